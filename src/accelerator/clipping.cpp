// Gradient unscaling and clipping across the prepared optimizers:
// accelerate's unscale_gradients, clip_grad_norm_ and clip_grad_value_.
#include "ampkit/accelerator/accelerator.h"

#include <cmath>
#include <string>

#include "accelerator/state.h"
#include "ampkit/error.h"

namespace ampkit {

namespace {
constexpr const char* kComponent = "Accelerator";
}  // namespace

void Accelerator::unscale_gradients() {
  auto& st = *state_;
  if (!st.scaler || !st.sync_gradients) {
    return;
  }
  for (auto& entry : st.optimizers) {
    if (!entry.unscaled && !entry.stepped) {
      st.scaler->unscale_(*entry.optimizer);
      entry.unscaled = true;
    }
  }
}

torch::Tensor Accelerator::clip_grad_norm_(
    const std::vector<torch::Tensor>& parameters,
    double max_norm,
    double norm_type) {
  if (!(max_norm >= 0) || std::isinf(max_norm)) {
    throw InvalidArgument(
        kComponent,
        "clip_grad_norm_ needs max_norm >= 0 and finite, got " +
            std::to_string(max_norm) + ". Typical values are 0.5 to 5.");
  }
  if (!(norm_type > 0)) {
    throw InvalidArgument(
        kComponent,
        "clip_grad_norm_ needs norm_type > 0 (or infinity), got " +
            std::to_string(norm_type) + ". Use 2.0 for the Euclidean norm.");
  }
  if (!state_->sync_gradients) {
    return {};
  }
  unscale_gradients();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) {
      grads.push_back(p.grad());
    }
  }
  if (grads.empty()) {
    return torch::zeros({}, torch::TensorOptions().device(device()));
  }
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  torch::Tensor total;
  if (std::isinf(norm_type)) {
    for (const auto& g : grads) {
      norms.push_back(g.abs().max().to(device()));
    }
    total = norms.size() == 1 ? norms[0] : torch::stack(norms).max();
  } else {
    for (const auto& g : grads) {
      norms.push_back(g.norm(norm_type).to(device()));
    }
    total = torch::stack(norms).norm(norm_type);
  }
  // PyTorch's clip_grad_norm_: multiply by the clamped coefficient without
  // a host sync (a no-op factor of 1 when the norm is below max_norm).
  const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (auto& g : grads) {
    g.mul_(coef.to(g.device()));
  }
  state_->last_grad_norm = total;
  return total;
}

void Accelerator::clip_grad_value_(
    const std::vector<torch::Tensor>& parameters, double clip_value) {
  if (!(clip_value >= 0) || std::isinf(clip_value)) {
    throw InvalidArgument(
        kComponent,
        "clip_grad_value_ needs clip_value >= 0 and finite, got " +
            std::to_string(clip_value) + ".");
  }
  if (!state_->sync_gradients) {
    return;
  }
  unscale_gradients();
  torch::NoGradGuard no_grad;
  for (const auto& p : parameters) {
    if (p.grad().defined()) {
      p.grad().clamp_(-clip_value, clip_value);
    }
  }
}

}  // namespace ampkit
