// The optimizer over the shards: take_over gives it the units' shards by
// param group, load_resharded joins optimizer state saved under another
// layout.
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "distributed/fsdp/fsdp_impl.h"
#include "utils/components.h"
#include "utils/optimizer_state.h"
#include "utils/strings.h"

namespace ampkit::dist {

void FullyShardedModel::take_over(torch::optim::Optimizer& optimizer) {
  auto& im = *impl_;
  if (!optimizer.state().empty()) {
    throw UsageError(
        component::kDistributed,
        "FSDP: the optimizer has state already (it stepped); prepare it "
        "before its first step, so that its state is made for the shards.");
  }
  // Each parameter's group.
  std::unordered_map<const void*, size_t> group_of;
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      im.optimizer_params.push_back(p);
      if (!group_of.emplace(p.unsafeGetTensorImpl(), g).second) {
        throw UsageError(
            component::kDistributed,
            "FSDP: a parameter appears twice in the optimizer's "
            "param_groups; list each once.");
      }
    }
  }
  std::unordered_set<const void*> ours;
  for (const auto& u : im.units) {
    for (const auto& f : u->flats) {
      for (const auto& p : f.params) {
        ours.insert(p.unsafeGetTensorImpl());
      }
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      if (ours.count(p.unsafeGetTensorImpl()) == 0) {
        throw UsageError(
            component::kDistributed,
            "FSDP: param_groups[" + std::to_string(g) +
                "] holds a tensor that is not a parameter of the sharded "
                "model. Build the optimizer from the model's parameters, "
                "then prepare both.");
      }
    }
  }
  // Flat buffers whose parameters are in several groups are split by
  // group, from their full values (gathered once, here, before training).
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> shards_of(groups.size());
  for (auto& u : im.units) {
    std::vector<FlatParam> flats;
    for (auto& f : u->flats) {
      constexpr size_t kNone = static_cast<size_t>(-1);
      std::vector<size_t> gi;
      for (const auto& p : f.params) {
        auto it = group_of.find(p.unsafeGetTensorImpl());
        gi.push_back(it == group_of.end() ? kNone : it->second);
      }
      std::vector<size_t> order;  // the groups in the order met
      for (size_t g : gi) {
        if (std::find(order.begin(), order.end(), g) == order.end()) {
          order.push_back(g);
        }
      }
      if (order.size() == 1) {
        if (order[0] != kNone) {
          shards_of[order[0]].push_back(f.shard);
        }
        flats.push_back(std::move(f));
        continue;
      }
      // The full values in the shards' own dtype (under MixedPrecision a
      // gathered unit holds the compute dtype's).
      const torch::Tensor full = im.gathered_copy(f, f.shard);
      std::vector<torch::Tensor> values;
      for (size_t i = 0; i < f.params.size(); ++i) {
        values.push_back(f.piece(full, i).clone());
      }
      for (size_t g : order) {
        std::vector<std::string> names;
        std::vector<torch::Tensor> params, vals;
        for (size_t i = 0; i < f.params.size(); ++i) {
          if (gi[i] == g) {
            names.push_back(f.names[i]);
            params.push_back(f.params[i]);
            vals.push_back(values[i]);
          }
        }
        flats.push_back(im.make_flat(names, params, vals));
        if (g != kNone) {
          shards_of[g].push_back(flats.back().shard);
        }
      }
    }
    u->flats = std::move(flats);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].params() = shards_of[g];
  }
  im.collect_shards();
}

const std::vector<torch::Tensor>& FullyShardedModel::optimizer_parameters()
    const {
  return impl_->optimizer_params;
}

void FullyShardedModel::load_resharded(
    torch::optim::Optimizer& optimizer,
    int64_t saved_processes,
    const std::function<void(int64_t)>& load) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  // Each shard the optimizer steps, with its buffer's length.
  std::unordered_map<const void*, const FlatParam*> flat_of;
  for (const auto& u : im.units) {
    for (const auto& f : u->flats) {
      flat_of[f.shard.unsafeGetTensorImpl()] = &f;
    }
  }
  auto& groups = optimizer.param_groups();
  std::vector<std::vector<torch::Tensor>> mine;
  for (auto& group : groups) {
    mine.push_back(group.params());
  }
  // Per shard: each tensor field's saved parts in process order, the
  // other fields, and a state to copy the type from.
  std::vector<std::vector<ampkit::detail::JoinedState>> found(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    found[g].resize(mine[g].size());
  }
  auto restore = [&] {
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g].params() = mine[g];
    }
    optimizer.state().clear();
  };
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: the optimizer state saved by " +
            std::to_string(saved_processes) + " processes " + what +
            ". Resume with the model, optimizer and param groups it was "
            "saved with.");
  };
  try {
    for (int64_t q = 0; q < saved_processes; ++q) {
      // Stand-ins for the saved shards: the files key state by position.
      std::vector<std::vector<torch::Tensor>> slots(groups.size());
      for (size_t g = 0; g < groups.size(); ++g) {
        for (const auto& p : mine[g]) {
          slots[g].push_back(torch::empty({0}, p.options()));
        }
        groups[g].params() = slots[g];
      }
      optimizer.state().clear();
      load(q);
      for (size_t g = 0; g < groups.size(); ++g) {
        for (size_t k = 0; k < slots[g].size(); ++k) {
          auto it =
              optimizer.state().find(ampkit::detail::state_key(slots[g][k]));
          if (it == optimizer.state().end()) {
            continue;
          }
          const auto differs = found[g][k].add(
              *it->second, [](const std::string&, const torch::Tensor& t) {
                return t.reshape({-1});
              });
          if (differs) {
            fail(
                "disagrees on '" + *differs + "' of param_groups[" +
                std::to_string(g) + "][" + std::to_string(k) +
                "] between processes");
          }
        }
      }
    }
    restore();
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t k = 0; k < mine[g].size(); ++k) {
        ampkit::detail::JoinedState& from = found[g][k];
        if (!from.like) {
          continue;  // no state saved (the parameter never stepped)
        }
        const auto at = flat_of.find(mine[g][k].unsafeGetTensorImpl());
        if (at == flat_of.end()) {
          fail("is for tensors this model does not shard");
        }
        const FlatParam& f = *at->second;
        std::map<std::string, c10::IValue> fields = from.values;
        for (auto& [key, parts] : from.parts) {
          // In process order the parts cover the buffer: FULL_SHARD's
          // process q holds part q; HYBRID_SHARD's first machine holds
          // every part; NO_SHARD's process 0 holds the whole.
          std::vector<torch::Tensor> cover;
          int64_t covered = 0;
          for (const auto& part : parts) {
            if (covered >= f.total) {
              break;
            }
            cover.push_back(part);
            covered += part.numel();
          }
          if (covered < f.total) {
            fail(
                "holds " + std::to_string(covered) + " elements of '" + key +
                "' for a buffer of " + std::to_string(f.total) + " (" +
                ampkit::detail::join(f.names, ", ") + ")");
          }
          torch::Tensor full = torch::zeros(
              {f.shard_size * im.parts()}, cover.front().options());
          full.narrow(0, 0, f.total)
              .copy_(torch::cat(cover).narrow(0, 0, f.total));
          const int64_t begin = im.sharded() ? im.rank * f.shard_size : 0;
          fields[key] = full.narrow(0, begin, f.shard_size).clone();
        }
        optimizer.state()[ampkit::detail::state_key(mine[g][k])] =
            ampkit::detail::state_with_fields(*from.like, fields);
      }
    }
  } catch (...) {
    restore();
    throw;
  }
}

}  // namespace ampkit::dist
