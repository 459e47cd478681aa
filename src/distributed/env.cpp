#include "ampkit/distributed/env.h"

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "ampkit/error.h"

#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::dist {
namespace {

constexpr const char* kHowToLaunch =
    " Start the processes with `ampkit launch --num_processes N ./train` or "
    "`torchrun --nproc_per_node N ./train`, which set RANK, WORLD_SIZE, "
    "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; by hand, "
    "set all of them for every process.";

std::optional<int64_t> read_int(
    const EnvLookup& env,
    const std::string& name,
    bool required,
    const std::string& why) {
  auto value = env(name);
  if (!value) {
    if (required) {
      throw InvalidArgument(
          component::kDistributed,
          name + " is not set, but " + why + "." + kHowToLaunch);
    }
    return std::nullopt;
  }
  const auto parsed = ampkit::detail::parse_int(*value);
  if (!parsed) {
    throw InvalidArgument(
        component::kDistributed,
        name + " must be an integer, got '" + *value + "'." + kHowToLaunch);
  }
  return *parsed;
}

void check_range(
    const std::string& name,
    int64_t value,
    const std::string& size_name,
    int64_t size) {
  if (value < 0 || value >= size) {
    throw InvalidArgument(
        component::kDistributed,
        name + " must be in [0, " + size_name + "=" + std::to_string(size) +
            "), got " + std::to_string(value) + "." + kHowToLaunch);
  }
}

void read_master(const EnvLookup& env, DistEnv& out, const std::string& who) {
  const std::string why = who + " says this is one of " +
                          std::to_string(out.world_size) +
                          " processes, which meet at MASTER_ADDR:MASTER_PORT";
  auto addr = env("MASTER_ADDR");
  if (!addr || addr->empty()) {
    throw InvalidArgument(
        component::kDistributed,
        "MASTER_ADDR is not set, but " + why +
            ". Set MASTER_ADDR to the address of the machine of rank 0 "
            "(127.0.0.1 on one machine)." +
            kHowToLaunch);
  }
  out.master_addr = *addr;
  const int64_t port = *read_int(env, "MASTER_PORT", true, why);
  if (port < 1 || port > 65535) {
    throw InvalidArgument(
        component::kDistributed,
        "MASTER_PORT must be in [1, 65535], got " + std::to_string(port) + "." +
            kHowToLaunch);
  }
  out.master_port = static_cast<int>(port);
}

std::string first_set(
    const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto v = env(name); v && !v->empty()) {
      return *v;
    }
  }
  return "";
}

}  // namespace

const char* to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::none:
      return "none";
    case Launcher::torchrun:
      return "torchrun";
    case Launcher::slurm:
      return "slurm";
    case Launcher::openmpi:
      return "openmpi";
  }
  return "unknown";
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

bool DistEnv::single_node() const {
  return (local_world_size > 0 && local_world_size == world_size) ||
         is_loopback(master_addr);
}

