// The fused Adam/AdamW step: agreement with LibTorch's own step() over many
// steps, state shared with step() and through save/load, and every reason it
// refuses an optimizer.
#include "optim/fused_step.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include "amp/compat.h"
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/error.h"
#include "optim/param_info.h"
#include "test_util.h"

namespace ampkit::detail {
namespace {

using ::testing::HasSubstr;

// Max |fused - plain| / max |plain| over every tensor: relative to each
// tensor's scale, so parameters that cross zero do not inflate it.
// Measured on LibTorch 1.13: 0 (bit-identical) with its AVX2 and AVX-512
// kernels, 2.6e-7 with ATEN_CPU_CAPABILITY=default (ATen then rounds its
// multiply-adds twice, the fused loop still once).
constexpr double kMaxRelDiff = 5e-7;
constexpr int kSteps = 100;

enum class Kind { kAdam, kAdamW };

// exp_avg and exp_avg_sq of p (AdamParamState and AdamWParamState alike).
std::vector<torch::Tensor> moments(
    torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  const auto& state = *optimizer.state().at(state_key(p));
  if (const auto* adam =
          dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    return {adam->exp_avg(), adam->exp_avg_sq()};
  }
  const auto& adamw = dynamic_cast<const torch::optim::AdamWParamState&>(state);
  return {adamw.exp_avg(), adamw.exp_avg_sq()};
}

int64_t step_of(torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  const auto& state = *optimizer.state().at(state_key(p));
  if (const auto* adam =
          dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    return adam->step();
  }
  return dynamic_cast<const torch::optim::AdamWParamState&>(state).step();
}

// Group 0: a tensor above the kernel's serial threshold (threaded path), one
// with a ragged tail and a tiny matrix; group 1: another size, another lr.
std::vector<std::vector<torch::Tensor>> make_params() {
  const std::vector<std::vector<std::vector<int64_t>>> shapes = {
      {{300, 200}, {37}, {5, 7}}, {{128, 64}, {1}}};
  std::vector<std::vector<torch::Tensor>> groups;
  for (const auto& group_shapes : shapes) {
    std::vector<torch::Tensor> group;
    for (const auto& shape : group_shapes) {
      group.push_back(torch::randn(shape).requires_grad_());
    }
    groups.push_back(group);
  }
  return groups;
}

std::vector<std::vector<torch::Tensor>> clone_params(
    const std::vector<std::vector<torch::Tensor>>& groups) {
  std::vector<std::vector<torch::Tensor>> out;
  for (const auto& group : groups) {
    std::vector<torch::Tensor> copy;
    for (const auto& p : group) {
      copy.push_back(p.detach().clone().requires_grad_());
    }
    out.push_back(copy);
  }
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    Kind kind,
    const std::vector<std::vector<torch::Tensor>>& groups,
    double weight_decay) {
  const std::vector<double> lrs = {1e-2, 3e-3};
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (kind == Kind::kAdam) {
      param_groups.emplace_back(
          groups[g],
          std::make_unique<torch::optim::AdamOptions>(
              torch::optim::AdamOptions(lrs[g]).weight_decay(weight_decay)));
    } else {
      param_groups.emplace_back(
          groups[g],
          std::make_unique<torch::optim::AdamWOptions>(
              torch::optim::AdamWOptions(lrs[g]).weight_decay(weight_decay)));
    }
  }
  if (kind == Kind::kAdam) {
    return std::make_unique<torch::optim::Adam>(param_groups);
  }
  return std::make_unique<torch::optim::AdamW>(param_groups);
}

std::vector<torch::Tensor> flat(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> out;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      out.push_back(p);
    }
  }
  return out;
}

// The same random gradient on the i-th parameter of both optimizers.
void set_same_random_grads(
    torch::optim::Optimizer& a, torch::optim::Optimizer& b) {
  auto pa = flat(a);
  auto pb = flat(b);
  for (size_t i = 0; i < pa.size(); ++i) {
    auto g = torch::randn_like(pa[i]);
    pa[i].mutable_grad() = g.clone();
    pb[i].mutable_grad() = g.clone();
  }
}

struct Diff {
  double max_rel = 0;
  bool identical = true;
};

Diff compare(const torch::Tensor& a, const torch::Tensor& b, Diff d) {
  const double scale = b.abs().max().item<double>();
  const double err = (a - b).abs().max().item<double>();
  d.max_rel = std::max(d.max_rel, scale > 0 ? err / scale : err);
  d.identical = d.identical && torch::equal(a, b);
  return d;
}

