// CosineWithWarmup: transformers' get_cosine_schedule_with_warmup, the warmup
// rise, then num_cycles cosine waves down to 0, with Python's doubles.
#include "ampkit/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ampkit/error.h"
#include "optim/scheduler_internal.h"

#include "utils/strings.h"

namespace ampkit::optim {

using detail::check_num_training_steps;
using detail::check_num_warmup_steps;
using detail::times;
using detail::warmup_ramp;

namespace {

// Python's math.pi; the cosine schedule must compute the same doubles.
constexpr double kPi = 3.141592653589793;

void check_num_cycles(const char* component, double v) {
  if (!(v >= 0.0) || !std::isfinite(v)) {
    throw InvalidArgument(
        component,
        "num_cycles must be >= 0 and finite, got " +
            ampkit::detail::exact_number(v) +
            ". It counts the cosine waves after warmup; 0.5 (the default) "
            "decays once from the base lr to 0.");
  }
}

}  // namespace

CosineWithWarmup::CosineWithWarmup(
    torch::optim::Optimizer& optimizer,
    int64_t num_warmup_steps,
    int64_t num_training_steps,
    double num_cycles)
    : LRScheduler(optimizer),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps),
      num_cycles_(num_cycles) {
  check_num_warmup_steps("CosineWithWarmup", num_warmup_steps);
  check_num_training_steps("CosineWithWarmup", num_training_steps);
  check_num_cycles("CosineWithWarmup", num_cycles);
  initial_step();
}

std::vector<double> CosineWithWarmup::get_lr() const {
  const int64_t step = last_epoch_;
  if (step < num_warmup_steps_) {
    return times(base_lrs_, warmup_ramp(step, num_warmup_steps_));
  }
  const double progress =
      double(step - num_warmup_steps_) /
      double(std::max<int64_t>(1, num_training_steps_ - num_warmup_steps_));
  // Left to right as in Python, so that the doubles are the same.
  const double factor =
      std::max(0.0, 0.5 * (1.0 + std::cos(kPi * num_cycles_ * 2.0 * progress)));
  return times(base_lrs_, factor);
}

void CosineWithWarmup::save_own_state(StateDict& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
  state["num_training_steps"] = num_training_steps_;
  state["num_cycles"] = num_cycles_;
}

void CosineWithWarmup::load_own_state(const StateDict& state) {
  const int64_t warmup = state.at("num_warmup_steps").toInt();
  const int64_t total = state.at("num_training_steps").toInt();
  const double cycles = state.at("num_cycles").toDouble();
  check_num_warmup_steps("CosineWithWarmup", warmup);
  check_num_training_steps("CosineWithWarmup", total);
  check_num_cycles("CosineWithWarmup", cycles);
  num_warmup_steps_ = warmup;
  num_training_steps_ = total;
  num_cycles_ = cycles;
}

}  // namespace ampkit::optim
