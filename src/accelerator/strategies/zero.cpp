// ZeRO-1/2 (DeepSpeed's stages, zero_stage 1 or 2): DDP's models, each
// optimizer stepping this process's shard (optim::ShardedOptimizer).
// Stage 2 reduce-scatters the gradients into the shards instead of DDP's
// all-reduce; in one process the shard is everything.
#include <algorithm>
#include <cmath>

#include "accelerator/state.h"
#include "accelerator/strategies/ddp.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::detail {
namespace {

class ZeroStrategy : public DdpStrategy {
 public:
  void setup_module(AcceleratorState& st, ModelEntry& model) override {
    if (st.process.group) {
      DdpStrategy::setup_module(st, model);
    }
  }
  void setup_optimizer(
      AcceleratorState& st, PreparedOptimizerEntry& entry) override {
    entry.sharded = std::make_shared<optim::ShardedOptimizer>(
        *entry.optimizer,
        st.process.group,
        st.options.zero_stage,
        // Under one byte (bucket_cap_mb is only checked positive): one
        // parameter per bucket, as DDP takes it.
        std::max<int64_t>(
            1, static_cast<int64_t>(st.options.bucket_cap_mb * 1024 * 1024)));
    agree_on_found_inf(st);
  }
  void before_backward(AcceleratorState& st) override {
    if (!st.gradient.synchronising()) {
      return;
    }
    for (auto& entry : st.optimizers) {
      if (entry.sharded) {
        entry.sharded->prepare_for_backward();  // ZeRO-2: reduce during it
      }
    }
  }
  std::optional<ShardedGradients> sharded_gradients(
      AcceleratorState& st,
      const std::vector<at::Tensor>& parameters) override {
    std::optional<ShardedGradients> out;
    std::vector<bool> managed(parameters.size(), false);
    for (const auto& entry : st.optimizers) {
      if (!entry.sharded) {
        continue;
      }
      if (!out) {
        out.emplace();
      }
      std::vector<bool> here;
      for (auto& g : entry.sharded->shard_gradients(parameters, here)) {
        out->shards.push_back(g);
      }
      for (size_t i = 0; i < parameters.size(); ++i) {
        managed[i] = managed[i] || here[i];
      }
    }
    if (out) {
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (!managed[i] && parameters[i].grad().defined()) {
          out->replicated.push_back(parameters[i].grad());
        }
      }
    }
    return out;
  }

  // The norm over every process's shard, from each process's part (sum of
  // |g|^p, or the max) combined across processes. Gradients that no sharded
  // optimizer holds are the same on every process: counted once.
  at::Tensor sharded_norm(
      AcceleratorState& st,
      const std::vector<at::Tensor>&,
      const ShardedGradients& grads,
      double norm_type) override {
    const c10::Device device = st.options.device;
    const bool inf = std::isinf(norm_type);
    torch::Tensor local =
        torch::zeros({}, torch::TensorOptions().device(device));
    auto add = [&](const torch::Tensor& g) {
      const torch::Tensor n = g.norm(norm_type).to(device);
      local = inf ? torch::maximum(local, n) : local + n.pow(norm_type);
    };
    for (const auto& g : grads.shards) {
      add(g);
    }
    if (st.process.process_index == 0 || inf) {
      for (const auto& g : grads.replicated) {
        add(g);
      }
    }
    if (st.process.group) {
      st.collective("clip_grad_norm_ (norm across shards)", [&] {
        st.process.group->all_reduce(
            local, inf ? dist::ReduceOp::max : dist::ReduceOp::sum);
      });
    }
    return inf ? local : local.pow(1.0 / norm_type);
  }

  // Stage 2 freed it after the reduce: this process's part of the reduced
  // gradient is in its shard.
  at::Tensor gradient_of(
      const AcceleratorState& st, const at::Tensor& param) const override {
    torch::Tensor grad = param.grad();
    for (size_t i = 0; !grad.defined() && i < st.optimizers.size(); ++i) {
      if (const auto& sharded = st.optimizers[i].sharded) {
        std::vector<bool> managed;
        const auto parts = sharded->shard_gradients({param}, managed);
        if (!parts.empty()) {
          grad = parts.front();
        }
      }
    }
    return grad;
  }

  void before_optimizer_step(
      AcceleratorState&, PreparedOptimizerEntry& entry) override {
    if (!entry.sharded->has_reduced_gradients()) {
      throw UsageError(
          component::kAccelerator,
          "optimizer.step() with zero_stage " +
              std::to_string(entry.sharded->stage()) +
              " found no gradients reduced into this process's shard since "
              "the last step. Call accelerator.backward(loss), not "
              "loss.backward(): under ZeRO the gradients reach the shard "
              "there.");
    }
  }

  void after_optimizer_step(
      AcceleratorState& st, PreparedOptimizerEntry& entry) override {
    // Each process stepped its shard (or, when the step was skipped, none
    // did): every process's shard to every process.
    st.collective("ZeRO parameter broadcast", [&] {
      entry.sharded->gather_parameters();
    });
  }

  std::vector<at::Tensor> clipped_parameters(
      const PreparedOptimizerEntry& entry) const override {
    return entry.sharded->parameters();
  }

  // The optimizer holds the shard; the parameters' own gradients are the
  // model's.
  void zero_grad(PreparedOptimizerEntry& entry, bool set_to_none) override {
    entry.sharded->zero_grad(set_to_none);
  }

  int64_t gradient_bytes(const PreparedOptimizerEntry& entry) const override {
    return entry.sharded->gradient_bytes();
  }

  std::string describe(const AcceleratorState& st) const override {
    return str("zero_stage ", st.options.zero_stage);
  }

  // Each process saves its shard, at these boundaries.
  checkpoint::Manifest::Partition optimizer_partition(
      const AcceleratorState&,
      const PreparedOptimizerEntry& entry) const override {
    return {entry.sharded->stage(), entry.sharded->boundaries()};
  }

  void load_repartitioned(
      AcceleratorState&,
      PreparedOptimizerEntry& entry,
      const checkpoint::Manifest::Partition& saved,
      const std::function<void(int64_t)>& load) override {
    entry.sharded->load_resplit(saved.boundaries, load);
  }

  void check_accelerate_format(
      const AcceleratorState& st, bool saving) const override {
    if (saving && !st.optimizers.empty()) {
      throw UsageError(
          component::kAccelerator,
          str("save_state(dir, SaveFormat::accelerate) writes whole "
              "optimizer states, and the prepared optimizers are sharded by "
              "ZeRO (zero_stage ",
              st.options.zero_stage,
              "). Save in ampkit's format (the default), or train without "
              "ZeRO to hand the run to Python."));
    }
  }

  void after_backward(AcceleratorState& st) override {
    DdpStrategy::after_backward(st);
    if (!st.gradient.synchronising()) {
      return;
    }
    for (auto& entry : st.optimizers) {
      if (entry.sharded) {
        st.collective("ZeRO gradient reduce-scatter", [&] {
          entry.sharded->reduce_gradients();
        });
      }
    }
  }
};

}  // namespace

std::unique_ptr<Strategy> make_zero_strategy() {
  return std::make_unique<ZeroStrategy>();
}

}  // namespace ampkit::detail
