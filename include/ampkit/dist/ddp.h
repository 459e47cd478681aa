// Data-parallel gradient synchronisation on PyTorch's own DDP engine
// (c10d::Reducer): parameters and buffers start equal on every process,
// and gradients are averaged by bucketed all-reduces launched from autograd
// hooks, so that communication overlaps the rest of backward.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/dist/process_group.h"

namespace ampkit::dist {

struct SyncOptions {
  /// The all-reduce bucket size (DDP's bucket_cap_mb).
  SyncOptions& bucket_cap_mb(double value) {
    bucket_cap_mb_ = value;
    return *this;
  }
  double bucket_cap_mb() const {
    return bucket_cap_mb_;
  }
  /// Allow parameters that get no gradient in some iterations (DDP's
  /// find_unused_parameters; it walks the graph from the outputs each
  /// iteration). Off: such a parameter is an error naming it.
  SyncOptions& find_unused_parameters(bool value) {
    find_unused_parameters_ = value;
    return *this;
  }
  bool find_unused_parameters() const {
    return find_unused_parameters_;
  }
  /// Compress each bucket to kBFloat16 or kHalf for the all-reduce (DDP's
  /// bf16/fp16 compression hooks); empty: full precision.
  SyncOptions& compression(std::optional<torch::Dtype> value) {
    compression_ = value;
    return *this;
  }
  std::optional<torch::Dtype> compression() const {
    return compression_;
  }
  /// Broadcast rank 0's buffers (batch-norm statistics) before each
  /// synchronising forward, as DDP's broadcast_buffers.
  SyncOptions& broadcast_buffers(bool value) {
    broadcast_buffers_ = value;
    return *this;
  }
  bool broadcast_buffers() const {
    return broadcast_buffers_;
  }
  /// false: no all-reduce at all; the synchronizer still starts the
  /// processes equal, broadcasts buffers and checks that every parameter
  /// got a gradient, and the caller reduces the gradients itself (ZeRO
  /// stage 2's reduce-scatter).
  SyncOptions& reduce_gradients(bool value) {
    reduce_gradients_ = value;
    return *this;
  }
  bool reduce_gradients() const {
    return reduce_gradients_;
  }

 private:
  double bucket_cap_mb_ = 25.0;
  bool reduce_gradients_ = true;
  bool find_unused_parameters_ = false;
  std::optional<torch::Dtype> compression_;
  bool broadcast_buffers_ = true;
};

class GradientSynchronizer {
 public:
  /// Broadcasts rank 0's parameters and buffers, assigns buckets and builds
  /// the Reducer. `parameters` are (name, tensor) in registration order.
  GradientSynchronizer(
      std::shared_ptr<ProcessGroup> group,
      std::vector<std::pair<std::string, torch::Tensor>> parameters,
      std::vector<torch::Tensor> buffers,
      SyncOptions options = {});
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  /// Before a forward with gradients enabled. `sync`: the backward of this
  /// forward all-reduces (false on accumulation micro-steps).
  void before_forward(bool sync);
  /// After that forward, with its output tensors (used to find unused
  /// parameters).
  void after_forward(const std::vector<torch::Tensor>& outputs, bool sync);
  /// After backward: with find_unused_parameters off, a parameter that got
  /// no gradient in a synchronising backward is a UsageError naming it.
  void after_backward();

  size_t num_buckets() const;
  const SyncOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampkit::dist
