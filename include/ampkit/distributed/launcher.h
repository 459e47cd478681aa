// `ampkit launch`: starts a program as the local processes of a distributed
// run, with the environment dist::detect_env reads, prefixes their output
// with the rank, forwards SIGINT/SIGTERM, and stops the whole group when one
// process fails. No worker outlives the launcher.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace ampkit::dist {

struct LaunchOptions {
  /// Processes over all machines (accelerate's --num_processes).
  int64_t num_processes = 1;
  int64_t num_machines = 1;
  int64_t machine_rank = 0;
  std::string main_process_ip = "127.0.0.1";
  /// 0 picks a free port (single machine only).
  int main_process_port = 0;
  /// Passed on as AMPKIT_MIXED_PRECISION etc. when set.
  std::string mixed_precision;
  bool cpu = false;
  int64_t gradient_accumulation_steps = 0;
  bool debug = false;
  /// ZeRO stage for the workers (AMPKIT_ZERO_STAGE); -1: not set.
  int64_t zero_stage = -1;
  /// accelerate launch's FSDP variables (ACCELERATE_USE_FSDP, FSDP_*), set
  /// in every worker's environment.
  std::vector<std::pair<std::string, std::string>> fsdp_env;
  /// Global gradient norm clip (AMPKIT_GRADIENT_CLIPPING); <= 0: not set.
  double gradient_clipping = 0;
  /// OMP_NUM_THREADS for each worker (accelerate's
  /// --num_cpu_threads_per_process). 0: an OMP_NUM_THREADS already set is
  /// passed on, else the machine's cores are shared among its processes
  /// (at least 1 each), so N CPU workers do not oversubscribe the cores.
  int64_t num_cpu_threads_per_process = 0;
  /// One log per rank (rank_<r>.log); the console gets the lines too with tee.
  std::string log_dir;
  bool tee = false;
  /// Restarts of the whole group after a failure.
  int64_t max_restarts = 0;
  std::chrono::milliseconds monitor_interval{100};
  /// After a worker failed: the others get SIGTERM, then SIGKILL after
  /// this long.
  std::chrono::milliseconds grace{5000};
  /// SIGTERM, SIGINT or SIGUSR1 to the launcher is forwarded to every
  /// worker, which finishes its step and saves (preemption); what is still
  /// running this long after is killed, and named.
  std::chrono::milliseconds preemption_grace{60000};
  /// Several machines: how long each launcher waits for all machines to
  /// join (a machine that never comes is named after this), and how long
  /// a joined machine may go without a heartbeat before the others stop.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(15)};
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(60)};
  /// accelerate's enable_cpu_affinity: each worker is pinned to its own
  /// share of this machine's usable cores (with GPUs, from the cores near
  /// its GPU: gpu_pci_bus_ids[local rank], CUDA's PCI bus ids), and its
  /// OMP_NUM_THREADS is that share unless num_cpu_threads_per_process says.
  bool enable_cpu_affinity = false;
  std::vector<std::string> gpu_pci_bus_ids;
  bool quiet = false;
  /// Start more processes on a machine than it has usable cores (refused
  /// otherwise: they would share cores). The user's process limit (ulimit
  /// -u) is never passed.
  bool oversubscribe = false;
  std::vector<std::string> command;
};

/// Runs the group; returns the launcher's exit code: 0, the failed
/// worker's exit code, or 128 + signal. Messages go to `err`, worker lines
/// (prefixed "[rank r] ") to `out`. Bad options are ampkit::InvalidArgument.
int launch(const LaunchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ampkit::dist
