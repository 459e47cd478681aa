// GradScaler: PyTorch's torch/amp/grad_scaler.py stage machine and update
// rule in C++, with ATen's kernels where LibTorch has them for the device.
#include "ampkit/amp/grad_scaler.h"

#include <ATen/ATen.h>

#include <cmath>
#include <sstream>

#include "amp/compat.h"
#include "amp/scale_update.h"
#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"

#include "utils/components.h"
#include "utils/non_finite.h"
#include "utils/strings.h"

namespace ampkit {

using detail::check_backoff_factor;
using detail::check_growth_factor;
using detail::check_growth_interval;
using detail::check_scale_value;
using detail::uses_extensions;
using detail::validate;

namespace {

using PerDevice = std::vector<std::pair<c10::Device, torch::Tensor>>;

// The entry of `copies` for `device`, made by `make(device)` the first time
// (PyTorch's _MultiDeviceReplicator).
template <typename Make>
torch::Tensor& on_device(
    PerDevice& copies, const c10::Device& device, Make make) {
  for (auto& [d, t] : copies) {
    if (d == device) {
      return t;
    }
  }
  copies.emplace_back(device, make(device));
  return copies.back().second;
}

std::string position_name(size_t group, size_t index) {
  return "param_groups[" + std::to_string(group) + "][" +
         std::to_string(index) + "]";
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), init_scale_(options_.init_scale()) {
  validate(options_);
}

void GradScaler::check_initialised(const char* funcname) const {
  if (!scale_.defined()) {
    throw UsageError(
        component::kGradScaler,
        std::string("Attempted ") + funcname +
            " but _scale is None.  This may indicate your script did not use "
            "scaler.scale(loss or outputs) earlier in the iteration.");
  }
}

void GradScaler::lazy_init(const c10::Device& device) {
  const auto on = at::TensorOptions().device(device);
  scale_ = at::full({}, init_scale_, on.dtype(at::kFloat));
  growth_tracker_ = at::full({}, init_growth_tracker_, on.dtype(at::kInt));
}

torch::Tensor GradScaler::scale(const torch::Tensor& outputs) {
  if (!options_.enabled()) {
    return outputs;
  }
  if (!scale_.defined()) {
    lazy_init(outputs.device());
  }
  return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

std::vector<torch::Tensor> GradScaler::scale(
    const std::vector<torch::Tensor>& outputs) {
  if (!options_.enabled() || outputs.empty()) {
    return outputs;
  }
  if (!scale_.defined()) {
    lazy_init(outputs.front().device());
  }
  PerDevice copies;
  std::vector<torch::Tensor> scaled;
  scaled.reserve(outputs.size());
  for (const auto& out : outputs) {
    scaled.push_back(
        out * on_device(copies, out.device(), [&](const c10::Device& d) {
          return scale_.to(d, /*non_blocking=*/true);
        }));
  }
  return scaled;
}

std::vector<std::pair<c10::Device, torch::Tensor>> GradScaler::unscale_grads(
    torch::optim::Optimizer& optimizer,
    const torch::Tensor& inv_scale,
    bool allow_fp16) {
  struct Group {
    c10::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> grads;
  };
  std::vector<Group> groups;
  at::NoGradGuard no_grad;
  auto& param_groups = optimizer.param_groups();
  for (size_t g = 0; g < param_groups.size(); ++g) {
    auto& params = param_groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor& param = params[i];
      if (!param.grad().defined()) {
        continue;
      }
      if (!allow_fp16 && param.grad().scalar_type() == at::kHalf) {
        const std::string* named = registered_name(param);
        const std::string name = named != nullptr
                                     ? *named + " (" + position_name(g, i) + ")"
                                     : position_name(g, i);
        throw InvalidArgument(
            component::kGradScaler,
            "Attempting to unscale FP16 gradients. Parameter " + name +
                " is float16, so its gradient is too, and an fp16 gradient "
                "cannot hold the unscaled values reliably. Keep trainable "
                "parameters in fp32 (do not call model->to(torch::kHalf)); "
                "autocast casts them to fp16 inside the forward pass.");
      }
      at::Tensor to_unscale;
      if (param.grad().is_sparse()) {
        // Duplicate indices are summed by coalesce(); in fp16 that sum may
        // overflow, so the coalesced values are what must be checked.
        if (param.grad().scalar_type() == at::kHalf) {
          param.mutable_grad() = param.grad().coalesce();
        }
        to_unscale = param.grad()._values();
      } else {
        to_unscale = param.grad();
      }
      Group* target = nullptr;
      for (auto& group : groups) {
        if (group.device == to_unscale.device() &&
            group.dtype == to_unscale.scalar_type()) {
          target = &group;
        }
      }
      if (target == nullptr) {
        groups.push_back(
            Group{to_unscale.device(), to_unscale.scalar_type(), {}});
        target = &groups.back();
      }
      target->grads.push_back(to_unscale);
    }
  }

  PerDevice found_inf_per_device;
  PerDevice inv_scale_per_device;
  for (auto& group : groups) {
    torch::Tensor& found_inf =
        on_device(found_inf_per_device, group.device, [](const c10::Device& d) {
          return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(d));
        });
    if (!inv_scale.defined()) {
      detail::non_finite_check_(group.grads, found_inf);
      continue;
    }
    const torch::Tensor& inv = on_device(
        inv_scale_per_device, group.device, [&](const c10::Device& d) {
          return inv_scale.to(d, /*non_blocking=*/true);
        });
    detail::non_finite_check_and_unscale_(group.grads, found_inf, inv);
  }
  if (found_inf_combiner_) {
    for (auto& [device, found_inf] : found_inf_per_device) {
      found_inf_combiner_(found_inf);
    }
  }
  return found_inf_per_device;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    return;
  }
  check_initialised("unscale_");
  OptimizerState& state = per_optimizer_states_[&optimizer];
  if (state.stage == Stage::unscaled) {
    throw UsageError(
        component::kGradScaler,
        "unscale_() has already been called on this optimizer since the last "
        "update().");
  }
  if (state.stage == Stage::stepped) {
    throw UsageError(
        component::kGradScaler, "unscale_() is being called after step().");
  }
  // The reciprocal is taken in double: float division can be inexact under
  // some compile options.
  const torch::Tensor inv_scale =
      scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  state.found_inf_per_device =
      unscale_grads(optimizer, inv_scale, /*allow_fp16=*/false);
  state.stage = Stage::unscaled;
}

