// How a run spreads over processes, as Lightning Fabric's Strategy: one
// interface, one file per strategy (single process, DDP, ZeRO-1/2, FSDP),
// picked once from the resolved options by make_strategy. What differs
// between the strategies lives in their files; the Accelerator only calls
// this interface around the user's steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace ampkit {
struct ResolvedAcceleratorOptions;
}

namespace ampkit::detail {

struct AcceleratorState;
struct ModelEntry;
struct PreparedOptimizerEntry;

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
};

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
