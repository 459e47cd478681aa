// Gradient unscaling and clipping across the prepared optimizers:
// accelerate's unscale_gradients, clip_grad_norm_ and clip_grad_value_.
#include "ampkit/accelerator/accelerator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

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

// One gradient's norm as torch::nn::utils::clip_grad_norm_ takes it.
torch::Tensor gradient_norm(const torch::Tensor& g, double norm_type) {
  return std::isinf(norm_type) ? g.abs().max() : g.norm(norm_type);
}

// clip_grad_norm_'s total of the per-gradient norms, on `device`; 0
// without any.
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

// torch::nn::utils::clip_grad_norm_'s total norm, on `device`; 0 without
// gradients.
torch::Tensor total_norm(
    const std::vector<torch::Tensor>& grads,
    double norm_type,
    const c10::Device& device) {
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) {
    norms.push_back(gradient_norm(g, norm_type));
  }
  return combine_norms(std::move(norms), norm_type, device);
}

// FSDP: DDP's norm to the bit. Each parameter's norm from its full
// gradient (gathered flat buffer by flat buffer), in the order DDP takes
// them: `parameters` as given, where an FSDP optimizer's shards stand for
// the parameters that optimizer held.
torch::Tensor fsdp_norm(
    detail::AcceleratorState& st,
    const std::vector<torch::Tensor>& parameters,
    double norm_type) {
  std::unordered_map<const void*, torch::Tensor> norms;
  std::unordered_map<const void*, dist::FullyShardedModel*> owner;
  for (auto& model : st.models) {
    auto& fsdp = model.fsdp;
    if (!fsdp) {
      continue;
    }
    st.collective("clip_grad_norm_ (FSDP gradient norms)", [&] {
      fsdp->for_each_full_gradient(
          [&](const torch::Tensor& p, const torch::Tensor& g) {
            norms[p.unsafeGetTensorImpl()] = gradient_norm(g, norm_type);
          });
    });
    for (const auto& shard : fsdp->shards()) {
      owner[shard.unsafeGetTensorImpl()] = fsdp.get();
    }
  }
  std::vector<torch::Tensor> ordered;
  std::unordered_set<const dist::FullyShardedModel*> expanded;
  auto add = [&](const torch::Tensor& p) {
    auto it = norms.find(p.unsafeGetTensorImpl());
    if (it != norms.end()) {
      ordered.push_back(it->second);
    } else if (p.grad().defined()) {
      ordered.push_back(gradient_norm(p.grad(), norm_type));
    }
  };
  for (const auto& p : parameters) {
    auto it = owner.find(p.unsafeGetTensorImpl());
    if (it == owner.end()) {
      add(p);
    } else if (expanded.insert(it->second).second) {
      for (const auto& q : it->second->optimizer_parameters()) {
        add(q);
      }
    }
  }
  return combine_norms(std::move(ordered), norm_type, st.options.device);
}

// ZeRO: the norm over every process's shard, from each process's part
// (sum of |g|^p, or the max) combined across processes. Gradients that no
// sharded optimizer holds are the same on every process: counted once.
torch::Tensor sharded_norm(
    detail::AcceleratorState& st,
    const detail::ShardedGradients& grads,
    double norm_type) {
  const c10::Device device = st.options.device;
  const bool inf = std::isinf(norm_type);
  torch::Tensor local = torch::zeros({}, torch::TensorOptions().device(device));
  auto add = [&](const torch::Tensor& g) {
    const torch::Tensor n = g.norm(norm_type).to(device);
    local = inf ? torch::maximum(local, n) : local + n.pow(norm_type);
  };
  for (const auto& g : grads.shards) {
    add(g);
  }
  if (st.process_index == 0 || inf) {
    for (const auto& g : grads.replicated) {
      add(g);
    }
  }
  if (st.group) {
    st.collective("clip_grad_norm_ (norm across shards)", [&] {
      st.group->all_reduce(
          local, inf ? dist::ReduceOp::max : dist::ReduceOp::sum);
    });
  }
  return inf ? local : local.pow(1.0 / norm_type);
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
  st.last_grad_norm = total;
  return total;
}
}  // namespace

namespace detail {
std::optional<ShardedGradients> sharded_gradients(
    AcceleratorState& st, const std::vector<torch::Tensor>& parameters) {
  std::optional<ShardedGradients> out;
  std::vector<bool> managed(parameters.size(), false);
  // FSDP: every shard's gradient (the model's own parameters hold none);
  // the shards among `parameters` (an optimizer's) are these.
  std::unordered_set<const void*> fsdp_shards;
  for (const auto& model : st.models) {
    const auto& fsdp = model.fsdp;
    if (!fsdp) {
      continue;
    }
    if (!out) {
      out.emplace();
    }
    for (const auto& shard : fsdp->shards()) {
      fsdp_shards.insert(shard.unsafeGetTensorImpl());
      if (shard.grad().defined()) {
        out->shards.push_back(shard.grad());
      }
    }
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    managed[i] = fsdp_shards.count(parameters[i].unsafeGetTensorImpl()) > 0;
  }
  for (const auto& entry : st.optimizers) {
    if (!entry.sharded) {
      continue;
    }
    if (!out) {
      out.emplace();
    }
    std::vector<bool> here;
    for (auto& g : entry.sharded->shard_gradients(parameters, here)) {
      out->shards.push_back(g);
    }
    for (size_t i = 0; i < parameters.size(); ++i) {
      managed[i] = managed[i] || here[i];
    }
  }
  if (out) {
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (!managed[i] && parameters[i].grad().defined()) {
        out->replicated.push_back(parameters[i].grad());
      }
    }
  }
  return out;
}

std::vector<torch::Tensor> ShardedGradients::all() const {
  std::vector<torch::Tensor> grads = shards;
  grads.insert(grads.end(), replicated.begin(), replicated.end());
  return grads;
}

void unscale_gradients(AcceleratorState& st) {
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

torch::Tensor clip_grad_norm(
    AcceleratorState& st,
    const std::vector<torch::Tensor>& parameters,
    double max_norm,
    double norm_type) {
  torch::NoGradGuard no_grad;
  const c10::Device device = st.options.device;
  if (!st.sync_gradients) {
    // The gradients are partial and, under loss scaling, still scaled:
    // nothing is clipped or unscaled in place, but the norm of what has
    // accumulated so far is returned (unscaled), so that code ported from
    // accelerate, which returns a norm on every call, can read it.
    const torch::Tensor partial =
        total_norm(defined_grads(parameters), norm_type, device);
    return st.scaler ? partial / st.scaler->get_scale() : partial;
  }
  unscale_gradients(st);
  const bool fsdp =
      std::any_of(st.models.begin(), st.models.end(), [](const auto& m) {
        return m.fsdp != nullptr;
      });
  if (fsdp) {
    const auto sharded = sharded_gradients(st, parameters);
    return clip_to(
        st, sharded->all(), fsdp_norm(st, parameters, norm_type), max_norm);
  }
  if (auto sharded = sharded_gradients(st, parameters)) {
    return clip_to(
        st, sharded->all(), sharded_norm(st, *sharded, norm_type), max_norm);
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
  if (!state_->sync_gradients) {
    return;
  }
  unscale_gradients();
  torch::NoGradGuard no_grad;
  const auto sharded = detail::sharded_gradients(*state_, parameters);
  for (const auto& g : sharded ? sharded->all() : defined_grads(parameters)) {
    g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace ampkit