std::optional<torch::Tensor> GradScaler::step(
    torch::optim::Optimizer& optimizer,
    torch::optim::Optimizer::LossClosure closure) {
  if (!options_.enabled()) {
    return optimizer.step(std::move(closure));
  }
  if (closure) {
    throw UsageError(
        component::kGradScaler,
        "Closure use is not currently supported if GradScaler is enabled. "
        "Call the closure yourself, then scaler.step(optimizer).");
  }
  OptimizerState& state = state_for_step(optimizer);
  if (state.stage == Stage::ready) {
    unscale_(optimizer);
  }
  check_recorded(state);
  bool found_inf = false;
  for (const auto& [device, t] : state.found_inf_per_device) {
    found_inf = found_inf || t.item<float>() != 0.0f;
  }
  std::optional<torch::Tensor> result;
  if (!found_inf) {
    result = optimizer.step();
  } else if (options_.report_overflow()) {
    record_non_finite(optimizer);
  }
  state.stage = Stage::stepped;
  return result;
}

void GradScaler::check_recorded(const OptimizerState& state) {
  if (state.found_inf_per_device.empty()) {
    throw UsageError(
        component::kGradScaler,
        "No inf checks were recorded for this optimizer. None of its "
        "parameters has a gradient: run backward() on scaler.scale(loss) "
        "before step(), with a loss that depends on these parameters.");
  }
}

GradScaler::OptimizerState& GradScaler::state_for_step(
    torch::optim::Optimizer& optimizer) {
  check_initialised("step");
  OptimizerState& state = per_optimizer_states_[&optimizer];
  if (state.stage == Stage::stepped) {
    throw UsageError(
        component::kGradScaler,
        "step() has already been called since the last update().");
  }
  return state;
}

