// The DDP strategy of ddp.h.
#include "accelerator/strategies/ddp.h"

#include <unordered_set>

#include "accelerator/state.h"

namespace ampkit::detail {

void DdpStrategy::setup_module(AcceleratorState& st, ModelEntry& model) {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& item : model.module->named_parameters()) {
    params.emplace_back(item.key(), item.value());
  }
  const auto& r = st.options;
  std::optional<torch::Dtype> compression;
  if (r.gradient_compression != Precision::no) {
    compression = to_dtype(r.gradient_compression);
  }
  model.synchronizer = std::make_unique<dist::GradientSynchronizer>(
      st.process.group,
      std::move(params),
      model.module->buffers(),
      dist::SyncOptions()
          .bucket_cap_mb(r.bucket_cap_mb)
          .find_unused_parameters(r.find_unused_parameters)
          .compression(compression)
          .broadcast_buffers(r.broadcast_buffers)
          .gradient_as_bucket_view(r.gradient_as_bucket_view)
          .static_graph(r.static_graph)
          // Stage 2 reduce-scatters instead (ShardedOptimizer).
          .reduce_gradients(r.zero_stage < 2));
}

void DdpStrategy::before_forward(AcceleratorState& st, ModelEntry& model) {
  if (model.synchronizer) {
    model.synchronizer->before_forward(st.gradient.synchronising());
  }
}

void DdpStrategy::after_forward(
    AcceleratorState& st,
    ModelEntry& model,
    const std::vector<at::Tensor>& outputs) {
  if (model.synchronizer) {
    model.synchronizer->after_forward(outputs, st.gradient.synchronising());
  }
}

void DdpStrategy::after_backward(AcceleratorState& st) {
  for (auto& model : st.models) {
    if (model.synchronizer) {
      model.synchronizer->after_backward();
    }
  }
}

void DdpStrategy::before_optimizer_step(
    AcceleratorState& st, PreparedOptimizerEntry& optimizer) {
  // Usually no model awaits a backward here: nothing is looked up.
  std::unordered_set<const void*> stepped;
  for (const auto& model : st.models) {
    if (!model.synchronizer || !model.synchronizer->awaiting_backward()) {
      continue;
    }
    if (stepped.empty()) {
      for (const auto& p : optimizer_parameters(optimizer)) {
        stepped.insert(p.unsafeGetTensorImpl());
      }
    }
    for (const auto& p : model.module->parameters()) {
      if (stepped.count(p.unsafeGetTensorImpl()) > 0) {
        model.synchronizer->check_backward_done();
        break;
      }
    }
  }
}

std::unique_ptr<Strategy> make_ddp_strategy() {
  return std::make_unique<DdpStrategy>();
}

}  // namespace ampkit::detail
