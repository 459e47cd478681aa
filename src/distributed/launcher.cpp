#include "ampkit/distributed/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "ampkit/error.h"
#include "distributed/affinity.h"
#include "distributed/agent.h"
#include "distributed/file_rendezvous.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::dist {
namespace {

// accelerate launch's default: the machine's cores shared among its
// processes, at least one each.
// The cores this process may run on (a container's or taskset's limit),
// as nproc counts them.
int64_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof set, &set) == 0
             ? std::max(1, CPU_COUNT(&set))
             : std::max(1u, std::thread::hardware_concurrency());
}

int64_t threads_per_process(int64_t local_processes) {
  return std::max<int64_t>(
      1, usable_cores() / std::max<int64_t>(1, local_processes));
}

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = ::write(g_signal_pipe[1], &byte, 1);
}

int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// PR_SET_PDEATHSIG kills a worker when the launcher dies, but not what the
// worker started (a shell script's children, a Python worker's data-loader
// processes). The reaper is a small process forked before any worker: the
// launcher tells it each worker's process group through a pipe, and when
// that pipe reaches end-of-file with groups still listed (the launcher is
// gone, even by SIGKILL) it SIGKILLs them. It only reads, kills and exits,
// which is safe after fork() in a process with threads.
class Reaper {
 public:
  Reaper() {
    int fds[2];
    if (::pipe(fds) != 0) {
      throw IoError(
          component::kLaunch,
          std::string("pipe failed: ") + std::strerror(errno));
    }
    pid_ = ::fork();
    if (pid_ < 0) {
      throw IoError(
          component::kLaunch,
          std::string("fork failed: ") + std::strerror(errno));
    }
    if (pid_ == 0) {
      ::close(fds[1]);
      run(fds[0]);
    }
    ::close(fds[0]);
    fd_ = fds[1];
    ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
  }
  ~Reaper() {
    ::close(fd_);
    ::waitpid(pid_, nullptr, 0);
  }
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  /// A worker's process group to kill should the launcher die.
  void watch(pid_t group) {
    send(group);
  }
  /// The group is over; the reaper forgets it.
  void forget(pid_t group) {
    send(-group);
  }

 private:
  void send(int32_t value) {
    [[maybe_unused]] auto n = ::write(fd_, &value, sizeof(value));
  }

  [[noreturn]] static void run(int fd) {
    ::signal(
        SIGINT, SIG_IGN);  // a terminal's Ctrl-C is the launcher's to handle
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGUSR1, SIG_IGN);
    const int null = ::open("/dev/null", O_RDWR);
    for (int i = 0; i < 3; ++i) {
      ::dup2(null, i);  // do not hold the launcher's output open
    }
    // Every inherited descriptor but the pipe is closed.
    for (int i = 3; i < 1024; ++i) {
      if (i != fd) {
        ::close(i);
      }
    }
    static int32_t groups[4096];
    size_t count = 0;
    int32_t value = 0;
    while (::read(fd, &value, sizeof(value)) ==
           static_cast<ssize_t>(sizeof(value))) {
      if (value > 0 && count < sizeof(groups) / sizeof(groups[0])) {
        groups[count++] = value;
      } else if (value < 0) {
        for (size_t i = 0; i < count; ++i) {
          if (groups[i] == -value) {
            groups[i] = groups[--count];
            break;
          }
        }
      }
    }
    for (size_t i = 0; i < count; ++i) {
      ::kill(-groups[i], SIGKILL);
    }
    ::_exit(0);
  }

  pid_t pid_ = -1;
  int fd_ = -1;
};

struct Worker {
  int64_t rank = 0;
  pid_t pid = -1;
  int fd = -1;  // its stdout+stderr
  std::string partial;
  std::deque<std::string> last_lines;
  std::unique_ptr<std::ofstream> log;
  bool running = false;
  int status = 0;
};

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) +
           " (" + ::strsignal(WTERMSIG(status)) + ")";
  }
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// Sets a worker's environment variable, over any inherited value.
void launcher_setenv(const std::string& k, const std::string& v) {
  ::setenv(k.c_str(), v.c_str(), 1);
}

