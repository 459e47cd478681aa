// The Strategy interface's defaults (nothing to do around a step) and the
// factory that picks one strategy from the resolved options.
#include "accelerator/strategies/strategy.h"

#include <stdexcept>

#include "accelerator/state.h"
#include "ampkit/accelerator/options.h"
#include "ampkit/checkpoint/model_io.h"
#include "ampkit/optim/zero.h"
#include "utils/strings.h"

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

std::optional<ShardedGradients> Strategy::sharded_gradients(
    AcceleratorState&, const std::vector<at::Tensor>&) {
  return std::nullopt;
}

at::Tensor Strategy::sharded_norm(
    AcceleratorState& st,
    const std::vector<at::Tensor>&,
    const ShardedGradients& grads,
    double norm_type) {
  std::vector<at::Tensor> norms;
  for (const auto& g : grads.all()) {
    norms.push_back(gradient_norm(g, norm_type));
  }
  return combine_norms(std::move(norms), norm_type, st.options.device);
}

at::Tensor Strategy::gradient_of(
    const AcceleratorState&, const at::Tensor& param) const {
  return param.grad();
}

void Strategy::before_optimizer_step(
    AcceleratorState&, PreparedOptimizerEntry&) {}
void Strategy::after_optimizer_step(
    AcceleratorState&, PreparedOptimizerEntry&) {}

std::vector<at::Tensor> Strategy::clipped_parameters(
    const PreparedOptimizerEntry& optimizer) const {
  return optimizer_parameters(optimizer);
}

void Strategy::zero_grad(PreparedOptimizerEntry& optimizer, bool set_to_none) {
  for (auto& group : optimizer.optimizer->param_groups()) {
    optim::clear_gradients(group.params(), set_to_none);
  }
}

int64_t Strategy::gradient_bytes(
    const PreparedOptimizerEntry& optimizer) const {
  return optim::gradient_bytes(optimizer_parameters(optimizer));
}

bool Strategy::saves_model_shards(const ModelEntry&) const {
  return false;
}

std::string Strategy::encode_model_shards(const ModelEntry&) const {
  throw std::logic_error(
      "ampkit: encode_model_shards of a strategy that saves whole models");
}

checkpoint::NamedTensors Strategy::full_model_state(
    AcceleratorState&, ModelEntry& model, bool keep) {
  return keep ? checkpoint::model_state(*model.module)
              : checkpoint::NamedTensors{};
}

ModelLoad Strategy::model_load_from_full(
    const ModelEntry& model,
    checkpoint::NamedTensors state,
    std::string origin) const {
  checkpoint::check_model_state(*model.module, state, origin);
  return ModelLoad{std::move(state), {}, std::move(origin)};
}

bool Strategy::loads_model_shards() const {
  return false;
}

ModelLoad Strategy::model_load_from_shards(
    const ModelEntry&,
    int64_t,
    int64_t,
    std::string,
    const std::function<checkpoint::Safetensors(int64_t)>&) const {
  throw std::logic_error(
      "ampkit: model_load_from_shards of a strategy that loads whole models");
}

void Strategy::apply_model_load(ModelEntry& model, ModelLoad& load) {
  checkpoint::load_model_state(*model.module, load.tensors, load.origin);
}

checkpoint::Manifest::Partition Strategy::optimizer_partition(
    const AcceleratorState&, const PreparedOptimizerEntry&) const {
  return {};
}

void Strategy::load_repartitioned(
    AcceleratorState&,
    PreparedOptimizerEntry&,
    const checkpoint::Manifest::Partition& saved,
    const std::function<void(int64_t)>&) {
  throw std::logic_error(
      str("ampkit: load_repartitioned of a whole optimizer (saved with "
          "zero_stage ",
          saved.zero_stage,
          ")"));
}

void Strategy::check_accelerate_format(const AcceleratorState&, bool) const {}

void agree_on_found_inf(AcceleratorState& st) {
  if (st.scaler && st.process.group) {
    auto group = st.process.group;
    st.scaler->set_found_inf_combiner([group](torch::Tensor& found_inf) {
      group->all_reduce(found_inf, dist::ReduceOp::max);
    });
  }
}

std::vector<at::Tensor> optimizer_parameters(
    const PreparedOptimizerEntry& optimizer) {
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer.optimizer->param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  return params;
}

std::vector<at::Tensor> ShardedGradients::all() const {
  std::vector<at::Tensor> grads = shards;
  grads.insert(grads.end(), replicated.begin(), replicated.end());
  return grads;
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
