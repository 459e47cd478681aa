// The Accelerator's state, shared by the Accelerator and the objects it
// prepares (they keep it alive, so they stay valid if it is destroyed first).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerator/strategies/entries.h"
#include "accelerator/strategies/strategy.h"
#include "ampkit/accelerator/options.h"
#include "ampkit/accelerator/prepared.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/distributed/process_group.h"
#include "ampkit/error.h"
#include "ampkit/optim/scheduler.h"
#include "ampkit/track/tracker.h"

namespace ampkit::detail {

// accelerate's GradientState: where the accumulation window stands and
// whether this backward synchronises.
struct GradientState {
  bool sync_gradients = true;
  bool end_of_dataloader = false;
  bool in_accumulate = false;
  int64_t no_sync_depth = 0;  // open no_sync() scopes
  /// Whether this backward synchronises gradients: a synchronising
  /// micro-step outside no_sync().
  bool synchronising() const {
    return sync_gradients && no_sync_depth == 0;
  }
  int64_t micro_step = 0;
  /// The accumulation window that ends at the next synchronising backward:
  /// its micro-steps so far, and with accumulate(model, num_items) the
  /// items they hold (on the device; empty when not counted).
  int64_t window_micro_steps = 0;
  torch::Tensor window_items;
  torch::Tensor window_factor;

  // Some optimizer stepped through the scaler and update() is still due.
  bool scaler_update_pending = false;
  int64_t forwards_since_backward = 0;
  bool warned_no_forward = false;
};

// accelerate's PartialState: this process among the others.
struct ProcessState {
  int64_t num_processes = 1;
  int64_t process_index = 0;
  int64_t local_process_index = 0;
  // Distributed runs only.
  std::shared_ptr<dist::ProcessGroup> group;
};

// What the trackers are told (trackers only on the main process) and the
// counters the logs and checkpoints carry.
struct TrackingState {
  std::vector<std::shared_ptr<track::Tracker>> trackers;
  std::string run_dir;
  int64_t optimizer_steps = 0;
  // Skipped steps counted so far, and the found_inf flags of later steps
  // summed on the device (read when logged or saved: skipped_step_count).
  int64_t skipped_steps = 0;
  torch::Tensor skipped_pending;
  torch::Tensor loss_sum;  // micro-step losses since the last automatic log
  int64_t loss_count = 0;
  torch::Tensor last_grad_norm;
  int64_t samples_since_log = 0;
  std::chrono::steady_clock::time_point last_log_time;
};

// What save_state writes besides models and optimizers, and the hooks
// around it.
struct CheckpointRegistry {
  std::vector<optim::LRScheduler*> schedulers;
  std::vector<std::shared_ptr<LoaderPosition>> loaders;
  // Prepared streams, whose position save_state cannot write (it says so
  // once).
  int64_t stream_loaders = 0;
  bool stream_position_told = false;
  struct Registered {
    std::function<StateDict()> save;
    std::function<void(const StateDict&)> load;
  };
  std::vector<Registered> registered;
  struct StateHookEntry {
    size_t handle;
    bool save;  // save_state (else load_state)
    std::function<void(
        const std::vector<std::shared_ptr<torch::nn::Module>>&,
        const std::string&)>
        hook;
  };
  std::vector<StateHookEntry> state_hooks;
  size_t next_hook_handle = 0;
  int64_t checkpoint_iteration = -1;  // next checkpoint_N; -1: not scanned
};

struct AcceleratorState {
  ResolvedAcceleratorOptions options;
  std::optional<AutocastOptions> autocast;  // empty for precision no
  std::optional<GradScaler> scaler;         // set when loss scaling is on
  std::vector<PreparedOptimizerEntry> optimizers;
  // In the order prepare() saw them; the wrappers go before the modules.
  std::vector<ModelEntry> models;
  /// The prepared model `m`, or nullptr (released by free_memory).
  ModelEntry* model_entry(const torch::nn::Module* m);
  /// The prepared modules, in order (for the state hooks).
  std::vector<std::shared_ptr<torch::nn::Module>> modules() const;

  GradientState gradient;
  /// At the window's first synchronising backward: scales its gradients by
  /// the real size of a short window (count_short_window) or by the items
  /// counted (all-reduced once), and keeps the factor in window_factor, by
  /// which a further backward in the same micro-step scales its loss; the
  /// next accumulate() scope clears it.
  void finish_window();

  TrackingState tracking;
  int64_t skipped_step_count();

  /// After each step of the first prepared optimizer: counts it and, with
  /// auto_log, logs every log_every_n_steps.
  void after_optimizer_step(const PreparedOptimizerEntry& entry);

  // detect_anomaly: parameter names by module path, in registration order.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters;
  /// The parameters whose gradients hold inf/NaN, as ampkit names them
  /// (utils/non_finite.h); empty when all are finite.
  std::string non_finite_gradients() const;

  ProcessState process;
  // How the models and optimizers are spread over the processes (set by
  // the Accelerator's constructor, after the group).
  std::unique_ptr<Strategy> strategy;
  bool trigger = false;
  // Real samples in the last gathered step of the active data loader when
  // its sampler padded the epoch; 0 when nothing to drop.
  int64_t gather_remainder = 0;

  CheckpointRegistry checkpoints;
  // A prepared loader splits each batch across the processes.
  bool split_batches = false;
  void run_state_hooks(bool save, const std::string& dir) const;
  /// Runs `body`; a failure of a collective inside names the failed rank.
  template <typename F>
  auto collective(const std::string& operation, F&& body) {
    if (!process.group) {
      return body();
    }
    try {
      return body();
    } catch (const Error&) {
      throw;
    } catch (...) {
      process.group->rethrow_explained(operation);
    }
  }

  /// The GradScaler's update() once per iteration, after the steps.
  void update_scaler();

  // Preemption (accelerator/preemption.cpp): the step last checked for a
  // stop signal, and what the Accelerator does on one (save, exit).
  int64_t preemption_checked_step = 0;
  std::function<void(int signal)> on_preemption;
};

/// The stop-signal handlers, shared by every Accelerator alive (installed
/// by the first, removed by the last).
void install_preemption_handlers();
void remove_preemption_handlers();
/// The largest `value` over the processes (the value itself in one).
int64_t max_over_processes(AcceleratorState& st, int64_t value);

/// Accelerator::unscale_gradients and clip_grad_norm_ (arguments checked),
/// also run by a prepared optimizer under gradient_clipping.
void unscale_gradients(AcceleratorState& st);
torch::Tensor clip_grad_norm(
    AcceleratorState& st,
    const std::vector<torch::Tensor>& parameters,
    double max_norm,
    double norm_type);

/// Moves an optimizer's state (Adam's moments, SGD's momentum buffers) to
/// `device` through a serialisation round trip, which every LibTorch
/// optimizer supports.
void move_optimizer_state(
    torch::optim::Optimizer& optimizer, const c10::Device& device);

/// Logs `metrics` at `step` to every tracker (there are none off the main
/// process), stamped with the current wall time.
void log_to_trackers(
    AcceleratorState& state, const track::Metrics& metrics, int64_t step);

}  // namespace ampkit::detail
