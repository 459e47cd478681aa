// ZeRO stages 1 and 2 (DeepSpeed's partitioned optimizer states and
// gradients) over a dist::ProcessGroup: each process keeps the optimizer
// state of its shard of the parameters only, steps that shard, and sends the
// updated values to the others.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ampkit/distributed/process_group.h"

namespace ampkit::optim {

/// Where the shards of `sizes` (element counts, in order) begin and end for
/// `num_shards` processes: num_shards + 1 offsets into the flattened
/// parameters. The even split is moved to the nearest parameter boundary
/// when one lies within 2.5% of a shard's length, so no parameter is split
/// unless it must be, and no shard is more than 5% above an even share.
std::vector<int64_t> partition_boundaries(
    const std::vector<int64_t>& sizes, int64_t num_shards);

/// Bytes of the state tensors `optimizer` holds (Adam's moments, SGD's
/// momentum buffers...), for Adam, AdamW, SGD, RMSprop and Adagrad; a
/// UsageError naming the type for others.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

/// optimizer.zero_grad() for `parameters`: each defined gradient becomes
/// undefined with set_to_none, else is zeroed in place (detached first), in
/// every LibTorch version.
void clear_gradients(std::vector<torch::Tensor>& parameters, bool set_to_none);

/// Bytes of the distinct storages behind these parameters' gradients (a
/// DDP bucket that holds several gradients counts once).
int64_t gradient_bytes(const std::vector<torch::Tensor>& parameters);

/// An optimizer whose state is partitioned across processes.
///
/// The constructor takes over `optimizer`: its parameters become views into
/// one flat buffer (their values and identity kept, so the model and the
/// synchronizer still hold them), and each param group now holds this
/// process's slice of the flat buffer instead. optimizer.step() then updates
/// only that slice and creates state for it only.
///
/// Per step:
///   prepare_for_backward()  stage 2: reduce-scatter during the backward
///   backward (stage 1: gradients all-reduced as in DDP; stage 2: local,
///             each bucket reduce-scattered as soon as it is complete)
///   reduce_gradients()   shard's averaged gradient into the shard's grad
///   [unscale, clip on shard_gradients(), with norms summed across processes]
///   optimizer.step()
///   gather_parameters()  every process's updated slice to every process
class ShardedOptimizer {
 public:
  /// `group` nullptr: one process, whose shard is everything. `stage`: 1 or
  /// 2. The optimizer must not have stepped yet; its trainable parameters
  /// must share one dtype and device, be dense, and appear once.
  /// `bucket_bytes`: stage 2 reduce-scatters the gradients in buckets of
  /// about this size (the last parameters' first, in a 1 MB bucket, as
  /// DDP's all-reduce buckets).
  ShardedOptimizer(
      torch::optim::Optimizer& optimizer,
      std::shared_ptr<dist::ProcessGroup> group,
      int64_t stage,
      int64_t bucket_bytes = 25 * 1024 * 1024);
  ~ShardedOptimizer();
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  /// Stage 2, before a backward whose gradients reduce_gradients() will
  /// reduce: during that backward, each bucket whose parameters all have
  /// their gradient is reduce-scattered (asynchronously, buckets in the
  /// same order on every process) and its gradients freed, so that the
  /// communication overlaps the rest of backward. Gradients that a later
  /// backward adds stay in .grad for the next reduce. Stage 1: nothing.
  void prepare_for_backward();

  /// After the backward that synchronises. Stage 1: copies this shard's
  /// part of the (already all-reduced) gradients into the shard gradient.
  /// Stage 2: averages the local gradients across processes into the shard
  /// gradient (a reduce-scatter) and frees the full-size gradients.
  void reduce_gradients();
  /// After optimizer.step(): broadcasts each process's slice of the flat
  /// parameters, so every process holds the full updated model.
  void gather_parameters();
  /// Clears the parameters' gradients and the shard's.
  void zero_grad(bool set_to_none);

  /// Loads the state that a ShardedOptimizer over the same parameters
  /// saved when they were split at `saved` (the boundaries() of a run with
  /// another number of processes): `load(q)` must load saved process q's
  /// archive into the optimizer (optimizer.load). The saved shards that
  /// overlap this process's are loaded in turn, and their elementwise state
  /// (Adam's moments, momentum buffers) is cut at this process's
  /// boundaries, which is exact; per-slice values such as Adam's step must
  /// agree across them. Parameters of another total size, or shards that
  /// disagree, are an InvalidArgument, and the optimizer keeps no state.
  void load_resplit(
      const std::vector<int64_t>& saved,
      const std::function<void(int64_t)>& load);

  /// The parts of the shard gradient that belong to `parameters` (views),
  /// for clipping; `managed[i]` is set for each parameter this optimizer
  /// holds.
  std::vector<torch::Tensor> shard_gradients(
      const std::vector<torch::Tensor>& parameters,
      std::vector<bool>& managed) const;

  int64_t stage() const {
    return stage_;
  }
  /// Whether reduce_gradients ran since the last gather_parameters (a step
  /// without it would use stale shard gradients).
  bool has_reduced_gradients() const {
    return pending_;
  }
  /// The flat offsets where each process's shard begins, and the total.
  const std::vector<int64_t>& boundaries() const {
    return boundaries_;
  }
  /// The parameters it took over, in flat order.
  const std::vector<torch::Tensor>& parameters() const {
    return params_;
  }
  /// Bytes of gradients this process holds now: the parameters' gradients
  /// (distinct storages) and the shard gradient.
  int64_t gradient_bytes() const;

 private:
  torch::optim::Optimizer& optimizer_;
  std::shared_ptr<dist::ProcessGroup> group_;
  int64_t stage_;
  int64_t rank_ = 0;
  int64_t world_ = 1;
  std::vector<torch::Tensor> params_;  // flat order
  std::vector<int64_t> offsets_;       // each parameter's flat offset
  std::vector<int64_t> boundaries_;
  // Each param group's [begin, end) in the flat buffer ({0, 0}: none).
  std::vector<std::pair<int64_t, int64_t>> group_ranges_;
  torch::Tensor flat_;  // every parameter's values
  // Each parameter's position in params_, by its TensorImpl.
  std::unordered_map<const void*, size_t> index_;
  /// The part of shard_grad_ that holds parameter i (undefined when this
  /// process's shard has none of it), and where that part starts in it.
  torch::Tensor owned_gradient(size_t i, int64_t* start = nullptr) const;

  /// Stage 2's buckets: contiguous ranges of parameters, last first.
  struct Bucket;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // each parameter's bucket
  size_t next_bucket_ = 0;         // the next to launch
  bool armed_ = false;             // prepare_for_backward, not yet reduced
  // The gradient accumulators the readiness hooks sit on, and their keys.
  std::vector<std::pair<std::shared_ptr<void>, uintptr_t>> hooks_;
  void gradient_ready(size_t i);
  void launch(size_t k);

  torch::Tensor shard_grad_;  // the gradient of [begin, end)
  // Stage 2: a second backward before zero_grad adds to the shard.
  bool reduced_ = false;
  bool pending_ = false;  // reduced since the last gather
};

}  // namespace ampkit::optim