// Parameters, and exp_avg/exp_avg_sq where a has state, of two optimizers.
Diff compare(torch::optim::Optimizer& a, torch::optim::Optimizer& b) {
  auto pa = flat(a);
  auto pb = flat(b);
  Diff d;
  for (size_t i = 0; i < pa.size(); ++i) {
    d = compare(pa[i].detach(), pb[i].detach(), d);
    if (a.state().count(detail::state_key(pa[i])) != 0) {
      const auto ma = moments(a, pa[i]);
      const auto mb = moments(b, pb[i]);
      d = compare(ma[0], mb[0], d);
      d = compare(ma[1], mb[1], d);
    }
  }
  return d;
}

void record(const Diff& d) {
  ::testing::Test::RecordProperty(
      "max_rel_diff", ::testing::PrintToString(d.max_rel));
  ::testing::Test::RecordProperty(
      "bit_identical", d.identical ? "true" : "false");
}

// kSteps fused steps against kSteps of LibTorch's step() on a twin.
Diff run_against_libtorch(Kind kind, double weight_decay) {
  torch::manual_seed(0);
  auto params = make_params();
  auto fused = make_optimizer(kind, params, weight_decay);
  auto plain = make_optimizer(kind, clone_params(params), weight_decay);
  EXPECT_EQ(fused_step_unsupported_reason(*fused), std::nullopt);
  for (int step = 0; step < kSteps; ++step) {
    set_same_random_grads(*fused, *plain);
    fused_step(*fused);
    plain->step();
  }
  return compare(*fused, *plain);
}

TEST(FusedStepTest, FusedAdamMatchesLibTorchAdamOver100Steps) {
  const Diff d = run_against_libtorch(Kind::kAdam, 0);
  record(d);
  EXPECT_LE(d.max_rel, kMaxRelDiff);
}

TEST(FusedStepTest, FusedAdamWithL2WeightDecayMatchesLibTorchAdamOver100Steps) {
  const Diff d = run_against_libtorch(Kind::kAdam, 0.05);
  record(d);
  EXPECT_LE(d.max_rel, kMaxRelDiff);
}

TEST(FusedStepTest, FusedAdamWMatchesLibTorchAdamWOver100Steps) {
  const Diff d = run_against_libtorch(Kind::kAdamW, 0);
  record(d);
  EXPECT_LE(d.max_rel, kMaxRelDiff);
}

TEST(FusedStepTest, FusedAdamWWithWeightDecayMatchesLibTorchAdamWOver100Steps) {
  const Diff d = run_against_libtorch(Kind::kAdamW, 0.05);
  record(d);
  EXPECT_LE(d.max_rel, kMaxRelDiff);
}

