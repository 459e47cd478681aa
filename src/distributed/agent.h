// The launchers of a run over several machines keep each other informed,
// as torchrun's elastic agents do, on a c10d TCPStore that machine 0's
// launcher hosts at MASTER_ADDR:MASTER_PORT (the workers use the same
// store as clients): every launcher joins before its workers start, beats
// a heartbeat, and publishes a failure. So a machine that never comes, one
// that fails, and one that goes silent stop every other machine within
// bounds, with a message naming it, instead of a 30-minute collective
// timeout.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ampkit::dist::detail {

struct AgentOptions {
  std::string master_addr;
  int port = 0;
  int64_t machine_rank = 0;
  int64_t num_machines = 1;
  /// How long a launcher waits for every machine to join.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(15)};
  /// Heartbeats every this long...
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(2)};
  /// ...and a machine whose heartbeat has not moved this long is lost.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(60)};
};

class Agent {
 public:
  /// Machine 0 opens the store; the others connect to it (waiting up to
  /// join_timeout for machine 0 to start). Throws ampkit::DistributedError
  /// with what to do when the port is taken or the store cannot be
  /// reached.
  explicit Agent(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Announces this machine for round `round` and waits for all the
  /// others; the error names the machines that did not come. It looks at
  /// `stop` every half second and returns false as soon as it says so (a
  /// signal to the launcher), true once every machine joined.
  bool join(int64_t round, const std::function<bool()>& stop);
  /// Beats this machine's heartbeat (at most every heartbeat_interval) and
  /// looks at the others: returns why the run must stop (a machine's
  /// published failure, a lost heartbeat, the store gone), or nothing.
  std::optional<std::string> check();
  /// Publishes this machine's failure for the others (best effort).
  void report_failure(const std::string& message);
  /// This machine stops (no restarts left, or interrupted): the others
  /// stop this round's workers and stop waiting for the next round.
  void leave(const std::string& why);
  /// This machine's workers finished this round. Machine 0 (which hosts
  /// the store) then waits, beating, until every machine finished (true),
  /// or one failed or went silent, or `stop` says so (false).
  bool finish(const std::function<bool()>& stop);
  /// A heartbeat while nothing else calls check() (waiting for workers to
  /// save after a signal); best effort.
  void beat();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ampkit::dist::detail
