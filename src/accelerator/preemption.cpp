// Preemption: SIGTERM (a scheduler's or cloud's notice before SIGKILL),
// SIGINT (Ctrl-C) and SIGUSR1 (Slurm's --signal) end a run at the next step
// boundary, after a checkpoint, instead of on the spot.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>

#include "accelerator/state.h"
#include "ampkit/accelerator/accelerator.h"
#include "ampkit/utils/warnings.h"
#include "utils/components.h"

namespace ampkit::detail {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
constexpr size_t kSignalCount = sizeof(kSignals) / sizeof(kSignals[0]);

volatile sig_atomic_t g_signal = 0;
std::mutex g_mutex;
int g_users = 0;  // Accelerators alive that asked for the handlers
struct sigaction g_previous[kSignalCount];
bool g_installed[kSignalCount] = {};

// Async-signal-safe: records the first signal, says so, and restores the
// default actions so that a second signal ends the process at once.
void on_signal(int sig) {
  if (g_signal == 0) {
    g_signal = sig;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : kSignals) {
    ::sigaction(s, &dfl, nullptr);
  }
  static const char kLine[] =
      "\nampkit: stop signal received: finishing the current step, then "
      "saving and exiting (send it again to stop at once)\n";
  [[maybe_unused]] auto n = ::write(2, kLine, sizeof(kLine) - 1);
}

}  // namespace

void install_preemption_handlers() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_users++ > 0) {
    return;
  }
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < kSignalCount; ++i) {
    struct sigaction current {};
    ::sigaction(kSignals[i], nullptr, &current);
    // A signal the program ignores (SIGINT in a background job) or handles
    // itself stays as it is.
    g_installed[i] = current.sa_handler == SIG_DFL &&
                     !(current.sa_flags & SA_SIGINFO) &&
                     ::sigaction(kSignals[i], &sa, &g_previous[i]) == 0;
  }
}

void remove_preemption_handlers() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_users > 0) {
    return;
  }
  for (size_t i = 0; i < kSignalCount; ++i) {
    if (g_installed[i]) {
      ::sigaction(kSignals[i], &g_previous[i], nullptr);
      g_installed[i] = false;
    }
  }
}

int64_t max_over_processes(AcceleratorState& st, int64_t value) {
  auto t = torch::tensor({value}, torch::kLong);
  if (st.process.group) {
    st.collective("all_reduce", [&] {
      st.process.group->all_reduce(t, dist::ReduceOp::max);
    });
  }
  return t.item<int64_t>();
}

void preemption_point(AcceleratorState& st) {
  if (st.tracking.optimizer_steps == st.preemption_checked_step) {
    return;  // no step since the last check
  }
  st.preemption_checked_step = st.tracking.optimizer_steps;
  // Every process stops at the same step: each asks whether any got a
  // signal (they may have got it at different moments).
  const int64_t sig = max_over_processes(st, g_signal);
  if (sig != 0 && st.on_preemption) {
    st.on_preemption(static_cast<int>(sig));
  }
}

}  // namespace ampkit::detail

namespace ampkit {

void Accelerator::preempt(int signal) {
  auto& st = *state_;
  const auto& r = st.options;
  const std::string name = ::sigabbrev_np(signal) != nullptr
                               ? std::string("SIG") + ::sigabbrev_np(signal)
                               : "signal " + std::to_string(signal);
  std::string what =
      "nothing saved (no checkpointing configured: "
      "save_on_preemption(true) or "
      "automatic_checkpoint_naming(true) saves one)";
  if (r.save_on_preemption || r.automatic_checkpoint_naming) {
    std::optional<std::string> dir;
    if (!r.automatic_checkpoint_naming) {
      const std::string parent =
          r.preemption_dir.empty()
              ? (std::filesystem::path(r.project_dir) / "checkpoints").string()
              : r.preemption_dir;
      dir = (std::filesystem::path(parent) /
             ("checkpoint_" + std::to_string(st.tracking.optimizer_steps)))
                .string();
    }
    what = "saved " + save_state(dir) + "; resume from it (load_state, or " +
           "--resume-from-checkpoint latest)";
  }
  end_training();
  if (is_main_process()) {
    std::cerr << "ampkit Accelerator: " << name << " at step "
              << st.tracking.optimizer_steps << ": " << what
              << "; exiting with " << 128 + signal << '\n'
              << std::flush;
  }
  std::cout << std::flush;
  std::exit(128 + signal);
}

}  // namespace ampkit
