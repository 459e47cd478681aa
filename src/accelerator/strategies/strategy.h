// How a run spreads over processes, as Lightning Fabric's Strategy: one
// interface, one file per strategy (single process, DDP, ZeRO-1/2, FSDP),
// picked once from the resolved options by make_strategy. What differs
// between the strategies lives in their files; the Accelerator only calls
// this interface around the user's steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ampkit {
struct ResolvedAcceleratorOptions;
}

namespace ampkit::detail {

struct AcceleratorState;
struct ModelEntry;
struct PreparedOptimizerEntry;

/// Where the gradients of some parameters are when a strategy shards them:
/// this process's parts of the shard gradients, and the gradients no shard
/// holds (the same on every process).
struct ShardedGradients {
  std::vector<at::Tensor> shards;
  std::vector<at::Tensor> replicated;
  /// Both, shards first.
  std::vector<at::Tensor> all() const;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  /// Wraps a model already on the device (prepare(model)): DDP's gradient
  /// synchronizer, FSDP's shards; prints its start-up line on rank 0.
  virtual void setup_module(AcceleratorState& st, ModelEntry& model) = 0;
  /// Wraps an optimizer whose parameters are on the device
  /// (prepare(optimizer)): ZeRO's sharded step, FSDP's shards.
  virtual void setup_optimizer(
      AcceleratorState& st, PreparedOptimizerEntry& optimizer) = 0;

  /// Around a prepared model's forward.
  virtual void before_forward(AcceleratorState& st, ModelEntry& model);
  virtual void after_forward(
      AcceleratorState& st,
      ModelEntry& model,
      const std::vector<at::Tensor>& outputs);
  /// Around every backward (a synchronising one or one under no_sync).
  virtual void before_backward(AcceleratorState& st);
  virtual void after_backward(AcceleratorState& st);

  /// summon_full_params: every model's whole parameters, then their shards
  /// again (the values kept).
  virtual void gather_full_params(AcceleratorState& st);
  virtual void release_full_params(AcceleratorState& st);
  /// The units a failed forward of `model` had not entered, for the hint
  /// (FSDP); empty elsewhere.
  virtual std::vector<std::string> units_not_entered(
      const ModelEntry& model) const;

  /// Where the gradients of `parameters` are, when they are not (all) the
  /// parameters' own; empty when they are.
  virtual std::optional<ShardedGradients> sharded_gradients(
      AcceleratorState& st, const std::vector<at::Tensor>& parameters);
  /// clip_grad_norm_'s total norm of what sharded_gradients returned for
  /// `parameters` (collective where the shards are spread).
  virtual at::Tensor sharded_norm(
      AcceleratorState& st,
      const std::vector<at::Tensor>& parameters,
      const ShardedGradients& grads,
      double norm_type);
  /// The gradient of `param` as detect_anomaly reports it: its own, or
  /// where the strategy keeps it.
  virtual at::Tensor gradient_of(
      const AcceleratorState& st, const at::Tensor& param) const;

  /// Around a prepared optimizer's step (it runs only when the gradients
  /// are synchronised).
  virtual void before_optimizer_step(
      AcceleratorState& st, PreparedOptimizerEntry& optimizer);
  virtual void after_optimizer_step(
      AcceleratorState& st, PreparedOptimizerEntry& optimizer);
  /// What gradient_clipping clips before the optimizer steps.
  virtual std::vector<at::Tensor> clipped_parameters(
      const PreparedOptimizerEntry& optimizer) const;
  /// The prepared optimizer's zero_grad.
  virtual void zero_grad(PreparedOptimizerEntry& optimizer, bool set_to_none);
  /// The bytes of the gradients the optimizer steps on.
  virtual int64_t gradient_bytes(const PreparedOptimizerEntry& optimizer) const;
};

/// Shared by the strategies' norms (accelerator/clipping.cpp): one
/// gradient's norm as torch::nn::utils::clip_grad_norm_ takes it, and the
/// total of such norms on `device` (0 without any).
at::Tensor gradient_norm(const at::Tensor& g, double norm_type);
at::Tensor combine_norms(
    std::vector<at::Tensor> norms, double norm_type, const c10::Device& device);
/// Under loss scaling in a process group, where each process checks only
/// its shards' gradients for inf/NaN: the processes skip a step together
/// (found_inf is max-reduced before the scaler decides).
void agree_on_found_inf(AcceleratorState& st);
/// The parameters a LibTorch optimizer steps, group by group.
std::vector<at::Tensor> optimizer_parameters(
    const PreparedOptimizerEntry& optimizer);

/// The strategy the resolved options ask for; `distributed` when the run
/// has a process group.
std::unique_ptr<Strategy> make_strategy(
    const ResolvedAcceleratorOptions& options, bool distributed);

// One factory per strategy file (strategies/<name>.cpp).
std::unique_ptr<Strategy> make_single_process_strategy();
std::unique_ptr<Strategy> make_ddp_strategy();
std::unique_ptr<Strategy> make_zero_strategy();
std::unique_ptr<Strategy> make_fsdp_strategy();

}  // namespace ampkit::detail
