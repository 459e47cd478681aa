// Making a FullyShardedModel: its groups, the units the auto-wrap policy
// picks, their flat buffers from process 0's values (FSDP2's _fsdp_init),
// and the registry in which fsdp_forward finds a module's unit.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "distributed/fsdp/fsdp_impl.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::dist {

void FullyShardedModel::Impl::split_hybrid() {
  const DistEnv& env = global->env();
  const int64_t per = env.local_world_size;
  const std::string why =
      "HYBRID_SHARD shards within a machine and replicates across machines";
  if (per <= 0 || env.world_size % per != 0) {
    throw InvalidArgument(
        component::kDistributed,
        why +
            ", so it needs the processes per machine (LOCAL_WORLD_SIZE, "
            "which ampkit launch and torchrun set) to divide the " +
            std::to_string(env.world_size) + " processes; it is " +
            std::to_string(per) + ".");
  }
  if (env.rank % per != env.local_rank) {
    throw InvalidArgument(
        component::kDistributed,
        why +
            ", so it needs the ranks numbered machine by machine (as "
            "ampkit launch and torchrun number them): rank " +
            std::to_string(env.rank) + " has LOCAL_RANK " +
            std::to_string(env.local_rank) + " of " + std::to_string(per) +
            ".");
  }
  if (per == env.world_size) {
    return;  // one machine: FULL_SHARD
  }
  const int64_t machine = env.rank / per;
  std::vector<int64_t> here, peers;
  for (int64_t k = 0; k < per; ++k) {
    here.push_back(machine * per + k);
  }
  for (int64_t m = 0; m < env.world_size / per; ++m) {
    peers.push_back(m * per + env.local_rank);
  }
  // Every process makes its machine's group first, then its replicas'.
  group = per > 1
              ? global->subgroup("fsdp_shard_" + std::to_string(machine), here)
              : nullptr;
  replicas = global->subgroup(
      "fsdp_replicate_" + std::to_string(env.local_rank), peers);
}

namespace {

// Which module each live unit is, for fsdp_forward.
std::mutex fsdp_registry_mutex;
std::unordered_map<const torch::nn::Module*, std::weak_ptr<FsdpUnit>>&
fsdp_registry() {
  static std::unordered_map<const torch::nn::Module*, std::weak_ptr<FsdpUnit>>
      map;
  return map;
}

// "BlockImpl" and "ns::BlockImpl" match "Block" (TORCH_MODULE's holder
// name), as accelerate matches class names.
bool fsdp_type_matches(
    std::string type, const std::vector<std::string>& names) {
  const auto colon = type.rfind("::");
  if (colon != std::string::npos) {
    type = type.substr(colon + 2);
  }
  std::string bare = type;
  if (bare.size() > 4 && bare.compare(bare.size() - 4, 4, "Impl") == 0) {
    bare = bare.substr(0, bare.size() - 4);
  }
  return std::find(names.begin(), names.end(), type) != names.end() ||
         std::find(names.begin(), names.end(), bare) != names.end();
}

// The modules an auto-wrap policy picked, by module path.
using FsdpPicked =
    std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>;
// A flat buffer's key within its unit: the dtype, and whether the
// parameters train.
using FsdpFlatKey = std::pair<c10::ScalarType, bool>;

// The units, root first, and each one's parameters by flat buffer.
struct FsdpUnitPlan {
  std::vector<std::pair<std::string, torch::nn::Module*>> unit_list;
  std::vector<std::vector<std::pair<FsdpFlatKey, std::vector<torch::Tensor>>>>
      split;
};

// The options checked against the strategy and the backend, and the groups
// a unit is sharded and replicated across (HYBRID_SHARD splits them).
void fsdp_init_groups(FullyShardedModel::Impl& im) {
  const auto& o = im.options;
  if (o.param_dtype() && o.strategy() == ShardingStrategy::no_shard) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: param_dtype " + std::string(c10::toString(*o.param_dtype())) +
            " with NO_SHARD: under NO_SHARD the parameters are the shards "
            "the optimizer steps, so they keep their dtype. Leave "
            "param_dtype unset (autocast computes in the low precision), or "
            "shard.");
  }
  if ((o.strategy() == ShardingStrategy::hybrid_shard ||
       o.strategy() == ShardingStrategy::hybrid_shard_zero2) &&
      im.global && im.global->size() > 1) {
    im.split_hybrid();
  }
  if (im.group) {
    im.rank = im.group->rank();
    im.world = im.group->size();
  }
  if (o.reduce_dtype() && im.global && !im.global->can_sum(*o.reduce_dtype())) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: reduce_dtype " + std::string(c10::toString(*o.reduce_dtype())) +
            ": the " + im.global->backend() +
            " backend of this LibTorch cannot sum it (Gloo has bf16 from "
            "LibTorch 2). Leave reduce_dtype unset to reduce in the shards' "
            "dtype.");
  }
}

