// The torch-facing half of the fused Adam/AdamW step: checks, per-parameter
// double scalars computed as LibTorch 1.13 computes them, and the
// optimizer's own state; the loop itself is optim/fused_kernel.cpp.
#include "optim/fused_step.h"

#include <ATen/Parallel.h>
#include <c10/util/C++17.h>
#include <c10/util/Type.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "amp/compat.h"
#include "ampkit/error.h"
#include "optim/fused_kernel.h"
#include "optim/param_info.h"

namespace ampkit::detail {

namespace {

using StateMap = OptimizerStateMap;

constexpr const char* kHint =
    " The fused step needs torch::optim::Adam or AdamW without amsgrad, on "
    "dense float32 CPU parameters (contiguous or channels-last) with float32 "
    "gradients of the same layout; optimizer.step() handles everything else.";

// The loop walks memory in order, so any dense, non-overlapping layout will
// do as long as the parameter, its gradient and its state share it.
bool is_plain_float_cpu(const at::Tensor& t) {
  return t.defined() && t.layout() == c10::kStrided && t.device().is_cpu() &&
         t.scalar_type() == at::kFloat && t.is_non_overlapping_and_dense();
}

template <typename State>
std::optional<std::string> state_reason(
    const StateMap& state, const at::Tensor& p, const std::string& name) {
  const auto found = state.find(state_key(p));
  if (found == state.end()) {
    return std::nullopt;
  }
  const auto* s = dynamic_cast<const State*>(found->second.get());
  if (s == nullptr) {
    return "fused_step: the state of " + name +
           " is not the optimizer's own param state type." + kHint;
  }
  for (const at::Tensor* buffer : {&s->exp_avg(), &s->exp_avg_sq()}) {
    if (!is_plain_float_cpu(*buffer) || buffer->sizes() != p.sizes() ||
        buffer->strides() != p.strides()) {
      return "fused_step: the exp_avg/exp_avg_sq state of " + name +
             " must be a dense float32 CPU tensor shaped and laid out like it, "
             "got " +
             (buffer->defined() ? describe_tensor(*buffer) : "undefined") +
             "." + kHint;
    }
  }
  return std::nullopt;
}

template <typename Options, typename State>
std::optional<std::string> reason_for(
    torch::optim::Optimizer& optimizer, const char* type_name) {
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& options = static_cast<const Options&>(groups[g].options());
    if (options.amsgrad()) {
      return std::string("fused_step: ") + type_name +
             " has amsgrad on in param group " + std::to_string(g) +
             ", got amsgrad=true." + kHint;
    }
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& p = params[i];
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) {
        continue;
      }
      const std::string name = param_position(g, i);
      if (!is_plain_float_cpu(p)) {
        return "fused_step: " + name +
               " must be a dense float32 CPU tensor, got " +
               describe_tensor(p) + "." + kHint;
      }
      if (!is_plain_float_cpu(grad) || grad.sizes() != p.sizes() ||
          grad.strides() != p.strides()) {
        return "fused_step: the gradient of " + name +
               " must be a dense float32 CPU tensor shaped and laid out like "
               "it, got " +
               describe_tensor(grad) + "." + kHint;
      }
      if (auto reason = state_reason<State>(optimizer.state(), p, name)) {
        return reason;
      }
    }
  }
  return std::nullopt;
}

