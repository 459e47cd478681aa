// LinearWithWarmup: transformers' get_linear_schedule_with_warmup, the
// warmup rise, then a linear decay to 0 at num_training_steps.
#include "ampkit/optim/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "optim/scheduler_internal.h"

namespace ampkit::optim {

using detail::check_num_training_steps;
using detail::check_num_warmup_steps;
using detail::times;
using detail::warmup_ramp;

LinearWithWarmup::LinearWithWarmup(
    torch::optim::Optimizer& optimizer,
    int64_t num_warmup_steps,
    int64_t num_training_steps)
    : LRScheduler(optimizer),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps) {
  check_num_warmup_steps("LinearWithWarmup", num_warmup_steps);
  check_num_training_steps("LinearWithWarmup", num_training_steps);
  initial_step();
}

std::vector<double> LinearWithWarmup::get_lr() const {
  const int64_t step = last_epoch_;
  if (step < num_warmup_steps_) {
    return times(base_lrs_, warmup_ramp(step, num_warmup_steps_));
  }
  const double factor = std::max(
      0.0,
      double(num_training_steps_ - step) /
          double(
              std::max<int64_t>(1, num_training_steps_ - num_warmup_steps_)));
  return times(base_lrs_, factor);
}

void LinearWithWarmup::save_own_state(StateDict& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
  state["num_training_steps"] = num_training_steps_;
}

void LinearWithWarmup::load_own_state(const StateDict& state) {
  const int64_t warmup = state.at("num_warmup_steps").toInt();
  const int64_t total = state.at("num_training_steps").toInt();
  check_num_warmup_steps("LinearWithWarmup", warmup);
  check_num_training_steps("LinearWithWarmup", total);
  num_warmup_steps_ = warmup;
  num_training_steps_ = total;
}

}  // namespace ampkit::optim