DistEnv detect_env(const EnvLookup& env) {
  DistEnv out;
  if (env("WORLD_SIZE") || env("RANK")) {
    out.launcher = Launcher::torchrun;
    out.world_size = *read_int(
        env, "WORLD_SIZE", true, "RANK is set, so this is a distributed run");
    if (out.world_size < 1) {
      throw InvalidArgument(
          component::kDistributed,
          "WORLD_SIZE must be at least 1, got " +
              std::to_string(out.world_size) + "." + kHowToLaunch);
    }
    out.rank = *read_int(
        env, "RANK", true, "WORLD_SIZE is set, so each process needs its rank");
    check_range("RANK", out.rank, "WORLD_SIZE", out.world_size);
    out.local_world_size =
        read_int(env, "LOCAL_WORLD_SIZE", false, "").value_or(-1);
    if (out.local_world_size == 0 || out.local_world_size > out.world_size) {
      throw InvalidArgument(
          component::kDistributed,
          "LOCAL_WORLD_SIZE must be in [1, WORLD_SIZE=" +
              std::to_string(out.world_size) + "], got " +
              std::to_string(out.local_world_size) + "." + kHowToLaunch);
    }
    // Without LOCAL_RANK, a single-node run's local rank is its rank.
    out.local_rank = read_int(env, "LOCAL_RANK", false, "").value_or(-1);
    if (out.world_size > 1) {
      read_master(env, out, "WORLD_SIZE");
    }
    if (out.local_rank < 0) {
      if (!out.single_node() && out.world_size > 1) {
        throw InvalidArgument(
            component::kDistributed,
            "LOCAL_RANK is not set in a run over several machines "
            "(MASTER_ADDR " +
                out.master_addr +
                "). Set LOCAL_RANK to the process's index on its machine." +
                kHowToLaunch);
      }
      out.local_rank = out.rank;
    }
    check_range(
        "LOCAL_RANK",
        out.local_rank,
        out.local_world_size > 0 ? "LOCAL_WORLD_SIZE" : "WORLD_SIZE",
        out.local_world_size > 0 ? out.local_world_size : out.world_size);
    out.run_id = first_set(env, {"AMPKIT_RUN_ID", "TORCHELASTIC_RUN_ID"});
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    out.launcher = Launcher::slurm;
    out.world_size = *read_int(env, "SLURM_NTASKS", true, "");
    if (out.world_size < 1) {
      throw InvalidArgument(
          component::kDistributed,
          "SLURM_NTASKS must be at least 1, got " +
              std::to_string(out.world_size) + ".");
    }
    out.rank = *read_int(env, "SLURM_PROCID", true, "");
    check_range("SLURM_PROCID", out.rank, "SLURM_NTASKS", out.world_size);
    out.local_rank = *read_int(
        env,
        "SLURM_LOCALID",
        true,
        "SLURM_PROCID is set, so each task needs its index on its node");
    if (auto nodes = read_int(env, "SLURM_NNODES", false, "")) {
      if (*nodes == 1) {
        out.local_world_size = out.world_size;
      }
    }
    check_range(
        "SLURM_LOCALID", out.local_rank, "SLURM_NTASKS", out.world_size);
    if (out.world_size > 1) {
      read_master(env, out, "SLURM_NTASKS");
    }
    const std::string job = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
    const std::string step = first_set(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
    out.run_id = job.empty() ? "" : job + "." + step;
  } else if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE")) {
    out.launcher = Launcher::openmpi;
    out.world_size = *read_int(
        env, "OMPI_COMM_WORLD_SIZE", true, "OMPI_COMM_WORLD_RANK is set");
    if (out.world_size < 1) {
      throw InvalidArgument(
          component::kDistributed,
          "OMPI_COMM_WORLD_SIZE must be at least 1, got " +
              std::to_string(out.world_size) + ".");
    }
    out.rank = *read_int(
        env, "OMPI_COMM_WORLD_RANK", true, "OMPI_COMM_WORLD_SIZE is set");
    check_range(
        "OMPI_COMM_WORLD_RANK",
        out.rank,
        "OMPI_COMM_WORLD_SIZE",
        out.world_size);
    out.local_rank = *read_int(
        env,
        "OMPI_COMM_WORLD_LOCAL_RANK",
        true,
        "OMPI_COMM_WORLD_RANK is set, so each process needs its local rank");
    out.local_world_size =
        read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", false, "").value_or(-1);
    check_range(
        "OMPI_COMM_WORLD_LOCAL_RANK",
        out.local_rank,
        out.local_world_size > 0 ? "OMPI_COMM_WORLD_LOCAL_SIZE"
                                 : "OMPI_COMM_WORLD_SIZE",
        out.local_world_size > 0 ? out.local_world_size : out.world_size);
    if (out.world_size > 1) {
      read_master(env, out, "OMPI_COMM_WORLD_SIZE");
    }
    out.run_id = first_set(env, {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"});
  }
  if (out.run_id.empty()) {
    out.run_id = first_set(env, {"AMPKIT_RUN_ID"});
  }
  return out;
}

}  // namespace ampkit::dist
