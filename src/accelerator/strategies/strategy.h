// How a run spreads over processes, as Lightning Fabric's Strategy: one
// interface, one file per strategy (single process, DDP, ZeRO-1/2, FSDP),
// picked once from the resolved options by make_strategy. What differs
// between the strategies lives in their files; the Accelerator only calls
// this interface around the user's steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ampkit/checkpoint/checkpoint_dir.h"
#include "ampkit/checkpoint/safetensors.h"

namespace ampkit {
struct ResolvedAcceleratorOptions;
}

namespace ampkit::detail {

struct AcceleratorState;
struct ModelEntry;
struct PreparedOptimizerEntry;

/// A model's weights as load_state and load_model read them, checked
/// before anything changes (Strategy::model_load_*), then set by
/// Strategy::apply_model_load.
struct ModelLoad {
  checkpoint::NamedTensors tensors;  // whole; under FSDP its buffers only
  std::vector<at::Tensor> shards;    // FSDP: this process's flat shards
  std::string origin;                // the file, for messages
};

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

  // Checkpoints (accelerator/checkpointing.cpp): how each model's and
  // optimizer's state is laid out over the processes, taken apart to save
  // and put together again to load. The defaults are a whole model and a
  // whole optimizer, saved by the writer and the same on every process.

  /// How the run is spread, for messages: "FSDP", "zero_stage 2", ...
  virtual std::string describe(const AcceleratorState& st) const = 0;
  /// Whether each process saves its own file of `model`'s weights (FSDP's
  /// SHARDED_STATE_DICT) rather than the writer one whole file.
  virtual bool saves_model_shards(const ModelEntry& model) const;
  /// This process's file of `model` when saves_model_shards (safetensors).
  virtual std::string encode_model_shards(const ModelEntry& model) const;
  /// `model`'s whole weights to save: a collective where they are
  /// sharded; empty where `keep` is false (a process that writes nothing).
  virtual checkpoint::NamedTensors full_model_state(
      AcceleratorState& st, ModelEntry& model, bool keep);
  /// From whole weights (a FULL_STATE_DICT or save_model's files).
  virtual ModelLoad model_load_from_full(
      const ModelEntry& model,
      checkpoint::NamedTensors state,
      std::string origin) const;
  /// Whether model_load_from_shards can take the per-process files that
  /// saves_model_shards writes.
  virtual bool loads_model_shards() const;
  /// From the per-process files `saved_processes` processes saved
  /// (`read(q)`: process q's); the buffers come from `buffers_from`'s.
  virtual ModelLoad model_load_from_shards(
      const ModelEntry& model,
      int64_t saved_processes,
      int64_t buffers_from,
      std::string origin,
      const std::function<checkpoint::Safetensors(int64_t)>& read) const;
  virtual void apply_model_load(ModelEntry& model, ModelLoad& load);

  /// How `optimizer`'s state is split over the processes (zero_stage 0 and
  /// no boundaries: whole, one file the writer saves; else one file per
  /// process, each its shard).
  virtual checkpoint::Manifest::Partition optimizer_partition(
      const AcceleratorState& st,
      const PreparedOptimizerEntry& optimizer) const;
  /// Loads a state saved with the same stage at other boundaries (another
  /// process count): `load(q)` loads saved process q's file into the
  /// optimizer; the shards are joined and split again for this process.
  virtual void load_repartitioned(
      AcceleratorState& st,
      PreparedOptimizerEntry& optimizer,
      const checkpoint::Manifest::Partition& saved,
      const std::function<void(int64_t)>& load);
  /// Refuses, naming why and what to do instead, what accelerate's folder
  /// format cannot hold under this strategy (`saving`: save_state with
  /// SaveFormat::accelerate, else load_state of accelerate's folder).
  virtual void check_accelerate_format(
      const AcceleratorState& st, bool saving) const;
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
