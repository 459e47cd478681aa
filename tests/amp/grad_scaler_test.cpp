// GradScaler: every stage transition and error of torch/amp/grad_scaler.py,
// the golden scale trajectory, skipped steps, state round-trips, extensions.
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/utils/warnings.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "amp/compat.h"
#include "ampkit/error.h"
#include "golden_scale_trajectory.h"
#include "test_util.h"

namespace ampkit {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A tiny model with two parameters whose gradients are known: for
// loss = (w * x).sum() + b, dloss/dw = x and dloss/db = 1.
struct Tiny {
  torch::Tensor w = torch::full({3}, 1.0).requires_grad_();
  torch::Tensor b = torch::zeros({1}).requires_grad_();
  torch::Tensor x = torch::tensor({1.0f, 2.0f, 3.0f});
  torch::optim::SGD opt{std::vector<torch::Tensor>{w, b}, 0.1};

  torch::Tensor loss() {
    return (w * x).sum() + b.sum();
  }
  void backward(GradScaler& scaler) {
    opt.zero_grad();
    scaler.scale(loss()).backward();
  }
  // One iteration, with an inf put into w's gradient when `overflow`;
  // returns whether the optimizer stepped.
  bool train_step(GradScaler& scaler, bool overflow) {
    backward(scaler);
    if (overflow) {
      w.grad()[0] = kInf;
    }
    const bool stepped = scaler.step(opt).has_value();
    scaler.update();
    return stepped;
  }
};

TEST(GradScalerTest, DefaultsArePyTorchs) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.get_growth_factor(), 2.0);
  EXPECT_EQ(scaler.get_backoff_factor(), 0.5);
  EXPECT_EQ(scaler.get_growth_interval(), 2000);
  EXPECT_TRUE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
}

TEST(GradScalerTest, RejectsInvalidOptionsWithTheValue) {
  AMPKIT_EXPECT_THROWS_WITH(
      GradScaler(GradScalerOptions().growth_factor(1.0)),
      InvalidArgument,
      "growth_factor must be > 1.0 and finite, got 1.");
  AMPKIT_EXPECT_THROWS_WITH(
      GradScaler(GradScalerOptions().backoff_factor(1.5)),
      InvalidArgument,
      "backoff_factor must be in (0, 1), got 1.5.");
  AMPKIT_EXPECT_THROWS_WITH(
      GradScaler(GradScalerOptions().growth_interval(0)),
      InvalidArgument,
      "growth_interval must be >= 1 (and fit in int32), got 0.");
  AMPKIT_EXPECT_THROWS_WITH(
      GradScaler(GradScalerOptions().init_scale(-2)),
      InvalidArgument,
      "init_scale must be a positive, finite float32, got -2.");
  AMPKIT_EXPECT_THROWS_WITH(
      GradScaler(GradScalerOptions().hysteresis(0)),
      InvalidArgument,
      "hysteresis must be >= 1, got 0.");
  AMPKIT_EXPECT_THROWS_WITH(
      GradScaler(GradScalerOptions().max_skipped_steps_at_min_scale(3)),
      InvalidArgument,
      "needs a floor, got min_scale 0");
  GradScaler scaler;
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.set_growth_factor(0.5), InvalidArgument, "got 0.5");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.set_backoff_factor(0), InvalidArgument, "got 0.");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.set_growth_interval(-1), InvalidArgument, "got -1.");
  EXPECT_EQ(scaler.get_growth_factor(), 2.0);
}

TEST(GradScalerTest, ScaleCreatesFloat32ScaleAndInt32TrackerLazily) {
  GradScaler scaler(GradScalerOptions().init_scale(1024));
  EXPECT_FALSE(scaler.get_scale_async().defined());
  auto scaled = scaler.scale(torch::tensor(3.0f));
  const torch::Tensor& s = scaler.get_scale_async();
  ASSERT_TRUE(s.defined());
  EXPECT_EQ(s.scalar_type(), torch::kFloat);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.device(), torch::Device(torch::kCPU));
  EXPECT_EQ(scaled.item<float>(), 3072.0f);
  EXPECT_EQ(scaler.state_dict().at("_growth_tracker").toInt(), 0);
}

