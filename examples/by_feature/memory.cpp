// Twin of accelerate's examples/by_feature/memory.py: the training loop
// inside find_executable_batch_size, which retries at 0.9x the batch size
// after an out-of-memory error, with accelerator.free_memory() releasing
// the previous try's prepared objects.
#include "by_feature/common.h"

namespace by_feature::memory {

struct Args : by_feature::Args {
  int64_t simulate_memory_limit = 0;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  Metric metric;

  // New Code #
  // We now can define an inner training loop function. It should take a
  // batch size as the only parameter, and build the dataloaders in there.
  auto inner_training_loop = [&](int64_t batch_size) {
    // And now just move everything below under this function
    // We need to bring in the Accelerator object from earlier
    // Ensure that anything declared outside this function is set as
    // unreferenced (free_memory releases what the last try prepared)
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
    accelerator.print("trained with batch size", batch_size);
  };
  // New Code #
  // And call it at the end with no arguments
  // Note: You could also refactor this outside of your training loop
  // function
  ampkit::find_executable_batch_size(inner_training_loop, config.batch_size);
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
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::memory