// In a worker: runs it on `cpus` only, or exits with 126.
void launcher_pin_worker(int64_t rank, const std::vector<int>& cpus) {
  cpu_set_t cores;
  CPU_ZERO(&cores);
  for (const int c : cpus) {
    CPU_SET(c, &cores);
  }
  if (::sched_setaffinity(0, sizeof cores, &cores) != 0) {
    std::fprintf(
        stderr,
        "ampkit launch: cannot pin rank %lld to its cores: %s\n",
        static_cast<long long>(rank),
        std::strerror(errno));
    std::_Exit(126);
  }
}

class Group {
 public:
  Group(
      const LaunchOptions& o,
      std::ostream& out,
      std::ostream& err,
      int port,
      Reaper& reaper,
      detail::Agent* agent,
      int64_t round)
      : o_(o),
        out_(out),
        err_(err),
        port_(port),
        reaper_(reaper),
        agent_(agent),
        round_(round) {}

  void start() {
    const int64_t local = o_.num_processes / o_.num_machines;
    const std::vector<std::vector<int>> pinned = plan_pinning(local);
    std::random_device device;
    run_id_ =
        "launch-" + std::to_string(::getpid()) + "-" + std::to_string(device());
    for (int64_t l = 0; l < local; ++l) {
      Worker w;
      w.rank = o_.machine_rank * local + l;
      int fds[2];
      if (::pipe(fds) != 0) {
        throw IoError(
            component::kLaunch,
            std::string("pipe failed: ") + std::strerror(errno));
      }
      const pid_t parent = ::getpid();
      const pid_t pid = ::fork();
      if (pid > 0) {
        ::setpgid(pid, pid);  // also here: no race with the first kill
        reaper_.watch(pid);
      }
      if (pid == 0) {
        exec_worker(w.rank, l, local, pinned, parent, fds);
      }
      ::close(fds[1]);
      ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
      w.pid = pid;
      w.fd = fds[0];
      w.running = true;
      if (!o_.log_dir.empty()) {
        w.log = std::make_unique<std::ofstream>(
            o_.log_dir + "/rank_" + std::to_string(w.rank) + ".log",
            std::ios::app);
      }
      workers_.push_back(std::move(w));
    }
  }

