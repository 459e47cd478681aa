// Agent: join, heartbeat and failure keys on the launchers' TCPStore.
#include "distributed/agent.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ampkit/error.h"
#include "distributed/compat.h"
#include "distributed/file_rendezvous.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::dist::detail {

namespace {

std::string text_of(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::vector<uint8_t> bytes_of(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

const char* kPrefix = "ampkit_agent/";

}  // namespace

struct Agent::Impl {
  AgentOptions o;
  c10::intrusive_ptr<c10d::TCPStore> store;
  int64_t round = 0;
  int64_t beats = 0;
  std::chrono::steady_clock::time_point last_beat, last_check;
  // Per other machine: the heartbeat value seen last, and since when.
  std::map<
      int64_t,
      std::pair<std::string, std::chrono::steady_clock::time_point>>
      seen;

  std::string key(const std::string& what, int64_t machine) const {
    return std::string(kPrefix) + what + "/" + std::to_string(machine);
  }
  // One failure key per round: a restart starts clean.
  std::string failed_key(int64_t r) const {
    return std::string(kPrefix) + "r" + std::to_string(r) + "/failed";
  }
  std::string failed_key() const {
    return failed_key(round);
  }
  // Beats this machine's heartbeat, at most every heartbeat_interval.
  void beat(std::chrono::steady_clock::time_point now) {
    if (now - last_beat >= o.heartbeat_interval) {
      store->set(
          key("heartbeat", o.machine_rank), bytes_of(std::to_string(++beats)));
      last_beat = now;
    }
  }
  // The first watched machine whose heartbeat has not moved for
  // heartbeat_timeout, said as the reason to stop.
  std::optional<std::string> silent_machine(
      std::chrono::steady_clock::time_point now) {
    for (auto& [m, last] : seen) {
      if (store->check({done_key(m)})) {
        continue;  // finished this round: its launcher may be gone
      }
      const std::string k = key("heartbeat", m);
      const std::string value = store->check({k}) ? text_of(store->get(k)) : "";
      if (value != last.first) {
        last = {value, now};
      } else if (now - last.second > o.heartbeat_timeout) {
        return "machine " + std::to_string(m) + " sent no heartbeat for " +
               seconds(std::chrono::duration_cast<std::chrono::milliseconds>(
                   now - last.second)) +
               " (--heartbeat_timeout): it was killed, hangs, or the "
               "network between the machines is cut";
      }
    }
    return std::nullopt;
  }
  std::string done_key(int64_t machine) const {
    return key("r" + std::to_string(round) + "/done", machine);
  }
  std::string where() const {
    return o.master_addr + ":" + std::to_string(o.port);
  }
};

Agent::Agent(AgentOptions options) : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.o = std::move(options);
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(im.o.port);
  so.isServer = im.o.machine_rank == 0;
  so.waitWorkers = false;
  so.timeout = im.o.join_timeout;
  const auto dialled = std::chrono::steady_clock::now();
  try {
    im.store = c10::make_intrusive<c10d::TCPStore>(im.o.master_addr, so);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (so.isServer && detail::port_in_use(e)) {
      throw DistributedError(
          component::kLaunch,
          "machine 0 could not open the rendezvous port " +
              std::to_string(im.o.port) + ": another program holds it (" +
              what +
              "). Pass another --main_process_port, the same on every "
              "machine, or stop what holds this one (ss -ltnp 'sport = :" +
              std::to_string(im.o.port) + "').");
    }
    if (so.isServer) {
      throw DistributedError(
          component::kLaunch,
          "machine 0 could not open the rendezvous at " + im.where() + ": " +
              what +
              ". --main_process_ip must be an address of this machine (the "
              "others connect to it), and --main_process_port a port it may "
              "listen on.");
    }
    throw DistributedError(
        component::kLaunch,
        "machine " + std::to_string(im.o.machine_rank) +
            " could not reach machine 0's launcher at " + im.where() +
            " after " +
            seconds(std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - dialled)) +
            " (--join_timeout " + seconds(im.o.join_timeout) + "): " + what +
            ". Start `ampkit launch --machine_rank 0` there, and check "
            "--main_process_ip/--main_process_port and that the port is "
            "open between the machines.");
  }
  // Each store operation is bounded by the heartbeat timeout: a machine 0
  // that vanished without closing the connection is noticed as a silence.
  im.store->setTimeout(std::min(im.o.join_timeout, im.o.heartbeat_timeout));
}

Agent::~Agent() = default;

