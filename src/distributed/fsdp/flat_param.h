// A flat parameter: one unit's parameters of one dtype as one buffer, of
// which each process holds a shard (FSDP2's _fsdp_param).
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ampkit/distributed/process_group.h"

namespace ampkit::dist::detail {

/// One flat buffer: parameters of one unit that share a dtype, whether
/// they train, and (after take_over) an optimizer param group.
struct FlatParam {
  std::vector<std::string> names;     // full names in the model
  std::vector<torch::Tensor> params;  // the model's own tensors
  std::vector<int64_t> offsets;
  std::vector<int64_t> numels;
  std::vector<std::vector<int64_t>> shapes;
  int64_t total = 0;       // elements, unpadded
  int64_t shard_size = 0;  // elements per process
  torch::Tensor shard;     // leaf, what the optimizer steps
  torch::Tensor full;      // gathered; its memory is released when freed
  torch::Tensor empty;     // what the parameters hold when freed
  // The full gradients of accumulation micro-steps that do not
  // synchronise, summed locally until the one that does (as DDP's no_sync
  // sums them in .grad); undefined otherwise.
  torch::Tensor pending;
  bool gathered = false;
  // A prefetch's all-gather into `full`, not yet waited for.
  PendingCollective inflight;
  // A synchronising backward's reduce-scatter of this buffer's gradients
  // into `reduced` (this process's part), not yet added into the shard's
  // gradient (Impl::finish_reduces).
  PendingCollective reducing;
  torch::Tensor reduced;
  // The dtype `full` is gathered in for computing (MixedPrecision's
  // param_dtype; the shard's own without it).
  c10::ScalarType compute_dtype = c10::ScalarType::Float;
  /// Parameter i's part of a flat tensor laid out as this buffer, in the
  /// parameter's shape.
  torch::Tensor piece(const torch::Tensor& flat, size_t i) const {
    return flat.narrow(0, offsets[i], numels[i]).view(shapes[i]);
  }
};

// A gathered buffer's memory: allocated for its elements, or released
// while the tensor keeps its size (flat_param.cpp).
void set_storage(torch::Tensor& t, bool allocate);
torch::Tensor freed_buffer(int64_t numel, const torch::TensorOptions& options);

}  // namespace ampkit::dist::detail
