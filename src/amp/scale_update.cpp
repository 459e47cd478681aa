// The GradScaler's options checks and its loss-scale update rule on the
// host: PyTorch's _amp_update_scale_ with ampkit's hysteresis and floor.
#include "amp/scale_update.h"

#include <cmath>
#include <string>

#include "ampkit/error.h"

#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::detail {

namespace {}  // namespace

void check_growth_factor(double v) {
  if (!(v > 1.0) || !std::isfinite(v)) {
    throw InvalidArgument(
        component::kGradScaler,
        "growth_factor must be > 1.0 and finite, got " + exact_number(v) +
            ". It multiplies the scale after growth_interval clean steps; "
            "PyTorch's default is 2.0.");
  }
}
void check_backoff_factor(double v) {
  if (!(v > 0.0 && v < 1.0)) {
    throw InvalidArgument(
        component::kGradScaler,
        "backoff_factor must be in (0, 1), got " + exact_number(v) +
            ". It multiplies the scale after a step with inf/NaN gradients; "
            "PyTorch's default is 0.5.");
  }
}
void check_growth_interval(int64_t v) {
  if (v < 1 || v > INT32_MAX) {
    throw InvalidArgument(
        component::kGradScaler,
        "growth_interval must be >= 1 (and fit in int32), got " +
            std::to_string(v) +
            ". It counts the clean steps before the scale grows; PyTorch's "
            "default is 2000.");
  }
}
void check_scale_value(const char* what, double v) {
  if (!(v > 0.0) || !std::isfinite(v) || v > 3.4028234663852886e38) {
    throw InvalidArgument(
        component::kGradScaler,
        std::string(what) + " must be a positive, finite float32, got " +
            exact_number(v) +
            ". PyTorch's default init_scale is 65536.0 (2^16).");
  }
}

void validate(const GradScalerOptions& o) {
  check_scale_value("init_scale", o.init_scale());
  check_growth_factor(o.growth_factor());
  check_backoff_factor(o.backoff_factor());
  check_growth_interval(o.growth_interval());
  if (o.hysteresis() < 1) {
    throw InvalidArgument(
        component::kGradScaler,
        "hysteresis must be >= 1, got " + std::to_string(o.hysteresis()) +
            ". 1 backs off on every overflow (PyTorch); N waits for N "
            "overflows in a row.");
  }
  if (!(o.min_scale() >= 0.0) || !std::isfinite(o.min_scale()) ||
      o.min_scale() > o.init_scale()) {
    throw InvalidArgument(
        component::kGradScaler,
        "min_scale must be in [0, init_scale=" + exact_number(o.init_scale()) +
            "], got " + exact_number(o.min_scale()) + ". 0 means no floor.");
  }
  if (o.max_skipped_steps_at_min_scale() < 0) {
    throw InvalidArgument(
        component::kGradScaler,
        "max_skipped_steps_at_min_scale must be >= 0, got " +
            std::to_string(o.max_skipped_steps_at_min_scale()) +
            ". 0 never stops training.");
  }
  if (o.max_skipped_steps_at_min_scale() > 0 && o.min_scale() == 0.0) {
    throw InvalidArgument(
        component::kGradScaler,
        "max_skipped_steps_at_min_scale=" +
            std::to_string(o.max_skipped_steps_at_min_scale()) +
            " needs a floor, got min_scale 0. Set min_scale (for example "
            "1.0) as well.");
  }
}

bool uses_extensions(const GradScalerOptions& o) {
  return o.hysteresis() > 1 || o.min_scale() > 0.0 ||
         o.max_skipped_steps_at_min_scale() > 0;
}

ScaleState next_scale_state(
    const ScaleState& state, bool found_inf, const GradScalerOptions& o) {
  ScaleState next = state;
  if (found_inf) {
    next.growth_tracker = 0;
    next.consecutive_overflows = state.consecutive_overflows + 1;
    const float floor = static_cast<float>(o.min_scale());
    const bool at_floor = o.min_scale() > 0.0 && state.scale <= floor;
    next.skipped_at_min_scale = at_floor ? state.skipped_at_min_scale + 1 : 0;
    if (next.consecutive_overflows >= o.hysteresis()) {
      float backed_off = static_cast<float>(state.scale * o.backoff_factor());
      if (o.min_scale() > 0.0 && backed_off < floor) {
        backed_off = floor;
      }
      next.scale = backed_off;
    }
    return next;
  }
  next.consecutive_overflows = 0;
  next.skipped_at_min_scale = 0;
  // A clean step: the tracker counts it before comparing with the interval.
  const int64_t successful = int64_t(state.growth_tracker) + 1;
  if (successful == o.growth_interval()) {
    const float grown = static_cast<float>(state.scale * o.growth_factor());
    if (std::isfinite(grown)) {
      next.scale = grown;
    }
    next.growth_tracker = 0;
  } else {
    next.growth_tracker = static_cast<int32_t>(successful);
  }
  return next;
}

}  // namespace ampkit::detail