TEST(GradScalerTest, ScalesAListOfOutputs) {
  GradScaler scaler(GradScalerOptions().init_scale(4));
  auto out = scaler.scale(std::vector<torch::Tensor>{
      torch::tensor(1.0f), torch::tensor({2.0f, 3.0f})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].item<float>(), 4.0f);
  EXPECT_TRUE(torch::equal(out[1], torch::tensor({8.0f, 12.0f})));
}

TEST(GradScalerTest, ErrorsBeforeAnyScaleNameTheCall) {
  Tiny m;
  GradScaler scaler;
  const char* fix =
      "This may indicate your script did not use scaler.scale(loss or "
      "outputs) earlier in the iteration.";
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.unscale_(m.opt),
      UsageError,
      std::string("Attempted unscale_ but _scale is None.  ") + fix);
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.step(m.opt), UsageError, "Attempted step but _scale is None.");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.update(), UsageError, "Attempted update but _scale is None.");
}

TEST(GradScalerTest, UnscaleMovesReadyToUnscaledAndDividesGradsExactly) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().init_scale(3.0));
  m.backward(scaler);
  EXPECT_TRUE(torch::equal(m.w.grad(), torch::tensor({3.0f, 6.0f, 9.0f})));
  scaler.unscale_(m.opt);
  // 1/3 is formed in double and rounded once to float, as PyTorch does.
  const float inv = static_cast<float>(1.0 / 3.0);
  EXPECT_TRUE(torch::equal(
      m.w.grad(), torch::tensor({3.0f * inv, 6.0f * inv, 9.0f * inv})));
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.unscale_(m.opt),
      UsageError,
      "unscale_() has already been called on this optimizer since the last "
      "update().");
}

TEST(GradScalerTest, StepAfterUnscaleDoesNotUnscaleAgain) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().init_scale(2.0));
  m.backward(scaler);
  scaler.unscale_(m.opt);
  auto result = scaler.step(m.opt);
  EXPECT_TRUE(result.has_value());
  // w = 1 - 0.1 * x: gradients were divided by 2 exactly once.
  EXPECT_TRUE(torch::allclose(m.w, torch::tensor({0.9f, 0.8f, 0.7f})));
}

TEST(GradScalerTest, StepFromReadyUnscalesThenSteps) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().init_scale(8.0));
  m.backward(scaler);
  ASSERT_TRUE(scaler.step(m.opt).has_value());
  EXPECT_TRUE(torch::allclose(m.w, torch::tensor({0.9f, 0.8f, 0.7f})));
  EXPECT_TRUE(torch::allclose(m.b, torch::tensor({-0.1f})));
}

TEST(GradScalerTest, SteppedRejectsStepAndUnscaleUntilUpdate) {
  Tiny m;
  GradScaler scaler;
  m.backward(scaler);
  scaler.step(m.opt);
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.step(m.opt),
      UsageError,
      "step() has already been called since the last update().");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.unscale_(m.opt),
      UsageError,
      "unscale_() is being called after step().");
  scaler.update();
  // update() resets every optimizer to READY.
  m.backward(scaler);
  EXPECT_NO_THROW(scaler.unscale_(m.opt));
  EXPECT_NO_THROW(scaler.step(m.opt));
  EXPECT_NO_THROW(scaler.update());
}

TEST(GradScalerTest, UpdateAfterUnscaleWithoutStepBacksOffAndResets) {
  Tiny m;
  GradScaler scaler;
  m.backward(scaler);
  m.w.grad()[0] = kInf;
  scaler.unscale_(m.opt);
  scaler.update();  // UNSCALED -> READY, using the recorded inf check
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  m.backward(scaler);
  EXPECT_NO_THROW(scaler.unscale_(m.opt));
}

TEST(GradScalerTest, StepWithoutAnyGradientSaysNoInfChecksWereRecorded) {
  Tiny m;
  GradScaler scaler;
  scaler.scale(torch::tensor(1.0f));
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.step(m.opt),
      UsageError,
      "No inf checks were recorded for this optimizer.");
}

TEST(GradScalerTest, UpdateWithoutStepSaysNoInfChecksWereRecorded) {
  GradScaler scaler;
  scaler.scale(torch::tensor(1.0f));
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.update(),
      UsageError,
      "No inf checks were recorded prior to update.");
}

