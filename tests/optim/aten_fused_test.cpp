// ATen's fused Adam/AdamW/SGD steps behind LibTorch's optimizers: the same
// training as optimizer.step() within fp32 rounding, with and without loss
// scaling, the same skipped steps, LibTorch's state kept, and every refusal.
#include "ampkit/optim/fused.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "amp/compat.h"
#include "ampkit/accelerator/accelerator.h"
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/error.h"
#include "optim/param_info.h"
#include "test_util.h"

namespace ampkit::optim {
namespace {

using ::testing::HasSubstr;

// The bar for "equal within fp32 rounding" after 200 steps:
// max |fused - plain| / max |plain|, per tensor. Measured on 2.11 CPU (Xeon
// with AVX-512): up to 4.9e-7 for Adam/AdamW.
constexpr double kMaxRelDiff = 1e-6;
constexpr int kSteps = 200;

#define SKIP_WITHOUT_ATEN_FUSED_KERNELS()                                 \
  if (!AMPKIT_TORCH_AT_LEAST(2, 4)) {                                     \
    GTEST_SKIP() << "ATen's fused optimizer kernels run on the CPU from " \
                    "LibTorch 2.4, this is " TORCH_VERSION;               \
  }

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(torch::Tensor x) {  // [B, 6] -> [B, 3]
    return fc2(torch::tanh(fc1(x)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

Net make_net() {
  torch::manual_seed(3);
  return Net();
}

using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(
    std::vector<torch::Tensor>)>;

struct Case {
  const char* name;
  MakeOptimizer make;
};

std::vector<Case> cases() {
  using namespace torch::optim;
  return {
      {"Adam",
       [](auto p) { return std::make_unique<Adam>(p, AdamOptions(1e-2)); }},
      {"Adam weight_decay amsgrad",
       [](auto p) {
         return std::make_unique<Adam>(
             p, AdamOptions(1e-2).weight_decay(0.05).amsgrad(true));
       }},
      {"AdamW",
       [](auto p) {
         return std::make_unique<AdamW>(
             p, AdamWOptions(1e-2).weight_decay(0.1));
       }},
      {"SGD momentum",
       [](auto p) {
         return std::make_unique<SGD>(p, SGDOptions(0.05).momentum(0.9));
       }},
      {"SGD nesterov weight_decay",
       [](auto p) {
         return std::make_unique<SGD>(
             p,
             SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3));
       }},
      {"SGD plain",
       [](auto p) { return std::make_unique<SGD>(p, SGDOptions(0.05)); }},
  };
}

double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

struct TrainingRun {
  std::vector<torch::Tensor> params;
  std::set<int> skipped;
  double final_scale = 0;
};

// kSteps prepared steps, with the GradScaler (fp32, loss scaling on) and
// inf losses at three steps when `loss_scaling`; `fused` picks the path.
// Each step's gradients are a fixed random direction per parameter (the
// loss is linear in the parameters), the same on both paths, so that the
// comparison is of the steps' arithmetic alone: with a model's own
// gradients the two fp32 trajectories feed their last-bit differences back
// into training and drift apart (measured: up to 1.3e-6 after 200 steps).
TrainingRun train(const Case& c, bool fused, bool loss_scaling) {
  Accelerator accelerator(AcceleratorOptions()
                              .mixed_precision("no")
                              .loss_scaling(loss_scaling)
                              .fused_optimizer_step(fused)
                              .quiet(true));
  Net net = make_net();
  auto optimizer_ptr = c.make(net->parameters());
  auto [model, optimizer] = accelerator.prepare(net, *optimizer_ptr);
  const auto x = torch::randn({4, 6});
  const std::set<int> inf_steps = {37, 38, 120};
  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  TrainingRun run;
  for (int step = 0; step < kSteps; ++step) {
    auto scope = accelerator.accumulate(model);
    auto loss = model(x).sum() * 0;
    for (const auto& p : net->parameters()) {
      loss = loss + (p * at::randn(p.sizes(), generator)).sum();
    }
    if (loss_scaling && inf_steps.count(step)) {
      loss = loss * std::numeric_limits<float>::infinity();
    }
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (accelerator.optimizer_step_was_skipped()) {
      run.skipped.insert(step);
    }
  }
  for (const auto& p : net->parameters()) {
    run.params.push_back(p.detach().clone());
  }
  run.final_scale = loss_scaling ? accelerator.scaler()->get_scale() : 0;
  return run;
}

TEST(AtenFusedStepTest, PreparedOptimizersTrainAsTheirOwnStepWithLossScaling) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const TrainingRun fused = train(c, true, true);
    const TrainingRun plain = train(c, false, true);
    EXPECT_EQ(fused.skipped, (std::set<int>{37, 38, 120}));
    EXPECT_EQ(fused.skipped, plain.skipped);
    EXPECT_EQ(fused.final_scale, plain.final_scale);
    for (size_t i = 0; i < fused.params.size(); ++i) {
      EXPECT_LE(
          max_relative_difference(fused.params[i], plain.params[i]),
          kMaxRelDiff)
          << "parameter " << i;
    }
  }
}

TEST(AtenFusedStepTest, PreparedOptimizersTrainAsTheirOwnStepWithoutScaling) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const TrainingRun fused = train(c, true, false);
    const TrainingRun plain = train(c, false, false);
    EXPECT_TRUE(fused.skipped.empty());
    for (size_t i = 0; i < fused.params.size(); ++i) {
      EXPECT_LE(
          max_relative_difference(fused.params[i], plain.params[i]),
          kMaxRelDiff)
          << "parameter " << i;
    }
  }
}

