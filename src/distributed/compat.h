// The c10d API differences between LibTorch 1.13 and 2.x, in one place
// (LIBTORCH_VERSIONS.md sections 3 and 4): who is a ProcessGroup, how a Gloo
// or NCCL group is assembled, and the Reducer's constructor.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "amp/compat.h"  // AMPKIT_TORCH_AT_LEAST

// Gloo sums and moves bf16 in LibTorch 2.x (checked on 2.11); in 1.13 every
// bf16 collective fails with "Invalid scalar type".
#define AMPKIT_GLOO_HAS_BF16 AMPKIT_TORCH_AT_LEAST(2, 0)

namespace ampkit::dist::detail {

/// A Gloo process group whose pairs bind to `hostname`'s address
/// ("127.0.0.1" keeps a single-node run on loopback), or, with an empty
/// hostname, to GLOO_SOCKET_IFNAME's interface or the machine's default.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    const std::string& hostname);

/// Whether c10d's TCPStore server failed because its port is taken (1.13
/// says "Address already in use", 2.x names EADDRINUSE).
bool port_in_use(const std::exception& e);

/// Whether this LibTorch was built with NCCL.
bool nccl_available();

/// An NCCL process group; throws ampkit::Unsupported where LibTorch has no
/// NCCL.
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout);

struct ReducerArgs {
  std::vector<at::Tensor> params;
  std::vector<std::vector<size_t>> bucket_indices;
  std::vector<size_t> per_bucket_size_limits;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  int64_t bucket_bytes_cap{};  // set by the caller, from SyncOptions
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  std::unordered_map<size_t, std::string> param_names;
  int64_t first_bucket_bytes_cap{};  // likewise
};

/// c10d::Reducer with whichever constructor this LibTorch has (the 10-,
/// 11-, 12- and 13-argument forms).
std::unique_ptr<c10d::Reducer> make_reducer(ReducerArgs args);

}  // namespace ampkit::dist::detail
