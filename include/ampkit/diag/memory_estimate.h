// `ampkit estimate-memory`: the memory a model's parameters, gradients and
// optimizer state take in training, per precision (activations excluded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ampkit/amp/precision.h"

namespace ampkit {

/// Bytes of one precision's training state for N parameters:
/// - no (fp32): weights 4N, gradients 4N, no master copy;
/// - fp16/bf16 under autocast: the fp32 weights are the master weights (4N),
///   autocast's cached half copies are the weights (2N), and gradients are
///   fp32 in the parameters plus the half gradients of the GEMMs (4N + 2N),
///   as accelerate's estimate-memory counts them;
/// - optimizer state, always fp32: adamw 8N (exp_avg, exp_avg_sq), sgd 4N
///   (the momentum buffer).
///
/// With ZeRO (zero_stage 1 or 2 over `processes`), the figures are per
/// process: the optimizer state is ceil(state / processes), and with stage 2
/// also the fp32 gradients held after each step's reduce-scatter (ampkit
/// partitions at parameter boundaries where it can, so a shard may be up to
/// 5% larger). The weights stay whole on every process, and during backward
/// each process still builds its full local gradients before the
/// reduce-scatter. Stage 3 (FSDP FULL_SHARD) divides the weights and the
/// fp32 gradients too (what a process holds between steps).
struct MemoryEstimate {
  Precision precision = Precision::no;
  int64_t zero_stage = 0;
  int64_t processes = 1;
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t master_weights = 0;
  int64_t total() const {
    return weights + gradients + optimizer_state + master_weights;
  }
};

/// "adamw" or "sgd"; anything else is an ampkit::InvalidArgument, as are
/// a zero_stage other than 0-3 and fewer than 1 process.
MemoryEstimate estimate_memory(
    int64_t parameters,
    const std::string& optimizer,
    Precision precision,
    int64_t zero_stage = 0,
    int64_t processes = 1);

/// Parses a parameter count: digits with an optional K, M or B suffix (any
/// case, decimals allowed: "1.5B"). Bad text is an ampkit::InvalidArgument.
int64_t parse_parameter_count(const std::string& text);

/// "1.50 GB" style (powers of 1024: B, KB, MB, GB, TB).
std::string format_bytes(int64_t bytes);

/// The table `ampkit estimate-memory` prints, one row per estimate.
std::string memory_table(
    int64_t parameters, const std::vector<MemoryEstimate>& rows);

}  // namespace ampkit
