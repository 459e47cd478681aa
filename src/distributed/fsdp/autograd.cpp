// fsdp_forward's autograd Function: a unit's forward and backward around
// the gather, free and reduce, and activation checkpointing's recompute.
#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "amp/compat.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/utils/random.h"
#include "distributed/fsdp/fsdp_impl.h"

namespace ampkit::dist {

namespace {

// One call of a unit, kept by its autograd node.
struct FsdpUnitCall : torch::CustomClassHolder {
  std::shared_ptr<FsdpUnit> unit;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> forward;
  std::vector<torch::Tensor> inputs;  // detached, requiring grad as given
  torch::Tensor output;               // with the unit's graph (no recompute)
  // Activation checkpointing: what the recompute must see again (the
  // random state, and the CPU's and CUDA's autocast settings).
  std::optional<RngState> rng;
  std::vector<AutocastOptions> autocast;
};

// The autocast settings in force on `device`, as an Autocast guard takes
// them.
AutocastOptions fsdp_autocast_in_force(c10::DeviceType device) {
  return AutocastOptions(device, ampkit::detail::autocast_get_dtype(device))
      .enabled(ampkit::detail::autocast_is_enabled(device))
      .cache_enabled(at::autocast::is_autocast_cache_enabled());
}

// For a scope: the generators in state `use`, then back as they were (also
// when the scope throws). The state put back was read from the generators
// a moment before, so setting it cannot fail.
class FsdpRngScope {
 public:
  explicit FsdpRngScope(const RngState& use) : saved_(get_rng_state()) {
    set_rng_state(use);
  }
  ~FsdpRngScope() {
    try {
      set_rng_state(saved_);
    } catch (...) {
    }
  }
  FsdpRngScope(const FsdpRngScope&) = delete;
  FsdpRngScope& operator=(const FsdpRngScope&) = delete;

 private:
  RngState saved_;
};

struct UnitFunction : torch::autograd::Function<UnitFunction> {
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx,
      c10::intrusive_ptr<FsdpUnitCall> call,
      const torch::Tensor& /*shard: puts the node in every graph*/,
      at::TensorList inputs) {
    FsdpUnit& u = *call->unit;
    auto& m = *u.owner;
    m.gather(u);
    if (m.options.forward_prefetch()) {
      m.prefetch(m.order_now.size() - 1, +1);
    }
    for (const auto& x : inputs) {
      torch::Tensor d = x.detach();
      if (x.requires_grad()) {
        d.requires_grad_(true);
      }
      call->inputs.push_back(d);
    }
    torch::Tensor out;
    if (m.options.activation_checkpointing()) {
      call->rng = get_rng_state();
      call->autocast = {
          fsdp_autocast_in_force(c10::DeviceType::CPU),
          fsdp_autocast_in_force(c10::DeviceType::CUDA)};
      out = call->forward(call->inputs);  // no graph: recomputed in backward
    } else {
      torch::AutoGradMode grad(true);
      call->output = call->forward(call->inputs);
      out = call->output.detach();
    }
    if (m.options.strategy() == ShardingStrategy::full_shard ||
        m.options.strategy() == ShardingStrategy::hybrid_shard) {
      m.release(u);
    }
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    return {out};
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad_outputs) {
    auto call = c10::static_intrusive_pointer_cast<FsdpUnitCall>(
        ctx->saved_data["call"].toCapsule());
    FsdpUnit& u = *call->unit;
    auto& m = *u.owner;
    // Units run backward in the reverse of their forward order; the unit
    // before this one in the forward comes next.
    size_t at = m.backward_cursor;
    while (at > 0 && m.order_now[at - 1] != &u) {
      --at;
    }
    const bool placed = at > 0;
    if (placed) {
      m.backward_cursor = --at;
    }
    m.gather(u);
    const auto prefetch = m.options.backward_prefetch();
    if (placed && prefetch == BackwardPrefetch::backward_pre) {
      m.prefetch(at, -1);
    }
    torch::Tensor out = call->output;
    if (call->rng) {
      // Recompute with the random and autocast state of the first run.
      FsdpRngScope rng(*call->rng);
      Autocast cpu(call->autocast[0]);
      Autocast cuda(call->autocast[1]);
      torch::AutoGradMode grad(true);
      out = call->forward(call->inputs);
    }
    std::vector<torch::Tensor> wrt;
    std::vector<size_t> input_slot;
    for (size_t i = 0; i < call->inputs.size(); ++i) {
      if (call->inputs[i].requires_grad()) {
        wrt.push_back(call->inputs[i]);
        input_slot.push_back(i);
      }
    }
    // Each flat buffer's parameters that train, in order.
    for (const auto& f : u.flats) {
      if (f.shard.requires_grad()) {
        wrt.insert(wrt.end(), f.params.begin(), f.params.end());
      }
    }
    std::vector<torch::Tensor> grads;
    if (out.requires_grad() && !wrt.empty()) {
      torch::Tensor g =
          grad_outputs[0].defined() ? grad_outputs[0] : torch::zeros_like(out);
      grads = torch::autograd::grad(
          {out},
          wrt,
          {g},
          /*retain_graph=*/false,
          /*create_graph=*/false,
          /*allow_unused=*/true);
    } else {
      grads.resize(wrt.size());
    }
    if (placed && prefetch == BackwardPrefetch::backward_post) {
      m.prefetch(at, -1);
    }
    m.finish_reduces();  // the unit before this one's
    {
      torch::NoGradGuard no_grad;
      size_t next = input_slot.size();
      for (auto& f : u.flats) {
        if (!f.shard.requires_grad()) {
          continue;
        }
        std::vector<torch::Tensor> flat_grads(
            grads.begin() + static_cast<std::ptrdiff_t>(next),
            grads.begin() +
                static_cast<std::ptrdiff_t>(next + f.params.size()));
        next += f.params.size();
        m.reduce(f, flat_grads);
      }
    }
    if (m.sharded()) {
      m.release(u);
    }
    ++u.backwards;
    torch::autograd::variable_list result(2 + call->inputs.size());
    for (size_t k = 0; k < input_slot.size(); ++k) {
      result[2 + input_slot[k]] = grads[k];
    }
    call->output = torch::Tensor();
    call->inputs.clear();
    return result;
  }
};

}  // namespace

torch::Tensor detail::fsdp_run(
    const std::shared_ptr<FsdpUnit>& unit,
    std::vector<torch::Tensor> inputs,
    std::function<torch::Tensor(const std::vector<torch::Tensor>&)> forward) {
  FsdpUnit& u = *unit;
  auto& m = *u.owner;
  u.entered = true;
  if (!torch::GradMode::is_enabled()) {
    m.gather(u);
    torch::Tensor out = forward(inputs);
    m.release(u);
    return out;
  }
  ++u.forwards;
  m.order_now.push_back(&u);
  m.backward_cursor = m.order_now.size();
  auto call = c10::make_intrusive<FsdpUnitCall>();
  call->unit = unit;
  call->forward = std::move(forward);
  // A shard that trains puts the node in the graph even when no input
  // requires a gradient (the first unit after the data).
  torch::Tensor anchor;
  for (const auto& f : u.flats) {
    if (f.shard.requires_grad()) {
      anchor = f.shard;
      break;
    }
  }
  auto outputs = UnitFunction::apply(call, anchor, at::TensorList(inputs));
  return outputs[0];
}

}  // namespace ampkit::dist
