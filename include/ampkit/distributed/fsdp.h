// Fully sharded data parallel (FSDP, DeepSpeed's ZeRO-3): each unit of a
// model keeps its parameters as one flat buffer of which every process holds
// 1/N. A unit's forward gathers the buffer (all-gather), runs, and frees it
// again; its backward gathers it again, computes the unit's gradients and
// reduce-scatters them into the process's shard, then frees. The optimizer
// steps the shards.
//
// LibTorch has no module hooks, so a unit runs through one call in its
// parent's forward, in place of `unit->forward(x)`:
//
//     x = ampkit::dist::fsdp_forward(*block, x);
//
// Outside FSDP (or for a module that is not a unit) it is that forward.
// Inside, it is an autograd Function around the unit: its backward runs the
// unit's backward (re-entrantly), so gradients are reduce-scattered while
// backward goes on through the units before it. The parameters that belong
// to no unit form the root unit: gathered before the model's forward, and
// reduce-scattered after the backward (Accelerator::backward).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ampkit/distributed/process_group.h"

namespace ampkit::dist {

/// accelerate's fsdp_sharding_strategy.
enum class ShardingStrategy {
  /// Parameters, gradients and optimizer state sharded; a unit's full
  /// parameters exist only while it computes (ZeRO-3).
  full_shard,
  /// Gradients and optimizer state sharded; a unit's full parameters stay
  /// from its forward until its backward (ZeRO-2 with FSDP's units).
  shard_grad_op,
  /// Nothing sharded: every process holds everything, gradients are
  /// all-reduced (DDP through FSDP's machinery).
  no_shard,
  /// FULL_SHARD within each machine (LOCAL_WORLD_SIZE processes), each
  /// machine a replica: gradients are reduce-scattered within the machine,
  /// then all-reduced across machines.
  hybrid_shard,
  /// HYBRID_SHARD whose units keep their full parameters from forward to
  /// backward, as SHARD_GRAD_OP does (PyTorch's _HYBRID_SHARD_ZERO2).
  hybrid_shard_zero2,
};
/// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
/// "HYBRID_SHARD_ZERO2" (accelerate's names, also its numbers 1 to 5, and
/// PyTorch's "_HYBRID_SHARD_ZERO2"); an InvalidArgument naming the value
/// otherwise.
ShardingStrategy parse_sharding_strategy(const std::string& value);
std::string to_string(ShardingStrategy strategy);

/// accelerate's fsdp_backward_prefetch: when backward issues the all-gather
/// of the unit whose backward comes next.
enum class BackwardPrefetch {
  /// When that unit's backward starts.
  none,
  /// Before the current unit computes its gradients (more memory: two
  /// units gathered during the computation).
  backward_pre,
  /// After the current unit computed its gradients, before they are
  /// reduced.
  backward_post,
};
/// "BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH" (accelerate's names; also
/// 1, 2, 3); an InvalidArgument naming the value otherwise.
BackwardPrefetch parse_backward_prefetch(const std::string& value);
std::string to_string(BackwardPrefetch prefetch);

/// accelerate's fsdp_state_dict_type: how save_state writes the model.
enum class StateDictType {
  /// The whole model in one file, gathered buffer by buffer for the writer
  /// (FULL_STATE_DICT with rank0_only).
  full_state_dict,
  /// Each process writes its own shards, nothing is gathered; a resume on
  /// another number of processes joins and splits them again.
  sharded_state_dict,
};
/// "FULL_STATE_DICT", "SHARDED_STATE_DICT" (also PyTorch's 1, 3);
/// LOCAL_STATE_DICT is Unsupported, anything else an InvalidArgument.
StateDictType parse_state_dict_type(const std::string& value);
std::string to_string(StateDictType type);

struct FsdpOptions {
  FsdpOptions& strategy(ShardingStrategy value) {
    strategy_ = value;
    return *this;
  }
  ShardingStrategy strategy() const {
    return strategy_;
  }
  /// TRANSFORMER_BASED_WRAP: the modules whose type is one of these names
  /// are units ("Block" matches BlockImpl, as TORCH_MODULE names it).
  FsdpOptions& wrap_types(std::vector<std::string> value) {
    wrap_types_ = std::move(value);
    return *this;
  }
  const std::vector<std::string>& wrap_types() const {
    return wrap_types_;
  }
  /// SIZE_BASED_WRAP: a module whose parameters not yet in a unit number
  /// at least this many becomes a unit, deepest first (0: off).
  FsdpOptions& min_num_params(int64_t value) {
    min_num_params_ = value;
    return *this;
  }
  int64_t min_num_params() const {
    return min_num_params_;
  }
  /// Each unit's forward keeps only its inputs; backward runs it again
  /// (with the random state of the first run, so dropout matches).
  FsdpOptions& activation_checkpointing(bool value) {
    activation_checkpointing_ = value;
    return *this;
  }
  bool activation_checkpointing() const {
    return activation_checkpointing_;
  }
  /// fsdp_forward_prefetch: when a unit's forward starts, the all-gather of
  /// the unit that came after it in the previous forward is issued, so it
  /// runs while this one computes.
  FsdpOptions& forward_prefetch(bool value) {
    forward_prefetch_ = value;
    return *this;
  }
  bool forward_prefetch() const {
    return forward_prefetch_;
  }
  FsdpOptions& backward_prefetch(BackwardPrefetch value) {
    backward_prefetch_ = value;
    return *this;
  }
  BackwardPrefetch backward_prefetch() const {
    return backward_prefetch_;
  }
  /// FSDP's MixedPrecision: the dtype a unit's floating-point parameters
  /// are gathered in and computed with (its gradients come in it too);
  /// the shards the optimizer steps stay in their own dtype (fp32 master
  /// weights). Unset: their own dtype. The Accelerator sets it, and
  /// reduce_dtype, to bf16/fp16 under mixed precision, as accelerate does.
  FsdpOptions& param_dtype(std::optional<c10::ScalarType> value) {
    param_dtype_ = value;
    return *this;
  }
  std::optional<c10::ScalarType> param_dtype() const {
    return param_dtype_;
  }
  /// The dtype gradients are reduced (reduce-scattered, all-reduced) in;
  /// unset: the shards' own. They are summed locally over accumulation
  /// micro-steps in the shards' dtype, and land in it.
  FsdpOptions& reduce_dtype(std::optional<c10::ScalarType> value) {
    reduce_dtype_ = value;
    return *this;
  }
  std::optional<c10::ScalarType> reduce_dtype() const {
    return reduce_dtype_;
  }
  /// How save_state writes the model (FULL_STATE_DICT by default).
  FsdpOptions& state_dict_type(StateDictType value) {
    state_dict_type_ = value;
    return *this;
  }
  StateDictType state_dict_type() const {
    return state_dict_type_;
  }

