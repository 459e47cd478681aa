// What the examples share: their flag spelling, the flags that set up the
// Accelerator, threads, and the resume step of a checkpointed run.
#pragma once

#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "cli_checks.h"

namespace examples {

// "--kebab-case,--snake_case": every flag accepts both, as accelerate's do.
inline std::string flags(const std::string& kebab) {
  std::string snake = kebab;
  std::replace(snake.begin(), snake.end(), '-', '_');
  return snake == kebab ? "--" + kebab : "--" + kebab + ",--" + snake;
}

// The flags every example takes; "", 0 and false leave the value to the
// launcher's environment (AMPKIT_MIXED_PRECISION, ...), else the default.
struct RunFlags {
  std::string mixed_precision;
  int64_t gradient_accumulation_steps = 0;
  bool cpu = false;
  int threads = 0;  // 0 = every core
  std::string log_with;
  std::string output_dir;
  uint64_t seed = 42;
  int64_t checkpointing_steps = 0;     // 0 = no checkpoints
  std::string resume_from_checkpoint;  // a folder, or "latest"
  int64_t zero_stage = -1;             // -1 = the environment, else 0
  bool reset_schedule = false;  // resume onto a schedule of another length
  // DDP: gradients as bucket views (on here, for speed; the library's
  // default is accelerate's, off) and static_graph (off).
  bool gradient_as_bucket_view = true;
  bool static_graph = false;
};

inline void add_run_flags(CLI::App& app, RunFlags& f) {
  app.add_option(
      flags("mixed-precision"),
      f.mixed_precision,
      "no, fp16, bf16 or auto (default: the environment, else no)");
  app.add_option(
         flags("gradient-accumulation-steps"),
         f.gradient_accumulation_steps,
         "micro-batches per optimizer step (default: the environment, else 1)")
      ->check(cli_checks::positive());
  app.add_flag(flags("cpu"), f.cpu, "train on the CPU even with a GPU");
  app.add_flag(
      flags("reset-schedule"),
      f.reset_schedule,
      "resuming with another --max-steps/--epochs: continue the new learning "
      "rate schedule from the saved step (refused otherwise)");
  app.add_option(
      flags("threads"), f.threads, "intra-op threads (default: every core)");
  app.add_option(
      flags("log-with"),
      f.log_with,
      "write the run's metrics into --output-dir: jsonl, csv, tensorboard "
      "or all (comma-separated); view them with `ampkit report`");
  app.add_option(
         flags("checkpointing-steps"),
         f.checkpointing_steps,
         "save_state every N optimizer steps into OUTPUT_DIR/checkpoints")
      ->check(cli_checks::non_negative());
  app.add_option(
      flags("resume-from-checkpoint"),
      f.resume_from_checkpoint,
      "a checkpoint folder, or `latest` (the newest complete one under "
      "OUTPUT_DIR/checkpoints; none yet starts fresh)");
  app.add_option(
      flags("output-dir"),
      f.output_dir,
      "the run directory: summary.json and the --log-with files");
  app.add_option(flags("seed"), f.seed, "random seed");
  app.add_option(
      flags("zero-stage"),
      f.zero_stage,
      "ZeRO: 1 shards the optimizer state across processes, 2 also the "
      "gradients; 0 is DDP (default: the environment, else 0)");
  app.add_option(
      flags("gradient-as-bucket-view"),
      f.gradient_as_bucket_view,
      "DDP keeps gradients as views into its all-reduce buckets, saving a "
      "copy in and out per step (default here: true; ampkit's and "
      "accelerate's default: false)");
  app.add_flag(
      flags("static-graph"),
      f.static_graph,
      "DDP's static_graph: the model runs the same graph every step");
}

// Sets LibTorch's intra-op threads (0: every core) and returns the count.
// --threads 0: OMP_NUM_THREADS when set (ampkit launch shares the cores
// among its processes through it), else every core.
inline int set_threads(int threads) {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int from_env = omp != nullptr ? std::atoi(omp) : 0;
  const int n =
      threads > 0 ? threads
      : from_env > 0
          ? from_env
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(n);
  return n;
}

// The run directory is --output-dir itself: project_dir is its parent.
inline std::string project_dir_of(const std::filesystem::path& output_dir) {
  return output_dir.has_parent_path() ? output_dir.parent_path().string()
                                      : std::string(".");
}

// --output-dir exists and takes files, checked before anything trains (an
// unwritable folder would otherwise be found at the final save).
inline void check_output_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const auto probe = dir / (".ampkit-write-test-" + std::to_string(::getpid()));
  if (!ec) {
    std::ofstream(probe) << "ok";
    if (!std::filesystem::exists(probe, ec)) {
      ec = std::make_error_code(std::errc::permission_denied);
    }
    std::filesystem::remove(probe, ec);
  }
  if (ec) {
    throw ampkit::IoError(
        "Example",
        "cannot write into --output-dir " + dir.string() + ": " + ec.message() +
            ". Pass a folder you can write to.");
  }
}

// The Accelerator's options from the flags (and --output-dir checked).
inline ampkit::AcceleratorOptions accelerator_options(const RunFlags& f) {
  check_output_dir(f.output_dir);
  ampkit::AcceleratorOptions options;
  options.seed(f.seed);
  if (!f.mixed_precision.empty()) {
    options.mixed_precision(f.mixed_precision);
  }
  if (f.gradient_accumulation_steps > 0) {
    options.gradient_accumulation_steps(f.gradient_accumulation_steps);
  }
  if (f.cpu) {
    options.cpu(true);
  }
  if (f.zero_stage >= 0) {
    options.zero_stage(f.zero_stage);
  }
  options.gradient_as_bucket_view(f.gradient_as_bucket_view)
      .static_graph(f.static_graph);
  options.project_dir(project_dir_of(f.output_dir));
  // SIGTERM (a scheduler's notice), Ctrl-C or SIGUSR1 finishes the step and
  // saves checkpoint_<step> where --resume-from-checkpoint latest looks.
  options.reset_schedule(f.reset_schedule);
  options.save_on_preemption(true).preemption_dir(
      (std::filesystem::path(f.output_dir) / "checkpoints").string());
  if (!f.log_with.empty()) {
    options.log_with(f.log_with).auto_log(true);
  }
  return options;
}

// --resume-from-checkpoint: a folder, or `latest`, the newest intact
// checkpoint under `checkpoints` (none yet: start fresh and say so, so
// that one command line can be re-run after a crash; only damaged ones:
// refused, see latest_checkpoint). "" and `none` start fresh.
inline void resume_from_checkpoint(
    ampkit::Accelerator& accelerator,
    const std::string& from_arg,
    const std::string& checkpoints) {
  if (from_arg.empty() || from_arg == "none") {
    return;
  }
  std::optional<std::string> from = from_arg;
  if (*from == "latest") {
    // The newest one every process has (each machine may have its own
    // folder).
    from = accelerator.latest_checkpoint(checkpoints);
    if (!from) {
      accelerator.print(
          "no checkpoint under", checkpoints, "yet: starting fresh");
      return;
    }
  }
  accelerator.load_state(*from);
  accelerator.print(
      "resumed from", *from, "at step", accelerator.optimizer_steps());
}

}  // namespace examples