// WeightDecayMode::kDecoupled marks AdamW; the rest is shared because
// LibTorch's two step() bodies differ only in where weight decay goes.
template <typename Options, typename State>
void step_all(
    torch::optim::Optimizer& optimizer,
    bool decoupled,
    std::optional<float> inv_scale) {
  at::NoGradGuard no_grad;
  const int threads = at::get_num_threads();
  auto& state_map = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    const double lr = options.lr();
    const double weight_decay = options.weight_decay();
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    for (auto& p : group.params()) {
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) {
        continue;
      }
      auto key = state_key(p);
      auto found = state_map.find(key);
      if (found == state_map.end()) {
        auto state = std::make_unique<State>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        found = state_map.emplace(std::move(key), std::move(state)).first;
      }
      auto& state = static_cast<State&>(*found->second);
      state.step(state.step() + 1);

      // LibTorch's doubles, each rounded once to float as ATen's CPU kernels
      // round Scalar arguments.
      const double bias_correction1 = 1 - std::pow(beta1, state.step());
      const double bias_correction2 = 1 - std::pow(beta2, state.step());
      const double step_size = lr / bias_correction1;
      AdamKernelScalars s;
      if (inv_scale) {
        s.unscale = true;
        s.inv_scale = *inv_scale;
      }
      s.beta1 = static_cast<float>(beta1);
      s.one_minus_beta1 = static_cast<float>(1 - beta1);
      s.beta2 = static_cast<float>(beta2);
      s.one_minus_beta2 = static_cast<float>(1 - beta2);
      s.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
      s.eps = static_cast<float>(options.eps());
      s.neg_step_size = static_cast<float>(-step_size);
      if (weight_decay == 0) {
        s.mode = WeightDecayMode::kNone;
      } else if (decoupled) {
        s.mode = WeightDecayMode::kDecoupled;
        s.decay = static_cast<float>(1 - lr * weight_decay);
      } else {
        s.mode = WeightDecayMode::kL2;
        s.decay = static_cast<float>(weight_decay);
      }

      at::Tensor& exp_avg = state.exp_avg();
      at::Tensor& exp_avg_sq = state.exp_avg_sq();
      adam_step(
          p.data_ptr<float>(),
          grad.data_ptr<float>(),
          exp_avg.data_ptr<float>(),
          exp_avg_sq.data_ptr<float>(),
          p.numel(),
          s,
          threads);
      // What the in-place ATen ops would have recorded for autograd.
      p.unsafeGetTensorImpl()->bump_version();
      exp_avg.unsafeGetTensorImpl()->bump_version();
      exp_avg_sq.unsafeGetTensorImpl()->bump_version();
      if (s.unscale) {
        grad.unsafeGetTensorImpl()->bump_version();
      }
    }
  }
}

}  // namespace

std::optional<std::string> fused_step_unsupported_reason(
    torch::optim::Optimizer& optimizer) {
  const std::type_info& type = typeid(optimizer);
  if (type == typeid(torch::optim::Adam)) {
    return reason_for<torch::optim::AdamOptions, torch::optim::AdamParamState>(
        optimizer, "torch::optim::Adam");
  }
  if (type == typeid(torch::optim::AdamW)) {
    return reason_for<
        torch::optim::AdamWOptions,
        torch::optim::AdamWParamState>(optimizer, "torch::optim::AdamW");
  }
  return std::string(
             "fused_step: the optimizer must be exactly torch::optim::Adam "
             "or torch::optim::AdamW (not a subclass), got ") +
         c10::demangle(type.name()) + "." + kHint;
}

void fused_step(
    torch::optim::Optimizer& optimizer,
    const at::Tensor& grad_scale,
    const at::Tensor& found_inf) {
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor*>{"grad_scale", &grad_scale},
        {"found_inf", &found_inf}}) {
    if (t->defined() && (!t->device().is_cpu() || t->dim() != 0 ||
                         t->scalar_type() != at::kFloat)) {
      throw InvalidArgument(
          "fused_step",
          std::string(name) +
              " must be a 0-dim float32 CPU tensor (a CPU GradScaler's), "
              "got " +
              describe_tensor(*t) +
              ". Create the GradScaler on the parameters' device (the "
              "CPU).");
    }
  }
  if (found_inf.defined() && found_inf.item<float>() != 0.0f) {
    return;  // GradScaler::step skips optimizer.step()
  }
  std::optional<float> inv_scale;
  if (grad_scale.defined()) {
    // GradScaler::unscale_'s rounding: the reciprocal in double, then float.
    inv_scale = static_cast<float>(1.0 / grad_scale.item<double>());
  }
  if (typeid(optimizer) == typeid(torch::optim::AdamW)) {
    step_all<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
        optimizer, /*decoupled=*/true, inv_scale);
  } else {
    step_all<torch::optim::AdamOptions, torch::optim::AdamParamState>(
        optimizer, /*decoupled=*/false, inv_scale);
  }
}

}  // namespace ampkit::detail
