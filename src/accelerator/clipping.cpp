// Gradient unscaling and clipping across the prepared optimizers:
// accelerate's unscale_gradients, clip_grad_norm_ and clip_grad_value_.
#include "ampkit/accelerator/accelerator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "accelerator/state.h"
#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit {

namespace {

std::vector<torch::Tensor> defined_grads(
    const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) {
      grads.push_back(p.grad());
    }
  }
  return grads;
}

// torch::nn::utils::clip_grad_norm_'s total norm, on `device`; 0 without
// gradients.
torch::Tensor total_norm(
    const std::vector<torch::Tensor>& grads,
    double norm_type,
    const c10::Device& device) {
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) {
    norms.push_back(detail::gradient_norm(g, norm_type));
  }
  return detail::combine_norms(std::move(norms), norm_type, device);
}

// PyTorch's clip_grad_norm_: multiply by the clamped coefficient without a
// host sync (a no-op factor of 1 when the norm is below max_norm).
torch::Tensor clip_to(
    detail::AcceleratorState& st,
    const std::vector<torch::Tensor>& grads,
    const torch::Tensor& total,
    double max_norm) {
  const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (const auto& g : grads) {
    g.mul_(coef.to(g.device()));
  }
  st.tracking.last_grad_norm = total;
  return total;
}
}  // namespace

namespace detail {
torch::Tensor gradient_norm(const torch::Tensor& g, double norm_type) {
  return std::isinf(norm_type) ? g.abs().max() : g.norm(norm_type);
}

torch::Tensor combine_norms(
    std::vector<torch::Tensor> norms,
    double norm_type,
    const c10::Device& device) {
  if (norms.empty()) {
    return torch::zeros({}, torch::TensorOptions().device(device));
  }
  for (auto& n : norms) {
    n = n.to(device);
  }
  if (std::isinf(norm_type)) {
    return norms.size() == 1 ? norms[0] : torch::stack(norms).max();
  }
  return torch::stack(norms).norm(norm_type);
}

void unscale_gradients(AcceleratorState& st) {
  if (!st.scaler || !st.gradient.sync_gradients) {
    return;
  }
  for (auto& entry : st.optimizers) {
    if (!entry.unscaled && !entry.stepped) {
      st.scaler->unscale_(*entry.optimizer);
      entry.unscaled = true;
    }
  }
}

torch::Tensor clip_grad_norm(
    AcceleratorState& st,
    const std::vector<torch::Tensor>& parameters,
    double max_norm,
    double norm_type) {
  torch::NoGradGuard no_grad;
  const c10::Device device = st.options.device;
  if (!st.gradient.sync_gradients) {
    // The gradients are partial and, under loss scaling, still scaled:
    // nothing is clipped or unscaled in place, but the norm of what has
    // accumulated so far is returned (unscaled), so that code ported from
    // accelerate, which returns a norm on every call, can read it.
    const torch::Tensor partial =
        total_norm(defined_grads(parameters), norm_type, device);
    return st.scaler ? partial / st.scaler->get_scale() : partial;
  }
  unscale_gradients(st);
  if (auto sharded = st.strategy->sharded_gradients(st, parameters)) {
    return clip_to(
        st,
        sharded->all(),
        st.strategy->sharded_norm(st, parameters, *sharded, norm_type),
        max_norm);
  }
  std::vector<torch::Tensor> grads = defined_grads(parameters);
  if (grads.empty()) {
    return torch::zeros({}, torch::TensorOptions().device(device));
  }
  return clip_to(st, grads, total_norm(grads, norm_type, device), max_norm);
}
}  // namespace detail

void Accelerator::unscale_gradients() {
  detail::unscale_gradients(*state_);
}

torch::Tensor Accelerator::clip_grad_norm_(
    const std::vector<torch::Tensor>& parameters,
    double max_norm,
    double norm_type) {
  if (!(max_norm >= 0) || std::isinf(max_norm)) {
    throw InvalidArgument(
        component::kAccelerator,
        "clip_grad_norm_ needs max_norm >= 0 and finite, got " +
            std::to_string(max_norm) + ". Typical values are 0.5 to 5.");
  }
  if (!(norm_type > 0)) {
    throw InvalidArgument(
        component::kAccelerator,
        "clip_grad_norm_ needs norm_type > 0 (or infinity), got " +
            std::to_string(norm_type) + ". Use 2.0 for the Euclidean norm.");
  }
  return detail::clip_grad_norm(*state_, parameters, max_norm, norm_type);
}

void Accelerator::clip_grad_value_(
    const std::vector<torch::Tensor>& parameters, double clip_value) {
  if (!(clip_value >= 0) || std::isinf(clip_value)) {
    throw InvalidArgument(
        component::kAccelerator,
        "clip_grad_value_ needs clip_value >= 0 and finite, got " +
            std::to_string(clip_value) + ".");
  }
  if (!state_->gradient.sync_gradients) {
    return;
  }
  unscale_gradients();
  torch::NoGradGuard no_grad;
  const auto sharded = state_->strategy->sharded_gradients(*state_, parameters);
  for (const auto& g : sharded ? sharded->all() : defined_grads(parameters)) {
    g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace ampkit