// GradScaler + fused_step(grad_scale, found_inf) against GradScaler +
// unscale_ + optimizer.step() on a twin, over 200 scaled steps in which
// gradients now and then hold an inf or a NaN (on one parameter, the rest
// finite) and the scale now and then grows (growth_interval 3): the same
// skipped steps, scales, step counts, unscaled gradients and weights.
void expect_scaled_fused_step_matches_unscale_and_step(
    Kind kind, double weight_decay) {
  SCOPED_TRACE(kind == Kind::kAdam ? "Adam" : "AdamW");
  torch::manual_seed(4);
  auto params = make_params();
  auto fused = make_optimizer(kind, params, weight_decay);
  auto plain = make_optimizer(kind, clone_params(params), weight_decay);
  const auto options = GradScalerOptions().init_scale(1024).growth_interval(3);
  GradScaler fused_scaler(options);
  GradScaler plain_scaler(options);
  const torch::Tensor loss = torch::tensor(1.0f);
  int skipped = 0;
  double largest_scale = 0;
  for (int step = 0; step < 200; ++step) {
    fused_scaler.scale(loss);
    plain_scaler.scale(loss);
    ASSERT_EQ(fused_scaler.get_scale(), plain_scaler.get_scale());
    // The gradients a scaled backward would leave.
    auto pf = flat(*fused);
    auto pp = flat(*plain);
    for (size_t i = 0; i < pf.size(); ++i) {
      auto g = torch::randn_like(pf[i]) * fused_scaler.get_scale();
      if (step % 13 == 5 && i == step % pf.size()) {
        g.view(-1)[g.numel() / 2] =
            step % 2 == 0 ? std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::quiet_NaN();
      }
      pf[i].mutable_grad() = g.clone();
      pp[i].mutable_grad() = g.clone();
    }
    ASSERT_EQ(fused_step_unsupported_reason(*fused), std::nullopt);
    const torch::Tensor found_inf = fused_scaler.step_supporting_amp_scaling(
        *fused, [&](const torch::Tensor& scale, const torch::Tensor& inf) {
          fused_step(*fused, scale, inf);
        });
    const bool plain_stepped = plain_scaler.step(*plain).has_value();
    const bool fused_stepped = found_inf.item<float>() == 0.0f;
    ASSERT_EQ(fused_stepped, plain_stepped) << "step " << step;
    skipped += fused_stepped ? 0 : 1;
    if (fused_stepped) {
      for (size_t i = 0; i < pf.size(); ++i) {
        ASSERT_TRUE(torch::equal(pf[i].grad(), pp[i].grad()))
            << "unscaled gradient of parameter " << i << " at step " << step;
      }
    }
    fused_scaler.update();
    plain_scaler.update();
    largest_scale = std::max(largest_scale, plain_scaler.get_scale());
  }
  EXPECT_EQ(skipped, 15);  // step % 13 == 5 for step < 200
  EXPECT_EQ(fused_scaler.get_scale(), plain_scaler.get_scale());
  EXPECT_GT(largest_scale, 1024.0);  // it grew in between
  for (auto& p : flat(*fused)) {
    EXPECT_EQ(step_of(*fused, p), 200 - skipped);
  }
  const Diff d = compare(*fused, *plain);
  record(d);
  EXPECT_LE(d.max_rel, kMaxRelDiff);
}

TEST(FusedStepTest, ScaledFusedAdamMatchesGradScalerWithPlainStepOver200Steps) {
  expect_scaled_fused_step_matches_unscale_and_step(Kind::kAdam, 0.05);
}

TEST(
    FusedStepTest, ScaledFusedAdamWMatchesGradScalerWithPlainStepOver200Steps) {
  expect_scaled_fused_step_matches_unscale_and_step(Kind::kAdamW, 0.05);
}

TEST(FusedStepTest, FoundInfLeavesEverythingAsItWas) {
  torch::manual_seed(5);
  auto params = make_params();
  auto optimizer = make_optimizer(Kind::kAdamW, params, 0.01);
  auto scratch = make_optimizer(Kind::kAdamW, clone_params(params), 0.01);
  set_same_random_grads(*optimizer, *scratch);
  fused_step(*optimizer);  // creates the state
  set_same_random_grads(*optimizer, *scratch);
  std::vector<torch::Tensor> before;
  for (auto& p : flat(*optimizer)) {
    before.push_back(p.detach().clone());
    before.push_back(p.grad().clone());
    for (const auto& m : moments(*optimizer, p)) {
      before.push_back(m.clone());
    }
  }
  fused_step(*optimizer, torch::tensor(8.0f), torch::tensor(1.0f));
  size_t k = 0;
  for (auto& p : flat(*optimizer)) {
    EXPECT_TRUE(torch::equal(p, before[k++]));
    EXPECT_TRUE(torch::equal(p.grad(), before[k++]));
    for (const auto& m : moments(*optimizer, p)) {
      EXPECT_TRUE(torch::equal(m, before[k++]));
    }
    EXPECT_EQ(step_of(*optimizer, p), 1);
  }
}

TEST(FusedStepTest, FusedAdamWithWeightDecayLeavesTheGradientUntouched) {
  torch::manual_seed(0);
  auto params = make_params();
  auto optimizer = make_optimizer(Kind::kAdam, params, 0.05);
  std::vector<torch::Tensor> grads;
  for (auto& p : flat(*optimizer)) {
    p.mutable_grad() = torch::randn_like(p);
    grads.push_back(p.grad().clone());
  }
  fused_step(*optimizer);
  auto ps = flat(*optimizer);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(torch::equal(ps[i].grad(), grads[i])) << "parameter " << i;
  }
}