TEST(GradScalerTest, RejectsFp16GradientsAndSaysToKeepParametersFp32) {
  auto p = torch::ones({2}, torch::kHalf).requires_grad_();
  p.mutable_grad() = torch::ones({2}, torch::kHalf);
  torch::optim::SGD opt({p}, 0.1);
  GradScaler scaler;
  scaler.register_parameter_names({{"head.weight", p}});
  scaler.scale(torch::tensor(1.0f));
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.unscale_(opt),
      InvalidArgument,
      "Attempting to unscale FP16 gradients. Parameter head.weight "
      "(param_groups[0][0]) is float16");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.unscale_(opt),
      InvalidArgument,
      "Keep trainable parameters in fp32");
}

TEST(GradScalerTest, AcceptsBf16Gradients) {
  auto p = torch::ones({2}, torch::kBFloat16).requires_grad_();
  p.mutable_grad() = torch::full({2}, 4.0, torch::kBFloat16);
  torch::optim::SGD opt({p}, 1.0);
  GradScaler scaler(GradScalerOptions().init_scale(2));
  scaler.scale(torch::tensor(1.0f));
  ASSERT_TRUE(scaler.step(opt).has_value());
  EXPECT_TRUE(torch::equal(p, torch::full({2}, -1.0, torch::kBFloat16)));
}

TEST(GradScalerTest, RejectsAClosureAsPyTorchDoes) {
  Tiny m;
  GradScaler scaler;
  m.backward(scaler);
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.step(m.opt, [] { return torch::tensor(0.0f); }),
      UsageError,
      "Closure use is not currently supported if GradScaler is enabled.");
}

TEST(GradScalerTest, InfInOneGradientSkipsThatStepOnlyAndHalvesTheScale) {
  Tiny m;
  GradScaler scaler;
  const int k = 3;
  for (int step = 0; step < 6; ++step) {
    m.backward(scaler);
    const torch::Tensor w_before = m.w.detach().clone();
    const torch::Tensor b_before = m.b.detach().clone();
    const double scale_before = scaler.get_scale();
    if (step == k) {
      m.w.grad()[1] = kInf;
    }
    auto result = scaler.step(m.opt);
    scaler.update();
    if (step == k) {
      EXPECT_FALSE(result.has_value());
      EXPECT_TRUE(torch::equal(m.w, w_before)) << "weights changed on skip";
      EXPECT_TRUE(torch::equal(m.b, b_before)) << "the finite param stepped";
      EXPECT_EQ(scaler.get_scale(), scale_before / 2);
      EXPECT_EQ(scaler.get_growth_tracker(), 0);
    } else {
      EXPECT_TRUE(result.has_value());
      EXPECT_FALSE(torch::equal(m.w, w_before)) << "step " << step;
      EXPECT_EQ(scaler.get_scale(), scale_before);
    }
  }
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 2);
}

TEST(GradScalerTest, NanGradientIsDetectedLikeInf) {
  Tiny m;
  GradScaler scaler;
  m.backward(scaler);
  m.b.grad()[0] = std::nanf("");
  EXPECT_FALSE(scaler.step(m.opt).has_value());
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScalerTest, UpdateCombinesOverflowsAcrossOptimizers) {
  Tiny a;
  Tiny c;
  GradScaler scaler;
  a.backward(scaler);
  c.backward(scaler);
  c.w.grad()[0] = kInf;
  const auto a_before = a.w.detach().clone();
  EXPECT_TRUE(scaler.step(a.opt).has_value());
  EXPECT_FALSE(scaler.step(c.opt).has_value());
  scaler.update();
  EXPECT_FALSE(torch::equal(a.w, a_before));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScalerTest, GrowsAfterGrowthIntervalCleanSteps) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().init_scale(4).growth_interval(3));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(scaler.get_scale(), 4.0);
    EXPECT_TRUE(m.train_step(scaler, /*overflow=*/false));
  }
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
}

