// What the Accelerator keeps of each prepared model and optimizer, with
// what its strategy wrapped them in. Only the strategy files
// (strategies/*.cpp) look inside those wrappers; the rest of the
// Accelerator goes through the Strategy interface.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>

#include "ampkit/distributed/ddp.h"
#include "ampkit/distributed/fsdp.h"
#include "ampkit/optim/zero.h"

namespace ampkit::detail {

/// How a prepared optimizer steps.
enum class FusedStep {
  none,   // optimizer.step(), through the GradScaler's unscale_ when scaling
  aten,   // optim::aten_fused_step (LibTorch >= 2.4), scaling folded in
  ampkit  // detail::fused_step (Adam/AdamW on the CPU, LibTorch < 2.4),
          // scaling folded in
};

struct PreparedOptimizerEntry {
  torch::optim::Optimizer* optimizer = nullptr;
  bool stepped = false;   // stepped since the last scale update
  bool unscaled = false;  // unscale_ ran since the last scale update
  // Whether the last step that ran was skipped: known, or found_inf on the
  // device, read by the host only when someone asks (skipped()).
  torch::Tensor found_inf;
  mutable std::optional<bool> skipped_known = false;
  bool skipped() const {
    if (!skipped_known) {
      skipped_known = found_inf.item<float>() != 0.0f;
    }
    return *skipped_known;
  }
  FusedStep fused = FusedStep::none;
  // zero_stage 1 or 2: the optimizer steps this process's shard.
  std::shared_ptr<optim::ShardedOptimizer> sharded;
  // FSDP: the model whose shards this optimizer steps (each process its
  // own shards; saved per process).
  dist::FullyShardedModel* fsdp = nullptr;
};

/// One prepared model and what its strategy wrapped it in (at most one).
struct ModelEntry {
  std::shared_ptr<torch::nn::Module> module;
  // DDP and ZeRO in a process group: its gradients' all-reduce.
  std::unique_ptr<dist::GradientSynchronizer> synchronizer;
  // FSDP: its shards (also in one process).
  std::shared_ptr<dist::FullyShardedModel> fsdp;
};

}  // namespace ampkit::detail
