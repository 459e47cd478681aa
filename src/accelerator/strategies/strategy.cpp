// The Strategy interface's defaults (nothing to do around a step) and the
// factory that picks one strategy from the resolved options.
#include "accelerator/strategies/strategy.h"

#include "ampkit/accelerator/options.h"

namespace ampkit::detail {

void Strategy::before_forward(AcceleratorState&, ModelEntry&) {}
void Strategy::after_forward(
    AcceleratorState&, ModelEntry&, const std::vector<at::Tensor>&) {}
void Strategy::before_backward(AcceleratorState&) {}
void Strategy::after_backward(AcceleratorState&) {}
void Strategy::gather_full_params(AcceleratorState&) {}
void Strategy::release_full_params(AcceleratorState&) {}
std::vector<std::string> Strategy::units_not_entered(const ModelEntry&) const {
  return {};
}

std::unique_ptr<Strategy> make_strategy(
    const ResolvedAcceleratorOptions& options, bool distributed) {
  if (options.fsdp) {
    return make_fsdp_strategy();  // also in one process
  }
  if (options.zero_stage > 0) {
    return make_zero_strategy();  // also in one process
  }
  if (distributed) {
    return make_ddp_strategy();
  }
  return make_single_process_strategy();
}

}  // namespace ampkit::detail