TEST(FusedStepTest, StateSavedAfterFusedStepsContinuesInAFreshOptimizer) {
  for (Kind kind : {Kind::kAdam, Kind::kAdamW}) {
    torch::manual_seed(1);
    auto params = make_params();
    auto fused = make_optimizer(kind, params, 0.01);
    // Only for set_same_random_grads' second argument.
    auto scratch = make_optimizer(kind, clone_params(params), 0.01);
    for (int step = 0; step < 5; ++step) {
      set_same_random_grads(*fused, *scratch);
      fused_step(*fused);
    }
    std::stringstream stream;
    {
      torch::serialize::OutputArchive out;
      fused->save(out);
      out.save_to(stream);
    }
    auto loaded = make_optimizer(kind, clone_params(params), 0.01);
    {
      torch::serialize::InputArchive in;
      in.load_from(stream);
      loaded->load(in);
    }
    // clone_params copied the initial values: bring them up to date.
    auto pf = flat(*fused);
    auto pl = flat(*loaded);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < pf.size(); ++i) {
        pl[i].copy_(pf[i]);
      }
    }
    for (int step = 0; step < 5; ++step) {
      set_same_random_grads(*fused, *loaded);
      fused_step(*fused);
      loaded->step();
    }
    const Diff d = compare(*fused, *loaded);
    EXPECT_LE(d.max_rel, kMaxRelDiff);
    for (auto& p : pl) {
      EXPECT_EQ(step_of(*loaded, p), 10);
    }
  }
}

TEST(FusedStepTest, FusedAndPlainStepsInterleaveOnSharedState) {
  for (Kind kind : {Kind::kAdam, Kind::kAdamW}) {
    torch::manual_seed(2);
    auto params = make_params();
    auto mixed = make_optimizer(kind, params, 0.01);
    auto plain = make_optimizer(kind, clone_params(params), 0.01);
    for (int step = 0; step < 20; ++step) {
      set_same_random_grads(*mixed, *plain);
      if (step % 3 == 1) {
        mixed->step();
      } else {
        fused_step(*mixed);
      }
      plain->step();
    }
    const Diff d = compare(*mixed, *plain);
    EXPECT_LE(d.max_rel, kMaxRelDiff);
    for (auto& p : flat(*mixed)) {
      EXPECT_EQ(step_of(*mixed, p), 20);
    }
  }
}

TEST(FusedStepTest, ParametersWithoutGradientsAreSkippedLikeLibTorch) {
  torch::manual_seed(3);
  auto params = make_params();
  auto fused = make_optimizer(Kind::kAdamW, params, 0.01);
  auto plain = make_optimizer(Kind::kAdamW, clone_params(params), 0.01);
  set_same_random_grads(*fused, *plain);
  // No gradient for the second parameter, nor its twin.
  flat(*fused)[1].mutable_grad() = torch::Tensor();
  flat(*plain)[1].mutable_grad() = torch::Tensor();
  const auto before = flat(*fused)[1].detach().clone();
  ASSERT_EQ(fused_step_unsupported_reason(*fused), std::nullopt);
  fused_step(*fused);
  plain->step();
  EXPECT_TRUE(torch::equal(flat(*fused)[1], before));
  EXPECT_EQ(fused->state().size(), plain->state().size());
  EXPECT_EQ(fused->state().size(), flat(*fused).size() - 1);
  EXPECT_EQ(fused->state().count(detail::state_key(flat(*fused)[1])), 0u);
  EXPECT_LE(compare(*fused, *plain).max_rel, kMaxRelDiff);
}

torch::Tensor with_grad(torch::Tensor p) {
  p.mutable_grad() = torch::zeros(p.sizes(), p.options());
  return p;
}

TEST(FusedStepTest, ScaleOrFoundInfThatIsNotACpuFloatScalarIsRefused) {
  auto p = with_grad(torch::randn({4}).requires_grad_());
  torch::optim::Adam adam({p});
  AMPKIT_EXPECT_THROWS_WITH(
      fused_step(adam, torch::tensor({2.0f, 2.0f})),
      InvalidArgument,
      "grad_scale must be a 0-dim float32 CPU tensor");
  AMPKIT_EXPECT_THROWS_WITH(
      fused_step(adam, {}, torch::tensor(0.0, torch::kDouble)),
      InvalidArgument,
      "found_inf must be a 0-dim float32 CPU tensor");
}

TEST(FusedStepTest, PlainAdamAndAdamWAreSupported) {
  auto p = with_grad(torch::randn({4}).requires_grad_());
  torch::optim::Adam adam({p});
  torch::optim::AdamW adamw({p});
  EXPECT_EQ(fused_step_unsupported_reason(adam), std::nullopt);
  EXPECT_EQ(fused_step_unsupported_reason(adamw), std::nullopt);
}

