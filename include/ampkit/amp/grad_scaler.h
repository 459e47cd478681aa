// ampkit::GradScaler: dynamic loss scaling with the semantics of PyTorch's
// torch.amp.GradScaler, plus opt-in guards against runaway overflow.
#pragma once

#include <c10/core/Device.h>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ampkit/state_dict.h"

namespace ampkit {

struct GradScalerOptions {
  /// Scale before the first update; > 0 and finite. Default 2^16.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// Multiplier after growth_interval unskipped steps in a row; > 1.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// Multiplier after a step with inf/NaN gradients; in (0, 1).
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Unskipped steps in a row before the scale grows; >= 1.
  TORCH_ARG(int64_t, growth_interval) = 2000;
  /// false makes every method a pass-through (step just calls
  /// optimizer.step()).
  TORCH_ARG(bool, enabled) = true;

  // Beyond PyTorch; the defaults reproduce PyTorch exactly.

  /// Back off only on the hysteresis-th overflow in a row (DeepSpeed's
  /// hysteresis); earlier ones skip the step but keep the scale. >= 1;
  /// default 1, PyTorch's behaviour.
  TORCH_ARG(int64_t, hysteresis) = 1;
  /// Floor the scale never backs off below; 0 (default) means no floor.
  TORCH_ARG(double, min_scale) = 0.0;
  /// Throw ampkit::TrainingDiverged once this many steps in a row were
  /// skipped with the scale already at min_scale; 0 (default) never throws.
  /// Needs min_scale > 0.
  TORCH_ARG(int64_t, max_skipped_steps_at_min_scale) = 0;
  /// On each skipped step, find the parameters whose gradients were
  /// non-finite and pass an OverflowReport to the overflow callback (by
  /// default a warning through ampkit::warn). Off by default, and then it costs
  /// nothing.
  TORCH_ARG(bool, report_overflow) = false;
};

/// What report_overflow collects about one skipped step.
struct OverflowReport {
  int64_t step = 0;  ///< number of update() calls before this one
  double old_scale = 0;
  double new_scale = 0;
  /// Names of the parameters with inf/NaN gradients ("fc1.weight" when
  /// register_parameter_names was called, else "param_groups[g][i]").
  std::vector<std::string> parameters;
  /// The same parameters with their counts, as ampkit's messages name them:
  /// "layer.w (1 inf of 6 values), param_groups[0][1] (1 NaN of 2 values)".
  std::string where;
};

/// The scaler's state as PyTorch's state_dict: "scale", "growth_factor",
/// "backoff_factor" (doubles), "growth_interval", "_growth_tracker"
/// (integers); with ampkit's extra options on, also their keys.
using GradScalerState = StateDict;

/// Per-iteration use, as in PyTorch:
///
///   scaler.scale(loss).backward();
///   scaler.unscale_(optimizer);          // optional, before clipping
///   scaler.step(optimizer);              // skipped on inf/NaN gradients
///   scaler.update();
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// outputs * scale. The scale (float32, 0-dim) and the growth tracker
  /// (int32) are created on the device of the first tensor scaled.
  torch::Tensor scale(const torch::Tensor& outputs);
  std::vector<torch::Tensor> scale(const std::vector<torch::Tensor>& outputs);

  /// Divides the optimizer's gradients by the scale and records whether any
  /// were inf/NaN. At most once per optimizer between updates, before step.
  void unscale_(torch::optim::Optimizer& optimizer);

  /// Unscales (unless unscale_ was called) and runs optimizer.step() when
  /// every gradient is finite. Returns step()'s result, or an empty optional
  /// when the step was skipped. A closure is rejected, as in PyTorch.
  std::optional<torch::Tensor> step(
      torch::optim::Optimizer& optimizer,
      torch::optim::Optimizer::LossClosure closure = nullptr);

  /// The step of an optimizer that unscales and skips inside its own kernels
  /// (ampkit::optim::aten_fused_step; torch.amp.GradScaler's path for
  /// optimizers with _step_supports_amp_scaling). Unless unscale_ ran, the
  /// gradients are only checked for inf/NaN, not unscaled, and
  /// `fused_step(grad_scale, found_inf)` gets the scale to divide them by;
  /// after unscale_ it gets an undefined grad_scale. found_inf (0-dim
  /// float32 on the scale's device, 1 when a gradient is inf/NaN) is what
  /// update() backs off on, and is returned; the scaler reads no value on
  /// the host (except with report_overflow). With the scaler disabled,
  /// `fused_step` gets two undefined tensors.
  torch::Tensor step_supporting_amp_scaling(
      torch::optim::Optimizer& optimizer,
      const std::function<void(
          const torch::Tensor& grad_scale, const torch::Tensor& found_inf)>&
          fused_step);

