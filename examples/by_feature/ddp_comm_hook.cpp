// Twin of accelerate's examples/by_feature/ddp_comm_hook.py: the gradient
// all-reduce compressed to fp16 or bf16 (DDP's fp16/bf16_compress_hook,
// ampkit's gradient_compression option).
#include "by_feature/common.h"

namespace by_feature::ddp_comm_hook {

struct Args : by_feature::Args {
  std::string ddp_comm_hook = "no";
  std::string ddp_comm_wrapper = "no";
};

// New Code #
// accelerate's DistributedDataParallelKwargs(comm_hook, comm_wrapper) as
// the Accelerator's gradient_compression. A wrapper compresses what a hook
// sends; with the fp16/bf16 hooks (already compressed) or no hook it
// changes nothing, as in accelerate.
ampkit::Precision gradient_compression(const Args& args) {
  if (args.ddp_comm_hook == "power_sgd" ||
      args.ddp_comm_hook == "batched_power_sgd") {
    throw ampkit::Unsupported(
        "ddp_comm_hook",
        "--ddp_comm_hook " + args.ddp_comm_hook +
            " is not available: PowerSGD exists only as Python "
            "(torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook); "
            "c10d's C++ hooks are the all-reduce and fp16 compression, and "
            "ampkit's gradient synchronizer offers fp16 and bf16 "
            "compression. Pass --ddp_comm_hook fp16 or bf16.");
  }
  if (args.ddp_comm_hook == "no") {
    return ampkit::Precision::no;
  }
  return ampkit::parse_precision(args.ddp_comm_hook);
}

void training_function(Config config, const Args& args) {
  config = testing(config);
  // Initialize accelerator
  ampkit::Accelerator accelerator(
      options(args).gradient_compression(gradient_compression(args)));
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

  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    for (auto& batch : train_dataloader) {
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
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  add_common_flags(app, args);
  // New Code #
  app.add_option(
         "--ddp_comm_hook",
         args.ddp_comm_hook,
         "DDP Communication hook to use. Choose between `no`, `fp16`, "
         "`bf16`, `power_sgd`, and `batched_power_sgd` (the last two are "
         "refused: PowerSGD is Python-only).")
      ->check(CLI::IsMember(
          {"no", "fp16", "bf16", "power_sgd", "batched_power_sgd"}));
  // New Code #
  app.add_option(
         "--ddp_comm_wrapper",
         args.ddp_comm_wrapper,
         "DDP Communication wrapper to use. Choose between `no`, `fp16`, "
         "and `bf16`.")
      ->check(CLI::IsMember({"no", "fp16", "bf16"}));
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::ddp_comm_hook
