// DDP: each model's gradients averaged over the processes by c10d's
// Reducer (dist::GradientSynchronizer), all-reduced in buckets during
// backward. ZeRO (zero.cpp) runs on top of it.
#pragma once

#include "accelerator/strategies/strategy.h"

namespace ampkit::detail {

class DdpStrategy : public Strategy {
 public:
  void setup_module(AcceleratorState& st, ModelEntry& model) override;
  void setup_optimizer(AcceleratorState&, PreparedOptimizerEntry&) override {}
  std::string describe(const AcceleratorState&) const override {
    return "DDP";
  }
  void before_forward(AcceleratorState& st, ModelEntry& model) override;
  void after_forward(
      AcceleratorState& st,
      ModelEntry& model,
      const std::vector<at::Tensor>& outputs) override;
  void after_backward(AcceleratorState& st) override;
  /// A model of this optimizer whose synchronising forward no backward
  /// reached is refused, naming its parameters.
  void before_optimizer_step(
      AcceleratorState& st, PreparedOptimizerEntry& optimizer) override;
};

}  // namespace ampkit::detail
