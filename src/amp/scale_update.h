// The GradScaler's option checks and the loss-scale update rule on the host:
// PyTorch's _amp_update_scale_ arithmetic, extended by ampkit's hysteresis
// and floor options.
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

/// Each throws ampkit::InvalidArgument naming the value and the valid range.
void check_growth_factor(double v);
void check_backoff_factor(double v);
void check_growth_interval(int64_t v);
void check_scale_value(const char* what, double v);
/// Every option, and the combinations that need each other.
void validate(const GradScalerOptions& o);

/// Whether any of ampkit's extensions (hysteresis, min_scale,
/// max_skipped_steps_at_min_scale) is on.
bool uses_extensions(const GradScalerOptions& o);

/// The state after one update(). With default options this is exactly
/// _amp_update_scale_: products formed in double, stored as float, and a
/// growth that would overflow float is not applied.
ScaleState next_scale_state(
    const ScaleState& state, bool found_inf, const GradScalerOptions& options);

}  // namespace ampkit::detail