TEST(GradScalerTest, MatchesGoldenScaleTrajectoryFromPyTorchsRule) {
  for (const auto& golden : golden::kScaleTrajectories) {
    SCOPED_TRACE(golden.name);
    GradScaler scaler(GradScalerOptions()
                          .init_scale(golden.init_scale)
                          .growth_factor(golden.growth_factor)
                          .backoff_factor(golden.backoff_factor)
                          .growth_interval(golden.growth_interval));
    auto w = torch::ones({2}).requires_grad_();
    torch::optim::SGD opt({w}, 1e-3);
    int mismatches = 0;
    for (int i = 0; i < golden.n && mismatches < 5; ++i) {
      opt.zero_grad();
      // A gradient of 1e-30 * scale stays finite up to float's maximum.
      scaler.scale((w * 1e-30f).sum()).backward();
      if (golden.overflow[i] == '1') {
        w.grad()[0] = kInf;
      }
      scaler.step(opt);
      scaler.update();
      const float scale = scaler.get_scale_async().item<float>();
      const int64_t tracker = scaler.get_growth_tracker();
      if (scale != golden.scale[i] || tracker != golden.tracker[i]) {
        ++mismatches;
        ADD_FAILURE() << "update " << i << ": scale " << scale << " tracker "
                      << tracker << ", PyTorch: " << golden.scale[i] << " "
                      << golden.tracker[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(GradScalerTest, NeverGrowsTheScaleToInfinity) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().init_scale(3e38).growth_interval(1));
  scaler.scale(torch::tensor(0.0f));
  auto w = torch::zeros({1}).requires_grad_();
  torch::optim::SGD opt({w}, 0.1);
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    scaler.scale((w * 0).sum()).backward();
    scaler.step(opt);
    scaler.update();
    EXPECT_TRUE(std::isfinite(scaler.get_scale()));
  }
  EXPECT_EQ(scaler.get_scale(), double(3e38f));
}

TEST(GradScalerTest, UpdateWithANewScaleSetsIt) {
  Tiny m;
  GradScaler scaler;
  m.backward(scaler);
  scaler.step(m.opt);
  scaler.update(128.0);
  EXPECT_EQ(scaler.get_scale(), 128.0);
  scaler.update(torch::tensor(256.0f));
  EXPECT_EQ(scaler.get_scale(), 256.0);
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.update(0.0),
      InvalidArgument,
      "new_scale must be a positive, finite float32, got 0.");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.update(torch::ones({2})),
      InvalidArgument,
      "a tensor of 2 elements");
  EXPECT_EQ(scaler.get_scale(), 256.0);
}

TEST(GradScalerTest, DisabledScalerIsAPassThrough) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().enabled(false));
  const auto loss = m.loss();
  const auto scaled = scaler.scale(loss);
  EXPECT_TRUE(scaled.is_same(loss));
  m.opt.zero_grad();
  scaled.backward();
  m.w.grad()[0] = kInf;  // not checked: step just calls optimizer.step()
  EXPECT_TRUE(scaler.step(m.opt).has_value());
  EXPECT_TRUE(std::isinf(m.w[0].item<float>()));
  EXPECT_NO_THROW(scaler.unscale_(m.opt));
  EXPECT_NO_THROW(scaler.update());
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_FALSE(scaler.is_enabled());
  EXPECT_TRUE(scaler.state_dict().empty());
  EXPECT_NO_THROW(scaler.load_state_dict({}));
}

TEST(GradScalerTest, StateDictHasPyTorchsKeysAndRoundTripsExactly) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().init_scale(1024).growth_interval(10));
  for (int i = 0; i < 3; ++i) {
    m.backward(scaler);
    scaler.step(m.opt);
    scaler.update();
  }
  const GradScalerState state = scaler.state_dict();
  std::vector<std::string> keys;
  for (const auto& kv : state) {
    keys.push_back(kv.first);
  }
  EXPECT_THAT(
      keys,
      ::testing::UnorderedElementsAre(
          "scale",
          "growth_factor",
          "backoff_factor",
          "growth_interval",
          "_growth_tracker"));
  EXPECT_EQ(state.at("scale").toDouble(), 1024.0);
  EXPECT_EQ(state.at("_growth_tracker").toInt(), 3);
  EXPECT_EQ(state.at("growth_interval").toInt(), 10);

  // Loaded before the first scale(): the lazily created tensors use it.
  GradScaler fresh;
  fresh.load_state_dict(state);
  EXPECT_EQ(fresh.get_scale(), 1024.0);
  EXPECT_EQ(fresh.get_growth_tracker(), 3);
  EXPECT_EQ(fresh.get_growth_interval(), 10);
  fresh.scale(torch::tensor(1.0f));
  EXPECT_EQ(fresh.get_scale(), 1024.0);
  EXPECT_EQ(fresh.get_growth_tracker(), 3);
  // Loaded after: the existing tensors are overwritten.
  GradScaler used;
  used.scale(torch::tensor(1.0f));
  used.load_state_dict(state);
  EXPECT_EQ(used.get_scale(), 1024.0);
  EXPECT_EQ(used.get_growth_tracker(), 3);
  EXPECT_EQ(used.state_dict().at("scale").toDouble(), 1024.0);
}