  // Returns the exit code once the group is over.
  int monitor() {
    while (true) {
      std::vector<pollfd> fds;
      fds.push_back({g_signal_pipe[0], POLLIN, 0});
      for (auto& w : workers_) {
        if (w.fd >= 0) {
          fds.push_back({w.fd, POLLIN, 0});
        }
      }
      ::poll(
          fds.data(),
          fds.size(),
          static_cast<int>(o_.monitor_interval.count()));
      if (fds[0].revents & POLLIN) {
        unsigned char sig = 0;
        if (::read(g_signal_pipe[0], &sig, 1) == 1) {
          // Preemption: the workers finish their step and save (an
          // Accelerator with handle_signals), within the grace period.
          err_ << "ampkit launch: got signal " << int(sig) << " ("
               << ::strsignal(sig)
               << "), forwarding it to the workers and waiting up to "
               << detail::seconds(o_.preemption_grace)
               << " (--preemption_grace) for them to stop; send it again "
                  "to stop them at once"
               << std::endl;
          signal_running(sig);
          const auto killed = wait_for_workers(o_.preemption_grace, true);
          if (!killed.empty()) {
            err_ << "ampkit launch: rank" << (killed.size() > 1 ? "s " : " ")
                 << ampkit::detail::join(killed, ", ")
                 << " did not stop within "
                 << detail::seconds(o_.preemption_grace) << " of "
                 << ::strsignal(sig) << "; killed (SIGKILL)" << std::endl;
          }
          interrupted = true;
          return 128 + sig;
        }
      }
      drain();
      if (agent_ != nullptr) {
        if (const auto why = agent_->check()) {
          err_ << "ampkit launch: stopping this machine's workers: " << *why
               << std::endl;
          stop_all();
          return 1;
        }
      }
      bool any_running = false;
      for (auto& w : workers_) {
        if (!w.running) {
          continue;
        }
        int status = 0;
        if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
          w.running = false;
          w.status = status;
          if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            drain();
            err_ << "ampkit launch: rank " << w.rank << " failed ("
                 << describe(status)
                 << "); stopping the other workers. Its last lines:\n";
            for (const auto& line : w.last_lines) {
              err_ << "  [rank " << w.rank << "] " << line << '\n';
            }
            err_ << std::flush;
            if (agent_ != nullptr) {
              agent_->report_failure(
                  "rank " + std::to_string(w.rank) + " failed (" +
                  describe(status) + ")" +
                  (w.last_lines.empty() ? std::string()
                                        : ": " + w.last_lines.back()));
            }
            stop_all();
            return exit_code(status);
          }
        } else {
          any_running = true;
        }
      }
      if (!any_running) {
        drain();
        return 0;
      }
    }
  }

  // A worker failed: the others cannot finish a step without it, so they
  // stop now. SIGTERM twice (an Accelerator defers the first to its next
  // step boundary, the second ends it), SIGKILL after the grace period.
  void stop_all() {
    signal_running(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    signal_running(SIGTERM);
    wait_for_workers(o_.grace, false);
  }

  void signal_running(int sig) {
    for (auto& w : workers_) {
      if (w.running) {
        ::kill(-w.pid, sig);
      }
    }
  }

  // Waits up to `grace` for the workers to exit (forwarding a further
  // signal the launcher gets, when `forward`), then SIGKILLs the rest;
  // returns their ranks.
  std::vector<std::string> wait_for_workers(
      std::chrono::milliseconds grace, bool forward) {
    std::vector<std::string> killed;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (true) {
      bool running = false;
      for (auto& w : workers_) {
        int status = 0;
        if (w.running && ::waitpid(w.pid, &status, WNOHANG) == w.pid) {
          w.running = false;
        }
        running = running || w.running;
      }
      drain();
      if (!running) {
        break;
      }
      if (agent_ != nullptr) {
        agent_->beat();  // saving after a signal is not a silence
      }
      unsigned char sig = 0;
      pollfd signal_fd{g_signal_pipe[0], POLLIN, 0};
      if (forward && ::poll(&signal_fd, 1, 0) > 0 &&
          ::read(g_signal_pipe[0], &sig, 1) == 1) {
        err_ << "ampkit launch: got " << ::strsignal(sig)
             << " again, stopping the workers at once" << std::endl;
        signal_running(sig);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        for (auto& w : workers_) {
          if (w.running) {
            ::kill(-w.pid, SIGKILL);
            ::waitpid(w.pid, nullptr, 0);
            w.running = false;
            killed.push_back(std::to_string(w.rank));
          }
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    drain();
    return killed;
  }

  ~Group() {
    for (auto& w : workers_) {
      if (w.running) {
        ::kill(-w.pid, SIGKILL);
        ::waitpid(w.pid, nullptr, 0);
      } else {
        ::kill(-w.pid, SIGKILL);  // what its exit left behind
      }
      reaper_.forget(w.pid);
      if (w.fd >= 0) {
        ::close(w.fd);
      }
    }
  }

 private:
  // With enable_cpu_affinity, the cores of each local rank (near its GPU
  // where the GPU's are known), announced in the first round; else none.
  std::vector<std::vector<int>> plan_pinning(int64_t local) const {
    std::vector<std::vector<int>> pinned;
    if (o_.enable_cpu_affinity) {
      std::vector<std::vector<int>> near_gpu;
      for (const auto& bus_id : o_.gpu_pci_bus_ids) {
        near_gpu.push_back(detail::pci_device_cpus(bus_id));
      }
      pinned = detail::plan_affinity(detail::allowed_cpus(), local, near_gpu);
      if (!o_.quiet && round_ == 0) {
        for (int64_t l = 0; l < local; ++l) {
          out_ << "ampkit launch: rank " << o_.machine_rank * local + l
               << " pinned to cores "
               << detail::format_cpu_list(pinned[static_cast<size_t>(l)])
               << " (enable_cpu_affinity"
               << (static_cast<size_t>(l) < near_gpu.size() &&
                           !near_gpu[static_cast<size_t>(l)].empty()
                       ? ", near its GPU"
                       : "")
               << ")\n";
        }
        out_ << std::flush;
      }
    }
    return pinned;
  }

  // In the forked child: becomes worker `rank` (local rank `l` of `local`),
  // its output into the pipe `fds`, and runs the command.
  [[noreturn]] void exec_worker(
      int64_t rank,
      int64_t l,
      int64_t local,
      const std::vector<std::vector<int>>& pinned,
      pid_t parent,
      const int fds[2]) const {
    // The kernel kills the worker if the launcher dies, even by SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Its own process group, so that stopping it stops its children.
    ::setpgid(0, 0);
    if (::getppid() != parent) {
      std::_Exit(1);
    }
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGUSR1, SIG_DFL);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    launcher_setenv("RANK", std::to_string(rank));
    launcher_setenv("WORLD_SIZE", std::to_string(o_.num_processes));
    launcher_setenv("LOCAL_RANK", std::to_string(l));
    launcher_setenv("LOCAL_WORLD_SIZE", std::to_string(local));
    launcher_setenv("MASTER_ADDR", o_.main_process_ip);
    launcher_setenv("MASTER_PORT", std::to_string(port_));
    if (!pinned.empty()) {
      launcher_pin_worker(rank, pinned[static_cast<size_t>(l)]);
    }
    if (o_.num_cpu_threads_per_process > 0) {
      launcher_setenv(
          "OMP_NUM_THREADS", std::to_string(o_.num_cpu_threads_per_process));
    } else if (!pinned.empty()) {
      launcher_setenv(
          "OMP_NUM_THREADS",
          std::to_string(pinned[static_cast<size_t>(l)].size()));
    } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
      launcher_setenv(
          "OMP_NUM_THREADS", std::to_string(threads_per_process(local)));
    }
    set_settings_env();
    std::vector<char*> argv;
    for (const auto& a : o_.command) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(
        stderr,
        "ampkit launch: cannot run %s: %s\n",
        argv[0],
        std::strerror(errno));
    std::_Exit(127);
  }

  // In a worker: the AMPKIT_* and FSDP_* variables of the launch settings.
  void set_settings_env() const {
    // One machine: a fresh id per group keeps restarts and other runs
    // apart. Several launchers must agree, so they key on the port.
    if (o_.num_machines == 1) {
      launcher_setenv("AMPKIT_RUN_ID", run_id_);
    }
    if (agent_ != nullptr) {
      // Machine 0's launcher hosts the store; each round's workers
      // keep their keys apart.
      launcher_setenv("AMPKIT_AGENT_STORE", "round" + std::to_string(round_));
    }
    if (!o_.mixed_precision.empty()) {
      launcher_setenv("AMPKIT_MIXED_PRECISION", o_.mixed_precision);
    }
    if (o_.gradient_accumulation_steps > 0) {
      launcher_setenv(
          "AMPKIT_GRADIENT_ACCUMULATION_STEPS",
          std::to_string(o_.gradient_accumulation_steps));
    }
    if (o_.cpu) {
      launcher_setenv("AMPKIT_USE_CPU", "1");
    }
    if (o_.debug) {
      launcher_setenv("AMPKIT_DEBUG", "1");
    }
    if (o_.zero_stage >= 0) {
      launcher_setenv("AMPKIT_ZERO_STAGE", std::to_string(o_.zero_stage));
    }
    for (const auto& [name, value] : o_.fsdp_env) {
      launcher_setenv(name, value);
    }
    if (o_.gradient_clipping > 0) {
      std::ostringstream clip;
      clip.precision(17);
      clip << o_.gradient_clipping;
      launcher_setenv("AMPKIT_GRADIENT_CLIPPING", clip.str());
    }
  }

  void emit(Worker& w, const std::string& line) {
    w.last_lines.push_back(line);
    if (w.last_lines.size() > 20) {
      w.last_lines.pop_front();
    }
    if (w.log) {
      *w.log << line << '\n' << std::flush;
    }
    if (!w.log || o_.tee) {
      out_ << "[rank " << w.rank << "] " << line << '\n' << std::flush;
    }
  }

  void drain() {
    char buffer[4096];
    for (auto& w : workers_) {
      while (w.fd >= 0) {
        const ssize_t n = ::read(w.fd, buffer, sizeof(buffer));
        if (n > 0) {
          w.partial.append(buffer, static_cast<size_t>(n));
          size_t pos;
          while ((pos = w.partial.find('\n')) != std::string::npos) {
            emit(w, w.partial.substr(0, pos));
            w.partial.erase(0, pos + 1);
          }
          continue;
        }
        if (n == 0) {  // the worker closed its output
          if (!w.partial.empty()) {
            emit(w, w.partial);
            w.partial.clear();
          }
          ::close(w.fd);
          w.fd = -1;
        }
        break;
      }
    }
  }

 public:
  bool interrupted = false;

 private:
  const LaunchOptions& o_;
  std::ostream& out_;
  std::ostream& err_;
  int port_;
  Reaper& reaper_;
  detail::Agent* agent_;
  int64_t round_;
  std::string run_id_;
  std::vector<Worker> workers_;
};

}  // namespace