TEST(AtenFusedStepTest, PrepareSaysWhichOptimizerStepsFused) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  testing::internal::CaptureStderr();
  Accelerator accelerator(AcceleratorOptions().mixed_precision("no"));
  auto prepared = accelerator.prepare(net, sgd);
  EXPECT_THAT(
      testing::internal::GetCapturedStderr(),
      HasSubstr("optimizer 0 steps fused (ATen's fused kernels)"));
}

// What GradScaler::step_supporting_amp_scaling hands the kernel, and what
// the gradients look like afterwards: unscaled, as after unscale_ + step.
TEST(AtenFusedStepTest, ScaledGradientsAreUnscaledInsideTheKernel) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  auto p = torch::ones({4}, torch::requires_grad());
  torch::optim::SGD sgd({p}, 0.5);
  GradScaler scaler(GradScalerOptions().init_scale(8));
  (scaler.scale(p.sum() * 3)).backward();  // grad 24 = 3 * scale
  torch::Tensor seen_scale;
  const auto found_inf = scaler.step_supporting_amp_scaling(
      sgd, [&](const torch::Tensor& grad_scale, const torch::Tensor& inf) {
        seen_scale = grad_scale;
        aten_fused_step(sgd, grad_scale, inf);
      });
  EXPECT_EQ(seen_scale.item<float>(), 8.0f);
  EXPECT_EQ(found_inf.item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(p.grad(), torch::full({4}, 3.0f)));
  EXPECT_TRUE(torch::allclose(p.detach(), torch::full({4}, -0.5f)));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 8.0);
}

TEST(AtenFusedStepTest, AfterUnscaleTheKernelGetsNoScale) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  auto p = torch::ones({4}, torch::requires_grad());
  torch::optim::SGD sgd({p}, 0.5);
  GradScaler scaler(GradScalerOptions().init_scale(8));
  (scaler.scale(p.sum() * 3)).backward();
  scaler.unscale_(sgd);  // as before clipping
  bool scale_defined = true;
  scaler.step_supporting_amp_scaling(
      sgd, [&](const torch::Tensor& grad_scale, const torch::Tensor& inf) {
        scale_defined = grad_scale.defined();
        aten_fused_step(sgd, grad_scale, inf);
      });
  EXPECT_FALSE(scale_defined);
  EXPECT_TRUE(torch::allclose(p.detach(), torch::full({4}, -0.5f)));
}

