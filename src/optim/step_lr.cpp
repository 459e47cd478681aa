// StepLR: PyTorch 1.13's torch.optim.lr_scheduler.StepLR, the lr times gamma
// every step_size steps.
#include "ampkit/optim/scheduler.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ampkit/error.h"
#include "optim/scheduler_internal.h"

#include "utils/strings.h"

namespace ampkit::optim {

using detail::times;

namespace {

void check_step_size(const char* component, int64_t v) {
  if (v < 1) {
    throw InvalidArgument(
        component,
        "step_size must be >= 1, got " + std::to_string(v) +
            ". It is the number of steps between two decays by gamma.");
  }
}

void check_gamma(const char* component, double v) {
  if (!(v > 0.0) || !std::isfinite(v)) {
    throw InvalidArgument(
        component,
        "gamma must be > 0 and finite, got " + ampkit::detail::exact_number(v) +
            ". It multiplies the lr every step_size steps; PyTorch's default "
            "is 0.1.");
  }
}

}  // namespace

StepLR::StepLR(
    torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  check_step_size("StepLR", step_size);
  check_gamma("StepLR", gamma);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  return times(base_lrs_, std::pow(gamma_, double(last_epoch_ / step_size_)));
}

void StepLR::save_own_state(StateDict& state) const {
  state["step_size"] = step_size_;
  state["gamma"] = gamma_;
}

void StepLR::load_own_state(const StateDict& state) {
  const int64_t step_size = state.at("step_size").toInt();
  const double gamma = state.at("gamma").toDouble();
  check_step_size("StepLR", step_size);
  check_gamma("StepLR", gamma);
  step_size_ = step_size;
  gamma_ = gamma;
}

}  // namespace ampkit::optim