 private:
  ShardingStrategy strategy_ = ShardingStrategy::full_shard;
  std::vector<std::string> wrap_types_;
  int64_t min_num_params_ = 0;
  bool activation_checkpointing_ = false;
  bool forward_prefetch_ = false;
  BackwardPrefetch backward_prefetch_ = BackwardPrefetch::none;
  std::optional<c10::ScalarType> param_dtype_;
  std::optional<c10::ScalarType> reduce_dtype_;
  StateDictType state_dict_type_ = StateDictType::full_state_dict;
};

class FullyShardedModel;

namespace detail {
/// The unit that `module` is under a live FullyShardedModel; nullptr when
/// it is none.
struct FsdpUnit;
std::shared_ptr<FsdpUnit> fsdp_unit_of(const torch::nn::Module& module);
/// Runs `forward` on `inputs` as unit `unit` (gather, compute, free; in
/// backward the same, and the gradients reduce-scattered).
torch::Tensor fsdp_run(
    const std::shared_ptr<FsdpUnit>& unit,
    std::vector<torch::Tensor> inputs,
    std::function<torch::Tensor(const std::vector<torch::Tensor>&)> forward);

template <typename M>
torch::nn::Module& module_of(M& module) {
  if constexpr (std::is_base_of_v<torch::detail::ModuleHolderIndicator, M>) {
    return *module.ptr();
  } else {
    return module;
  }
}
template <typename M>
auto& impl_of(M& module) {
  if constexpr (std::is_base_of_v<torch::detail::ModuleHolderIndicator, M>) {
    return *module;
  } else {
    return module;
  }
}
template <typename M, size_t... I>
torch::Tensor call_forward(
    M& module,
    const std::vector<torch::Tensor>& in,
    std::index_sequence<I...>) {
  return impl_of(module).forward(in[I]...);
}
}  // namespace detail

/// `module.forward(inputs...)`, as an FSDP unit where `module` is one (see
/// above); `module` is an Impl (`*block->as<Block>()`) or a holder
/// (`block`). The unit's forward takes tensors and returns one tensor.
template <typename M, typename... T>
torch::Tensor fsdp_forward(M& module, const T&... inputs) {
  static_assert(
      (std::is_convertible_v<const T&, const torch::Tensor&> && ...),
      "fsdp_forward: a unit's forward takes tensors");
  auto unit = detail::fsdp_unit_of(detail::module_of(module));
  if (!unit) {
    return detail::impl_of(module).forward(inputs...);
  }
  return detail::fsdp_run(
      unit,
      std::vector<torch::Tensor>{inputs...},
      [&module](const std::vector<torch::Tensor>& in) {
        return detail::call_forward(
            module, in, std::index_sequence_for<T...>{});
      });
}

/// A model sharded across the processes of `group` (nullptr: one process).
class FullyShardedModel {
 public:
  /// Picks the units by `options`' policy (neither set: the whole model is
  /// one unit), flattens and shards their parameters and starts every
  /// process from process 0's values (parameters and buffers). The model's
  /// parameters then hold no values between uses (0 elements); the shards
  /// (shards()) are what an optimizer steps: see take_over.
  FullyShardedModel(
      std::shared_ptr<torch::nn::Module> model,
      std::shared_ptr<ProcessGroup> group,
      FsdpOptions options);
  ~FullyShardedModel();
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;

