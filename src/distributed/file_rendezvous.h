// The single-node rendezvous: a c10d FileStore in a private directory,
// found through a marker only a live rank 0 of this run can have written.
#pragma once

#include <chrono>
#include <string>

#include "ampkit/distributed/env.h"

namespace ampkit::dist::detail {

struct FileRendezvous {
  std::string dir;
  std::string marker;
  std::string store_path;
};

/// Rank 0 publishes, in <dir>/owner, its PID, start time and a fresh nonce;
/// the others accept only a marker whose process is alive with that start
/// time, so a marker left by a crashed run is never joined.
FileRendezvous file_rendezvous(
    const DistEnv& env, std::chrono::milliseconds timeout);

/// "1.5 s".
std::string seconds(std::chrono::milliseconds ms);

}  // namespace ampkit::dist::detail
