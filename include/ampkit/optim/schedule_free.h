// Schedule-free AdamW (Defazio et al. 2024), the update of the
// `schedulefree` package's AdamWScheduleFree: no LR schedule, a linear
// warmup built in, and train()/eval() switching the parameters between the
// point gradients are taken at (y) and the average that is evaluated (x).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace ampkit::optim {

/// The hyper-parameters (the package's defaults), and per param group the
/// running values the package keeps in its group dict: k, train_mode,
/// weight_sum, lr_max, scheduled_lr.
struct ScheduleFreeAdamWOptions
    : public torch::optim::OptimizerCloneableOptions<ScheduleFreeAdamWOptions> {
  ScheduleFreeAdamWOptions(double lr = 0.0025);
  TORCH_ARG(double, lr) = 0.0025;
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;
  /// Linear warmup over this many steps (0: none).
  TORCH_ARG(int64_t, warmup_steps) = 0;
  /// Polynomial weighting of the average, power r.
  TORCH_ARG(double, r) = 0;
  /// During warmup the average weights steps by lr^weight_lr_power.
  TORCH_ARG(double, weight_lr_power) = 2.0;
  // Running values (the package's group entries), saved with the state.
  TORCH_ARG(int64_t, k) = 0;
  TORCH_ARG(bool, train_mode) = false;
  TORCH_ARG(double, weight_sum) = 0;
  TORCH_ARG(double, lr_max) = -1;
  TORCH_ARG(double, scheduled_lr) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override;
  void set_lr(const double lr) override;
};

struct ScheduleFreeAdamWParamState
    : public torch::optim::OptimizerCloneableParamState<
          ScheduleFreeAdamWParamState> {
  TORCH_ARG(torch::Tensor, z);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

/// Call train() before training steps and eval() before evaluating or
/// saving, as with the package (a step in eval mode is an
/// ampkit::UsageError). Its state saves and loads as LibTorch's optimizers'.
class ScheduleFreeAdamW : public torch::optim::Optimizer {
 public:
  explicit ScheduleFreeAdamW(
      const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
      ScheduleFreeAdamWOptions defaults = {});
  explicit ScheduleFreeAdamW(
      std::vector<torch::Tensor> params, ScheduleFreeAdamWOptions defaults = {})
      : ScheduleFreeAdamW(
            {torch::optim::OptimizerParamGroup(std::move(params))},
            std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  /// Parameters to y, where gradients are taken (from x: lerp to z by
  /// 1 - beta1). Does nothing in train mode.
  void train();
  /// Parameters to x, the average to evaluate and save. Does nothing in
  /// eval mode.
  void eval();
  /// Whether the first group is in train mode.
  bool train_mode() const;

  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    _TORCH_OPTIM_SERIALIZE_WITH_TEMPLATE_ARG(ScheduleFreeAdamW);
  }
  void switch_mode(bool to_train);
};

}  // namespace ampkit::optim
