// The ampkit demo: a small CNN trained on Fashion-MNIST with the Accelerator
// (mixed precision, gradient accumulation, a warmup+cosine schedule),
// progress on stderr, the run's metrics (--log-with) and a summary.json in
// --output-dir.
#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <thread>

#include "common/example_support.h"

namespace {

// [B, 1, 28, 28] -> [B, 10]: two conv/batch-norm/pool stages, an MLP head.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module(
            "conv1",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(32))),
        conv2(register_module(
            "conv2",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(64))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 7 * 7, 128))),
        dropout(register_module("dropout", torch::nn::Dropout(0.25))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 2);  // [B, 32, 14, 14]
    x = torch::max_pool2d(torch::relu(bn2(conv2(x))), 2);  // [B, 64, 7, 7]
    x = dropout(torch::relu(fc1(x.flatten(1))));           // [B, 128]
    return fc2(x);                                         // [B, 10]
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Linear fc1;
  torch::nn::Dropout dropout;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

struct Args : examples::RunFlags {
  Args() {
    output_dir = "fashion_mnist_output";
  }
  int64_t epochs = 2;
  int64_t max_steps = 0;  // 0 = no limit
  int64_t batch_size = 64;
  double lr = 2e-3;
  int64_t limit_train = 0;    // 0 = all 60000
  int64_t limit_test = 0;     // 0 = all 10000
  double min_accuracy = 0;    // exit 1 below this (for CI)
  int64_t profile_steps = 0;  // 0 = no profile
  bool channels_last = true;  // the Accelerator's channels_last option
  bool prefetch = true;       // non_blocking and pin_memory (CUDA only)
  std::string data_dir = ampkit::data::kFashionMnistDir;
};

// --profile-steps profiles the optimizer steps after this many of the run
// (counted from its checkpoint when resumed), once the allocator and the
// caches are warm (bench/cnn_peer.py --profile profiles the Python loop over
// the same steps).
constexpr int64_t kProfileAfter = 20;

// The profiled steps' operators, per step: OUTPUT_DIR/profile.json (name,
// calls, self and total CPU microseconds) and the profiler's table in
// OUTPUT_DIR/profile.txt.
void write_profile(
    ampkit::diag::Profiler& profiler,
    int64_t first_step,
    int64_t steps,
    const std::filesystem::path& output_dir) {
  nlohmann::json ops = nlohmann::json::array();
  const auto per_step = [steps](double v) { return v / double(steps); };
  for (const auto& op : profiler.key_averages()) {
    ops.push_back(
        {{"name", op.name},
         {"calls", per_step(double(op.calls))},
         {"self_us", per_step(op.self_cpu_time_total_us)},
         {"total_us", per_step(op.cpu_time_total_us)}});
  }
  std::filesystem::create_directories(output_dir);
  const nlohmann::json profile{
      {"first_step", first_step}, {"steps", steps}, {"ops", ops}};
  std::ofstream(output_dir / "profile.json") << profile.dump(1) << '\n';
  std::ofstream(output_dir / "profile.txt") << profiler.table();
}

std::optional<size_t> limit(int64_t n) {
  return n > 0 ? std::optional<size_t>(static_cast<size_t>(n)) : std::nullopt;
}

// Each process scores its share of the test set; the counts are summed.
template <typename Model>
double accuracy(
    Model& model,
    const ampkit::data::FashionMnist& test,
    ampkit::Accelerator& accelerator) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t n = test.images.size(0);
  std::vector<int64_t> chunks;
  for (int64_t i = 0; i < n; i += 1000) {
    chunks.push_back(i);
  }
  int64_t correct = 0;
  for (int64_t i : accelerator.split_between_processes(chunks)) {
    auto x = test.images.slice(0, i, i + 1000).to(accelerator.device());
    auto y = test.labels.slice(0, i, i + 1000).to(accelerator.device());
    correct += model(x).argmax(1).eq(y).sum().template item<int64_t>();
  }
  model->train();
  const auto total = accelerator.reduce(torch::tensor({correct}));
  return double(total.template item<int64_t>()) / double(n);
}

