// ProcessGroup's private state, shared with the gradient synchronizer
// (which drives the c10d group directly).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "ampkit/distributed/process_group.h"

namespace ampkit::dist {

struct ProcessGroup::Impl {
  DistEnv env;
  GroupOptions options;
  std::string backend;
  /// The device the group was made for (its GPU under NCCL).
  c10::Device device{c10::DeviceType::CPU};
  std::string rendezvous;
  std::string network;  // where the group's traffic goes, and why
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::string bind_host;  // what Gloo binds ("": GLOO_SOCKET_IFNAME's)
  // A subgroup's: the whole run's store (failures are reported there, under
  // the run's ranks) and its members' ranks in the run; unset otherwise.
  c10::intrusive_ptr<c10d::Store> root_store;
  std::vector<int64_t> members;
  int64_t global_rank(int64_t r) const {
    return members.empty() ? r : members[static_cast<size_t>(r)];
  }
  std::string rdzv_dir;
  std::string marker;
  std::atomic<bool> failure_reported{false};
  // After a peer's failure this rank's own error is a consequence, not a
  // cause to report.
  std::atomic<bool> peer_failed{false};
};

}  // namespace ampkit::dist
