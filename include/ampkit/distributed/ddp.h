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

#include "ampkit/distributed/process_group.h"

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
  /// Gradients live in the all-reduce buckets, as views, instead of being
  /// copied into them and back (DDP's gradient_as_bucket_view; false, as
  /// PyTorch and accelerate): saves a gradient-sized buffer and two copies
  /// of every gradient per step. With it, a gradient is a view: code that
  /// replaces p.grad() (rather than writing into it) detaches it from the
  /// bucket.
  SyncOptions& gradient_as_bucket_view(bool value) {
    gradient_as_bucket_view_ = value;
    return *this;
  }
  bool gradient_as_bucket_view() const {
    return gradient_as_bucket_view_;
  }
  /// The model runs the same graph, with the same parameters used or
  /// unused, every step (DDP's static_graph; false, as PyTorch and
  /// accelerate). The first synchronising backward all-reduces at its end
  /// and records which parameters got no gradient; later steps treat those
  /// as ready without find_unused_parameters' graph walk, and parameters
  /// without a gradient are allowed.
  SyncOptions& static_graph(bool value) {
    static_graph_ = value;
    return *this;
  }
  bool static_graph() const {
    return static_graph_;
  }

 private:
  double bucket_cap_mb_ = 25.0;
  bool reduce_gradients_ = true;
  bool find_unused_parameters_ = false;
  std::optional<torch::Dtype> compression_;
  bool broadcast_buffers_ = true;
  bool gradient_as_bucket_view_ = false;
  bool static_graph_ = false;
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
  /// After backward: with find_unused_parameters and static_graph off, a
  /// parameter that got no gradient in a synchronising backward is a
  /// UsageError naming it. A backward that reached none of the parameters
  /// (a GAN's discriminator loss after the generator's forward) is not
  /// this model's: its reduction waits for the backward that reaches it,
  /// as PyTorch's DDP does.
  void after_backward();
  /// Before an optimizer steps this model's parameters: a synchronising
  /// forward whose backward never reached them is the UsageError naming
  /// them (their gradients were never made, nor all-reduced).
  void check_backward_done() const;
  /// Whether a synchronising forward still waits for the backward that
  /// reaches this model (with find_unused_parameters or static_graph, a
  /// backward never leaves it waiting).
  bool awaiting_backward() const;

  size_t num_buckets() const;
  const SyncOptions& options() const;

  struct Impl;

 private:
  [[noreturn]] static void throw_without_gradient(
      size_t count, const std::string& missing, const std::string& when);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampkit::dist