torch::Tensor GradScaler::step_supporting_amp_scaling(
    torch::optim::Optimizer& optimizer,
    const std::function<
        void(const torch::Tensor& grad_scale, const torch::Tensor& found_inf)>&
        fused_step) {
  if (!options_.enabled()) {
    fused_step({}, {});
    return {};
  }
  OptimizerState& state = state_for_step(optimizer);
  const bool scaled = state.stage == Stage::ready;
  if (scaled) {
    state.found_inf_per_device =
        unscale_grads(optimizer, torch::Tensor(), /*allow_fp16=*/true);
  }
  check_recorded(state);
  torch::Tensor found_inf;
  for (const auto& [device, t] : state.found_inf_per_device) {
    const torch::Tensor here = t.to(scale_.device(), /*non_blocking=*/true);
    // The kernels skip where found_inf == 1 exactly: max, not a sum.
    found_inf = found_inf.defined() ? torch::maximum(found_inf, here) : here;
  }
  fused_step(scaled ? scale_ : torch::Tensor(), found_inf);
  if (options_.report_overflow() && found_inf.item<float>() != 0.0f) {
    record_non_finite(optimizer);
  }
  state.stage = Stage::stepped;
  return found_inf;
}

bool GradScaler::uses_host_update() const {
  return uses_extensions(options_) || options_.report_overflow() ||
         !detail::has_amp_kernels(scale_.device().type());
}

void GradScaler::update() {
  if (!options_.enabled()) {
    return;
  }
  check_initialised("update");
  std::vector<torch::Tensor> found_infs;
  for (const auto& [opt, state] : per_optimizer_states_) {
    for (const auto& [device, t] : state.found_inf_per_device) {
      found_infs.push_back(t.to(scale_.device(), /*non_blocking=*/true));
    }
  }
  if (found_infs.empty()) {
    throw UsageError(
        component::kGradScaler,
        "No inf checks were recorded prior to update. Call "
        "scaler.step(optimizer) (or unscale_) for each optimizer before "
        "update().");
  }
  torch::Tensor combined = found_infs.front();
  for (size_t i = 1; i < found_infs.size(); ++i) {
    combined = combined + found_infs[i];
  }
  per_optimizer_states_.clear();
  if (uses_host_update()) {
    update_on_host(combined);
  } else {
    at::_amp_update_scale_(
        scale_,
        growth_tracker_,
        combined,
        options_.growth_factor(),
        options_.backoff_factor(),
        options_.growth_interval());
  }
  overflowed_parameters_.clear();
  overflowed_where_.clear();
  ++updates_;
}

void GradScaler::update_on_host(const torch::Tensor& found_inf) {
  const bool found = found_inf.item<float>() != 0.0f;
  detail::ScaleState state;
  state.scale = scale_.item<float>();
  state.growth_tracker = growth_tracker_.item<int32_t>();
  state.consecutive_overflows = consecutive_overflows_;
  state.skipped_at_min_scale = skipped_at_min_scale_;
  const detail::ScaleState next =
      detail::next_scale_state(state, found, options_);
  scale_.fill_(next.scale);
  growth_tracker_.fill_(next.growth_tracker);
  consecutive_overflows_ = next.consecutive_overflows;
  skipped_at_min_scale_ = next.skipped_at_min_scale;
  if (found && options_.report_overflow()) {
    report(state.scale, next.scale);
  }
  const int64_t limit = options_.max_skipped_steps_at_min_scale();
  if (limit > 0 && skipped_at_min_scale_ >= limit) {
    throw TrainingDiverged(
        component::kGradScaler,
        "training diverged: " + std::to_string(skipped_at_min_scale_) +
            " steps in a row were skipped with the loss scale at its floor "
            "min_scale=" +
            detail::exact_number(options_.min_scale()) +
            ", so the gradients are inf/NaN even at the smallest scale "
            "allowed. Lower the learning rate, clip gradients "
            "(clip_grad_norm_), check the inputs and the loss for inf/NaN, "
            "or train in bf16, which needs no loss scaling.");
  }
}

