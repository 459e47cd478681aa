// One process, no sharding: the model and optimizer run as they are, and
// every hook of the Strategy keeps its default (nothing to do).
#include "accelerator/strategies/strategy.h"

namespace ampkit::detail {
namespace {

class SingleProcessStrategy : public Strategy {
 public:
  void setup_module(AcceleratorState&, ModelEntry&) override {}
  void setup_optimizer(AcceleratorState&, PreparedOptimizerEntry&) override {}
  std::string describe(const AcceleratorState&) const override {
    return "one process";
  }
};

}  // namespace

std::unique_ptr<Strategy> make_single_process_strategy() {
  return std::make_unique<SingleProcessStrategy>();
}

}  // namespace ampkit::detail
