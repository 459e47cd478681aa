// A c10d process group set up from the launcher's environment, with the
// collectives the Accelerator uses. Failures become ampkit::DistributedError
// naming the rank that failed; debug mode checks shapes before collectives.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ampkit/distributed/env.h"

namespace ampkit::dist {

enum class ReduceOp { sum, mean, max };

struct GroupOptions {
  /// How long a rendezvous or a collective may wait for the other
  /// processes before failing (c10d's default: 30 minutes). It reaches the
  /// store and the backend.
  GroupOptions& timeout(std::chrono::milliseconds value) {
    timeout_ = value;
    return *this;
  }
  std::chrono::milliseconds timeout() const {
    return timeout_;
  }
  /// Before each collective, compare the tensors' shapes across processes
  /// and fail with every rank's shape instead of hanging.
  GroupOptions& debug(bool value) {
    debug_ = value;
    return *this;
  }
  bool debug() const {
    return debug_;
  }
  /// "gloo", "nccl", or "" for NCCL on a CUDA device where LibTorch has it,
  /// else Gloo.
  GroupOptions& backend(std::string value) {
    backend_ = std::move(value);
    return *this;
  }
  const std::string& backend() const {
    return backend_;
  }

 private:
  std::chrono::milliseconds timeout_ = std::chrono::minutes(30);
  bool debug_ = false;
  std::string backend_;
};

/// A collective that was issued and not yet waited for (the *_async
/// calls): under Gloo it runs on Gloo's threads, under NCCL on NCCL's
/// stream, while this thread goes on.
class PendingCollective {
 public:
  PendingCollective() = default;
  explicit PendingCollective(std::function<void()> finish)
      : finish_(std::move(finish)) {}
  bool pending() const {
    return static_cast<bool>(finish_);
  }
  /// Waits for it (NCCL: makes the current stream wait) and finishes it;
  /// a failure is the synchronous call's error. Then no longer pending.
  void wait() {
    auto finish = std::move(finish_);
    finish_ = nullptr;
    if (finish) {
      finish();
    }
  }

 private:
  std::function<void()> finish_;
};

/// One process's membership of a distributed run. Create it once per
/// process, on every process, in the same order as the other collectives.
class ProcessGroup {
 public:
  /// Rendezvous and backend. A single-node run (DistEnv::single_node) meets
  /// through c10d's FileStore in a private (0700) directory and binds Gloo
  /// to 127.0.0.1, so it opens no port outside loopback; a multi-node run
  /// meets at MASTER_ADDR:MASTER_PORT over c10d's TCPStore and warns once
  /// that this port is unauthenticated.
  ProcessGroup(
      const DistEnv& env, const GroupOptions& options, c10::Device device);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int64_t rank() const;
  int64_t size() const;
  const DistEnv& env() const;
  const GroupOptions& options() const;
  /// "gloo" or "nccl".
  const std::string& backend() const;
  /// How the processes met: "FileStore <path>" or "TCPStore <addr>:<port>".
  const std::string& rendezvous() const;
  /// The address or interface Gloo/NCCL use, and where it came from:
  /// loopback on one machine, GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME when
  /// set, else the local address the kernel routes toward MASTER_ADDR.
  const std::string& network() const;

  void barrier();
  /// In place; mean divides the sum by size().
  void all_reduce(torch::Tensor& tensor, ReduceOp op);
  /// Every process's tensor, in rank order; the shapes must agree.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);
  /// Every process's `input` (the same length on each), in rank order, into
  /// `output` (size() times as long, contiguous): a flat all-gather.
  void all_gather_into(torch::Tensor& output, const torch::Tensor& input);
  /// all_gather_into, issued now and finished by the result's wait();
  /// `output` and `input` must stay as they are until then. NCCL gathers
  /// into `output` directly (c10d's _allgather_base).
  PendingCollective all_gather_into_async(
      torch::Tensor& output, const torch::Tensor& input);
  /// In place: every process ends with `root`'s tensor.
  void broadcast(torch::Tensor& tensor, int64_t root = 0);
  /// Broadcasts many tensors from `root` in few messages (c10d's
  /// broadcast_coalesced), as DDP does for parameters and buffers.
  void broadcast_coalesced(
      const std::vector<torch::Tensor>& tensors, int64_t root = 0);
  /// A reduce-scatter with uneven parts: sums `flat` (the same length on
  /// every process) across processes and writes this process's part of the
  /// sum, flat[boundaries[rank], boundaries[rank + 1]), into `output`.
  /// `boundaries` has size() + 1 non-decreasing offsets from 0 to
  /// flat.numel(). NCCL runs its reduce-scatter (parts padded to one length
  /// where they differ). On Gloo each process sends every other its part
  /// of `flat` and adds the parts it receives, in rank order: half the
  /// bytes of an all-reduce (Gloo's own reduce_scatter, LibTorch 2.x only,
  /// is slower than its all-reduce). `flat` is left unchanged.
  void reduce_scatter(
      torch::Tensor& output,
      torch::Tensor& flat,
      const std::vector<int64_t>& boundaries);
  /// reduce_scatter, issued now and finished (`output` written) by the
  /// result's wait(); `flat` and `output` must stay as they are until then.
  /// NCCL with equal parts reduce-scatters `flat` directly (c10d's
  /// _reduce_scatter_base), without a padded copy.
  PendingCollective reduce_scatter_async(
      torch::Tensor& output,
      torch::Tensor& flat,
      const std::vector<int64_t>& boundaries);
  /// Whether the backend sums tensors of `dtype` (Gloo in LibTorch 1.13
  /// has no bf16; gathers move any dtype, bf16 as bytes there).
  bool can_sum(c10::ScalarType dtype) const;
  /// Whether reduce_scatter runs the backend's own (NCCL) rather than
  /// ampkit's point-to-point one (Gloo).
  bool has_reduce_scatter() const;
  /// Every process's shape of `tensor`; with debug on, each collective
  /// calls it and throws when they differ.
  std::vector<std::vector<int64_t>> all_shapes(const torch::Tensor& tensor);

  /// A group of some of this group's processes (`ranks`: increasing, in
  /// this group's numbering, this process among them), as
  /// torch.distributed.new_group: only its members call it, at the same
  /// point, with the same `name` (which keeps subgroups' rendezvous apart).
  /// Its collectives number the members 0, 1, ...; its errors name the
  /// whole run's ranks. An InvalidArgument for ranks out of order or out of
  /// range, a UsageError when this process is not among them.
  std::shared_ptr<ProcessGroup> subgroup(
      const std::string& name, const std::vector<int64_t>& ranks);

  /// Tells the other processes that this one failed with `message`, so
  /// that their waits end with an error naming this rank.
  void report_failure(const std::string& message) noexcept;
  /// Rethrows the exception being handled; a c10d/Gloo failure becomes a
  /// DistributedError naming `operation` and the rank that failed, if one
  /// reported it. Call from inside a catch block.
  [[noreturn]] void rethrow_explained(const std::string& operation);

  struct Impl;
  Impl& impl() {
    return *impl_;
  }

 private:
  ProcessGroup();  // subgroup's
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampkit::dist
