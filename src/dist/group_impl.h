// ProcessGroup's private state, shared with the gradient synchronizer
// (which drives the c10d group directly).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <optional>
#include <string>

#include "ampkit/dist/process_group.h"

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
  std::string rdzv_dir;
  std::string marker;
  std::atomic<bool> failure_reported{false};
  // After a peer's failure this rank's own error is a consequence, not a
  // cause to report.
  std::atomic<bool> peer_failed{false};
  // Whether the backend has its own reduce_scatter; asked on first use.
  std::optional<bool> native_reduce_scatter;
};

}  // namespace ampkit::dist