void GradScaler::report(double old_scale, double new_scale) {
  OverflowReport r;
  r.step = updates_;
  r.old_scale = old_scale;
  r.new_scale = new_scale;
  r.parameters = overflowed_parameters_;
  r.where = overflowed_where_;
  last_overflow_ = r;
  if (overflow_callback_) {
    overflow_callback_(r);
    return;
  }
  warn(
      component::kGradScaler,
      detail::skipped_step_line(r.step, r.where, old_scale, new_scale));
}

void GradScaler::record_non_finite(torch::optim::Optimizer& optimizer) {
  std::vector<std::pair<std::string, at::Tensor>> grads;
  auto& param_groups = optimizer.param_groups();
  for (size_t g = 0; g < param_groups.size(); ++g) {
    const auto& params = param_groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string* named = registered_name(params[i]);
      grads.emplace_back(
          named != nullptr ? *named : position_name(g, i), params[i].grad());
    }
  }
  const auto found = detail::find_non_finite(grads);
  for (const auto& f : found) {
    overflowed_parameters_.push_back(f.name);
  }
  if (!found.empty()) {
    overflowed_where_ += (overflowed_where_.empty() ? "" : ", ") +
                         detail::describe_non_finite(found);
  }
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled()) {
    return;
  }
  check_initialised("update");
  check_scale_value("new_scale", new_scale);
  scale_.fill_(new_scale);
  per_optimizer_states_.clear();
  overflowed_parameters_.clear();
  overflowed_where_.clear();
}

void GradScaler::update(const torch::Tensor& new_scale) {
  if (!options_.enabled()) {
    return;
  }
  check_initialised("update");
  if (!new_scale.defined() || new_scale.numel() != 1 ||
      new_scale.requires_grad()) {
    throw InvalidArgument(
        component::kGradScaler,
        "new_scale should be a float or a 1-element tensor with "
        "requires_grad=false, got " +
            (new_scale.defined()
                 ? "a tensor of " + std::to_string(new_scale.numel()) +
                       " elements, requires_grad=" +
                       (new_scale.requires_grad() ? "true" : "false")
                 : std::string("an undefined tensor")) +
            ".");
  }
  update(new_scale.item<double>());
}

double GradScaler::get_scale() const {
  if (!options_.enabled()) {
    return 1.0;
  }
  return scale_.defined() ? double(scale_.item<float>()) : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!options_.enabled()) {
    return 0;
  }
  return growth_tracker_.defined() ? growth_tracker_.item<int32_t>()
                                   : init_growth_tracker_;
}

double GradScaler::get_growth_factor() const {
  return options_.growth_factor();
}
void GradScaler::set_growth_factor(double new_factor) {
  check_growth_factor(new_factor);
  options_.growth_factor(new_factor);
}
double GradScaler::get_backoff_factor() const {
  return options_.backoff_factor();
}
void GradScaler::set_backoff_factor(double new_factor) {
  check_backoff_factor(new_factor);
  options_.backoff_factor(new_factor);
}
int64_t GradScaler::get_growth_interval() const {
  return options_.growth_interval();
}
void GradScaler::set_growth_interval(int64_t new_interval) {
  check_growth_interval(new_interval);
  options_.growth_interval(new_interval);
}
bool GradScaler::is_enabled() const {
  return options_.enabled();
}

const std::string* GradScaler::registered_name(
    const torch::Tensor& param) const {
  auto it = parameter_names_.find(param.unsafeGetTensorImpl());
  return it != parameter_names_.end() ? &it->second : nullptr;
}

void GradScaler::register_parameter_names(
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters) {
  for (const auto& item : named_parameters) {
    parameter_names_[item.value().unsafeGetTensorImpl()] = item.key();
  }
}

void GradScaler::set_overflow_callback(
    std::function<void(const OverflowReport&)> cb) {
  overflow_callback_ = std::move(cb);
}

}  // namespace ampkit