void check_process_count(const LaunchOptions& o) {
  const int64_t here = o.num_processes / o.num_machines;
  const int64_t cores = usable_cores();
  if (here > cores && !o.oversubscribe) {
    throw InvalidArgument(
        component::kLaunch,
        std::to_string(here) + " processes on this machine, which has " +
            std::to_string(cores) +
            " usable cores: they would share cores and train slower than " +
            std::to_string(cores) + ". Pass --num_processes " +
            std::to_string(cores * o.num_machines) +
            " or less, or --oversubscribe to start them anyway.");
  }
  // Each worker is at least one process of this user: above the user's
  // process limit the forks would fail part-way (or take the machine's).
  struct rlimit nproc {};
  if (::getrlimit(RLIMIT_NPROC, &nproc) == 0 &&
      nproc.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(here) >= nproc.rlim_cur) {
    throw InvalidArgument(
        component::kLaunch,
        std::to_string(here) + " processes on this machine, but this user " +
            "may run at most " + std::to_string(nproc.rlim_cur) +
            " (ulimit -u). Pass a smaller --num_processes.");
  }
}

namespace {

// Refuses launch options that cannot start a group.
void launcher_check_options(const LaunchOptions& o) {
  if (o.command.empty()) {
    throw InvalidArgument(
        component::kLaunch,
        "no program to launch. Usage: ampkit launch [options] PROGRAM "
        "[ARGS...]");
  }
  if (o.num_processes < 1 || o.num_machines < 1 ||
      o.num_processes % o.num_machines != 0) {
    throw InvalidArgument(
        component::kLaunch,
        "num_processes must be a positive multiple of num_machines, got " +
            std::to_string(o.num_processes) + " processes on " +
            std::to_string(o.num_machines) + " machines.");
  }
  if (o.machine_rank < 0 || o.machine_rank >= o.num_machines) {
    throw InvalidArgument(
        component::kLaunch,
        "machine_rank must be in [0, num_machines=" +
            std::to_string(o.num_machines) + "), got " +
            std::to_string(o.machine_rank) + ".");
  }
  if (o.num_cpu_threads_per_process < 0) {
    throw InvalidArgument(
        component::kLaunch,
        "num_cpu_threads_per_process must be >= 0, got " +
            std::to_string(o.num_cpu_threads_per_process) +
            ". 0 shares the machine's cores among its processes.");
  }
  if (o.max_restarts < 0) {
    throw InvalidArgument(
        component::kLaunch,
        "max_restarts must be >= 0, got " + std::to_string(o.max_restarts) +
            ".");
  }
  if (o.main_process_port < 0 || o.main_process_port > 65535) {
    throw InvalidArgument(
        component::kLaunch,
        "main_process_port must be 0 (pick a free port) or 1-65535, got " +
            std::to_string(o.main_process_port) + ".");
  }
}

// The main process's port: main_process_port, or a free one for 0.
int launcher_port(const LaunchOptions& o) {
  int port = o.main_process_port;
  if (port == 0) {
    if (o.num_machines > 1) {
      throw InvalidArgument(
          component::kLaunch,
          "main_process_port 0 (pick a free port) works on one machine only; "
          "with " +
              std::to_string(o.num_machines) +
              " machines pass the same --main_process_port to every launcher.");
    }
    port = pick_free_port();
  }
  return port;
}

// Creates --log_dir, refusing one that cannot be written.
void launcher_make_log_dir(const LaunchOptions& o) {
  if (!o.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.log_dir, ec);
    if (ec || ::access(o.log_dir.c_str(), W_OK) != 0) {
      throw IoError(
          component::kLaunch,
          "cannot write the worker logs into --log_dir " + o.log_dir + ": " +
              (ec ? ec.message() : std::string(std::strerror(errno))) +
              ". Pass a writable folder.");
    }
  }
}