TEST(AtenFusedStepTest, InfGradientSkipsTheStepAndBacksOffTheScale) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  auto p = torch::ones({4}, torch::requires_grad());
  torch::optim::Adam adam({p}, 0.1);
  GradScaler scaler(GradScalerOptions().init_scale(8));
  (scaler.scale(p.sum())).backward();
  p.mutable_grad() = torch::tensor({1.0f, INFINITY, 1.0f, 1.0f});
  const auto found_inf = scaler.step_supporting_amp_scaling(
      adam, [&](const torch::Tensor& grad_scale, const torch::Tensor& inf) {
        aten_fused_step(adam, grad_scale, inf);
      });
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  EXPECT_TRUE(torch::equal(p.detach(), torch::ones({4})));
  // Adam's state exists (created as Adam::step creates it) at step 0.
  const auto& state = static_cast<const torch::optim::AdamParamState&>(
      *adam.state().at(detail::state_key(p)));
  EXPECT_EQ(state.step(), 0);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 4.0);
}

TEST(AtenFusedStepTest, SkippedFirstSgdStepLeavesNoMomentumBuffer) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  auto p = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1).momentum(0.9));
  p.mutable_grad() = torch::tensor({NAN, 1.0f, 1.0f});
  aten_fused_step(sgd, {}, torch::ones({}));
  EXPECT_TRUE(sgd.state().empty());
  EXPECT_TRUE(torch::equal(p.detach(), torch::ones({3})));
  // The next, finite step starts the buffer as SGD::step would.
  p.mutable_grad() = torch::ones({3});
  aten_fused_step(sgd);
  ASSERT_EQ(sgd.state().size(), 1u);
  EXPECT_TRUE(torch::allclose(p.detach(), torch::full({3}, 0.9f)));
}

// State written by the kernels is LibTorch's: a plain step() and a fresh
// optimizer loaded from it continue the same trajectory.
TEST(AtenFusedStepTest, FusedAndPlainStepsShareLibTorchsState) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    Net a = make_net();
    Net b = make_net();
    auto opt_a = c.make(a->parameters());
    auto opt_b = c.make(b->parameters());
    const auto x = torch::randn({8, 6});
    auto step = [&](Net& net, torch::optim::Optimizer& opt, bool fused) {
      opt.zero_grad();
      net(x).pow(2).sum().backward();
      fused ? aten_fused_step(opt) : (void)opt.step();
    };
    for (int i = 0; i < 3; ++i) {
      step(a, *opt_a, true);
      step(b, *opt_b, false);
    }
    // Through a save/load round trip into a fresh optimizer.
    std::stringstream buffer;
    {
      torch::serialize::OutputArchive archive;
      opt_a->save(archive);
      archive.save_to(buffer);
    }
    auto opt_a2 = c.make(a->parameters());
    {
      torch::serialize::InputArchive archive;
      archive.load_from(buffer);
      opt_a2->load(archive);
    }
    for (int i = 0; i < 3; ++i) {
      step(a, *opt_a2, i % 2 == 0);
      step(b, *opt_b, false);
    }
    const auto pa = a->parameters();
    const auto pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_LE(max_relative_difference(pa[i], pb[i]), kMaxRelDiff) << i;
    }
  }
}