bool Agent::join(int64_t round, const std::function<bool()>& stop) {
  auto& im = *impl_;
  im.round = round;
  const std::string r = "r" + std::to_string(round) + "/";
  im.store->set(im.key(r + "join", im.o.machine_rank), bytes_of("1"));
  std::vector<std::string> keys;
  for (int64_t m = 0; m < im.o.num_machines; ++m) {
    keys.push_back(im.key(r + "join", m));
  }
  const auto deadline = std::chrono::steady_clock::now() + im.o.join_timeout;
  std::string store_error;
  while (true) {
    if (stop && stop()) {
      return false;
    }
    try {
      if (im.store->check({im.failed_key()})) {
        throw DistributedError(
            component::kLaunch,
            "round " + std::to_string(round) +
                " cannot start: " + text_of(im.store->get(im.failed_key())));
      }
      if (im.store->check(keys)) {
        break;
      }
      // From round 1 on, the machines of the round before are watched
      // while they are awaited: one that died is named at once.
      const auto now = std::chrono::steady_clock::now();
      im.beat(now);
      if (const auto lost = im.silent_machine(now)) {
        const std::string why =
            "round " + std::to_string(round) + " cannot start: " + *lost + ".";
        report_failure(why);  // the others stop waiting too
        throw DistributedError(component::kLaunch, why);
      }
    } catch (const DistributedError&) {
      throw;
    } catch (const std::exception& e) {
      store_error = e.what();  // machine 0 is gone: say so below
    }
    if (!store_error.empty() || std::chrono::steady_clock::now() >= deadline) {
      std::vector<std::string> missing;
      for (int64_t m = 0; m < im.o.num_machines && store_error.empty(); ++m) {
        try {
          if (!im.store->check({im.key(r + "join", m)})) {
            missing.push_back(std::to_string(m));
          }
        } catch (const std::exception&) {
          missing.push_back(std::to_string(m));
        }
      }
      if (!store_error.empty()) {
        throw DistributedError(
            component::kLaunch,
            "machine " + std::to_string(im.o.machine_rank) +
                " lost machine 0's launcher at " + im.where() +
                " while waiting for round " + std::to_string(round) + ": " +
                store_error + ". Look at machine 0's output.");
      }
      const std::string why =
          "machine" + std::string(missing.size() > 1 ? "s " : " ") +
          ampkit::detail::join(missing, ", ") + " of " +
          std::to_string(im.o.num_machines) + " did not join at " + im.where() +
          " within " + seconds(im.o.join_timeout) +
          " (--join_timeout). Start `ampkit launch --machine_rank N` on "
          "each machine with the same --num_machines, --main_process_ip "
          "and --main_process_port.";
      report_failure(why);  // the machines that came stop waiting too
      throw DistributedError(component::kLaunch, why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Heartbeats count from now: a machine that joined is watched.
  const auto now = std::chrono::steady_clock::now();
  im.seen.clear();
  for (int64_t m = 0; m < im.o.num_machines; ++m) {
    if (m != im.o.machine_rank) {
      im.seen[m] = {"", now};
    }
  }
  im.last_beat = {};
  im.last_check = {};
  return true;
}

std::optional<std::string> Agent::check() {
  auto& im = *impl_;
  const auto now = std::chrono::steady_clock::now();
  if (now - im.last_check < std::chrono::milliseconds(500)) {
    return std::nullopt;  // a reported failure is still seen within 0.5 s
  }
  im.last_check = now;
  try {
    im.beat(now);
    const std::string failed = im.failed_key();
    if (im.store->check({failed})) {
      return text_of(im.store->get(failed));
    }
    if (auto lost = im.silent_machine(now)) {
      return lost;
    }
  } catch (const std::exception& e) {
    return "the launchers' store at " + im.where() +
           (im.o.machine_rank == 0 ? std::string()
                                   : std::string(" (machine 0)")) +
           " stopped answering: " + e.what();
  }
  return std::nullopt;
}

void Agent::report_failure(const std::string& message) {
  auto& im = *impl_;
  try {
    if (im.store->check({im.failed_key()})) {
      return;  // the first failure of a round is the one to tell
    }
    im.store->set(
        im.failed_key(),
        bytes_of(
            "machine " + std::to_string(im.o.machine_rank) + ": " + message));
  } catch (const std::exception&) {
    // The store is gone: the others see that by themselves.
  }
}

void Agent::leave(const std::string& why) {
  auto& im = *impl_;
  const std::string message =
      "machine " + std::to_string(im.o.machine_rank) + " " + why;
  for (const int64_t r : {im.round, im.round + 1}) {
    try {
      if (!im.store->check({im.failed_key(r)})) {
        im.store->set(im.failed_key(r), bytes_of(message));
      }
    } catch (const std::exception&) {
      // The store is gone: the others see that by themselves.
    }
  }
}

bool Agent::finish(const std::function<bool()>& stop) {
  auto& im = *impl_;
  try {
    im.store->set(im.done_key(im.o.machine_rank), bytes_of("1"));
  } catch (const std::exception&) {
    // Machine 0 is gone; it saw this machine's workers finish or not.
    return im.o.machine_rank != 0;
  }
  if (im.o.machine_rank != 0) {
    return true;
  }
  // Machine 0 hosts the store: it stays until every machine finished (they
  // may still be saving), a machine failed, or one went silent.
  while (!(stop && stop())) {
    const auto now = std::chrono::steady_clock::now();
    try {
      im.beat(now);
      if (im.store->check({im.failed_key()})) {
        return false;
      }
      bool all = true;
      for (int64_t m = 0; m < im.o.num_machines && all; ++m) {
        all = im.store->check({im.done_key(m)});
      }
      if (all) {
        return true;
      }
      if (im.silent_machine(now)) {
        return false;
      }
    } catch (const std::exception&) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

void Agent::beat() {
  auto& im = *impl_;
  try {
    im.beat(std::chrono::steady_clock::now());
  } catch (const std::exception&) {
    // check() reports a store that stopped answering.
  }
}

}  // namespace ampkit::dist::detail