TEST(GradScalerTest, LoadingABadStateIsAnErrorAndChangesNothing) {
  GradScaler scaler;
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.load_state_dict({}),
      UsageError,
      "The source state dict is empty, possibly because it was saved from a "
      "disabled instance of GradScaler.");
  GradScalerState state = GradScaler().state_dict();
  state["scale"] = 512.0;
  state["growth_factor"] = 0.5;
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.load_state_dict(state), InvalidArgument, "got 0.5");
  state = GradScaler().state_dict();
  state.erase("_growth_tracker");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.load_state_dict(state),
      InvalidArgument,
      "state is missing the key \"_growth_tracker\"");
  state = GradScaler().state_dict();
  state["scal"] = 1.0;
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.load_state_dict(state),
      InvalidArgument,
      "unknown state key \"scal\"; known keys: scale, growth_factor");
  state = GradScaler().state_dict();
  state["growth_interval"] = std::string("often");
  AMPKIT_EXPECT_THROWS_WITH(
      scaler.load_state_dict(state),
      InvalidArgument,
      "state key \"growth_interval\" must be an integer");
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.get_growth_factor(), 2.0);
}

TEST(GradScalerTest, UnscalesSparseGradients) {
  torch::nn::Embedding emb(torch::nn::EmbeddingOptions(5, 2).sparse(true));
  torch::optim::SGD opt(emb->parameters(), 0.0);
  GradScaler scaler(GradScalerOptions().init_scale(4));
  scaler.scale(emb(torch::tensor({1, 3}, torch::kLong)).sum()).backward();
  ASSERT_TRUE(emb->weight.grad().is_sparse());
  scaler.unscale_(opt);
  EXPECT_TRUE(torch::equal(emb->weight.grad()._values(), torch::ones({2, 2})));
}

TEST(GradScalerTest, UnscalesNonContiguousAndDoubleGradients) {
  auto p = torch::ones({3, 2}).requires_grad_();
  auto q = torch::ones({4}, torch::kDouble).requires_grad_();
  p.mutable_grad() = torch::full({2, 3}, 8.0).t();
  q.mutable_grad() = torch::full({4}, 8.0, torch::kDouble);
  ASSERT_FALSE(p.grad().is_contiguous());
  torch::optim::SGD opt({p, q}, 0.0);
  GradScaler scaler(GradScalerOptions().init_scale(8));
  scaler.scale(torch::tensor(1.0f));
  scaler.unscale_(opt);
  EXPECT_TRUE(torch::equal(p.grad(), torch::ones({3, 2})));
  EXPECT_TRUE(torch::equal(q.grad(), torch::ones({4}, torch::kDouble)));
  q.mutable_grad()[2] = std::numeric_limits<double>::infinity();
  scaler.update(8.0);
  EXPECT_FALSE(scaler.step(opt).has_value());
}

// The CPU fallback splits large tensors across threads: an inf anywhere, in
// any chunk or the tail, must be found, and finite values never flagged.
TEST(GradScalerTest, FindsASingleInfAnywhereInALargeGradient) {
  const int64_t n = (1 << 18) + 13;
  for (int64_t pos : {int64_t(0), int64_t(70000), n - 1}) {
    auto grad = torch::full({n}, 2.0f);
    grad[pos] = kInf;
    auto found = torch::zeros({});
    auto inv = torch::full({}, 0.5f);
    detail::non_finite_check_and_unscale_({grad}, found, inv);
    EXPECT_EQ(found.item<float>(), 1.0f) << "inf at " << pos;
    EXPECT_EQ(grad[pos == 0 ? 1 : 0].item<float>(), 1.0f);
  }
  auto grad = torch::full({n}, 3e38f);
  auto found = torch::zeros({});
  detail::non_finite_check_and_unscale_({grad}, found, torch::full({}, 1.0f));
  EXPECT_EQ(found.item<float>(), 0.0f);
}

