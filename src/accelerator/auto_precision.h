// mixed_precision "auto" decided on the user's own model (private): the
// prepared model's forward and backward on the first real batch, timed in
// each candidate precision before the first optimizer step, with nothing
// of the run changed by it.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ampkit/amp/precision.h"

namespace ampkit::detail {

struct AcceleratorState;

/// bf16 (or fp16) must run the model's step at least this much faster than
/// fp32 before auto leaves fp32.
constexpr double kAutoMargin = 1.1;
/// Timed repetitions per candidate (their median), after one warm-up.
constexpr int kAutoRepetitions = 3;

/// For tests: the candidates instead of the hardware's, and (when set) the
/// seconds a step "took" in each instead of the clock (the probe still runs
/// the forward and backward, so that what it restores is tested; injected
/// timings are neither cached nor read from the cache). nullopt undoes it.
struct AutoProbeOverride {
  std::vector<Precision> candidates;
  std::function<double(Precision)> seconds;
};
void set_auto_probe_override(std::optional<AutoProbeOverride> override);
/// The candidates `auto` measures on this device (one: no measurement).
std::vector<Precision> auto_candidates(
    bool cpu, bool native_cpu_bf16, std::vector<Precision> gpu_candidates);

/// What the decision depends on: the parameters' shapes and dtypes, the
/// inputs' shapes and dtypes, the CPU, LibTorch and the thread count.
std::string auto_cache_key(
    const torch::nn::Module& module, const std::vector<torch::Tensor>& inputs);

// auto_precision_pending and decide_auto_precision, which the prepared
// model calls, are declared in ampkit/accelerator/prepared.h.

}  // namespace ampkit::detail
