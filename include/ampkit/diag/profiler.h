// LibTorch's profiler around a block of training, as torch.profiler.profile
// and accelerate's Accelerator::profile: per-op counts and CPU times
// (key_averages and its table), and a Chrome trace (chrome://tracing,
// Perfetto). Built on LibTorch's legacy profiler, which both supported
// LibTorch versions have in C++: it records the operators the calling
// thread runs (autograd's CPU backward included) with their CPU time; GPU
// kernel times are not in it.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampkit::diag {

/// accelerate's ProfileKwargs (the options LibTorch's legacy profiler has).
struct ProfileOptions {
  /// Record each op's input shapes (into the trace).
  TORCH_ARG(bool, record_shapes) = false;
  /// Record the memory each op allocates (the table's Self CPU Mem).
  TORCH_ARG(bool, profile_memory) = false;
  /// Estimate FLOPs of matrix multiplications and convolutions.
  TORCH_ARG(bool, with_flops) = false;
  /// Where stop() writes the Chrome trace (created if missing); "" none.
  TORCH_ARG(std::string, output_trace_dir);
  /// The trace's file name in output_trace_dir.
  TORCH_ARG(std::string, trace_file) = "profile_0.json";
};

/// One operator name's totals (torch's FunctionEventAvg).
struct OpStats {
  std::string name;
  int64_t calls = 0;
  double self_cpu_time_total_us = 0;  ///< without the ops it called
  double cpu_time_total_us = 0;       ///< with them
  int64_t self_cpu_memory_bytes = 0;  ///< with profile_memory
  uint64_t flops = 0;                 ///< with with_flops
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