TEST(FusedStepTest, AmsgradIsUnsupported) {
  auto p = with_grad(torch::randn({4}).requires_grad_());
  torch::optim::Adam adam({p}, torch::optim::AdamOptions().amsgrad(true));
  torch::optim::AdamW adamw({p}, torch::optim::AdamWOptions().amsgrad(true));
  auto reason = fused_step_unsupported_reason(adam);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("amsgrad"));
  reason = fused_step_unsupported_reason(adamw);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("amsgrad"));
}

TEST(FusedStepTest, NonDenseParameterWithGradientIsUnsupported) {
  auto p = torch::randn({12}).slice(0, 0, 12, 2).detach().requires_grad_();
  ASSERT_FALSE(p.is_non_overlapping_and_dense());
  torch::optim::AdamW adamw({p});
  // Without a gradient step() skips it, so it does not matter.
  EXPECT_EQ(fused_step_unsupported_reason(adamw), std::nullopt);
  with_grad(p);
  const auto reason = fused_step_unsupported_reason(adamw);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("parameter 0 of param group 0"));
  EXPECT_THAT(*reason, HasSubstr("dense"));
  EXPECT_THAT(*reason, HasSubstr("strides [2]"));
}

// Channels-last convolution weights (Accelerator channels_last): the loop
// walks memory in order, so it steps them as it steps contiguous ones.
TEST(FusedStepTest, ChannelsLastParametersStepLikeLibTorch) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params;
  for (auto shape : {std::vector<int64_t>{32, 1, 3, 3}, {64, 32, 3, 3}}) {
    params.push_back(torch::randn(shape)
                         .contiguous(at::MemoryFormat::ChannelsLast)
                         .requires_grad_());
  }
  params.push_back(torch::randn({64}).requires_grad_());
  std::vector<torch::Tensor> twins;
  for (const auto& p : params) {
    twins.push_back(p.detach().clone().requires_grad_());
  }
  ASSERT_FALSE(twins[1].is_contiguous());
  torch::optim::AdamW fused(params, torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW plain(twins, torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < kSteps; ++step) {
    set_same_random_grads(fused, plain);
    ASSERT_EQ(fused_step_unsupported_reason(fused), std::nullopt);
    fused_step(fused);
    plain.step();
  }
  const Diff d = compare(fused, plain);
  record(d);
  EXPECT_LE(d.max_rel, kMaxRelDiff);
  EXPECT_TRUE(params[1].is_contiguous(at::MemoryFormat::ChannelsLast));
}

TEST(FusedStepTest, GradientLaidOutUnlikeItsParameterIsUnsupported) {
  auto p = torch::randn({2, 3, 4, 4})
               .contiguous(at::MemoryFormat::ChannelsLast)
               .requires_grad_();
  p.mutable_grad() = torch::zeros({2, 3, 4, 4});
  torch::optim::AdamW adamw({p});
  const auto reason = fused_step_unsupported_reason(adamw);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("laid out like it"));
}

TEST(FusedStepTest, NonContiguousGradientIsUnsupported) {
  auto p = torch::randn({4, 6}).requires_grad_();
  p.mutable_grad() = torch::zeros({6, 4}).t();
  torch::optim::Adam adam({p});
  const auto reason = fused_step_unsupported_reason(adam);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("gradient of parameter 0"));
}

TEST(FusedStepTest, DoubleParameterIsUnsupported) {
  auto p = with_grad(torch::randn({3}, torch::kDouble).requires_grad_());
  torch::optim::Adam adam({p});
  const auto reason = fused_step_unsupported_reason(adam);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("float32"));
  EXPECT_THAT(*reason, HasSubstr("got Double"));
}

TEST(FusedStepTest, OtherOptimizersAndSubclassesAreUnsupported) {
  auto p = with_grad(torch::randn({4}).requires_grad_());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  auto reason = fused_step_unsupported_reason(sgd);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("got torch::optim::SGD"));

  struct MyAdamW : torch::optim::AdamW {
    using torch::optim::AdamW::AdamW;
  };
  MyAdamW mine({p});
  reason = fused_step_unsupported_reason(mine);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("MyAdamW"));
}

}  // namespace
}  // namespace ampkit::detail