  /// Makes `optimizer`, built over this model's parameters, step the
  /// shards instead: each param group gets the shards of the units whose
  /// parameters it held. A unit's parameters must all be in one group;
  /// the optimizer must not have stepped.
  void take_over(torch::optim::Optimizer& optimizer);

  /// Before the model's forward: gathers the root unit's parameters.
  /// `sync` false (an accumulation micro-step, DDP's no_sync): this
  /// forward's backward sums the full gradients locally, and the next
  /// synchronising one reduces the sum (as DDP, so the numbers match it;
  /// it holds the unsharded gradients meanwhile, as FSDP's no_sync does).
  void before_forward(bool sync = true);
  /// After a backward through the model: reduce-scatters the root unit's
  /// gradients into its shard and frees its parameters. A unit whose
  /// forward ran with gradients but whose backward did not is named in a
  /// warning (its gradients were not reduced).
  void after_backward();
  /// After a forward without gradients (evaluation): frees the root's
  /// parameters.
  void after_forward_without_grad();

  /// The shards (leaf tensors, this process's 1/N of each unit, padding
  /// included), root first.
  const std::vector<torch::Tensor>& shards() const;
  /// The units' module paths ("" for the root), root first.
  std::vector<std::string> unit_names() const;
  /// The units (path and type) that the forward begun by the last
  /// before_forward has not entered through fsdp_forward so far.
  std::vector<std::string> units_not_entered() const;
  /// Calls `fn(parameter, gradient)` for each trainable parameter whose
  /// flat buffer has a gradient, with its full (averaged) gradient in the
  /// parameter's shape: each buffer's shard gradients are all-gathered in
  /// turn into a temporary. Every process must call it (clipping computes
  /// DDP's per-parameter norms with it, so the norm is DDP's to the bit).
  void for_each_full_gradient(
      const std::function<void(const torch::Tensor&, const torch::Tensor&)>&
          fn);
  /// The parameters take_over found in the optimizer, in its param groups'
  /// order (empty before take_over).
  const std::vector<torch::Tensor>& optimizer_parameters() const;
  /// Bytes this process holds for parameters and gradients now: the shards,
  /// their gradients, and any full parameters gathered.
  int64_t held_bytes() const;
  /// The largest number of bytes gathered at once since the last call
  /// (full parameters), and resets it.
  int64_t take_peak_gathered_bytes();
  /// Gathers every unit, so that the model's parameters hold their full
  /// values (to save or load them as an unsharded model does, or to run it
  /// outside training); every process must call it. Units stay gathered
  /// (fsdp_forward frees nothing) until release_all: with `keep_values`,
  /// each process first takes its shard of what the parameters hold now
  /// (a load into them).
  void gather_all();
  void release_all(bool keep_values);