// TRANSFORMER_BASED_WRAP: the outermost modules of a type to wrap.
FsdpPicked fsdp_wrap_by_type(torch::nn::Module& model, const FsdpOptions& o) {
  FsdpPicked picked;
  std::function<void(const std::string&, torch::nn::Module&)> walk =
      [&](const std::string& path, torch::nn::Module& mod) {
        for (const auto& child : mod.named_children()) {
          const std::string sub =
              path.empty() ? child.key() : path + "." + child.key();
          if (fsdp_type_matches(child.value()->name(), o.wrap_types())) {
            picked.emplace_back(sub, child.value());
          } else {
            walk(sub, *child.value());
          }
        }
      };
  walk("", model);
  if (picked.empty()) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: no module of the model is of a type to wrap (" +
            ampkit::detail::join(o.wrap_types(), ", ") +
            "; fsdp_transformer_layer_cls_to_wrap). Name the type of the "
            "model's repeated blocks, as TORCH_MODULE names it (Block for "
            "BlockImpl).");
  }
  return picked;
}

FsdpPicked fsdp_wrap_by_size(
    const std::shared_ptr<torch::nn::Module>& model, const FsdpOptions& o) {
  // accelerate's size_based_auto_wrap_policy: deepest first, a module
  // whose parameters not yet in a unit reach the threshold is one.
  FsdpPicked picked;
  std::function<int64_t(
      const std::string&, const std::shared_ptr<torch::nn::Module>&, bool)>
      walk = [&](const std::string& path,
                 const std::shared_ptr<torch::nn::Module>& mod,
                 bool root) -> int64_t {
    int64_t left = 0;
    for (const auto& p : mod->parameters(/*recurse=*/false)) {
      left += p.numel();
    }
    for (const auto& child : mod->named_children()) {
      const std::string sub =
          path.empty() ? child.key() : path + "." + child.key();
      left += walk(sub, child.value(), false);
    }
    if (!root && left >= o.min_num_params()) {
      // A unit inside would nest: only leaf-most picks are kept.
      bool has_unit_below = false;
      for (const auto& p : picked) {
        if (p.first.rfind(path + ".", 0) == 0) {
          has_unit_below = true;
        }
      }
      if (!has_unit_below) {
        picked.emplace_back(path, mod);
        return 0;
      }
    }
    return left;
  };
  walk("", model, true);
  return picked;
}

FsdpPicked fsdp_pick_units(const FullyShardedModel::Impl& im) {
  const auto& o = im.options;
  if (!o.wrap_types().empty() && o.min_num_params() > 0) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: wrap by type (fsdp_transformer_layer_cls_to_wrap) and by size "
        "(fsdp_min_num_params) are both set; choose one auto-wrap policy.");
  }
  if (!o.wrap_types().empty()) {
    return fsdp_wrap_by_type(*im.model, o);
  }
  if (o.min_num_params() > 0) {
    return fsdp_wrap_by_size(im.model, o);
  }
  return {};
}

// Which unit each parameter of a picked module is in, by tensor.
std::unordered_map<const void*, std::string> fsdp_owner_units(
    torch::nn::Module& model,
    const FsdpPicked& picked,
    std::unordered_map<const void*, std::string>& name_of) {
  // Parameters shared between a unit and anything outside it cannot be in
  // two flat buffers.
  std::unordered_map<const void*, std::string> owner_unit;
  for (const auto& [path, mod] : picked) {
    for (const auto& p : mod->parameters()) {
      owner_unit.emplace(p.unsafeGetTensorImpl(), path);
    }
  }
  for (const auto& item : model.named_modules()) {
    const std::string& path = item.key();
    bool inside = false;
    for (const auto& pk : picked) {
      if (path == pk.first || path.rfind(pk.first + ".", 0) == 0) {
        inside = true;
      }
    }
    if (inside) {
      continue;
    }
    for (const auto& p : item.value()->parameters(/*recurse=*/false)) {
      auto it = owner_unit.find(p.unsafeGetTensorImpl());
      if (it != owner_unit.end()) {
        throw UsageError(
            component::kDistributed,
            "FSDP: parameter " + name_of[p.unsafeGetTensorImpl()] +
                " is used by unit '" + it->second +
                "' and outside it. A shared (tied) parameter must live in "
                "one unit: wrap the modules that share it together, or "
                "leave them to the root.");
      }
    }
  }
  return owner_unit;
}

