// LibTorch's Adam, AdamW and SGD stepped by ATen's fused kernels, with the
// optimizers' own param states. The arithmetic is ATen's (as Python's
// fused=True); the bookkeeping around it follows torch/optim/{adam,sgd}.py's
// _fused_* functions: step counts as tensors incremented before the kernel,
// one kernel call per (device, dtype) group, grad_scale and found_inf moved
// to each group's device.
#include "ampkit/optim/fused.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <map>
#include <memory>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "optim/param_info.h"
#include "utils/components.h"

#include "optim/compat.h"  // AMPKIT_HAS_ATEN_FUSED_OPTIM
#if AMPKIT_HAS_ATEN_FUSED_OPTIM
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_sub.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#endif

namespace ampkit::optim {

namespace {

constexpr const char* kHint =
    " ATen's fused step needs torch::optim::Adam, AdamW or SGD on dense "
    "float32/float64/float16/bfloat16 parameters on the CPU or a CUDA "
    "device, each with a dense gradient of its dtype; optimizer.step() "
    "handles everything else.";

enum class Kind { adam, adamw, sgd, other };

Kind kind_of(const torch::optim::Optimizer& optimizer) {
  const std::type_info& type = typeid(optimizer);
  if (type == typeid(torch::optim::Adam)) {
    return Kind::adam;
  }
  if (type == typeid(torch::optim::AdamW)) {
    return Kind::adamw;
  }
  if (type == typeid(torch::optim::SGD)) {
    return Kind::sgd;
  }
  return Kind::other;
}

bool fusable_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf ||
         t == at::kBFloat16;
}

bool fusable_device(const c10::Device& d) {
  return d.is_cpu() || d.is_cuda();
}

#if AMPKIT_HAS_ATEN_FUSED_OPTIM

// Tensors of one kernel call: one device and dtype, in parameter order.
struct Group {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
      steps, momentum_buffers;
  // SGD: parameters whose momentum buffer this step creates (the kernel's
  // is_first_step copies the gradient into it), kept apart from the rest.
  std::vector<at::Tensor> first_params, first_grads, first_buffers;
};

using GroupKey = std::pair<std::string, at::ScalarType>;

Group& group_for(std::map<GroupKey, Group>& groups, const at::Tensor& p) {
  return groups[{p.device().str(), p.scalar_type()}];
}

// `t` on `device`, once per device.
const at::Tensor& on_device(
    std::map<std::string, at::Tensor>& cache,
    const at::Tensor& t,
    const c10::Device& device) {
  auto found = cache.find(device.str());
  if (found == cache.end()) {
    found =
        cache.emplace(device.str(), t.to(device, /*non_blocking=*/true)).first;
  }
  return found->second;
}

std::optional<at::Tensor> maybe(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

bool skipped_by(const at::Tensor& found_inf) {
  return found_inf.defined() && found_inf.item<float>() != 0.0f;
}

// Adam's/AdamW's param state with its step count also on the parameter's
// device, as Python's fused path keeps it: the kernel reads it there and
// found_inf takes a skipped step back there, so a step needs no host read.
// LibTorch's int64 step() is the count the host saw last; it is brought up
// to date (one read) when the state is saved, cloned or synced by
// sync_fused_step_counts, and on the CPU after every step (no device to
// wait for). A step() changed on the host since is taken as the new count.
template <typename State>
class DeviceStepState : public State {
 public:
  DeviceStepState(const State& state, const c10::Device& device)
      : State(state) {
    reset(device);
  }

  // The step tensor for this step's kernel; re-made from the host count
  // when that was changed (loaded, set by hand) or the device moved.
  at::Tensor& device_step(const c10::Device& device) {
    if (State::step() != host_seen_ || step_.device() != device) {
      reset(device);
    }
    return step_;
  }

  // After the kernels ran: the host count is stale until the next sync.
  void stepped() {
    host_stale_ = true;
    if (step_.device().is_cpu()) {
      sync();
    }
  }

  void sync() const {
    if (!host_stale_) {
      return;
    }
    auto& self = const_cast<DeviceStepState&>(*this);
    self.State::step(static_cast<int64_t>(step_.item<double>()));
    self.host_seen_ = State::step();
    self.host_stale_ = false;
  }

  void serialize(torch::serialize::OutputArchive& archive) const override {
    sync();
    State::serialize(archive);
  }

  std::unique_ptr<torch::optim::OptimizerParamState> clone() const override {
    sync();
    return std::make_unique<State>(static_cast<const State&>(*this));
  }

 private:
  void reset(const c10::Device& device) {
    step_ = at::full(
        {},
        static_cast<double>(State::step()),
        at::TensorOptions().dtype(at::kFloat).device(device));
    host_seen_ = State::step();
    host_stale_ = false;
  }

  at::Tensor step_;
  int64_t host_seen_ = 0;
  bool host_stale_ = false;
};

// The DeviceStepState of `slot` (made from LibTorch's state on first use).
template <typename State>
DeviceStepState<State>& device_step_state(
    std::unique_ptr<torch::optim::OptimizerParamState>& slot,
    const c10::Device& device) {
  if (auto* ours = dynamic_cast<DeviceStepState<State>*>(slot.get())) {
    return *ours;
  }
  auto made = std::make_unique<DeviceStepState<State>>(
      static_cast<const State&>(*slot), device);
  auto& ref = *made;
  slot = std::move(made);
  return ref;
}

template <typename Options, typename State>
void step_adam(
    torch::optim::Optimizer& optimizer,
    bool decoupled,
    const at::Tensor& grad_scale,
    const at::Tensor& found_inf) {
  auto& state_map = optimizer.state();
  std::map<std::string, at::Tensor> scales, infs;
  std::vector<DeviceStepState<State>*> stepped;
  for (auto& param_group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(param_group.options());
    std::map<GroupKey, Group> groups;
    for (auto& p : param_group.params()) {
      if (!p.grad().defined()) {
        continue;
      }
      auto key = detail::state_key(p);
      auto found = state_map.find(key);
      if (found == state_map.end()) {
        // As Adam::step creates it.
        auto state = std::make_unique<State>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        if (options.amsgrad()) {
          state->max_exp_avg_sq(
              torch::zeros_like(p, at::MemoryFormat::Preserve));
        }
        found = state_map.emplace(std::move(key), std::move(state)).first;
      }
      auto& state = device_step_state<State>(found->second, p.device());
      if (options.amsgrad() && !state.max_exp_avg_sq().defined()) {
        state.max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
      }
      Group& g = group_for(groups, p);
      g.params.push_back(p);
      g.grads.push_back(p.grad());
      g.exp_avgs.push_back(state.exp_avg());
      g.exp_avg_sqs.push_back(state.exp_avg_sq());
      if (options.amsgrad()) {
        g.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      }
      g.steps.push_back(state.device_step(p.device()));
      stepped.push_back(&state);
    }
    const double lr = options.lr();
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    for (auto& [key, g] : groups) {
      const c10::Device device = g.params.front().device();
      const auto scale = grad_scale.defined()
                             ? maybe(on_device(scales, grad_scale, device))
                             : std::nullopt;
      const auto inf = found_inf.defined()
                           ? maybe(on_device(infs, found_inf, device))
                           : std::nullopt;
      // The kernel reads the step the update is for: Python increments its
      // step tensors before the call and takes a skipped step back after.
      at::_foreach_add_(g.steps, 1);
      // Adam and AdamW's kernels take the same arguments.
      auto adam = [&](auto kernel) {
        kernel(
            g.params,
            g.grads,
            g.exp_avgs,
            g.exp_avg_sqs,
            g.max_exp_avg_sqs,
            g.steps,
            lr,
            beta1,
            beta2,
            options.weight_decay(),
            options.eps(),
            options.amsgrad(),
            /*maximize=*/false,
            scale,
            inf);
      };
      if (decoupled) {
        adam([](auto&&... args) { at::_fused_adamw_(args...); });
      } else {
        adam([](auto&&... args) { at::_fused_adam_(args...); });
      }
      if (inf) {
        at::_foreach_sub_(
            g.steps, std::vector<at::Tensor>(g.steps.size(), *inf));
      }
    }
  }
  for (auto* state : stepped) {
    state->stepped();
  }
}

template <typename State>
void sync_steps(torch::optim::Optimizer& optimizer) {
  for (auto& [key, state] : optimizer.state()) {
    if (auto* ours = dynamic_cast<const DeviceStepState<State>*>(state.get())) {
      ours->sync();
    }
  }
}

void step_sgd(
    torch::optim::Optimizer& optimizer,
    const at::Tensor& grad_scale,
    const at::Tensor& found_inf) {
  auto& state_map = optimizer.state();
  std::map<std::string, at::Tensor> scales, infs;
  std::vector<std::pair<at::Tensor, at::Tensor>> created;  // param, buffer
  for (auto& param_group : optimizer.param_groups()) {
    const auto& options =
        static_cast<const torch::optim::SGDOptions&>(param_group.options());
    const bool momentum = options.momentum() != 0;
    std::map<GroupKey, Group> groups;
    for (auto& p : param_group.params()) {
      if (!p.grad().defined()) {
        continue;
      }
      Group& g = group_for(groups, p);
      if (!momentum) {
        g.params.push_back(p);
        g.grads.push_back(p.grad());
        continue;
      }
      auto found = state_map.find(detail::state_key(p));
      if (found == state_map.end()) {
        // SGD::step clones the first (decayed) gradient into the buffer;
        // the kernel's is_first_step does the same into this one.
        at::Tensor buffer = at::empty_like(p.grad());
        g.first_params.push_back(p);
        g.first_grads.push_back(p.grad());
        g.first_buffers.push_back(buffer);
        created.emplace_back(p, buffer);
      } else {
        auto& state = static_cast<torch::optim::SGDParamState&>(*found->second);
        g.params.push_back(p);
        g.grads.push_back(p.grad());
        g.momentum_buffers.push_back(state.momentum_buffer());
      }
    }
    for (auto& [key, g] : groups) {
      const c10::Device device =
          (g.params.empty() ? g.first_params : g.params).front().device();
      const auto scale = grad_scale.defined()
                             ? maybe(on_device(scales, grad_scale, device))
                             : std::nullopt;
      const auto inf = found_inf.defined()
                           ? maybe(on_device(infs, found_inf, device))
                           : std::nullopt;
      const auto run = [&](std::vector<at::Tensor>& params,
                           std::vector<at::Tensor>& grads,
                           std::vector<at::Tensor>& buffers,
                           bool first) {
        if (params.empty()) {
          return;
        }
        at::_fused_sgd_(
            params,
            grads,
            buffers,
            options.weight_decay(),
            options.momentum(),
            options.lr(),
            options.dampening(),
            options.nesterov(),
            /*maximize=*/false,
            first,
            scale,
            inf);
      };
      run(g.params, g.grads, g.momentum_buffers, false);
      run(g.first_params, g.first_grads, g.first_buffers, true);
    }
  }
  // A skipped first step leaves no buffer behind, as SGD::step would not
  // have run at all.
  if (!skipped_by(found_inf)) {
    for (auto& [p, buffer] : created) {
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(buffer);
      state_map.emplace(detail::state_key(p), std::move(state));
    }
  }
}

#endif  // AMPKIT_HAS_ATEN_FUSED_OPTIM

// Why the kernels cannot run `optimizer`, without the component's name.
std::optional<std::string> unsupported_reason(
    torch::optim::Optimizer& optimizer) {
  const Kind kind = kind_of(optimizer);
  if (kind == Kind::other) {
    return "the optimizer must be exactly torch::optim::Adam, AdamW or SGD "
           "(not a subclass), got " +
           c10::demangle(typeid(optimizer).name()) + "." + kHint;
  }
  if (!AMPKIT_HAS_ATEN_FUSED_OPTIM) {
    return std::string(
        "ATen's fused optimizer kernels run on the CPU and on CUDA from "
        "LibTorch 2.4, got LibTorch " TORCH_VERSION ".");
  }
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& p = params[i];
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) {
        continue;
      }
      const std::string name = detail::param_position(g, i);
      if (p.layout() != c10::kStrided || !fusable_dtype(p.scalar_type()) ||
          !fusable_device(p.device())) {
        return name +
               " must be a dense float32/float64/float16/bfloat16 tensor on "
               "the CPU or a CUDA device, got " +
               detail::describe_tensor(p) + "." + kHint;
      }
      if (grad.layout() != c10::kStrided ||
          grad.scalar_type() != p.scalar_type() ||
          grad.device() != p.device() || grad.sizes() != p.sizes()) {
        return "the gradient of " + name +
               " must be dense, on its device and of its dtype and shape, "
               "got " +
               detail::describe_tensor(grad) + " for a parameter of " +
               detail::describe_tensor(p) + "." + kHint;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> aten_fused_step_unsupported_reason(
    torch::optim::Optimizer& optimizer) {
  auto reason = unsupported_reason(optimizer);
  if (reason) {
    *reason = std::string(component::kAtenFusedStep) + ": " + *reason;
  }
  return reason;
}

void sync_fused_step_counts(torch::optim::Optimizer& optimizer) {
#if AMPKIT_HAS_ATEN_FUSED_OPTIM
  switch (kind_of(optimizer)) {
    case Kind::adam:
      sync_steps<torch::optim::AdamParamState>(optimizer);
      break;
    case Kind::adamw:
      sync_steps<torch::optim::AdamWParamState>(optimizer);
      break;
    case Kind::sgd:
    case Kind::other:
      break;
  }
#else
  (void)optimizer;
#endif
}

void aten_fused_step(
    torch::optim::Optimizer& optimizer,
    const torch::Tensor& grad_scale,
    const torch::Tensor& found_inf) {
  if (auto reason = unsupported_reason(optimizer)) {
    throw Unsupported(component::kAtenFusedStep, *reason);
  }
  for (const at::Tensor* t : {&grad_scale, &found_inf}) {
    if (t->defined() && (t->dim() != 0 || t->scalar_type() != at::kFloat)) {
      throw InvalidArgument(
          component::kAtenFusedStep,
          std::string(t == &grad_scale ? "grad_scale" : "found_inf") +
              " must be a 0-dim float32 tensor, got " +
              detail::describe_tensor(*t) +
              ". Pass GradScaler's scale and found_inf as "
              "GradScaler::step_supporting_amp_scaling hands them over.");
    }
  }
#if AMPKIT_HAS_ATEN_FUSED_OPTIM
  at::NoGradGuard no_grad;
  switch (kind_of(optimizer)) {
    case Kind::adam:
      step_adam<torch::optim::AdamOptions, torch::optim::AdamParamState>(
          optimizer, false, grad_scale, found_inf);
      break;
    case Kind::adamw:
      step_adam<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
          optimizer, true, grad_scale, found_inf);
      break;
    case Kind::sgd:
      step_sgd(optimizer, grad_scale, found_inf);
      break;
    case Kind::other:
      break;
  }
#endif
}

}  // namespace ampkit::optim