// The agent that keeps the machines in step, when there are several.
std::unique_ptr<detail::Agent> launcher_agent(
    const LaunchOptions& o, int port) {
  std::unique_ptr<detail::Agent> agent;
  if (o.num_machines > 1) {
    detail::AgentOptions ao;
    ao.master_addr = o.main_process_ip;
    ao.port = port;
    ao.machine_rank = o.machine_rank;
    ao.num_machines = o.num_machines;
    ao.join_timeout = o.join_timeout;
    ao.heartbeat_timeout = o.heartbeat_timeout;
    ao.heartbeat_interval =
        std::min(ao.heartbeat_interval, o.heartbeat_timeout / 4);
    agent = std::make_unique<detail::Agent>(ao);
  }
  return agent;
}

}  // namespace

int launch(const LaunchOptions& o, std::ostream& out, std::ostream& err) {
  launcher_check_options(o);
  check_process_count(o);
  const int port = launcher_port(o);
  launcher_make_log_dir(o);
  // Before the signal handlers: while it dials machine 0, Ctrl-C stops the
  // launcher as usual (nothing has started yet).
  std::unique_ptr<detail::Agent> agent = launcher_agent(o, port);
  if (::pipe(g_signal_pipe) != 0) {
    throw IoError(
        component::kLaunch,
        std::string("pipe failed: ") + std::strerror(errno));
  }
  // The handlers and the pipe are undone however launch() ends (a machine
  // that did not join throws).
  struct SignalsRestored {
    ~SignalsRestored() {
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGUSR1, SIG_DFL);
      ::close(g_signal_pipe[0]);
      ::close(g_signal_pipe[1]);
    }
  } restore_signals;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGUSR1, &sa, nullptr);  // Slurm's --signal
  Reaper reaper;
  // A signal while waiting for the other machines: nothing runs here yet.
  int waiting_signal = 0;
  auto signalled = [&waiting_signal] {
    pollfd signal_fd{g_signal_pipe[0], POLLIN, 0};
    unsigned char sig = 0;
    if (::poll(&signal_fd, 1, 0) > 0 &&
        ::read(g_signal_pipe[0], &sig, 1) == 1) {
      waiting_signal = sig;
    }
    return waiting_signal != 0;
  };
  int code = 0;
  for (int64_t attempt = 0;; ++attempt) {
    if (agent) {
      // Every machine starts round `attempt` together: a restart anywhere
      // is a restart everywhere.
      if (!agent->join(attempt, signalled)) {
        err << "ampkit launch: " << ::strsignal(waiting_signal)
            << " while waiting for the other machines; nothing was started"
            << std::endl;
        agent->leave("was interrupted while waiting for the others");
        code = 128 + waiting_signal;
        break;
      }
    }
    Group group(o, out, err, port, reaper, agent.get(), attempt);
    group.start();
    code = group.monitor();
    if (code == 0 && agent && !agent->finish(signalled)) {
      err << "ampkit launch: this machine's workers finished, but another "
             "machine's did not (its launcher says why)"
          << std::endl;
      code = 1;
    }
    if (code == 0) {
      break;
    }
    if (group.interrupted || waiting_signal != 0 || attempt >= o.max_restarts) {
      if (agent) {
        agent->leave(
            group.interrupted || waiting_signal != 0
                ? "was interrupted"
                : "has no restarts left (--max_restarts " +
                      std::to_string(o.max_restarts) + ")");
      }
      break;
    }
    err << "ampkit launch: restarting the group (" << attempt + 1 << " of "
        << o.max_restarts << ")" << std::endl;
  }
  return code;
}

}  // namespace ampkit::dist
