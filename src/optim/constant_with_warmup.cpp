// ConstantWithWarmup: transformers' get_constant_schedule_with_warmup, a
// linear rise from 0 to the base lr over the warmup steps, then constant.
#include "ampkit/optim/scheduler.h"

#include <cstdint>
#include <vector>

#include "optim/scheduler_internal.h"

namespace ampkit::optim {

using detail::check_num_warmup_steps;
using detail::times;
using detail::warmup_ramp;

ConstantWithWarmup::ConstantWithWarmup(
    torch::optim::Optimizer& optimizer, int64_t num_warmup_steps)
    : LRScheduler(optimizer), num_warmup_steps_(num_warmup_steps) {
  check_num_warmup_steps("ConstantWithWarmup", num_warmup_steps);
  initial_step();
}

std::vector<double> ConstantWithWarmup::get_lr() const {
  const int64_t step = last_epoch_;
  const double factor =
      step < num_warmup_steps_ ? warmup_ramp(step, num_warmup_steps_) : 1.0;
  return times(base_lrs_, factor);
}

void ConstantWithWarmup::save_own_state(StateDict& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
}

void ConstantWithWarmup::load_own_state(const StateDict& state) {
  const int64_t warmup = state.at("num_warmup_steps").toInt();
  check_num_warmup_steps("ConstantWithWarmup", warmup);
  num_warmup_steps_ = warmup;
}

}  // namespace ampkit::optim
