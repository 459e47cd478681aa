// ScheduleFreeAdamW: the schedulefree package's AdamWScheduleFree.step,
// train and eval, op for op (its per-parameter branch), so the trajectory
// matches the package's to rounding.
#include "ampkit/optim/schedule_free.h"

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "ampkit/error.h"
#include "optim/compat.h"
#include "utils/components.h"

namespace ampkit::optim {

namespace {

using Options = ScheduleFreeAdamWOptions;
using ParamState = ScheduleFreeAdamWParamState;

void check(bool ok, const std::string& what, double value) {
  if (!ok) {
    throw InvalidArgument(
        component::kScheduleFreeAdamW,
        what + ", got " + std::to_string(value) + ".");
  }
}
}  // namespace

ScheduleFreeAdamWOptions::ScheduleFreeAdamWOptions(double lr) : lr_(lr) {}

void ScheduleFreeAdamWOptions::serialize(
    torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(warmup_steps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(r);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_lr_power);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(k);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(train_mode);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_sum);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr_max);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(scheduled_lr);
}

void ScheduleFreeAdamWOptions::serialize(
    torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, warmup_steps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, r);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_lr_power);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, k);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, train_mode);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_sum);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr_max);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, scheduled_lr);
}

double ScheduleFreeAdamWOptions::get_lr() const {
  return lr();
}

void ScheduleFreeAdamWOptions::set_lr(const double lr) {
  this->lr(lr);
}

void ScheduleFreeAdamWParamState::serialize(
    torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(z);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void ScheduleFreeAdamWParamState::serialize(
    torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, z);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

ScheduleFreeAdamW::ScheduleFreeAdamW(
    const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
    ScheduleFreeAdamWOptions defaults)
    : Optimizer(param_groups, std::make_unique<Options>(defaults)) {
  const auto [beta1, beta2] = defaults.betas();
  check(defaults.lr() >= 0, "lr must be >= 0", defaults.lr());
  check(defaults.eps() >= 0, "eps must be >= 0", defaults.eps());
  // beta1 = 0 would divide by zero in eval() (1 - 1/beta1).
  check(beta1 > 0 && beta1 < 1, "beta1 must be in (0, 1)", beta1);
  check(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1)", beta2);
  check(
      defaults.weight_decay() >= 0,
      "weight_decay must be >= 0",
      defaults.weight_decay());
  check(
      defaults.warmup_steps() >= 0,
      "warmup_steps must be >= 0",
      static_cast<double>(defaults.warmup_steps()));
}

bool ScheduleFreeAdamW::train_mode() const {
  return static_cast<const Options&>(param_groups().at(0).options())
      .train_mode();
}

void ScheduleFreeAdamW::train() {
  switch_mode(true);
}

void ScheduleFreeAdamW::eval() {
  switch_mode(false);
}

void ScheduleFreeAdamW::switch_mode(bool to_train) {
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    auto& options = static_cast<Options&>(group.options());
    if (options.train_mode() == to_train) {
      continue;
    }
    const double beta1 = std::get<0>(options.betas());
    const double weight = to_train ? 1 - beta1 : 1 - 1 / beta1;
    for (auto& p : group.params()) {
      auto it = state().find(ampkit::detail::state_key(p));
      if (it != state().end()) {
        const auto& z = static_cast<ParamState&>(*it->second).z();
        p.lerp_(z.to(p.device()), weight);
      }
    }
    options.train_mode(to_train);
  }
}

torch::Tensor ScheduleFreeAdamW::step(LossClosure closure) {
  if (!train_mode()) {
    throw UsageError(
        component::kScheduleFreeAdamW,
        "step() in eval mode. Call optimizer.train() before training and "
        "optimizer.eval() before evaluating or saving, as with the "
        "schedulefree package.");
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    auto& o = static_cast<Options&>(group.options());
    const auto [beta1, beta2] = o.betas();
    const int64_t k = o.k();
    const double sched =
        k < o.warmup_steps()
            ? static_cast<double>(k + 1) / static_cast<double>(o.warmup_steps())
            : 1.0;
    const double bias_correction2 =
        1 - std::pow(beta2, static_cast<double>(k + 1));
    const double lr = o.lr() * sched;
    o.scheduled_lr(lr);
    const double lr_max = std::max(lr, o.lr_max());
    o.lr_max(lr_max);
    const double weight = std::pow(static_cast<double>(k + 1), o.r()) *
                          std::pow(lr_max, o.weight_lr_power());
    o.weight_sum(o.weight_sum() + weight);
    const double ckp1 = o.weight_sum() != 0 ? weight / o.weight_sum() : 0;
    for (auto& y : group.params()) {
      if (!y.grad().defined()) {
        continue;
      }
      auto& slot = state()[ampkit::detail::state_key(y)];
      if (!slot) {
        auto fresh = std::make_unique<ParamState>();
        fresh->z(y.clone(at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(y, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<ParamState&>(*slot);
      auto& z = s.z();
      auto& exp_avg_sq = s.exp_avg_sq();
      const auto& grad = y.grad();
      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const auto denom = exp_avg_sq.div(bias_correction2).sqrt_().add_(o.eps());
      // The package divides p.grad in place; a copy leaves the gradient
      // as backward wrote it, with the same values.
      auto normalized = grad.div(denom);
      if (o.weight_decay() != 0) {
        normalized.add_(y, o.weight_decay());
      }
      y.lerp_(z, ckp1);
      y.add_(normalized, lr * (beta1 * (1 - ckp1) - 1));
      z.sub_(normalized, lr);
    }
    o.k(k + 1);
  }
  return loss;
}

// LibTorch's optimizer serialization writes each group's options but does
// not read them back (its load restores the per-parameter state only);
// here the options hold the running k, weight_sum, lr_max and mode, so
// they are written again under their own key and restored.
constexpr const char* kGroupOptions = "ampkit_schedule_free_groups";

void ScheduleFreeAdamW::save(torch::serialize::OutputArchive& archive) const {
  serialize(*this, archive);
  torch::serialize::OutputArchive groups;
  for (size_t i = 0; i < param_groups().size(); ++i) {
    torch::serialize::OutputArchive group;
    static_cast<const Options&>(param_groups()[i].options()).serialize(group);
    groups.write(std::to_string(i), group);
  }
  archive.write(kGroupOptions, groups);
}

void ScheduleFreeAdamW::load(torch::serialize::InputArchive& archive) {
  serialize(*this, archive);
  torch::serialize::InputArchive groups;
  if (!archive.try_read(kGroupOptions, groups)) {
    throw IoError(
        component::kScheduleFreeAdamW,
        "the archive has no per-group state (k, weight_sum, mode); got one "
        "another optimizer wrote. Load what ScheduleFreeAdamW::save wrote.");
  }
  for (size_t i = 0; i < param_groups().size(); ++i) {
    torch::serialize::InputArchive group;
    if (!groups.try_read(std::to_string(i), group)) {
      throw IoError(
          component::kScheduleFreeAdamW,
          "the archive has " + std::to_string(i) +
              " param groups, the optimizer " +
              std::to_string(param_groups().size()) +
              ". Build the optimizer with the groups it was saved with.");
    }
    auto options = std::make_unique<Options>();
    options->serialize(group);
    param_groups()[i].set_options(std::move(options));
  }
}

}  // namespace ampkit::optim