  /// Backs off after any skipped step since the last update, grows after
  /// growth_interval clean steps; call once per iteration after every step.
  void update();
  /// Sets the scale to new_scale (> 0, finite) instead.
  void update(double new_scale);
  /// The same with a one-element tensor that does not require grad.
  void update(const torch::Tensor& new_scale);

  /// The current scale; init_scale before the first scale(); 1.0 disabled.
  /// Reads the scale tensor, so it synchronises with a GPU.
  double get_scale() const;
  /// The scale tensor itself (float32, 0-dim) without a synchronisation;
  /// undefined before the first scale() (PyTorch's _get_scale_async).
  const torch::Tensor& get_scale_async() const {
    return scale_;
  }
  /// Unskipped steps since the last growth or backoff; 0 when disabled.
  int64_t get_growth_tracker() const;
  double get_growth_factor() const;
  void set_growth_factor(double new_factor);
  double get_backoff_factor() const;
  void set_backoff_factor(double new_factor);
  int64_t get_growth_interval() const;
  void set_growth_interval(int64_t new_interval);
  bool is_enabled() const;

  /// Empty when disabled. Call after update() to checkpoint an iteration.
  GradScalerState state_dict() const;
  /// No-op when disabled; an empty state is an error, as in PyTorch.
  void load_state_dict(const GradScalerState& state);

  /// Names used by the overflow report, e.g. model->named_parameters().
  void register_parameter_names(
      const torch::OrderedDict<std::string, torch::Tensor>& named_parameters);
  /// Replaces the default report sink (one line on stderr).
  void set_overflow_callback(std::function<void(const OverflowReport&)> cb);
  /// Combines an optimizer's found_inf (0-dim float, 1 when one of its
  /// gradients is inf/NaN) with the other processes' in place, right after
  /// its gradients were checked, so that every process skips or steps
  /// together when each holds only its shard of the gradients (ZeRO;
  /// PyTorch's ShardedGradScaler all-reduces it with MAX). Every process
  /// must check the same optimizers in the same order. Empty: none.
  void set_found_inf_combiner(std::function<void(torch::Tensor&)> combine) {
    found_inf_combiner_ = std::move(combine);
  }
  /// The report of the most recent skipped step, when report_overflow is on.
  const std::optional<OverflowReport>& last_overflow() const {
    return last_overflow_;
  }

  const GradScalerOptions& options() const {
    return options_;
  }

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerState {
    Stage stage = Stage::ready;
    std::vector<std::pair<c10::Device, torch::Tensor>> found_inf_per_device;
  };

  void check_initialised(const char* funcname) const;
  void lazy_init(const c10::Device& device);
  // Divides by inv_scale and flags inf/NaN; with an undefined inv_scale
  // only flags them.
  std::vector<std::pair<c10::Device, torch::Tensor>> unscale_grads(
      torch::optim::Optimizer& optimizer,
      const torch::Tensor& inv_scale,
      bool allow_fp16);
  OptimizerState& state_for_step(torch::optim::Optimizer& optimizer);
  static void check_recorded(const OptimizerState& state);
  bool uses_host_update() const;
  void update_on_host(const torch::Tensor& found_inf);
  void report(double old_scale, double new_scale);
  /// The name given by register_parameter_names, or nullptr.
  const std::string* registered_name(const torch::Tensor& param) const;
  /// Adds the parameters of `optimizer` whose gradients hold inf/NaN to
  /// the report of the step being skipped.
  void record_non_finite(torch::optim::Optimizer& optimizer);

  GradScalerOptions options_;
  double init_scale_;
  int64_t init_growth_tracker_ = 0;
  torch::Tensor scale_;           // float32, 0-dim
  torch::Tensor growth_tracker_;  // int32, 0-dim
  std::unordered_map<const torch::optim::Optimizer*, OptimizerState>
      per_optimizer_states_;
  // Parameters with non-finite gradients this iteration, for the report.
  std::vector<std::string> overflowed_parameters_;
  std::string overflowed_where_;
  int64_t consecutive_overflows_ = 0;
  int64_t skipped_at_min_scale_ = 0;
  int64_t updates_ = 0;
  std::unordered_map<const void*, std::string> parameter_names_;
  std::function<void(const OverflowReport&)> overflow_callback_;
  std::function<void(torch::Tensor&)> found_inf_combiner_;
  std::optional<OverflowReport> last_overflow_;
};

}  // namespace ampkit
