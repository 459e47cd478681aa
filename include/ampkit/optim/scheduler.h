// Learning-rate schedulers with the exact semantics of PyTorch's
// torch.optim.lr_scheduler and Hugging Face transformers' warmup schedules.
#pragma once

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ampkit/state_dict.h"

namespace ampkit::optim {

/// Holds an optimizer and sets the lr of each of its param groups, like
/// LibTorch's torch::optim::LRScheduler. Per iteration, as in PyTorch:
///
///   optimizer.step();
///   scheduler.step();        // ReduceLROnPlateau: scheduler.step(val_loss)
///
/// The optimizer must outlive the scheduler.
class LRScheduler {
 public:
  /// Records each param group's current lr as base_lrs (PyTorch's
  /// "initial_lr"); changes no lr itself (the derived constructors do).
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  /// Advances one step (PyTorch's scheduler.step()): last_epoch + 1, then
  /// every group's lr = get_lr() for the new last_epoch.
  virtual void step();
  /// Only ReduceLROnPlateau takes a metric; the others throw
  /// ampkit::UsageError saying to call step(), and ReduceLROnPlateau::step()
  /// throws one saying to call step(metric).
  virtual void step(double metric);
  virtual bool takes_metric() const {
    return false;
  }

  /// Learning rates last applied, one per param group (PyTorch's
  /// get_last_lr()).
  const std::vector<double>& get_last_lr() const;
  /// Steps taken: 0 after construction, + 1 per step().
  int64_t last_epoch() const;
  torch::optim::Optimizer& optimizer();

  /// PyTorch's keys where it has them ("last_epoch", "base_lrs", "_last_lr",
  /// "_step_count"; ReduceLROnPlateau has no "base_lrs" and "_step_count"),
  /// the scheduler's own parameters and counters under PyTorch's names, and
  /// "scheduler": name(), so that a state cannot be loaded into another kind.
  virtual StateDict state_dict() const;
  /// Restores a state_dict() of the same kind of scheduler on an optimizer
  /// with as many param groups, then sets the optimizer's lrs to "_last_lr"
  /// so that training resumes exactly. A missing, unknown, mistyped or out of
  /// range key throws ampkit::InvalidArgument naming it, and changes nothing.
  virtual void load_state_dict(const StateDict& state);

  /// "constant_with_warmup", "linear_with_warmup", "cosine_with_warmup",
  /// "step" or "reduce_on_plateau".
  virtual std::string name() const = 0;

 protected:
  /// PyTorch's get_lr(): the lrs for last_epoch_, one per param group. The
  /// default keeps the optimizer's current lrs.
  virtual std::vector<double> get_lr() const;
  /// PyTorch's _initial_step(): steps from epoch -1 to 0. Derived
  /// constructors call it once their arguments are checked.
  void initial_step();
  /// The optimizer's lrs now, one per param group.
  std::vector<double> current_lrs() const;
  /// Sets group i's lr to lrs[i] and records lrs as the last lrs.
  void apply_lrs(const std::vector<double>& lrs);
  /// "StepLR", "ReduceLROnPlateau", ...: the component in error messages.
  std::string component() const;

  /// Adds the scheduler's own parameters and counters to `state`;
  /// load_state_dict expects exactly these keys, with these types.
  virtual void save_own_state(StateDict& state) const = 0;
  /// Checks the own keys of a state whose key set and types are already
  /// checked (integers are Int, numbers Double), then applies them. Throws
  /// before changing anything.
  virtual void load_own_state(const StateDict& state) = 0;

  torch::optim::Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
  /// PyTorch's _step_count: step() calls, the one in initial_step included.
  int64_t step_count_ = 0;
};

/// transformers' get_constant_schedule_with_warmup: lr rises linearly from 0
/// to the base lr over num_warmup_steps steps, then stays there.
class ConstantWithWarmup : public LRScheduler {
 public:
  /// num_warmup_steps >= 0; 0 starts at the base lr.
  ConstantWithWarmup(
      torch::optim::Optimizer& optimizer, int64_t num_warmup_steps);
  std::string name() const override {
    return "constant_with_warmup";
  }

 protected:
  std::vector<double> get_lr() const override;
  void save_own_state(StateDict& state) const override;
  void load_own_state(const StateDict& state) override;

 private:
  int64_t num_warmup_steps_;
};

/// transformers' get_linear_schedule_with_warmup: warmup from 0 to the base
/// lr, then linear decay to 0 at num_training_steps (and 0 after it).
class LinearWithWarmup : public LRScheduler {
 public:
  /// num_warmup_steps >= 0, num_training_steps >= 0 (total steps, warmup
  /// included).
  LinearWithWarmup(
      torch::optim::Optimizer& optimizer,
      int64_t num_warmup_steps,
      int64_t num_training_steps);
  std::string name() const override {
    return "linear_with_warmup";
  }

