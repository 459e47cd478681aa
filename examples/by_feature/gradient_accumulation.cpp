// Twin of accelerate's examples/by_feature/gradient_accumulation.py:
// gradient accumulation with accelerator.accumulate(model).
#include "by_feature/common.h"

namespace by_feature::gradient_accumulation {

struct Args : by_feature::Args {
  int64_t gradient_accumulation_steps = 1;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  // New Code #
  const int64_t gradient_accumulation_steps = args.gradient_accumulation_steps;
  // Initialize accelerator
  ampkit::Accelerator accelerator(
      options(args).gradient_accumulation_steps(gradient_accumulation_steps));
  // Sample hyper-parameters for learning rate, batch size, seed and a few
  // other HPs
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  const int64_t batch_size = config.batch_size;

  Metric metric;
  ampkit::set_seed(config.seed);
  auto [train_dataloader, eval_dataloader] =
      get_dataloaders(accelerator, batch_size);
  // Instantiate the model (we build the model here so that the seed also
  // controls new weights initialization)
  Net net;
  // Instantiate optimizer
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(lr));
  // Instantiate scheduler
  ampkit::optim::LinearWithWarmup linear(
      adamw,
      /*num_warmup_steps=*/100,
      /*num_training_steps=*/
      num_batches(load_splits().train, batch_size) * num_epochs);
  // Prepare everything
  auto [model, optimizer, lr_scheduler] =
      accelerator.prepare(net, adamw, linear);

  // Now we train the model
  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    for (auto& batch : train_dataloader) {
      // New code #
      // We use the new `accumulate` scope to perform gradient accumulation
      auto scope = accelerator.accumulate(model);
      auto loss = loss_of(model, batch);
      accelerator.backward(loss);
      optimizer.step();
      lr_scheduler.step();
      optimizer.zero_grad();
    }
    const auto eval_metric =
        evaluate(accelerator, model, eval_dataloader, metric);
    // Use accelerator.print to print only on the main process.
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
  }
  accelerator.print(
      "optimizer steps:",
      accelerator.optimizer_steps(),
      "scheduler steps:",
      lr_scheduler.scheduler().last_epoch());
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  add_common_flags(app, args);
  // New Code #
  app.add_option(
         "--gradient_accumulation_steps,--gradient-accumulation-steps",
         args.gradient_accumulation_steps,
         "The number of minibatches to be ran before gradients are "
         "accumulated.")
      ->check(cli_checks::positive());
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::gradient_accumulation
