// A unit's flat parameters gathered, freed and reduced together, and the
// prefetch that follows the last forward's order (FSDP2's _fsdp_param_group).
#include <torch/types.h>

#include <cstddef>
#include <vector>

#include "distributed/fsdp/fsdp_impl.h"

namespace ampkit::dist {

void FullyShardedModel::Impl::prefetch(size_t at, int step) {
  // The forward before this one ran the same units in the same order up
  // to here: the next unit is the one it ran next.
  const auto next = static_cast<std::ptrdiff_t>(at) + step;
  const auto& seen = step > 0 ? order : order_now;
  if (next < 0 || next >= static_cast<std::ptrdiff_t>(seen.size()) ||
      (step > 0 && (at >= order.size() || order[at] != order_now[at]))) {
    return;
  }
  for (auto& f : seen[static_cast<size_t>(next)]->flats) {
    start_gather(f);
  }
}

void FullyShardedModel::Impl::gather(FsdpUnit& u) {
  for (auto& f : u.flats) {
    gather(f);
  }
}

void FullyShardedModel::Impl::release(FsdpUnit& u) {
  for (auto& f : u.flats) {
    release(f);
  }
}

void FullyShardedModel::Impl::reduce(FsdpUnit& u) {
  finish_reduces();
  torch::NoGradGuard no_grad;
  for (auto& f : u.flats) {
    if (!f.shard.requires_grad()) {
      continue;
    }
    std::vector<torch::Tensor> grads;
    for (auto& p : f.params) {
      grads.push_back(p.grad());
    }
    reduce(f, grads);
    for (auto& p : f.params) {
      p.mutable_grad() = torch::Tensor();
    }
  }
}

void FullyShardedModel::Impl::collect_shards() {
  shards.clear();
  for (const auto& u : units) {
    for (const auto& f : u->flats) {
      shards.push_back(f.shard);
    }
  }
}

}  // namespace ampkit::dist