// Adam's step counts live on the parameter's device between fused steps
// (no host read per step on CUDA); LibTorch's step() still says the count,
// a count set by hand is taken as the new one, a skipped step takes the
// count back, and clone() hands out LibTorch's own state type.
TEST(AtenFusedStepTest, StepCountsOnTheDeviceFollowTheHostsCount) {
  SKIP_WITHOUT_ATEN_FUSED_KERNELS();
  auto p = torch::ones({4}, torch::requires_grad());
  auto q = torch::ones({4}, torch::requires_grad());
  torch::optim::AdamW fused({p}, 0.1);
  torch::optim::AdamW plain({q}, 0.1);
  auto state_of = [](torch::optim::Optimizer& opt,
                     const torch::Tensor& t) -> torch::optim::AdamWParamState& {
    return static_cast<torch::optim::AdamWParamState&>(
        *opt.state().at(detail::state_key(t)));
  };
  auto grads = [&](float v) {
    p.mutable_grad() = torch::full({4}, v);
    q.mutable_grad() = torch::full({4}, v);
  };
  for (int i = 0; i < 2; ++i) {
    grads(1.0f + i);
    aten_fused_step(fused);
    plain.step();
  }
  EXPECT_EQ(state_of(fused, p).step(), 2);
  grads(5.0f);
  aten_fused_step(fused, {}, torch::ones({}));  // skipped
  EXPECT_EQ(state_of(fused, p).step(), 2);
  // A count set by hand (as a loaded checkpoint would) drives the next
  // kernel's bias correction: step 10 on both sides.
  state_of(fused, p).step(9);
  state_of(plain, q).step(9);
  grads(3.0f);
  aten_fused_step(fused);
  plain.step();
  EXPECT_EQ(state_of(fused, p).step(), 10);
  EXPECT_LE(max_relative_difference(p, q), kMaxRelDiff);
  sync_fused_step_counts(fused);
  const auto copy = fused.state().at(detail::state_key(p))->clone();
  EXPECT_EQ(typeid(*copy), typeid(torch::optim::AdamWParamState));
  EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*copy).step(), 10);
}

TEST(AtenFusedStepTest, UnsupportedOptimizersAndTensorsAreNamed) {
  auto p = torch::ones({2, 2}, torch::requires_grad());
  p.mutable_grad() = torch::ones({2, 2});
  torch::optim::RMSprop rmsprop({p});
  EXPECT_THAT(
      aten_fused_step_unsupported_reason(rmsprop).value_or(""),
      HasSubstr("aten_fused_step: the optimizer must be exactly "
                "torch::optim::Adam, AdamW or SGD (not a subclass), got "
                "torch::optim::RMSprop."));
  AMPKIT_EXPECT_THROWS_WITH(
      aten_fused_step(rmsprop), Unsupported, "got torch::optim::RMSprop");

  torch::optim::SGD sgd({p}, 0.1);
  if (!AMPKIT_TORCH_AT_LEAST(2, 4)) {
    EXPECT_THAT(
        aten_fused_step_unsupported_reason(sgd).value_or(""),
        HasSubstr("run on the CPU and on CUDA from LibTorch 2.4, got "
                  "LibTorch " TORCH_VERSION));
    return;
  }
  EXPECT_EQ(aten_fused_step_unsupported_reason(sgd), std::nullopt);
  p.mutable_grad() = torch::ones({2, 2}, torch::kDouble);
  EXPECT_THAT(
      aten_fused_step_unsupported_reason(sgd).value_or(""),
      HasSubstr("the gradient of parameter 0 of param group 0 must be "
                "dense, on its device and of its dtype and shape, got "
                "Double"));
  auto ints = torch::ones({2}, torch::kLong);
  ints.mutable_grad() = torch::ones({2}, torch::kLong);
  torch::optim::SGD int_sgd({ints}, 0.1);
  EXPECT_THAT(
      aten_fused_step_unsupported_reason(int_sgd).value_or(""),
      HasSubstr("parameter 0 of param group 0 must be a dense "
                "float32/float64/float16/bfloat16 tensor"));
  p.mutable_grad() = torch::ones({2, 2});
  AMPKIT_EXPECT_THROWS_WITH(
      aten_fused_step(sgd, torch::ones({2})),
      InvalidArgument,
      "grad_scale must be a 0-dim float32 tensor");
}

}  // namespace
}  // namespace ampkit::optim
