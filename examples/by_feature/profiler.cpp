// Twin of accelerate's examples/by_feature/profiler.py: each epoch's
// training under accelerator.profile(), its per-op table printed, and a
// Chrome trace per process with --output_trace_dir.
#include "by_feature/common.h"

namespace by_feature::profiler {

struct Args : by_feature::Args {
  bool record_shapes = false;
  bool profile_memory = false;
  bool with_flops = false;
  std::string output_trace_dir;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  // New Code #
  auto profile_kwargs = ampkit::diag::ProfileOptions()
                            .record_shapes(args.record_shapes)
                            .profile_memory(args.profile_memory)
                            .with_flops(args.with_flops)
                            .output_trace_dir(args.output_trace_dir);
  ampkit::Accelerator accelerator(
      options(args).profile_options(profile_kwargs));
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
    // New Code #
    auto prof = accelerator.profile();
    for (auto& batch : train_dataloader) {
      auto scope = accelerator.accumulate(model);
      auto loss = loss_of(model, batch);
      accelerator.backward(loss);
      optimizer.step();
      lr_scheduler.step();
      optimizer.zero_grad();
    }
    prof.stop();  // the end of Python's `with accelerator.profile()`
    // New Code #
    accelerator.print(prof.table("self_cpu_time_total", -1));
    if (!prof.trace_path().empty()) {
      accelerator.print("trace:", prof.trace_path());
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
  app.add_flag(
      "--record_shapes",
      args.record_shapes,
      "If passed, will record shapes for profiling.");
  app.add_flag(
      "--profile_memory",
      args.profile_memory,
      "If passed, will profile memory.");
  app.add_flag(
      "--with_flops", args.with_flops, "If passed, will profile flops.");
  app.add_option(
      "--output_trace_dir",
      args.output_trace_dir,
      "If passed, will save a json trace to the specified path.");
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::profiler