  /// The model's parameters by name, in named_parameters' order, with
  /// their full values in the shards' dtype (fp32 master weights), for
  /// saving: gathered buffer by buffer into a temporary, so no process
  /// holds more than one buffer gathered at a time (FULL_STATE_DICT with
  /// rank0_only). Every process must call it; with `keep` false it takes
  /// part and returns nothing.
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters(bool keep);

  /// Loads `optimizer` (taken over) from state saved by `saved_processes`
  /// processes under another layout: `load(q)` loads process q's file into
  /// the optimizer; each buffer's state is joined from the saved shards
  /// and this process keeps its own shard. An InvalidArgument when the
  /// saved shards do not cover the buffers.
  void load_resharded(
      torch::optim::Optimizer& optimizer,
      int64_t saved_processes,
      const std::function<void(int64_t)>& load);

  /// SHARDED_STATE_DICT. `tensors`: this process's shard of every flat
  /// buffer, by unit and index ("blocks.0#0"); `layout`: each buffer's
  /// length and parameter names, and which part of how many this
  /// process's shards are.
  struct SavedShards {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    std::map<std::string, std::string> layout;
  };
  SavedShards local_shards() const;

  /// Loading, in two steps so that a checkpoint is read and checked whole
  /// before anything changes: shards_from_saved / shards_from_full return
  /// this process's shard of every flat buffer and change nothing;
  /// load_shards then sets them.
  ///
  /// The shards `saved_processes` processes saved with local_shards
  /// (`read(q)`: process q's). With the same count and layout each process
  /// reads its own; otherwise each buffer is joined from the saved parts
  /// and split again for this run. Different buffers or parameters are an
  /// InvalidArgument.
  std::vector<torch::Tensor> shards_from_saved(
      int64_t saved_processes,
      const std::function<SavedShards(int64_t)>& read) const;
  /// Cut from whole parameters by name (a FULL_STATE_DICT or save_model
  /// file), parameter by parameter: no buffer is gathered. Every parameter
  /// must be there in its full shape (parameter_shapes), else an
  /// InvalidArgument naming it; other names are left alone.
  std::vector<torch::Tensor> shards_from_full(
      const std::vector<std::pair<std::string, torch::Tensor>>& parameters)
      const;
  /// Each parameter's name and full shape, in named_parameters' order (the
  /// model's own tensors are empty while their unit is not gathered).
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes()
      const;
  /// Sets this process's shards to `shards` (from shards_from_saved or
  /// shards_from_full) and drops any gathered copy.
  void load_shards(const std::vector<torch::Tensor>& shards);

  const FsdpOptions& options() const;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampkit::dist
