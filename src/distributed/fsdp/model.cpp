// FullyShardedModel around the user's steps: the root unit's gather before
// the forward and reduce after the backward (FSDP2's _fsdp_state), the
// gathered model (summon_full_params) and what it holds.
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"
#include "distributed/fsdp/fsdp_impl.h"
#include "utils/components.h"

namespace ampkit::dist {

void FullyShardedModel::before_forward(bool sync) {
  auto& im = *impl_;
  im.sync = sync;
  for (auto& u : im.units) {
    u->entered = false;
  }
  if (!im.order_now.empty()) {
    im.order = std::move(im.order_now);
    im.order_now.clear();
  }
  im.backward_cursor = 0;
  im.gather(*im.units[0]);
}

std::vector<std::string> FullyShardedModel::units_not_entered() const {
  std::vector<std::string> out;
  for (size_t k = 1; k < impl_->units.size(); ++k) {
    const auto& u = *impl_->units[k];
    if (!u.entered) {
      out.push_back(u.name + " (" + u.module->name() + ")");
    }
  }
  return out;
}

void FullyShardedModel::after_forward_without_grad() {
  auto& im = *impl_;
  im.release(*im.units[0]);
}

void FullyShardedModel::after_backward() {
  auto& im = *impl_;
  FsdpUnit& root = *im.units[0];
  // A unit gathered ahead (prefetch) whose backward did not come.
  for (size_t k = 1; k < im.units.size(); ++k) {
    im.release(*im.units[k]);
  }
  if (!im.sync) {
    // An accumulation micro-step: the root's gradients stay in .grad (the
    // next backward adds to them), so its parameters stay gathered.
    return;
  }
  im.reduce(root);
  im.finish_reduces();
  im.release(root);
  std::string missing;
  for (size_t k = 1; k < im.units.size(); ++k) {
    auto& u = *im.units[k];
    if (u.trainable() && u.backwards < u.forwards) {
      missing += (missing.empty() ? "" : ", ") + u.name;
    }
    u.forwards = 0;
    u.backwards = 0;
  }
  if (!missing.empty()) {
    // Not an error: an evaluation forward without NoGradGuard leaves the
    // same trace. The units keep their shards' gradients as they were.
    warn(
        component::kDistributed,
        "FSDP: unit(s) " + missing +
            " ran a forward with gradients whose backward did not run by "
            "the end of this backward, so those gradients were not reduced: "
            "a unit's output must lead to the loss (evaluate under "
            "torch::NoGradGuard).");
  }
}

const std::vector<torch::Tensor>& FullyShardedModel::shards() const {
  return impl_->shards;
}

std::vector<std::string> FullyShardedModel::unit_names() const {
  std::vector<std::string> out;
  for (const auto& u : impl_->units) {
    out.push_back(u->name);
  }
  return out;
}

int64_t FullyShardedModel::held_bytes() const {
  int64_t bytes = 0;
  for (const auto& u : impl_->units) {
    for (const auto& f : u->flats) {
      bytes += f.shard.numel() * f.shard.element_size();
      if (f.shard.grad().defined()) {
        bytes += f.shard.grad().numel() * f.shard.grad().element_size();
      }
      if (f.gathered && impl_->sharded()) {
        bytes += f.full.numel() * f.full.element_size();
      }
      if (f.pending.defined()) {
        bytes += f.pending.numel() * f.pending.element_size();
      }
    }
  }
  return bytes;
}

int64_t FullyShardedModel::take_peak_gathered_bytes() {
  const int64_t peak = impl_->peak_gathered_bytes;
  impl_->peak_gathered_bytes = impl_->gathered_bytes;
  return peak;
}

void FullyShardedModel::for_each_full_gradient(
    const std::function<void(const torch::Tensor&, const torch::Tensor&)>& fn) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      const torch::Tensor& g = f.shard.grad();
      if (!f.shard.requires_grad() || !g.defined()) {
        continue;
      }
      const torch::Tensor full = im.gathered_copy(f, g);
      for (size_t i = 0; i < f.params.size(); ++i) {
        fn(f.params[i], f.piece(full, i));
      }
    }
  }
}

void FullyShardedModel::gather_all() {
  auto& im = *impl_;
  // Full precision (the shards' dtype), also under MixedPrecision: the
  // compute buffer is made again in that dtype while nothing uses it.
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      const auto own = f.shard.scalar_type();
      if (f.full.scalar_type() == own || !im.sharded()) {
        continue;
      }
      if (f.gathered) {
        throw UsageError(
            component::kDistributed,
            "FSDP: summon_full_params while unit '" + u->name +
                "' is gathered in its compute dtype (param_dtype " +
                std::string(c10::toString(f.full.scalar_type())) +
                ") for a backward still to come. Gather the full "
                "parameters before the forward or after the backward.");
      }
      f.full =
          detail::freed_buffer(f.full.numel(), f.shard.options().dtype(own));
    }
  }
  for (auto& u : im.units) {
    im.gather(*u);
  }
  im.summoned = true;
}

void FullyShardedModel::release_all(bool keep_values) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  im.summoned = false;
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      if (keep_values && f.gathered && im.sharded()) {
        const int64_t begin = im.rank * f.shard_size;
        f.shard.detach().copy_(f.full.narrow(0, begin, f.shard_size));
      }
      im.release(f);
      if (im.sharded() && f.full.scalar_type() != f.compute_dtype) {
        f.full = detail::freed_buffer(
            f.full.numel(), f.shard.options().dtype(f.compute_dtype));
      }
    }
  }
}

const FsdpOptions& FullyShardedModel::options() const {
  return impl_->options;
}

}  // namespace ampkit::dist