int run(const Args& args) {
  const int threads = examples::set_threads(args.threads);
  const std::filesystem::path output_dir(args.output_dir);
  const ampkit::AcceleratorOptions options =
      examples::accelerator_options(args)
          .channels_last(args.channels_last)
          .non_blocking(args.prefetch)
          .pin_memory(args.prefetch);
  ampkit::Accelerator accelerator(options);
  std::cerr << "fashion_mnist: ampkit " << AMPKIT_VERSION << ", LibTorch "
            << TORCH_VERSION << ", " << threads << " threads\n";
  const auto caps = ampkit::Capabilities::current();
  if (accelerator.device().is_cpu() &&
      accelerator.mixed_precision() == ampkit::Precision::bf16 &&
      !caps.cpu.native_bf16()) {
    std::cerr << "fashion_mnist: note: this CPU has no native bf16 "
                 "(AVX512-BF16/AMX); bf16 autocast runs 15-20x slower than "
                 "fp32 here. Pass --mixed-precision no for speed.\n";
  }

  ampkit::data::FashionMnistBatchDataset train_set(
      true, args.data_dir, limit(args.limit_train));
  const auto test = ampkit::data::FashionMnistDataset(
                        false, args.data_dir, limit(args.limit_test))
                        .data();
  const int64_t n_train = static_cast<int64_t>(*train_set.size());

  Net net;
  torch::optim::AdamW adamw(
      net->parameters(),
      torch::optim::AdamWOptions(args.lr).weight_decay(1e-4));
  // Per process: the global batch is batch_size x num_processes.
  const int64_t global_batch = args.batch_size * accelerator.num_processes();
  const int64_t batches_per_epoch = (n_train + global_batch - 1) / global_batch;
  const int64_t accumulation = accelerator.gradient_accumulation_steps();
  const int64_t steps_per_epoch =
      (batches_per_epoch + accumulation - 1) / accumulation;
  int64_t total_steps = steps_per_epoch * args.epochs;
  if (args.max_steps > 0) {
    total_steps = std::min(total_steps, args.max_steps);
  }
  // accelerate's rule: a prepared scheduler advances num_processes times
  // per optimizer step, so it is sized as for one process.
  const int64_t schedule_steps = total_steps * accelerator.num_processes();
  std::optional<ampkit::diag::Profiler> profiler;
  ampkit::optim::CosineWithWarmup cosine(
      adamw, std::max<int64_t>(1, schedule_steps / 20), schedule_steps);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, adamw, cosine);
  // Each process reads its shard of every epoch (one process: all of it),
  // reshuffled from the seed and the epoch.
  auto loader = accelerator.prepare_data_loader(
      std::move(train_set),
      torch::data::DataLoaderOptions(args.batch_size),
      ampkit::data::ShardedSamplerOptions().shuffle(true).seed(args.seed));

  if (!args.log_with.empty()) {
    accelerator.init_trackers(
        output_dir.filename().string(),
        {{"model", "conv32-bn-conv64-bn-fc128-fc10"},
         {"batch_size", std::to_string(args.batch_size)},
         {"epochs", std::to_string(args.epochs)},
         {"lr", std::to_string(args.lr)},
         {"train_images", std::to_string(n_train)}});
  }
  // Checkpoints go to OUTPUT_DIR/checkpoints/checkpoint_STEP; `latest` picks
  // the newest complete one, so one command line can be re-run after a crash.
  const std::string checkpoints = (output_dir / "checkpoints").string();
  examples::resume_from_checkpoint(
      accelerator, args.resume_from_checkpoint, checkpoints);
  ampkit::track::ProgressOptions progress_options;
  progress_options.enabled = accelerator.is_main_process();
  ampkit::track::Progress progress(total_steps, progress_options);
  int64_t steps = accelerator.optimizer_steps();
  // Profiled: steps profile_from+1 .. profile_from+profile_steps, warm-up
  // counted from where this run starts, so a resumed run profiles too.
  const int64_t profile_from = steps + kProfileAfter;
  if (args.profile_steps > 0 &&
      total_steps < profile_from + args.profile_steps) {
    throw std::invalid_argument(
        "--profile-steps " + std::to_string(args.profile_steps) +
        " profiles steps " + std::to_string(profile_from + 1) + " to " +
        std::to_string(profile_from + args.profile_steps) +
        (steps > 0
             ? " (the run resumes at step " + std::to_string(steps) +
                   " and warms up for " + std::to_string(kProfileAfter) + ")"
             : std::string()) +
        ", but this run ends at step " + std::to_string(total_steps) +
        "; raise --max-steps or --epochs, or profile fewer steps");
  }
  // Skipped steps are counted on the device (no host read per step).
  const int64_t skipped_before = accelerator.skipped_optimizer_steps();
  int64_t samples = 0;
  double train_loss = 0;
  // The optimizer steps train_loss is the mean over (a resumed run's first
  // shown loss is its own first step's, not 0).
  const int64_t first_step = steps + 1;
  int64_t loss_from = first_step;
  int64_t loss_to = 0;
  double epoch_accuracy = 0;
  double train_seconds = 0;
  // A resumed run continues in the epoch its checkpoint was saved in.
  for (int64_t epoch = loader.sampler()->epoch() + 1;
       epoch <= args.epochs && steps < total_steps;
       ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    int64_t epoch_samples = 0;
    // Summed on the device; read (a host sync) only when the display
    // changes, not every step.
    torch::Tensor running;
    int64_t since_log = 0;
    int64_t window_from = steps + 1;
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate(model);
      auto loss = torch::cross_entropy_loss(model(batch.data), batch.target);
      accelerator.backward(loss);
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      epoch_samples += batch.data.size(0);
      running = running.defined() ? running + loss.detach() : loss.detach();
      ++since_log;
      if (!accelerator.sync_gradients()) {
        continue;
      }
      ++steps;
      if (args.profile_steps > 0 && accelerator.is_main_process()) {
        if (steps == profile_from) {
          profiler.emplace();
        } else if (profiler && steps == profile_from + args.profile_steps) {
          write_profile(
              *profiler, profile_from + 1, args.profile_steps, output_dir);
          profiler.reset();
        }
      }
      // The mean loss over the last 20 micro-batches, for the display.
      if (since_log >= 20 || steps == first_step || steps == total_steps ||
          accelerator.end_of_dataloader()) {
        train_loss = running.item<double>() / static_cast<double>(since_log);
        loss_from = window_from;
        loss_to = steps;
        window_from = steps + 1;
        running = torch::Tensor();
        since_log = 0;
      }
      const double secs = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count();
      progress.update({steps, epoch, train_loss, double(epoch_samples) / secs});
      if (args.checkpointing_steps > 0 &&
          steps % args.checkpointing_steps == 0) {
        accelerator.save_state((std::filesystem::path(checkpoints) /
                                ("checkpoint_" + std::to_string(steps)))
                                   .string());
      }
      if (steps == total_steps) {
        break;
      }
    }
    train_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    samples += epoch_samples;
    epoch_accuracy = accuracy(model, test, accelerator);
    accelerator.log({{"test_accuracy", epoch_accuracy}});
    progress.update(
        {steps,
         epoch,
         train_loss,
         double(epoch_samples) /
             std::max(
                 1e-9,
                 std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - start)
                     .count())});
    if (!accelerator.is_main_process()) {
      continue;
    }
    if (!progress.plain()) {
      std::fprintf(stderr, "\n");
    }
    std::fprintf(
        stderr,
        "epoch %lld test accuracy %.4f (%lld images)\n",
        static_cast<long long>(epoch),
        epoch_accuracy,
        static_cast<long long>(test.images.size(0)));
  }
  progress.finish();
  accelerator.end_training();
  // The trained weights, as Hugging Face saves them (OUTPUT_DIR/model).
  accelerator.save_model(model, (output_dir / "model").string());

  const nlohmann::json summary = {
      {"test_accuracy", epoch_accuracy},
      {"train_loss", train_loss},
      // The optimizer steps that mean covers, and where this run began (1,
      // or the step after the checkpoint it resumed from).
      {"train_loss_steps", {loss_from, loss_to}},
      {"first_step", first_step},
      {"steps", steps},
      {"skipped_steps", accelerator.skipped_optimizer_steps() - skipped_before},
      // All processes together (each reads the same number of samples).
      {"samples_per_second",
       double(samples * accelerator.num_processes()) / train_seconds},
      {"precision", ampkit::to_string(accelerator.mixed_precision())},
      {"device", accelerator.device().str()},
      {"num_processes", accelerator.num_processes()},
      {"gradient_accumulation_steps", accumulation},
      {"zero_stage", accelerator.options().zero_stage},
      // What this process holds (rank 0's shard under ZeRO).
      {"optimizer_state_bytes", optimizer.state_bytes()},
      {"train_seconds", train_seconds},
  };
  if (accelerator.is_main_process()) {
    std::filesystem::create_directories(args.output_dir);
    const auto path = std::filesystem::path(args.output_dir) / "summary.json";
    std::ofstream(path) << summary.dump(2) << '\n';
    accelerator.print(summary.dump());
  }
  if (epoch_accuracy < args.min_accuracy) {
    std::fprintf(
        stderr,
        "fashion_mnist: test accuracy %.4f is below --min-accuracy %.4f\n",
        epoch_accuracy,
        args.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{
      "Train a small CNN on Fashion-MNIST with ampkit's Accelerator. Unset "
      "options come from the launcher's environment (AMPKIT_MIXED_PRECISION, "
      "AMPKIT_GRADIENT_ACCUMULATION_STEPS), else their defaults."};
  app.add_option(
         examples::flags("epochs"), args.epochs, "passes over the training set")
      ->check(cli_checks::positive());
  app.add_option(
         examples::flags("max-steps"),
         args.max_steps,
         "stop after this many optimizer steps (0: no limit)")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("batch-size"),
         args.batch_size,
         "images per micro-batch")
      ->check(cli_checks::positive());
  app.add_option(examples::flags("lr"), args.lr, "AdamW peak learning rate")
      ->check(cli_checks::positive());
  app.add_option(
      examples::flags("limit-train"),
      args.limit_train,
      "use only the first N training images");
  app.add_option(
      examples::flags("limit-test"),
      args.limit_test,
      "use only the first N test images");
  app.add_option(
      examples::flags("min-accuracy"),
      args.min_accuracy,
      "exit 1 when the final test accuracy is below this");
  app.add_option(
      examples::flags("data-dir"),
      args.data_dir,
      "folder with the Fashion-MNIST IDX .gz files");
  app.add_option(
      examples::flags("prefetch"),
      args.prefetch,
      "on a GPU, copy each batch from pinned memory one batch ahead on a "
      "side stream (the Accelerator's non_blocking and pin_memory); false "
      "copies each batch when it is handed out");
  app.add_option(
      examples::flags("channels-last"),
      args.channels_last,
      "lay the convolution weights out channels-last (NHWC), the "
      "Accelerator's channels_last option; false keeps NCHW");
  app.add_option(
         examples::flags("profile-steps"),
         args.profile_steps,
         "profile N optimizer steps after this run's first 20 (a resumed "
         "run counts from its checkpoint) with LibTorch's profiler: per-step "
         "operator times in OUTPUT_DIR/profile.json and "
         "the table in profile.txt")
      ->check(cli_checks::non_negative());
  examples::add_run_flags(app, args);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "fashion_mnist: " << e.what() << '\n';
    return 2;
  }
}
