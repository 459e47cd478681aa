// `ampkit doctor`: checks this machine, LibTorch and the config file before a
// training run, measures matmul throughput per dtype, and recommends a
// mixed_precision per device from the same capability rules `auto` uses.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>

#include "ampkit/amp/capability.h"
#include "ampkit/amp/precision.h"

namespace ampkit::diag {

/// `fail` blocks training; `warn` runs, but slower or other than intended.
enum class CheckStatus { ok, warn, fail };

/// "OK", "WARN" or "FAIL", as the table shows it.
std::string to_string(CheckStatus status);

/// One line of the doctor's table.
struct CheckResult {
  std::string name;  ///< "blas", "threads", "config", ...
  CheckStatus status = CheckStatus::ok;
  std::string value;   ///< what was found, e.g. "OpenBLAS (...), 233 GFLOP/s"
  std::string detail;  ///< what to do about it; "" when nothing
};

/// Throughput of one square matmul [n, n] @ [n, n] on one device and dtype.
struct MatmulTiming {
  c10::DeviceType device = c10::DeviceType::CPU;
  std::string dtype;             ///< "fp32", "bf16" or "fp16"
  std::optional<double> gflops;  ///< empty when the matmul could not run
  std::string note;  ///< "unsupported: <LibTorch's message>" when empty
  int size = 0;      ///< n; 0 where unknown (injected timings)
};

/// A device's recommended mixed_precision and why.
struct PrecisionRecommendation {
  c10::DeviceType device = c10::DeviceType::CPU;
  Precision precision = Precision::no;
  std::string reason;  ///< quotes the measured ratio when there is one
};

/// Pure: the recommendation is auto_precision(device, caps) (what
/// mixed_precision "auto" resolves to) unless the timings of `device`
/// contradict it: a chosen reduced precision whose matmul runs more than 10%
/// slower than fp32, or fails, turns it into `no`. The reason always quotes
/// the measured reduced/fp32 ratio when both were measured (the chosen dtype's,
/// or bf16's, else fp16's, when the choice is `no`), e.g. "bf16 matmul 8.8x
/// faster than fp32 (2060 vs 233 GFLOP/s)".
PrecisionRecommendation recommend_precision(
    c10::DeviceType device,
    const Capabilities& caps,
    const std::vector<MatmulTiming>& timings);

/// What `run_doctor` looks at and how long it measures.
struct DoctorOptions {
  /// Where checkpoints and logs go: its file system's free space is checked.
  std::string project_dir = ".";
  /// Checks run after the built-in ones, in order: the CLI adds the config
  /// file's (config::check_config_file), which lives in a higher layer.
  std::vector<std::function<CheckResult()>> more_checks;
  /// n of the timed [n, n] @ [n, n] matmuls, >= 1. Default 1024.
  int matmul_size = 1024;
  /// Each matmul is timed for at least this long, in seconds, after one
  /// warm-up run. Default 0.2.
  double min_seconds = 0.2;
};

/// Everything the doctor found.
struct DoctorReport {
  std::vector<CheckResult> checks;
  std::vector<MatmulTiming> timings;
  std::vector<PrecisionRecommendation> recommendations;

  /// True when any check failed.
  bool blocks_training() const;
  /// The checks as an aligned CHECK/STATUS/VALUE table, each detail on the
  /// lines below its check, then the matmul timings.
  std::string table() const;
};

/// Runs every check: libtorch, blas, threads, cpu, precision (<device>) per
/// device, gpu, cuda, nccl, one "gpu (cuda:<i>)" per visible GPU, disk,
/// then options.more_checks. Problems become checks; it throws only on invalid
/// options (ampkit::InvalidArgument).
DoctorReport run_doctor(const DoctorOptions& options = {});

/// The BLAS LibTorch's CPU matmuls go to, as the doctor's blas check finds
/// it (the libraries mapped into this process, else at::show_config()).
struct BlasInUse {
  /// "MKL", "OpenBLAS", "BLIS", "FlexiBLAS", "ATLAS", "reference BLAS", or
  /// "" when none was identified.
  std::string kind;
  std::string path;  ///< the library's real path, or where the name came from
};
BlasInUse blas_in_use();

/// The CUDA stack as the doctor's cuda and nccl checks see it; versions as
/// "12.1" text, "" where unknown.
struct CudaVersions {
  bool compiled = false;  ///< this LibTorch was built with CUDA
  std::string runtime;
  std::string driver;  ///< "" when no driver is installed
  std::string nccl;
  std::string error;  ///< the first CUDA error met, "" when none
};
CudaVersions cuda_versions();

}  // namespace ampkit::diag