 protected:
  std::vector<double> get_lr() const override;
  void save_own_state(StateDict& state) const override;
  void load_own_state(const StateDict& state) override;

 private:
  int64_t num_warmup_steps_;
  int64_t num_training_steps_;
};

/// transformers' get_cosine_schedule_with_warmup: warmup from 0 to the base
/// lr, then num_cycles cosine waves between the base lr and 0 over the
/// remaining steps. Past num_training_steps the formula goes on (with 0.5
/// cycles the lr rises again), as in transformers.
class CosineWithWarmup : public LRScheduler {
 public:
  /// num_warmup_steps >= 0, num_training_steps >= 0, num_cycles >= 0 and
  /// finite (0.5: one decay from the base lr to 0).
  CosineWithWarmup(
      torch::optim::Optimizer& optimizer,
      int64_t num_warmup_steps,
      int64_t num_training_steps,
      double num_cycles = 0.5);
  std::string name() const override {
    return "cosine_with_warmup";
  }

 protected:
  std::vector<double> get_lr() const override;
  void save_own_state(StateDict& state) const override;
  void load_own_state(const StateDict& state) override;

 private:
  int64_t num_warmup_steps_;
  int64_t num_training_steps_;
  double num_cycles_;
};

/// torch.optim.lr_scheduler.StepLR: lr = base_lr * gamma^(last_epoch /
/// step_size), PyTorch's closed form (equal to its chainable form to a few
/// ulps, and unaffected by lrs set from outside).
class StepLR : public LRScheduler {
 public:
  /// step_size >= 1 (steps between decays), gamma > 0 and finite.
  StepLR(
      torch::optim::Optimizer& optimizer,
      int64_t step_size,
      double gamma = 0.1);
  std::string name() const override {
    return "step";
  }

 protected:
  std::vector<double> get_lr() const override;
  void save_own_state(StateDict& state) const override;
  void load_own_state(const StateDict& state) override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// ReduceLROnPlateau's mode: min reduces when the metric stops decreasing
/// (a loss), max when it stops increasing (an accuracy).
enum class PlateauMode { min, max };
/// rel: better than best * (1 -/+ threshold); abs: better than
/// best -/+ threshold.
enum class ThresholdMode { rel, abs };

/// PyTorch's spellings: "min"/"max", "rel"/"abs" (also in state dicts).
std::string to_string(PlateauMode mode);
std::string to_string(ThresholdMode mode);
/// Throws ampkit::InvalidArgument naming the valid values.
PlateauMode parse_plateau_mode(const std::string& text);
ThresholdMode parse_threshold_mode(const std::string& text);

struct ReduceLROnPlateauOptions {
  /// Default min.
  TORCH_ARG(PlateauMode, mode) = PlateauMode::min;
  /// new_lr = lr * factor on a plateau; in [0, 1). Default 0.1.
  TORCH_ARG(double, factor) = 0.1;
  /// Steps without improvement tolerated before the lr is reduced; >= 0.
  /// Default 10.
  TORCH_ARG(int64_t, patience) = 10;
  /// How much better than the best a metric must be to count as an
  /// improvement (see threshold_mode); >= 0. Default 1e-4.
  TORCH_ARG(double, threshold) = 1e-4;
  /// Default rel.
  TORCH_ARG(ThresholdMode, threshold_mode) = ThresholdMode::rel;
  /// Steps after a reduction during which bad steps are not counted; >= 0.
  /// Default 0.
  TORCH_ARG(int64_t, cooldown) = 0;
  /// Lower bound on every group's lr; >= 0. Default 0.
  TORCH_ARG(double, min_lr) = 0;
  /// A reduction smaller than eps is skipped; >= 0. Default 1e-8.
  TORCH_ARG(double, eps) = 1e-8;
};

/// torch.optim.lr_scheduler.ReduceLROnPlateau (PyTorch 1.13): multiplies the
/// lrs by factor once the metric passed to step(metric) has not improved for
/// more than patience steps.
class ReduceLROnPlateau : public LRScheduler {
 public:
  explicit ReduceLROnPlateau(
      torch::optim::Optimizer& optimizer,
      ReduceLROnPlateauOptions options = {});

  /// Throws ampkit::UsageError: this scheduler needs the metric.
  void step() override;
  /// One step with the monitored metric (for example the validation loss).
  void step(double metric) override;
  bool takes_metric() const override {
    return true;
  }
  std::string name() const override {
    return "reduce_on_plateau";
  }

 protected:
  void save_own_state(StateDict& state) const override;
  void load_own_state(const StateDict& state) override;

 private:
  bool is_better(double a, double best) const;

  ReduceLROnPlateauOptions options_;
  /// PyTorch's min_lrs: options.min_lr for every param group.
  std::vector<double> min_lrs_;
  /// The best metric so far; +inf ("min") or -inf ("max") before the first.
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace ampkit::optim
