// The collectives over a flat buffer's shards: gathered into a temporary,
// and gradients reduce-scattered (all-reduced without sharding, then across
// machines under HYBRID_SHARD) into the shard (FSDP2's _fsdp_collectives).
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "distributed/fsdp/fsdp_impl.h"

namespace ampkit::dist {

torch::Tensor FullyShardedModel::Impl::gathered_copy(
    const FlatParam& f, const torch::Tensor& part) {
  if (!sharded() || world == 1) {
    return part.detach();
  }
  torch::Tensor full = torch::empty({f.shard_size * world}, part.options());
  group->all_gather_into(full, part.detach());
  return full;
}

void FullyShardedModel::Impl::reduce(
    FlatParam& f, const std::vector<torch::Tensor>& grads) {
  torch::Tensor flat =
      torch::zeros({f.shard_size * parts()}, f.shard.options());
  for (size_t i = 0; i < f.params.size(); ++i) {
    if (grads[i].defined()) {
      flat.narrow(0, f.offsets[i], f.numels[i]).copy_(grads[i].reshape({-1}));
    }
  }
  if (f.pending.defined()) {
    // Earlier micro-steps first, as .grad accumulates.
    flat = f.pending.add_(flat);
    f.pending = torch::Tensor();
  }
  if (!sync) {
    f.pending = flat;
    return;
  }
  const auto own = flat.scalar_type();
  const auto wire = options.reduce_dtype().value_or(own);
  if (wire != own) {
    flat = flat.to(wire);  // MixedPrecision's reduce_dtype
  }
  const int64_t processes = world * (replicas ? replicas->size() : 1);
  if (processes > 1) {
    // DDP's order (c10d's Reducer): multiply by 1 / the process count,
    // then sum.
    flat.mul_(1.0 / static_cast<double>(processes));
  }
  f.reduced = flat;
  if (world > 1 && !sharded()) {
    group->all_reduce(flat, ReduceOp::sum);
  } else if (world > 1) {
    std::vector<int64_t> bounds;
    for (int64_t r = 0; r <= world; ++r) {
      bounds.push_back(r * f.shard_size);
    }
    f.reduced = torch::empty({f.shard_size}, flat.options());
    f.reducing = group->reduce_scatter_async(f.reduced, flat, bounds);
  }
  reducing.push_back(&f);
}

void FullyShardedModel::Impl::finish_reduces() {
  torch::NoGradGuard no_grad;
  auto issued = std::move(reducing);
  reducing.clear();
  for (FlatParam* f : issued) {
    f->reducing.wait();
    torch::Tensor part = std::move(f->reduced);
    f->reduced = torch::Tensor();
    if (replicas) {
      // HYBRID_SHARD: the machine's sum, then the sum across machines.
      replicas->all_reduce(part, ReduceOp::sum);
    }
    if (part.scalar_type() != f->shard.scalar_type()) {
      part = part.to(f->shard.scalar_type());
    }
    torch::Tensor& g = f->shard.mutable_grad();
    if (g.defined()) {
      g.add_(part);
    } else {
      g = part;
    }
  }
}

}  // namespace ampkit::dist
