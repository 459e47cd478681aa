// Where this process sits in a distributed run, read from the variables
// that torchrun (and ampkit launch), Slurm or OpenMPI set.
#pragma once

#include <cstdint>
#include <string>

#include "ampkit/utils/env.h"

namespace ampkit::dist {

/// The launcher conventions ampkit reads, in the order it looks for them.
enum class Launcher { none, torchrun, slurm, openmpi };
const char* to_string(Launcher launcher);

struct DistEnv {
  Launcher launcher = Launcher::none;
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  /// Processes on this machine; -1 when the launcher does not say.
  int64_t local_world_size = -1;
  std::string master_addr;  ///< "" for one process
  int master_port = 0;      ///< 0 for one process
  /// Identifies this run among others on the machine (TORCHELASTIC_RUN_ID,
  /// AMPKIT_RUN_ID, SLURM_JOB_ID.SLURM_STEP_ID, ...); "" when none is set.
  std::string run_id;

  bool distributed() const {
    return world_size > 1;
  }
  /// Every process runs on this machine: the launcher says so
  /// (local_world_size == world_size) or MASTER_ADDR is a loopback address.
  bool single_node() const;
};

/// Whether `host` is a loopback name or address (localhost, 127.x.y.z, ::1).
bool is_loopback(const std::string& host);

/// Reads the environment. torchrun's RANK/WORLD_SIZE come first, then
/// Slurm's SLURM_PROCID/SLURM_NTASKS, then OpenMPI's OMPI_COMM_WORLD_*;
/// none of them is one process. A missing, malformed or inconsistent
/// variable is an ampkit::InvalidArgument naming it, its value and how to
/// launch (ampkit launch, torchrun).
DistEnv detect_env(const EnvLookup& env = process_environment());

}  // namespace ampkit::dist
