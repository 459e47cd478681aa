// The loss-scale update rule on the host: PyTorch's _amp_update_scale_
// arithmetic, extended by ampkit's hysteresis and floor options.
#pragma once

#include <cstdint>

#include "ampkit/amp/grad_scaler.h"

namespace ampkit::detail {

struct ScaleState {
  float scale = 0;
  int32_t growth_tracker = 0;
  int64_t consecutive_overflows = 0;
  int64_t skipped_at_min_scale = 0;
};

/// The state after one update(). With default options this is exactly
/// _amp_update_scale_: products formed in double, stored as float, and a
/// growth that would overflow float is not applied.
ScaleState next_scale_state(
    const ScaleState& state, bool found_inf, const GradScalerOptions& options);

}  // namespace ampkit::detail
