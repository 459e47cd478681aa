// LibTorch's profiler around a block of training, as torch.profiler.profile
// and accelerate's Accelerator::profile: per-op counts and times
// (key_averages and its table), and a Chrome trace (chrome://tracing,
// Perfetto), optionally on accelerate's schedule (wait, warmup, active,
// repeat, skip_first; step() after each iteration).
//  - LibTorch 2.x: Kineto (torch/csrc/autograd/profiler_kineto.h), with CPU
//    and, where there is a GPU, CUDA activities: the table gains each
//    kernel's device time, and the trace is Kineto's.
//  - LibTorch 1.13: the legacy profiler, which that version has in C++: the
//    operators the calling thread runs (autograd's CPU backward included)
//    with their CPU time; no GPU kernel times.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampkit::diag {

/// accelerate's ProfileKwargs: record_shapes, profile_memory, with_flops,
/// output_trace_dir and schedule_option.
struct ProfileOptions {
  /// Record each op's input shapes (into the trace).
  TORCH_ARG(bool, record_shapes) = false;
  /// Record the memory each op allocates (the table's Self CPU Mem).
  TORCH_ARG(bool, profile_memory) = false;
  /// Estimate FLOPs of matrix multiplications and convolutions.
  TORCH_ARG(bool, with_flops) = false;
  /// Where stop() writes the Chrome trace (created if missing); "" none.
  TORCH_ARG(std::string, output_trace_dir);
  /// The trace's file name in output_trace_dir; with a schedule, cycle k
  /// > 0 writes <name>_cycle<k>.json beside it.
  TORCH_ARG(std::string, trace_file) = "profile_0.json";
  /// accelerate's ProfileKwargs(schedule_option=...), torch.profiler.schedule:
  /// after skip_first steps, cycles of `wait` idle steps, `warmup` steps
  /// (the profiler starts, its results are dropped) and `active` recorded
  /// steps, `repeat` times (0: until stop()). step() ends a step. active 0
  /// (the default): no schedule, everything from construction to stop().
  TORCH_ARG(int64_t, schedule_wait) = 0;
  TORCH_ARG(int64_t, schedule_warmup) = 0;
  TORCH_ARG(int64_t, schedule_active) = 0;
  TORCH_ARG(int64_t, schedule_repeat) = 0;
  TORCH_ARG(int64_t, schedule_skip_first) = 0;
};

/// One operator name's totals (torch's FunctionEventAvg).
struct OpStats {
  std::string name;
  int64_t calls = 0;
  double self_cpu_time_total_us = 0;  ///< without the ops it called
  double cpu_time_total_us = 0;       ///< with them
  int64_t self_cpu_memory_bytes = 0;  ///< with profile_memory
  uint64_t flops = 0;                 ///< with with_flops
  /// GPU kernels (Kineto with CUDA): their time on the device.
  double device_time_total_us = 0;
};

/// RAII: profiles the calling thread from construction to stop() (or
/// destruction). One profiler at a time per thread.
class Profiler {
 public:
  explicit Profiler(ProfileOptions options = {});
  ~Profiler();
  Profiler(Profiler&&) noexcept;
  Profiler& operator=(Profiler&&) = delete;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  /// Stops recording (once; later calls do nothing) and writes the trace
  /// when output_trace_dir is set.
  void stop();
  /// Ends a training step (torch.profiler's prof.step()): with a schedule,
  /// starts or ends a recording as it says. Without one, nothing.
  void step();
  /// Recordings finished so far (schedule cycles; 1 after stop() without a
  /// schedule).
  int64_t cycles() const;
  /// "kineto" (LibTorch 2.x) or "legacy" (1.13).
  static const char* backend();
  /// Per operator name, sorted by `sort_by`: self_cpu_time_total (default),
  /// cpu_time_total, count, self_cpu_memory_usage or flops. Stops first.
  std::vector<OpStats> key_averages(
      const std::string& sort_by = "self_cpu_time_total");
  /// key_averages as torch's table; row_limit -1: every row.
  std::string table(
      const std::string& sort_by = "self_cpu_time_total", int row_limit = -1);
  /// Writes the Chrome trace JSON to `path`. Stops first.
  void export_chrome_trace(const std::string& path);
  /// The trace stop() wrote, else "".
  const std::string& trace_path() const;

 private:
  struct Recording;
  std::unique_ptr<Recording> recording_;
};

}  // namespace ampkit::diag
