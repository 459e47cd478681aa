// Twin of accelerate's examples/by_feature/automatic_gradient_accumulation.py:
// find_executable_batch_size picks the largest batch that fits, and
// gradient accumulation makes up the observed batch size.
#include "by_feature/common.h"

namespace by_feature::automatic_gradient_accumulation {

struct Args : by_feature::Args {
  int64_t simulate_memory_limit = 0;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  // New Code #
  // The batch size we want to train with: each optimizer step sees this many
  // samples, whatever fits at once
  const int64_t observed_batch_size = config.batch_size;
  Metric metric;

  // New Code #
  // We use the `find_executable_batch_size` decorator, passing in the
  // desired observed batch size to train on
  auto inner_training_loop = [&](int64_t batch_size) {
    // And now just move everything below under this function
    // Ensure that anything declared outside this function is set as
    // unreferenced
    // New Code #
    // And reduce the number of accumulation steps to match
    const int64_t num_gradient_accumulation_steps =
        observed_batch_size / batch_size;
    accelerator.set_gradient_accumulation_steps(
        num_gradient_accumulation_steps);
    accelerator.free_memory();
    ampkit::set_seed(config.seed);
    simulate_out_of_memory(batch_size, args.simulate_memory_limit);
    Net net;
    torch::optim::AdamW adamw(
        net->parameters(), torch::optim::AdamWOptions(lr));
    auto [train_dataloader, eval_dataloader] =
        get_dataloaders(accelerator, batch_size);
    ampkit::optim::LinearWithWarmup linear(
        adamw, 100, num_batches(load_splits().train, batch_size) * num_epochs);
    auto [model, optimizer, lr_scheduler] =
        accelerator.prepare(net, adamw, linear);
    for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
      model->train();
      for (auto& batch : train_dataloader) {
        // And perform gradient accumulation
        auto scope = accelerator.accumulate(model);
        auto loss = loss_of(model, batch);
        accelerator.backward(loss);
        optimizer.step();
        lr_scheduler.step();
        optimizer.zero_grad();
      }
      const auto eval_metric =
          evaluate(accelerator, model, eval_dataloader, metric);
      accelerator.print(
          "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
    }
    accelerator.print(
        "batch size",
        batch_size,
        "with",
        num_gradient_accumulation_steps,
        "accumulation steps:",
        accelerator.optimizer_steps(),
        "optimizer steps");
  };
  // New Code #
  // And call it at the end with no arguments
  ampkit::find_executable_batch_size(inner_training_loop, observed_batch_size);
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  add_common_flags(app, args);
  app.add_option(
      "--simulate_memory_limit",
      args.simulate_memory_limit,
      "Testing: fail as out of memory above this batch size (0: never), "
      "to see the smaller retries on a machine with memory to spare.");
  CLI11_PARSE(app, argc, argv);
  set_threads();
  // The original's batch_size is 256: the largest that fits is searched
  // from there.
  Config config;
  config.batch_size = 256;
  training_function(config, args);
  return 0;
}

}  // namespace by_feature::automatic_gradient_accumulation
