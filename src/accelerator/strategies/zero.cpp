// ZeRO-1/2 (DeepSpeed's stages, zero_stage 1 or 2): DDP's models, each
// optimizer stepping this process's shard (optim::ShardedOptimizer).
// Stage 2 reduce-scatters the gradients into the shards instead of DDP's
// all-reduce; in one process the shard is everything.
#include <algorithm>

#include "accelerator/state.h"
#include "accelerator/strategies/ddp.h"

namespace ampkit::detail {
namespace {

class ZeroStrategy : public DdpStrategy {
 public:
  void setup_module(AcceleratorState& st, ModelEntry& model) override {
    if (st.group) {
      DdpStrategy::setup_module(st, model);
    }
  }
  void setup_optimizer(
      AcceleratorState& st, PreparedOptimizerEntry& entry) override {
    entry.sharded = std::make_shared<optim::ShardedOptimizer>(
        *entry.optimizer,
        st.group,
        st.options.zero_stage,
        // Under one byte (bucket_cap_mb is only checked positive): one
        // parameter per bucket, as DDP takes it.
        std::max<int64_t>(
            1, static_cast<int64_t>(st.options.bucket_cap_mb * 1024 * 1024)));
    if (st.scaler && st.group) {
      // Each process checks only its shard's gradients: skip together.
      auto group = st.group;
      st.scaler->set_found_inf_combiner([group](torch::Tensor& found_inf) {
        group->all_reduce(found_inf, dist::ReduceOp::max);
      });
    }
  }
  void before_backward(AcceleratorState& st) override {
    if (!st.synchronising()) {
      return;
    }
    for (auto& entry : st.optimizers) {
      if (entry.sharded) {
        entry.sharded->prepare_for_backward();  // ZeRO-2: reduce during it
      }
    }
  }
  void after_backward(AcceleratorState& st) override {
    DdpStrategy::after_backward(st);
    if (!st.synchronising()) {
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