// Each unit's parameters, in the model's order, split into flat buffers
// by dtype and by whether they train.
FsdpUnitPlan fsdp_plan_units(
    torch::nn::Module& model,
    const FsdpPicked& picked,
    const std::unordered_map<const void*, std::string>& owner_unit) {
  std::vector<std::pair<std::string, torch::nn::Module*>> unit_list{
      {"", nullptr}};
  for (const auto& [path, mod] : picked) {
    unit_list.emplace_back(path, mod.get());
  }
  std::unordered_map<std::string, size_t> unit_index;
  for (size_t k = 0; k < unit_list.size(); ++k) {
    unit_index[unit_list[k].first] = k;
  }
  std::vector<std::vector<std::pair<FsdpFlatKey, std::vector<torch::Tensor>>>>
      split(unit_list.size());
  for (const auto& item : model.named_parameters()) {
    const auto& p = item.value();
    auto owner = owner_unit.find(p.unsafeGetTensorImpl());
    const size_t k = owner == owner_unit.end() ? 0 : unit_index[owner->second];
    const FsdpFlatKey key{p.scalar_type(), p.requires_grad()};
    auto& groups = split[k];
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return g.first == key;
    });
    if (it == groups.end()) {
      groups.emplace_back(key, std::vector<torch::Tensor>{});
      it = groups.end() - 1;
    }
    it->second.push_back(p);
  }
  return {std::move(unit_list), std::move(split)};
}

// The units of `plan`, each buffer's values broadcast from process 0.
void fsdp_make_units(
    FullyShardedModel::Impl& im,
    FsdpUnitPlan& plan,
    std::unordered_map<const void*, std::string>& name_of) {
  const auto& unit_list = plan.unit_list;
  auto& split = plan.split;
  for (size_t k = 0; k < unit_list.size(); ++k) {
    auto u = std::make_shared<FsdpUnit>();
    u->owner = &im;
    u->name = unit_list[k].first;
    u->module = unit_list[k].second;
    for (auto& [key, params] : split[k]) {
      std::vector<std::string> names;
      std::vector<torch::Tensor> values;
      int64_t total = 0;
      for (const auto& p : params) {
        names.push_back(name_of[p.unsafeGetTensorImpl()]);
        total += p.numel();
      }
      // One broadcast of the unit's values from process 0.
      torch::Tensor flat =
          torch::empty({total}, params.front().options().requires_grad(false));
      int64_t offset = 0;
      for (const auto& p : params) {
        flat.narrow(0, offset, p.numel()).copy_(p.detach().reshape({-1}));
        values.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
      }
      if (im.global && im.global->size() > 1) {
        im.global->broadcast(flat, 0);
      }
      u->flats.push_back(im.make_flat(names, params, values));
    }
    im.units.push_back(u);
  }
}

}  // namespace

FullyShardedModel::FullyShardedModel(
    std::shared_ptr<torch::nn::Module> model,
    std::shared_ptr<ProcessGroup> group,
    FsdpOptions options)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.model = std::move(model);
  im.global = group;
  im.group = std::move(group);
  im.options = std::move(options);
  fsdp_init_groups(im);

  // Units: the modules the policy picks (never nested: a module inside a
  // unit is part of it), then the root with what is left.
  const FsdpPicked picked = fsdp_pick_units(im);

  // Parameter names (deduplicated by tensor, as named_parameters does).
  std::unordered_map<const void*, std::string> name_of;
  for (const auto& item : im.model->named_parameters()) {
    name_of.emplace(item.value().unsafeGetTensorImpl(), item.key());
  }
  const auto owner_unit = fsdp_owner_units(*im.model, picked, name_of);
  FsdpUnitPlan plan = fsdp_plan_units(*im.model, picked, owner_unit);

  // Flatten, start from process 0's values, keep this process's shard.
  torch::NoGradGuard no_grad;
  fsdp_make_units(im, plan, name_of);
  im.collect_shards();
  if (im.global && im.global->size() > 1) {
    auto buffers = im.model->buffers();
    if (!buffers.empty()) {
      im.global->broadcast_coalesced(buffers, 0);
    }
  }
  std::lock_guard<std::mutex> lock(fsdp_registry_mutex);
  for (size_t i = 1; i < im.units.size(); ++i) {
    fsdp_registry()[im.units[i]->module] = im.units[i];
  }
}

FullyShardedModel::~FullyShardedModel() {
  std::lock_guard<std::mutex> lock(fsdp_registry_mutex);
  for (size_t i = 1; i < impl_->units.size(); ++i) {
    fsdp_registry().erase(impl_->units[i]->module);
  }
}

std::shared_ptr<FsdpUnit> detail::fsdp_unit_of(
    const torch::nn::Module& module) {
  std::lock_guard<std::mutex> lock(fsdp_registry_mutex);
  auto& map = fsdp_registry();
  auto it = map.find(&module);
  if (it == map.end()) {
    return nullptr;
  }
  return it->second.lock();
}

}  // namespace ampkit::dist
