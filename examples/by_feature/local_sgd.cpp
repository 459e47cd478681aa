// Twin of accelerate's examples/by_feature/local_sgd.py: each process
// steps on its own gradients, and LocalSGD averages the parameters every
// --local_sgd_steps steps and at the end of each epoch.
#include "by_feature/common.h"

namespace by_feature::local_sgd {

struct Args : by_feature::Args {
  int64_t gradient_accumulation_steps = 1;
  int64_t local_sgd_steps = 8;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  // New Code #
  const int64_t gradient_accumulation_steps = args.gradient_accumulation_steps;
  const int64_t local_sgd_steps = args.local_sgd_steps;
  // Initialize accelerator
  ampkit::Accelerator accelerator(
      options(args).gradient_accumulation_steps(gradient_accumulation_steps));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  const int64_t batch_size = config.batch_size;
  Metric metric;
  ampkit::set_seed(config.seed);
  auto [train_dataloader, eval_dataloader] =
      get_dataloaders(accelerator, batch_size);
  Net net;
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(lr));
  ampkit::optim::LinearWithWarmup linear(
      adamw, 100, num_batches(load_splits().train, batch_size) * num_epochs);
  auto [model, optimizer, lr_scheduler] =
      accelerator.prepare(net, adamw, linear);

  // Now we train the model
  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    {
      // 0 disables it (the original's None)
      ampkit::LocalSGD local_sgd(
          accelerator, model, local_sgd_steps, local_sgd_steps > 0);
      for (auto& batch : train_dataloader) {
        // New code #
        // We use the new `accumulate` scope to perform gradient
        // accumulation
        auto scope = accelerator.accumulate(model);
        auto loss = loss_of(model, batch);
        accelerator.backward(loss);
        optimizer.step();
        lr_scheduler.step();
        optimizer.zero_grad();
        // LocalSGD-specific line
        local_sgd.step();
      }
    }  // leaving the scope averages the parameters once more
    // The processes now hold the same parameters: their sums, gathered,
    // are equal.
    torch::Tensor sum = torch::zeros({}, torch::kDouble);
    for (const auto& p : model->parameters()) {
      sum += p.detach().to(torch::kCPU, torch::kDouble).sum();
    }
    const auto sums = accelerator.gather(sum.to(accelerator.device()));
    accelerator.print(
        "parameters equal on every process:",
        sums.eq(sums[0]).all().item<bool>() ? "yes" : "no");
    const auto eval_metric =
        evaluate(accelerator, model, eval_dataloader, metric);
    // Use accelerator.print to print only on the main process.
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
  }
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  add_common_flags(app, args);
  // New Code #
  app.add_option(
         "--gradient_accumulation_steps",
         args.gradient_accumulation_steps,
         "The number of minibatches to be ran before gradients are "
         "accumulated.")
      ->check(cli_checks::positive());
  app.add_option(
         "--local_sgd_steps",
         args.local_sgd_steps,
         "Number of local SGD steps, or 0 to disable local SGD")
      ->check(cli_checks::non_negative());
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::local_sgd