TEST(GradScalerTest, HysteresisBacksOffOnlyOnTheNthOverflowInARow) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().init_scale(64).hysteresis(2));
  auto overflow_step = [&](bool inf) { return m.train_step(scaler, inf); };
  EXPECT_FALSE(overflow_step(true));
  EXPECT_EQ(scaler.get_scale(), 64.0);  // first overflow tolerated
  EXPECT_TRUE(overflow_step(false));    // a clean step resets the count
  EXPECT_FALSE(overflow_step(true));
  EXPECT_EQ(scaler.get_scale(), 64.0);
  EXPECT_FALSE(overflow_step(true));
  EXPECT_EQ(scaler.get_scale(), 32.0);  // second in a row backs off
  EXPECT_FALSE(overflow_step(true));
  EXPECT_EQ(scaler.get_scale(), 16.0);
  const auto state = scaler.state_dict();
  EXPECT_EQ(state.at("hysteresis").toInt(), 2);
  EXPECT_EQ(state.at("_consecutive_overflows").toInt(), 3);
}

TEST(GradScalerTest, MinScaleFloorsTheBackoffAndStuckTrainingRaises) {
  Tiny m;
  GradScaler scaler(GradScalerOptions()
                        .init_scale(4)
                        .min_scale(1)
                        .max_skipped_steps_at_min_scale(3));
  std::vector<double> scales;
  try {
    for (int i = 0; i < 10; ++i) {
      m.train_step(scaler, /*overflow=*/true);
      scales.push_back(scaler.get_scale());
    }
    ADD_FAILURE() << "expected TrainingDiverged";
  } catch (const TrainingDiverged& e) {
    EXPECT_THAT(
        std::string(e.what()),
        ::testing::HasSubstr(
            "GradScaler: training diverged: 3 steps in a row were skipped "
            "with the loss scale at its floor min_scale=1"));
    EXPECT_THAT(
        std::string(e.what()), ::testing::HasSubstr("Lower the learning rate"));
  }
  // 4 -> 2 -> 1, then three skips at the floor; the third throws.
  EXPECT_THAT(scales, ::testing::ElementsAre(2.0, 1.0, 1.0, 1.0));
  EXPECT_EQ(scaler.get_scale(), 1.0);
}

TEST(GradScalerTest, OverflowReportNamesTheNonFiniteParameters) {
  Tiny m;
  GradScaler scaler(GradScalerOptions().report_overflow(true));
  scaler.register_parameter_names({{"layer.w", m.w}});
  std::vector<OverflowReport> reports;
  scaler.set_overflow_callback(
      [&](const OverflowReport& r) { reports.push_back(r); });
  m.backward(scaler);
  scaler.step(m.opt);
  scaler.update();
  EXPECT_TRUE(reports.empty());
  m.backward(scaler);
  m.w.grad()[2] = kInf;
  m.b.grad()[0] = std::nanf("");
  scaler.step(m.opt);
  scaler.update();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].step, 1);
  EXPECT_EQ(reports[0].old_scale, 65536.0);
  EXPECT_EQ(reports[0].new_scale, 32768.0);
  EXPECT_THAT(
      reports[0].parameters,
      ::testing::ElementsAre("layer.w", "param_groups[0][1]"));
  EXPECT_EQ(
      reports[0].where,
      "layer.w (1 inf of 3 values), param_groups[0][1] (1 NaN of 1 value)");
  ASSERT_TRUE(scaler.last_overflow().has_value());
}

// Without a callback the report is a warning, through the replaceable sink.
TEST(GradScalerTest, OverflowReportGoesToTheWarningSink) {
  std::vector<Warning> warnings;
  const WarningHandler previous =
      set_warning_handler([&](const Warning& w) { warnings.push_back(w); });
  Tiny m;
  GradScaler scaler(GradScalerOptions().report_overflow(true));
  m.backward(scaler);
  m.w.grad()[0] = kInf;
  scaler.step(m.opt);
  scaler.update();
  set_warning_handler(previous);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].component, "GradScaler");
  EXPECT_EQ(
      warnings[0].message,
      "step 0 skipped: non-finite gradients in param_groups[0][0] (1 inf of 3 "
      "values); loss scale 65536 -> 32768");
  EXPECT_TRUE(warnings[0].main_process_only);
}

TEST(GradScalerTest, OverflowReportIsOffByDefault) {
  Tiny m;
  GradScaler scaler;
  EXPECT_FALSE(m.train_step(scaler, /*overflow=*/true));
  EXPECT_FALSE(scaler.last_overflow().has_value());
}

}  // namespace
}  // namespace ampkit
