// Non-finite attribution, written once: which named tensors (gradients) hold
// inf or NaN, and the one way ampkit's messages name them. The GradScaler
// (amp) and the Accelerator's detect_anomaly both use it, so it sits in the
// lowest layer rather than in diag/, which amp may not include.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampkit::detail {

struct NonFiniteTensor {
  std::string name;
  int64_t numel = 0;
  int64_t nan = 0;
  int64_t inf = 0;
};

/// The tensors of `named` holding inf or NaN, in order, with their counts.
/// Undefined tensors are skipped and sparse ones checked on their values.
/// One host sync when every tensor is finite.
std::vector<NonFiniteTensor> find_non_finite(
    const std::vector<std::pair<std::string, at::Tensor>>& named);

/// "fc1.bias (1 inf of 8 values), fc2.weight (2 NaN, 1 inf of 6 values)".
std::string describe_non_finite(const std::vector<NonFiniteTensor>& found);

/// The line for a step the loss scaler skipped:
/// "step 3 skipped: non-finite gradients in <where>; loss scale 65536 ->
/// 32768".
std::string skipped_step_line(
    int64_t step, const std::string& where, double old_scale, double new_scale);

}  // namespace ampkit::detail
