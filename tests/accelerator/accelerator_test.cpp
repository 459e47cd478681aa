// The Accelerator on tiny CPU models: accumulation equals one large batch,
// schedulers skip with the optimizer, clipping sees unscaled gradients, and
// the prepared forward runs under autocast and returns fp32.
#include <torch/torch.h>
#include <torch/version.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "accelerator/auto_precision.h"
#include "accelerator/state.h"
#include "amp/compat.h"
#include "ampkit/accelerator/accelerator.h"
#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit {
namespace {

// An MLP 6 -> 16 -> 3 with one output head; x [B, 6] -> [B, 3].
struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(torch::relu(fc1(x)));
  }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

AcceleratorOptions quiet() {
  return AcceleratorOptions().quiet(true);
}

Net make_net(uint64_t seed = 0) {
  torch::manual_seed(seed);
  return Net();
}

template <typename M>
std::vector<torch::Tensor> snapshot(const M& net) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : net->parameters()) {
    copies.push_back(p.detach().clone());
  }
  return copies;
}

void expect_close(
    const std::vector<torch::Tensor>& a,
    const std::vector<torch::Tensor>& b,
    double atol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/0, atol))
        << "tensor " << i << " differs by "
        << (a[i] - b[i]).abs().max().item<double>();
  }
}

void expect_equal(
    const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
  }
}

// ZeRO's partition: the even split moves to a parameter boundary within
// 2.5% of a shard, else a parameter is split; no shard is over 1/N + 5%.
TEST(ZeroTest, PartitionKeepsParametersWholeUnlessItMustSplitOne) {
  using optim::partition_boundaries;
  EXPECT_EQ(
      partition_boundaries({100, 100, 100, 100}, 2),
      (std::vector<int64_t>{0, 200, 400}));
  // 1000 per shard: the boundary at 1020 is within 25, so it is kept.
  EXPECT_EQ(
      partition_boundaries({1020, 980}, 2),
      (std::vector<int64_t>{0, 1020, 2000}));
  // fc1.weight (128) holds the even split of 161 at 80: it is split.
  EXPECT_EQ(
      partition_boundaries({128, 16, 16, 1}, 2),
      (std::vector<int64_t>{0, 80, 161}));
  EXPECT_EQ(partition_boundaries({5}, 1), (std::vector<int64_t>{0, 5}));
  // Fewer values than shards: some shards are empty, none is negative.
  EXPECT_EQ(
      partition_boundaries({1, 1}, 4), (std::vector<int64_t>{0, 0, 1, 1, 2}));
  torch::manual_seed(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> sizes;
    int64_t total = 0;
    const int64_t count = torch::randint(1, 40, {1}).item<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      sizes.push_back(torch::randint(1, 5000, {1}).item<int64_t>());
      total += sizes.back();
    }
    for (int64_t n : {2, 3, 4, 8}) {
      const auto b = partition_boundaries(sizes, n);
      ASSERT_EQ(b.size(), static_cast<size_t>(n + 1));
      EXPECT_EQ(b.front(), 0);
      EXPECT_EQ(b.back(), total);
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_LE(b[r], b[r + 1]);
        EXPECT_LE(b[r + 1] - b[r], total / n * 1.05 + 1)
            << "shard " << r << " of " << n;
      }
    }
  }
}

// One process: the shard is everything, and training equals the plain
// optimizer's (AdamW stepping one flat tensor instead of one per
// parameter: equal to fp32 rounding). The parameters keep their identity.
TEST(ZeroTest, OneProcessZeroTrainsLikeThePlainOptimizer) {
  for (int64_t stage : {1, 2}) {
    SCOPED_TRACE("zero_stage " + std::to_string(stage));
    std::vector<std::vector<torch::Tensor>> results;
    for (int64_t zero : {int64_t{0}, stage}) {
      Accelerator accelerator(quiet().zero_stage(zero));
      Net net = make_net(5);
      const auto first = net->parameters()[0];
      torch::optim::AdamW adamw(net->parameters(), 1e-2);
      auto [model, optimizer] = accelerator.prepare(net, adamw);
      for (int step = 0; step < 30; ++step) {
        torch::manual_seed(100 + step);
        auto x = torch::randn({8, 6});
        accelerator.backward(model(x).square().mean());
        optimizer.step();
        optimizer.zero_grad();
      }
      EXPECT_TRUE(net->parameters()[0].is_same(first));
      results.push_back(snapshot(net));
    }
    expect_close(results[0], results[1], 1e-6);
  }
}

// Stage 2 frees the parameters' gradients after the reduce: detect_anomaly
// looks in the shard instead, and still names the parameter.
TEST(ZeroTest, DetectAnomalyFindsNonFiniteGradientsInTheShard) {
  Accelerator accelerator(quiet().zero_stage(2).detect_anomaly(true));
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto hook = net->fc2->bias.register_hook([](torch::Tensor g) {
    g = g.clone();
    g[1] = INFINITY;
    return g;
  });
  accelerator.backward(model(torch::randn({2, 6})).pow(2).sum());
  EXPECT_FALSE(net->fc2->bias.grad().defined());
  AMPKIT_EXPECT_THROWS_WITH(
      optimizer.step(),
      TrainingDiverged,
      "non-finite gradients at step 1 in fc2.bias (1 inf of 3 values)");
  net->fc2->bias.remove_hook(hook);
}

// bucket_cap_mb is only checked positive: a cap below one byte is one
// parameter per bucket (as DDP takes it), not a refused "0 bytes".
TEST(ZeroTest, BucketCapUnderOneByteGivesOneParameterPerBucket) {
  Net plain = make_net(3);
  torch::optim::SGD plain_sgd(plain->parameters(), 0.1);
  const auto x = torch::randn({4, 6});
  plain->forward(x).pow(2).sum().backward();
  plain_sgd.step();
  Accelerator accelerator(quiet().zero_stage(2).bucket_cap_mb(1e-9));
  Net net = make_net(3);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  accelerator.backward(model(x).pow(2).sum());
  optimizer.step();
  expect_close(snapshot(plain), snapshot(net), 0);
}

TEST(ZeroTest, StepAfterAPlainBackwardIsRefused) {
  Accelerator accelerator(quiet().zero_stage(2));
  Net net = make_net();
  torch::optim::AdamW adamw(net->parameters(), 1e-2);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  model(torch::randn({4, 6})).sum().backward();
  AMPKIT_EXPECT_THROWS_WITH(
      optimizer.step(), UsageError, "Call accelerator.backward(loss), not");
}

TEST(ZeroTest, OptimizersItCannotFlattenAreRefused) {
  {
    Accelerator accelerator(quiet().zero_stage(1));
    Net net = make_net();
    torch::optim::AdamW adamw(net->parameters(), 1e-2);
    auto model = accelerator.prepare(net);
    net->fc2->to(torch::kDouble);
    AMPKIT_EXPECT_THROWS_WITH(
        accelerator.prepare(adamw),
        InvalidArgument,
        "they must share one dtype and device");
  }
  {
    Accelerator accelerator(quiet().zero_stage(1));
    Net net = make_net();
    torch::optim::AdamW adamw(net->parameters(), 1e-2);
    net->forward(torch::randn({2, 6})).sum().backward();
    adamw.step();
    AMPKIT_EXPECT_THROWS_WITH(
        accelerator.prepare(adamw), UsageError, "has already stepped");
  }
}

// accelerate's backward(loss, **kwargs): retain_graph keeps the graph for a
// second backward, create_graph builds one through the gradients.
TEST(AcceleratorTest, BackwardPassesRetainGraphAndCreateGraph) {
  Accelerator accelerator(quiet());
  Net net = make_net();
  auto model = accelerator.prepare(net);
  auto loss = model(torch::randn({4, 6})).square().mean();
  accelerator.backward(loss, /*retain_graph=*/true);
  const auto once = net->fc1->weight.grad().clone();
  accelerator.backward(loss);
  EXPECT_TRUE(torch::allclose(net->fc1->weight.grad(), 2 * once));
  EXPECT_THROW(accelerator.backward(loss), std::exception);  // graph freed
  net->zero_grad();
  auto again = model(torch::randn({4, 6})).square().mean();
  accelerator.backward(again, /*retain_graph=*/false, /*create_graph=*/true);
  EXPECT_TRUE(net->fc1->weight.grad().requires_grad());
}

sighandler_t current_handler(int sig) {
  struct sigaction sa {};
  ::sigaction(sig, nullptr, &sa);
  return sa.sa_handler;
}

// The stop-signal handlers: taken only over the default action, given back
// by the last Accelerator, never with handle_signals(false).
TEST(AcceleratorTest, StopSignalHandlersReplaceOnlyDefaultsAndAreGivenBack) {
  ASSERT_EQ(current_handler(SIGUSR1), SIG_DFL);
  {
    Accelerator first(quiet());
    EXPECT_NE(current_handler(SIGUSR1), SIG_DFL);
    {
      Accelerator second(quiet());
      EXPECT_NE(current_handler(SIGTERM), SIG_DFL);
    }
    EXPECT_NE(current_handler(SIGUSR1), SIG_DFL);  // the first still runs
  }
  EXPECT_EQ(current_handler(SIGUSR1), SIG_DFL);
  EXPECT_EQ(current_handler(SIGTERM), SIG_DFL);
  {
    Accelerator unhandled(quiet().handle_signals(false));
    EXPECT_EQ(current_handler(SIGTERM), SIG_DFL);
  }
  ::signal(SIGUSR1, SIG_IGN);  // as a background job ignores SIGINT
  {
    Accelerator accelerator(quiet());
    EXPECT_EQ(current_handler(SIGUSR1), SIG_IGN);
  }
  ::signal(SIGUSR1, SIG_DFL);
}

// A stop signal in the middle of a step: the step finishes, the next step
// boundary saves checkpoint_<step> under preemption_dir and exits with
// 128 + the signal, saying what it saved; the checkpoint loads.
TEST(AcceleratorTest, SigtermFinishesTheStepSavesAndExitsWith143) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  // (threadsafe death tests run the test again in a new process: the
  // folder cannot be named after the process)
  const auto dir =
      std::filesystem::temp_directory_path() / "ampkit-preempt-death-test";
  std::filesystem::remove_all(dir);
  auto train = [&](bool signal) {
    Accelerator accelerator(
        quiet().save_on_preemption(true).preemption_dir(dir.string()));
    Net net = make_net();
    torch::optim::SGD sgd(net->parameters(), 0.1);
    auto [model, optimizer] = accelerator.prepare(net, sgd);
    for (int step = 0; step < 3; ++step) {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(model(torch::ones({2, 6})).square().mean());
      if (signal && step == 1) {
        ::raise(SIGTERM);  // mid-step: recorded, not acted on yet
      }
      optimizer.step();
      optimizer.zero_grad();
    }
    std::exit(0);
  };
  EXPECT_EXIT(train(false), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      train(true),
      ::testing::ExitedWithCode(143),
      "SIGTERM at step 2: saved [^\n]*checkpoint_2; resume from it");
  Accelerator accelerator(quiet());
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  accelerator.load_state((dir / "checkpoint_2").string());
  EXPECT_EQ(accelerator.optimizer_steps(), 2);
  std::filesystem::remove_all(dir);
}

// Resuming with another accumulation, precision or ZeRO stage is refused,
// naming both values, before anything is loaded.
TEST(AcceleratorTest, ResumeRefusesAnotherAccumulationOrPrecision) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ampkit-resume-settings-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto with = [&](AcceleratorOptions options, bool save) {
    Accelerator accelerator(options);
    Net net = make_net();
    torch::optim::SGD sgd(net->parameters(), 0.1);
    auto [model, optimizer] = accelerator.prepare(net, sgd);
    if (save) {
      accelerator.save_state(dir.string());
    } else {
      accelerator.load_state(dir.string());
    }
  };
  with(quiet().gradient_accumulation_steps(2), true);
  AMPKIT_EXPECT_THROWS_WITH(
      with(quiet().gradient_accumulation_steps(4), false),
      InvalidArgument,
      "saved with gradient_accumulation_steps 2, this run has 4. Resume with "
      "the same setting (gradient_accumulation_steps(2), the flag "
      "--gradient_accumulation_steps 2)");
  AMPKIT_EXPECT_THROWS_WITH(
      with(
          quiet().gradient_accumulation_steps(2).mixed_precision("bf16"),
          false),
      InvalidArgument,
      "saved with mixed_precision no, this run has bf16");
  EXPECT_NO_THROW(with(quiet().gradient_accumulation_steps(2), false));
  std::filesystem::remove_all(dir);
}

// A model whose forward uses the random generator (dropout) and changes
// buffers (BatchNorm's running statistics): what the auto probe restores.
struct NoisyNetImpl : torch::nn::Module {
  NoisyNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 16))),
        norm(register_module("norm", torch::nn::BatchNorm1d(16))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        fc2(register_module("fc2", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(drop(torch::relu(norm(fc1(x)))));
  }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d norm;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(NoisyNet);

// Trains 3 steps of NoisyNet from seed 0; its weights, buffers and the
// generator's next number.
std::vector<torch::Tensor> train_noisy(
    AcceleratorOptions options, Precision* chosen = nullptr) {
  torch::manual_seed(0);
  Accelerator accelerator(options.quiet(true));
  NoisyNet net;
  torch::optim::Adam adam(net->parameters(), 1e-2);
  auto [model, optimizer] = accelerator.prepare(net, adam);
  for (int step = 0; step < 3; ++step) {
    auto scope = accelerator.accumulate(model);
    const auto x = torch::randn({8, 6});
    accelerator.backward(model(x).square().mean());
    optimizer.step();
    optimizer.zero_grad();
  }
  if (chosen != nullptr) {
    *chosen = accelerator.mixed_precision();
  }
  std::vector<torch::Tensor> state;
  for (const auto& p : net->parameters()) {
    state.push_back(p.detach().clone());
  }
  for (const auto& b : net->buffers()) {
    state.push_back(b.clone());
  }
  state.push_back(torch::rand({1}));
  return state;
}

void expect_bit_identical(
    const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
  }
}

// auto with two candidates: timed on the model's first batch (timings
// injected here), bf16 only when it is at least 1.1x as fast; the run is
// bit-identical to one in the precision it chose (the probe's forwards and
// backwards leave weights, BatchNorm's statistics and the generator alone).
TEST(AcceleratorTest, AutoTimesTheModelAndTakesBf16OnlyByTheMargin) {
  auto inject = [](double bf16_seconds) {
    detail::set_auto_probe_override(detail::AutoProbeOverride{
        {Precision::no, Precision::bf16}, [bf16_seconds](Precision p) {
          return p == Precision::bf16 ? bf16_seconds : 1.0;
        }});
  };
  Precision chosen = Precision::automatic;
  inject(0.8);  // 1.25x
  const auto with_auto = train_noisy(quiet().mixed_precision("auto"), &chosen);
  EXPECT_EQ(chosen, Precision::bf16);
  inject(0.95);  // 1.05x: not worth leaving fp32
  const auto auto_fp32 = train_noisy(quiet().mixed_precision("auto"), &chosen);
  EXPECT_EQ(chosen, Precision::no);
  detail::set_auto_probe_override(std::nullopt);
  expect_bit_identical(with_auto, train_noisy(quiet().mixed_precision("bf16")));
  expect_bit_identical(auto_fp32, train_noisy(quiet().mixed_precision("no")));
}

// What the decision is cached under: the parameters, the batch, the CPU,
// LibTorch and the threads; a second run with the same model and batch
// reads the cache instead of measuring.
TEST(AcceleratorTest, AutoDecisionIsCachedByModelAndBatch) {
  Net a = make_net();
  NoisyNet b;
  const auto x = torch::ones({8, 6});
  EXPECT_EQ(
      detail::auto_cache_key(*a, {x}),
      detail::auto_cache_key(*make_net(1), {x}));
  EXPECT_NE(detail::auto_cache_key(*a, {x}), detail::auto_cache_key(*b, {x}));
  EXPECT_NE(
      detail::auto_cache_key(*a, {x}),
      detail::auto_cache_key(*a, {torch::ones({4, 6})}));
  EXPECT_THAT(
      detail::auto_cache_key(*a, {x}),
      ::testing::HasSubstr(std::to_string(at::get_num_threads()) + " threads"));
  const auto home = std::filesystem::temp_directory_path() /
                    ("ampkit-auto-cache-" + std::to_string(::getpid()));
  const char* previous = std::getenv("XDG_CACHE_HOME");
  const std::string saved = previous != nullptr ? previous : "";
  ::setenv("XDG_CACHE_HOME", home.c_str(), 1);
  // Real timings, two candidates on any CPU.
  detail::set_auto_probe_override(
      detail::AutoProbeOverride{{Precision::no, Precision::bf16}, {}});
  std::vector<std::string> reasons;
  for (int run = 0; run < 2; ++run) {
    Accelerator accelerator(quiet().mixed_precision("auto"));
    Net net = make_net();
    auto model = accelerator.prepare(net);
    model(x);
    reasons.push_back(accelerator.options().auto_precision_reason);
  }
  detail::set_auto_probe_override(std::nullopt);
  if (previous != nullptr) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
  EXPECT_THAT(reasons[0], ::testing::HasSubstr("measured on its first batch:"));
  EXPECT_THAT(
      reasons[1], ::testing::HasSubstr("measured on its first batch, cached"));
  EXPECT_TRUE(std::filesystem::exists(home / "ampkit" / "auto_precision.json"));
  std::filesystem::remove_all(home);
}

// accelerate's accumulate(*models), unwrap_model and the process helpers.
TEST(AcceleratorTest, AccumulateTakesSeveralModelsAndUnwrapGivesThemBack) {
  Accelerator accelerator(quiet().gradient_accumulation_steps(2));
  Net generator = make_net(1);
  Net discriminator = make_net(2);
  auto [g, d] = accelerator.prepare(generator, discriminator);
  {
    auto scope = accelerator.accumulate(g, d);
    EXPECT_FALSE(accelerator.sync_gradients());
  }
  {
    auto scope = accelerator.accumulate(g, d);
    EXPECT_TRUE(accelerator.sync_gradients());
  }
  Accelerator other(quiet());
  Net stranger = make_net(3);
  auto s = other.prepare(stranger);
  AMPKIT_EXPECT_THROWS_WITH(
      (void)accelerator.accumulate(g, s),
      UsageError,
      "a model this Accelerator did not prepare");
  EXPECT_EQ(accelerator.unwrap_model(g).ptr(), generator.ptr());
  EXPECT_TRUE(accelerator.is_last_process());
  int ran = 0;
  EXPECT_TRUE(accelerator.on_main_process([&] { ++ran; }));
  EXPECT_TRUE(accelerator.on_local_main_process([&] { ++ran; }));
  EXPECT_TRUE(accelerator.on_last_process([&] { ++ran; }));
  EXPECT_FALSE(accelerator.on_process(1, [&] { ++ran; }));
  EXPECT_EQ(ran, 3);
}

TEST(AcceleratorTest, SetSeedDeviceSpecificAddsTheRankAndCanBeDeterministic) {
  set_seed(11, /*device_specific=*/true, /*deterministic=*/true);
  const auto first = torch::rand({3});
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  at::globalContext().setDeterministicAlgorithms(false, false);
  set_seed(11);  // one process: rank 0
  EXPECT_TRUE(torch::rand({3}).equal(first));
}

// accelerate's save/load state pre-hooks: a hook keeps its own file in the
// checkpoint, and reads it back from the folder load_state is given.
class StateHookTest : public testing_util::TempDirTest {};

TEST_F(StateHookTest, HooksRunBeforeSaveAndLoadWithTheModelsAndFolder) {
  Accelerator accelerator(quiet());
  Net net = make_net();
  auto model = accelerator.prepare(net);
  size_t models_seen = 0;
  const size_t save = accelerator.register_save_state_pre_hook(
      [&](const std::vector<std::shared_ptr<torch::nn::Module>>& models,
          const std::string& dir) {
        models_seen = models.size();
        std::ofstream(dir + "/extra.txt") << "kept";
      });
  std::string loaded_from;
  accelerator.register_load_state_pre_hook(
      [&](const std::vector<std::shared_ptr<torch::nn::Module>>&,
          const std::string& dir) {
        std::ifstream in(dir + "/extra.txt");
        std::getline(in, loaded_from);
      });
  const std::string dir = accelerator.save_state((dir_ / "ckpt").string());
  EXPECT_EQ(models_seen, 1u);
  accelerator.load_state(dir);
  EXPECT_EQ(loaded_from, "kept");
  accelerator.remove_state_hook(save);
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.remove_state_hook(save),
      InvalidArgument,
      "which no registered hook has");
}

TEST(AcceleratorTest, AccumulatedMicroBatchesEqualOneLargeBatch) {
  constexpr int64_t kSteps = 4;
  torch::manual_seed(3);
  const auto x = torch::randn({kSteps * 8, 6});
  const auto y = torch::randn({kSteps * 8, 3});

  // One batch of 32.
  Net big = make_net();
  torch::optim::SGD big_opt(big->parameters(), 0.1);
  big_opt.zero_grad();
  torch::mse_loss(big(x), y).backward();
  big_opt.step();

  // Four micro-batches of 8 through the Accelerator.
  Accelerator accelerator(quiet().gradient_accumulation_steps(kSteps));
  Net small = make_net();
  const auto initial = snapshot(small);
  torch::optim::SGD sgd(small->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(small, sgd);
  for (int64_t i = 0; i < kSteps; ++i) {
    auto scope = accelerator.accumulate(model);
    EXPECT_EQ(accelerator.sync_gradients(), i == kSteps - 1) << i;
    const auto rows = torch::indexing::Slice(i * 8, (i + 1) * 8);
    accelerator.backward(
        torch::mse_loss(model(x.index({rows})), y.index({rows})));
    optimizer.step();
    optimizer.zero_grad();
    if (i < kSteps - 1) {
      // Micro-steps neither step nor clear the accumulating gradients.
      expect_equal(snapshot(small), initial);
      EXPECT_TRUE(small->fc1->weight.grad().defined());
    }
  }
  expect_close(snapshot(small), snapshot(big), 1e-6);
  EXPECT_FALSE(small->fc1->weight.grad().defined());
}

TEST(AcceleratorTest, BackwardOutsideAccumulateIsRefusedWhenAccumulating) {
  Accelerator accelerator(quiet().gradient_accumulation_steps(2));
  auto model = accelerator.prepare(make_net());
  const auto loss = model(torch::randn({2, 6})).sum();
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.backward(loss),
      UsageError,
      "backward() with gradient_accumulation_steps 2 must run inside an "
      "accumulate() scope");
}

TEST(AcceleratorTest, AccumulateScopesDoNotNest) {
  Accelerator accelerator(quiet());
  auto model = accelerator.prepare(make_net());
  auto outer = accelerator.accumulate(model);
  AMPKIT_EXPECT_THROWS_WITH(
      { auto inner = accelerator.accumulate(model); },
      UsageError,
      "accumulate() scopes do not nest");
}

TEST(AcceleratorTest, AccumulateRefusesAModelPreparedElsewhere) {
  Accelerator a(quiet());
  Accelerator b(quiet());
  auto model = b.prepare(make_net());
  AMPKIT_EXPECT_THROWS_WITH(
      { auto scope = a.accumulate(model); }, UsageError, "did not prepare");
}

// The data set of 10 batches of 2: with accumulation 4, gradients sync at
// micro-steps 4 and 8 and at the last batch, in every epoch.
TEST(AcceleratorTest, LastBatchOfThePreparedLoaderSynchronises) {
  Accelerator accelerator(quiet().gradient_accumulation_steps(4));
  auto model = accelerator.prepare(make_net());
  auto dataset =
      torch::data::datasets::TensorDataset(torch::randn({20, 6}))
          .map(torch::data::transforms::Stack<torch::data::TensorExample>());
  auto loader = accelerator.prepare(
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          std::move(dataset), torch::data::DataLoaderOptions(2)));
  const std::vector<bool> expected = {
      false, false, false, true, false, false, false, true, false, true};
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<bool> synced;
    std::vector<bool> last;
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate(model);
      EXPECT_EQ(batch.data.sizes(), (std::vector<int64_t>{2, 6}));
      synced.push_back(accelerator.sync_gradients());
      last.push_back(accelerator.end_of_dataloader());
    }
    EXPECT_EQ(synced, expected) << "epoch " << epoch;
    EXPECT_EQ(last.back(), true);
    EXPECT_EQ(std::count(last.begin(), last.end(), true), 1);
    EXPECT_FALSE(accelerator.end_of_dataloader());
  }
}

TEST(AcceleratorTest, PreparedLoaderYieldsEveryBatchInOrder) {
  Accelerator accelerator(quiet());
  const auto data = torch::arange(10).to(torch::kFloat).reshape({10, 1});
  auto dataset = torch::data::datasets::TensorDataset(data).map(
      torch::data::transforms::Stack<torch::data::TensorExample>());
  auto loader = accelerator.prepare(
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          std::move(dataset), torch::data::DataLoaderOptions(4)));
  std::vector<torch::Tensor> batches;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.device(), accelerator.device());
    batches.push_back(batch.data);
  }
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_TRUE(torch::equal(torch::cat(batches), data));
}

// fp16-style loss scaling with fp32 gradients on the CPU: an inf in one
// gradient skips the optimizer step, and the scheduler must not advance.
TEST(AcceleratorTest, SchedulerDoesNotStepWhenTheOptimizerStepWasSkipped) {
  Accelerator accelerator(quiet().loss_scaling(true));
  ASSERT_NE(accelerator.scaler(), nullptr);
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  optim::StepLR step_lr(sgd, /*step_size=*/1, /*gamma=*/0.5);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, sgd, step_lr);
  const auto x = torch::randn({4, 6});

  auto train_step = [&](bool inject_inf) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(x).pow(2).mean());
    if (inject_inf) {
      torch::NoGradGuard no_grad;
      net->fc2->weight.grad()[0][0] = INFINITY;
    }
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  };

  train_step(false);
  EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
  EXPECT_DOUBLE_EQ(scheduler.get_last_lr()[0], 0.05);
  EXPECT_EQ(step_lr.last_epoch(), 1);
  const auto before = snapshot(net);
  const double scale = accelerator.scaler()->get_scale();

  train_step(true);
  EXPECT_TRUE(accelerator.optimizer_step_was_skipped());
  EXPECT_TRUE(optimizer.step_was_skipped());
  EXPECT_EQ(step_lr.last_epoch(), 1);
  EXPECT_DOUBLE_EQ(scheduler.get_last_lr()[0], 0.05);
  EXPECT_DOUBLE_EQ(accelerator.scaler()->get_scale(), scale * 0.5);
  expect_equal(snapshot(net), before);

  train_step(false);
  EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
  EXPECT_EQ(step_lr.last_epoch(), 2);
  EXPECT_DOUBLE_EQ(scheduler.get_last_lr()[0], 0.025);
}

TEST(AcceleratorTest, SchedulerStepsOncePerOptimizerStepWhenAccumulating) {
  Accelerator accelerator(quiet().gradient_accumulation_steps(2));
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  optim::StepLR step_lr(sgd, 1, 0.5);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, sgd, step_lr);
  for (int i = 0; i < 6; ++i) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(torch::randn({2, 6})).sum());
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  }
  EXPECT_EQ(step_lr.last_epoch(), 3);
}

TEST(AcceleratorTest, SchedulerStepsOnEveryCallWithoutStepWithOptimizer) {
  Accelerator accelerator(
      quiet().gradient_accumulation_steps(2).step_scheduler_with_optimizer(
          false));
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  optim::StepLR step_lr(sgd, 1, 0.5);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, sgd, step_lr);
  for (int i = 0; i < 3; ++i) {
    auto scope = accelerator.accumulate(model);
    scheduler.step();
  }
  EXPECT_EQ(step_lr.last_epoch(), 3);
}

// Clipping under loss scaling must act on the true gradients: the same
// model without scaling, clipped the same way, ends identical.
TEST(AcceleratorTest, ClipGradNormUnderTheScalerEqualsClippingUnscaledGrads) {
  const auto x = torch::randn({8, 6});
  auto run = [&](bool scaled, torch::Tensor* norm) {
    Accelerator accelerator(quiet().loss_scaling(scaled).grad_scaler(
        GradScalerOptions().init_scale(1024)));
    Net net = make_net(5);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    auto [model, optimizer] = accelerator.prepare(net, sgd);
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(x).pow(2).sum());
    *norm = accelerator.clip_grad_norm_(net->parameters(), 0.5);
    std::vector<torch::Tensor> grads;
    for (const auto& p : net->parameters()) {
      grads.push_back(p.grad().clone());
    }
    optimizer.step();
    return std::make_pair(grads, snapshot(net));
  };
  torch::Tensor scaled_norm;
  torch::Tensor plain_norm;
  const auto scaled = run(true, &scaled_norm);
  const auto plain = run(false, &plain_norm);
  EXPECT_GT(plain_norm.item<double>(), 0.5);  // clipping really happened
  EXPECT_NEAR(
      scaled_norm.item<double>(),
      plain_norm.item<double>(),
      1e-5 * plain_norm.item<double>());
  expect_close(scaled.first, plain.first, 1e-6);
  expect_close(scaled.second, plain.second, 1e-6);

  // The clipped gradients have norm max_norm (PyTorch's 1e-6 epsilon).
  double total = 0;
  for (const auto& g : plain.first) {
    total += g.pow(2).sum().item<double>();
  }
  EXPECT_NEAR(std::sqrt(total), 0.5, 1e-5);
}

TEST(AcceleratorTest, ClipGradNormMatchesLibTorchForEveryNormType) {
  for (double norm_type :
       {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Accelerator accelerator(quiet());
    Net a = make_net(6);
    Net b = make_net(6);
    const auto x = torch::randn({4, 6});
    auto model = accelerator.prepare(a);
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(x).pow(2).sum());
    b(x).pow(2).sum().backward();
    const double ours =
        accelerator.clip_grad_norm_(a->parameters(), 0.1, norm_type)
            .item<double>();
    const double theirs =
        torch::nn::utils::clip_grad_norm_(b->parameters(), 0.1, norm_type);
    EXPECT_NEAR(ours, theirs, 1e-5 * theirs) << norm_type;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      EXPECT_TRUE(torch::allclose(
          a->parameters()[i].grad(), b->parameters()[i].grad(), 1e-5, 1e-7))
          << norm_type;
    }
  }
}

TEST(AcceleratorTest, ClipGradValueClampsUnscaledGradients) {
  Accelerator accelerator(quiet().loss_scaling(true));
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto scope = accelerator.accumulate(model);
  accelerator.backward(model(torch::randn({8, 6})).pow(2).sum() * 100);
  accelerator.clip_grad_value_(net->parameters(), 0.01);
  for (const auto& p : net->parameters()) {
    EXPECT_LE(p.grad().abs().max().item<double>(), 0.01);
  }
  // Unscaled before clamping: a scaled gradient would be clamped at 0.01
  // and then divided by 65536.
  EXPECT_NEAR(net->fc2->bias.grad().abs().max().item<double>(), 0.01, 1e-9);
  optimizer.step();
}

// A micro-step clips nothing but still returns a norm (accelerate returns
// one on every call, and ported code reads it with .item()).
TEST(AcceleratorTest, ClipOnAMicroStepChangesNothingAndReturnsThePartialNorm) {
  for (bool scaling : {false, true}) {
    Accelerator accelerator(
        quiet().gradient_accumulation_steps(2).loss_scaling(scaling));
    Net net = make_net();
    auto model = accelerator.prepare(net);
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(torch::randn({4, 6})).pow(2).sum() * 1000);
    std::vector<torch::Tensor> grads;
    for (const auto& p : net->parameters()) {
      grads.push_back(p.grad().clone());
    }
    const auto norm = accelerator.clip_grad_norm_(net->parameters(), 0.1);
    ASSERT_TRUE(norm.defined());
    const double scale = scaling ? 65536.0 : 1.0;
    std::vector<torch::Tensor> norms;
    for (const auto& g : grads) {
      norms.push_back(g.norm());
    }
    EXPECT_NEAR(
        norm.item<double>(),
        torch::stack(norms).norm().item<double>() / scale,
        1e-4 * norm.item<double>())
        << "scaling " << scaling;
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_TRUE(torch::equal(net->parameters()[i].grad(), grads[i]));
    }
  }
}

TEST(AcceleratorTest, ClipRejectsBadArguments) {
  Accelerator accelerator(quiet());
  Net net = make_net();
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.clip_grad_norm_(net->parameters(), -1.0),
      InvalidArgument,
      "max_norm >= 0 and finite, got -1");
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.clip_grad_norm_(net->parameters(), 1.0, 0.0),
      InvalidArgument,
      "norm_type > 0");
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.clip_grad_value_(net->parameters(), NAN),
      InvalidArgument,
      "clip_value >= 0 and finite");
}

TEST(AcceleratorTest, PreparedForwardRunsInBf16AndReturnsFp32) {
  Accelerator accelerator(quiet().mixed_precision("bf16"));
  Net net = make_net();
  auto model = accelerator.prepare(net);
  const auto x = torch::randn({4, 6});
  const auto out = model(x);
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  // The values are bf16 results widened to fp32.
  EXPECT_TRUE(torch::equal(out, out.to(torch::kBFloat16).to(torch::kFloat)));
  Autocast reference(torch::kCPU, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(out, net->forward(x).to(torch::kFloat)));
}

TEST(AcceleratorTest, PreparedForwardInFp32IsThePlainForward) {
  Accelerator accelerator(quiet());
  Net net = make_net();
  auto model = accelerator.prepare(net);
  const auto x = torch::randn({4, 6});
  EXPECT_TRUE(torch::equal(model(x), net->forward(x)));
  EXPECT_EQ(model->fc1->weight.data_ptr(), net->fc1->weight.data_ptr());
}

// Outputs of several kinds come back fp32 element by element.
struct PairNetImpl : torch::nn::Module {
  PairNetImpl() : fc(register_module("fc", torch::nn::Linear(6, 2))) {}
  std::tuple<torch::Tensor, torch::Tensor, int64_t> forward(torch::Tensor x) {
    auto y = fc(x);
    return {y, y.argmax(1), 7};
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(PairNet);

TEST(AcceleratorTest, TupleOutputsAreConvertedElementByElement) {
  Accelerator accelerator(quiet().mixed_precision("bf16"));
  auto model = accelerator.prepare(PairNet());
  auto [y, index, seven] = model(torch::randn({3, 6}));
  EXPECT_EQ(y.scalar_type(), torch::kFloat);
  EXPECT_EQ(index.scalar_type(), torch::kLong);
  EXPECT_EQ(seven, 7);
}

TEST(AcceleratorTest, SharedPtrModelsCanBePrepared) {
  Accelerator accelerator(quiet().mixed_precision("bf16"));
  auto impl = std::make_shared<NetImpl>();
  auto model = accelerator.prepare(impl);
  EXPECT_EQ(model(torch::randn({2, 6})).scalar_type(), torch::kFloat);
}

TEST(AcceleratorTest, BackwardWarnsOnceWhenNoForwardRanUnderAutocast) {
  Accelerator accelerator(quiet().mixed_precision("bf16"));
  Net net = make_net();
  auto model = accelerator.prepare(net);
  testing::internal::CaptureStderr();
  {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model->forward(torch::randn({2, 6})).sum());
  }
  {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model->forward(torch::randn({2, 6})).sum());
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, testing::HasSubstr("not model->forward(x)"));
  EXPECT_EQ(err.find("not model->forward"), err.rfind("not model->forward"));
}

TEST(AcceleratorTest, NoWarningWhenThePreparedForwardRan) {
  Accelerator accelerator(quiet().mixed_precision("bf16"));
  auto model = accelerator.prepare(make_net());
  testing::internal::CaptureStderr();
  auto scope = accelerator.accumulate(model);
  accelerator.backward(model(torch::randn({2, 6})).sum());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(AcceleratorTest, OptimizerStateSurvivesPreparation) {
  // Two identical models, one Adam step each; preparing one optimizer
  // after that step must keep its moments, so the next steps agree.
  const auto x = torch::randn({4, 6});
  Net a = make_net(9);
  Net b = make_net(9);
  torch::optim::Adam adam_a(a->parameters(), 1e-2);
  torch::optim::Adam adam_b(b->parameters(), 1e-2);
  a(x).pow(2).sum().backward();
  adam_a.step();
  b(x).pow(2).sum().backward();
  adam_b.step();

  detail::move_optimizer_state(adam_a, c10::Device(c10::kCPU));
  // LibTorch's own step on both sides, so that they agree to the bit.
  Accelerator accelerator(quiet().fused_optimizer_step(false));
  auto [model, optimizer] = accelerator.prepare(a, adam_a);
  for (int i = 0; i < 3; ++i) {
    optimizer.zero_grad();
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(x).pow(2).sum());
    optimizer.step();
    adam_b.zero_grad();
    b(x).pow(2).sum().backward();
    adam_b.step();
  }
  expect_equal(snapshot(a), snapshot(b));
}

// Weights after fused steps (a) against LibTorch's step (b): from 2.4
// ATen's kernel, within 1e-6 of each tensor's largest value (fp32
// rounding); before, ampkit's loop, within 5e-7 relative. Returns whether
// they are bit-identical.
bool expect_fused_weights_close(const Net& a, const Net& b) {
  const auto pa = snapshot(a);
  const auto pb = snapshot(b);
  bool identical = true;
  for (size_t i = 0; i < pa.size(); ++i) {
    identical = identical && torch::equal(pa[i], pb[i]);
    if (AMPKIT_TORCH_AT_LEAST(2, 4)) {
      EXPECT_LE(
          ((pa[i] - pb[i]).abs().max() / pb[i].abs().max()).item<double>(),
          1e-6)
          << i;
    } else {
      EXPECT_TRUE(torch::allclose(pa[i], pb[i], 5e-7, 0)) << i;
    }
  }
  return identical;
}

// The fused AdamW step computes LibTorch's update: before LibTorch 2.4
// ampkit's loop, bit-identical where ATen runs its FMA kernels (AVX2/AVX-512)
// and within 5e-7 relative otherwise; from 2.4 ATen's fused kernel, within
// 1e-6 of each tensor's largest value (fp32 rounding).
TEST(AcceleratorTest, FusedAdamWStepMatchesLibTorchsStep) {
  const auto x = torch::randn({8, 6});
  Net a = make_net(11);
  Net b = make_net(11);
  torch::optim::AdamW adamw_a(
      a->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  torch::optim::AdamW adamw_b(
      b->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  testing::internal::CaptureStderr();
  Accelerator accelerator(AcceleratorOptions().mixed_precision("no"));
  auto [model, optimizer] = accelerator.prepare(a, adamw_a);
  EXPECT_THAT(
      testing::internal::GetCapturedStderr(),
      testing::HasSubstr("optimizer 0 steps fused"));
  for (int i = 0; i < 20; ++i) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(x).pow(2).sum());
    optimizer.step();
    optimizer.zero_grad();
    adamw_b.zero_grad();
    b(x).pow(2).sum().backward();
    adamw_b.step();
  }
  RecordProperty(
      "bit_identical", expect_fused_weights_close(a, b) ? "yes" : "no");
}

// With loss scaling the fused step takes the scale and the inf flag (ATen's
// kernels from 2.4, ampkit's loop before): the same skipped step and the same
// weights as GradScaler + unscale_ + LibTorch's step on a twin.
TEST(AcceleratorTest, FusedAdamWStepWithLossScalingMatchesGradScalerAndStep) {
  const auto x = torch::randn({8, 6});
  Net a = make_net(12);
  Net b = make_net(12);
  torch::optim::AdamW adamw_a(
      a->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  torch::optim::AdamW adamw_b(
      b->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  GradScaler scaler;
  testing::internal::CaptureStderr();
  Accelerator accelerator(
      AcceleratorOptions().mixed_precision("no").loss_scaling(true));
  auto [model, optimizer] = accelerator.prepare(a, adamw_a);
  EXPECT_THAT(
      testing::internal::GetCapturedStderr(),
      testing::HasSubstr("loss scaling inside)"));
  auto poison = [](Net& net) {
    torch::NoGradGuard no_grad;
    net->fc1->weight.grad()[0][1] = INFINITY;
  };
  for (int i = 0; i < 20; ++i) {
    {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(model(x).pow(2).sum());
      if (i == 7) {
        poison(a);
      }
      optimizer.step();
      optimizer.zero_grad();
    }
    EXPECT_EQ(optimizer.step_was_skipped(), i == 7) << "step " << i;
    adamw_b.zero_grad();
    scaler.scale(b(x).pow(2).sum()).backward();
    if (i == 7) {
      poison(b);
    }
    EXPECT_EQ(scaler.step(adamw_b).has_value(), i != 7) << "step " << i;
    scaler.update();
  }
  EXPECT_EQ(accelerator.scaler()->get_scale(), scaler.get_scale());
  expect_fused_weights_close(a, b);
}

struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : conv(register_module(
            "conv",
            // No bias: batch norm cancels its gradient to rounding noise,
            // which Adam would blow up differently in each layout.
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(3, 8, 3).padding(1).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(8))),
        fc(register_module("fc", torch::nn::Linear(8 * 4 * 4, 3))),
        conv1ch(register_module(
            "conv1ch", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc(torch::max_pool2d(torch::relu(bn(conv(x))), 2).flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
  torch::nn::Conv2d conv1ch;  // one input channel; not in forward
};
TORCH_MODULE(ConvNet);

// channels_last lays the conv weight out NHWC in place (the optimizer made
// before prepare still steps it, fused), the convolutions then produce NHWC
// outputs, and training follows a contiguous twin up to the rounding of
// the other summation order.
TEST(AcceleratorTest, ChannelsLastLaysConvWeightsOutNhwcAndTrainsAlike) {
  torch::manual_seed(13);
  ConvNet a;
  ConvNet b;
  {
    torch::NoGradGuard no_grad;
    const auto pa = a->parameters();
    const auto pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      pb[i].copy_(pa[i]);
    }
  }
  torch::optim::AdamW adamw_a(a->parameters(), 1e-2);
  torch::optim::AdamW adamw_b(b->parameters(), 1e-2);
  testing::internal::CaptureStderr();
  Accelerator accelerator(AcceleratorOptions().channels_last(true));
  auto [model, optimizer] = accelerator.prepare(a, adamw_a);
  EXPECT_THAT(
      testing::internal::GetCapturedStderr(),
      testing::HasSubstr("optimizer 0 steps fused"));
  EXPECT_TRUE(a->conv->weight.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(a->conv->weight.is_contiguous());
  EXPECT_EQ(
      a->conv1ch->weight.suggest_memory_format(),
      at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(a->fc->weight.is_contiguous());  // 2-dim: as it was
  EXPECT_TRUE(adamw_a.param_groups()[0].params()[0].is_same(a->conv->weight));
  const auto x = torch::randn({4, 3, 8, 8});
  EXPECT_TRUE(a->conv(x).is_contiguous(at::MemoryFormat::ChannelsLast));
  // One input channel: the input is NCHW and channels-last at once, so the
  // weight's strides decide (the demo's first layer).
  EXPECT_FALSE(a->conv1ch(x.slice(1, 0, 1)).is_contiguous());
  const auto target = torch::tensor({0, 2, 1, 0});
  for (int i = 0; i < 10; ++i) {
    {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(torch::cross_entropy_loss(model(x), target));
      optimizer.step();
      optimizer.zero_grad();
    }
    adamw_b.zero_grad();
    torch::cross_entropy_loss(b(x), target).backward();
    adamw_b.step();
  }
  EXPECT_TRUE(a->conv->weight.is_contiguous(at::MemoryFormat::ChannelsLast));
  const auto pa = snapshot(a);
  const auto pb = snapshot(b);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i], pb[i], 1e-4, 1e-5)) << i;
  }
}

TEST(AcceleratorTest, DetectAnomalyNamesTheStepOfANonFiniteLoss) {
  Accelerator accelerator(quiet().detect_anomaly(true));
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto scope = accelerator.accumulate(model);
  const auto x = torch::full({2, 6}, std::numeric_limits<float>::quiet_NaN());
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.backward(model(x).sum()),
      TrainingDiverged,
      "detect_anomaly: the loss is non-finite at step 1 (micro-step 1)");
}

TEST(AcceleratorTest, DetectAnomalyNamesTheFirstParameterWithANonFiniteGrad) {
  Accelerator accelerator(quiet().detect_anomaly(true));
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  for (int step = 1; step <= 2; ++step) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(torch::randn({2, 6})).pow(2).sum());
    if (step == 2) {
      torch::NoGradGuard no_grad;
      net->fc2->bias.grad()[1] = INFINITY;
      net->fc2->weight.grad()[0][0] = NAN;
      const auto before = snapshot(net);
      AMPKIT_EXPECT_THROWS_WITH(
          optimizer.step(),
          TrainingDiverged,
          "detect_anomaly: non-finite gradients at step 2 in fc2.weight (1 "
          "NaN of 48 values), fc2.bias (1 inf of 3 values); the step was not "
          "taken");
      expect_equal(snapshot(net), before);  // the step was not taken
    } else {
      optimizer.step();
      optimizer.zero_grad();
    }
  }
}

TEST(AcceleratorTest, DetectAnomalyLogsEachSkippedStepUnderLossScaling) {
  Accelerator accelerator(quiet().detect_anomaly(true).loss_scaling(true));
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  testing::internal::CaptureStderr();
  for (int step = 1; step <= 2; ++step) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(torch::randn({2, 6})).pow(2).sum());
    if (step == 2) {
      torch::NoGradGuard no_grad;
      net->fc1->bias.grad()[3] = INFINITY;
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  EXPECT_THAT(
      testing::internal::GetCapturedStderr(),
      testing::HasSubstr(
          "ampkit Accelerator: warning: step 2 skipped: non-finite gradients "
          "in fc1.bias (1 inf of 16 values); loss scale 65536 -> 32768"));
  EXPECT_TRUE(accelerator.optimizer_step_was_skipped());
}

// The prepared forward is an entry point of the hint layer: LibTorch's own
// error, its type kept, with the cause and fix appended.
TEST(AcceleratorTest, ForwardErrorsCarryAnAmpkitHint) {
  Accelerator accelerator(quiet());
  auto model = accelerator.prepare(make_net());
  try {
    model(torch::randn({2, 6}).to(torch::kBFloat16));
    ADD_FAILURE() << "a bf16 input to an fp32 model must fail";
  } catch (const c10::Error& e) {
    EXPECT_THAT(
        e.what(), testing::HasSubstr("mat1 and mat2 must have the same dtype"));
    EXPECT_THAT(e.what(), testing::HasSubstr("ampkit hint:"));
    EXPECT_THAT(e.what(), testing::HasSubstr("accelerator.autocast()"));
  }
}

TEST(AcceleratorTest, AnOptimizerIsPreparedOnlyOnce) {
  Accelerator accelerator(quiet());
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto first = accelerator.prepare(sgd);
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.prepare(sgd), UsageError, "already prepared");
}

TEST(AcceleratorTest, ZeroGradCanZeroInPlace) {
  Accelerator accelerator(quiet());
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  accelerator.backward(model(torch::randn({2, 6})).sum());
  optimizer.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(net->fc1->weight.grad().defined());
  EXPECT_EQ(net->fc1->weight.grad().abs().sum().item<double>(), 0.0);
}

TEST(AcceleratorTest, SingleProcessCollectivesKeepShapesOfManyProcesses) {
  Accelerator accelerator(quiet());
  EXPECT_TRUE(accelerator.is_main_process());
  EXPECT_TRUE(accelerator.is_local_main_process());
  EXPECT_EQ(accelerator.process_index(), 0);
  EXPECT_EQ(accelerator.num_processes(), 1);
  accelerator.wait_for_everyone();
  const auto scalar = torch::tensor(3.5);
  EXPECT_EQ(accelerator.gather(scalar).sizes(), (std::vector<int64_t>{1}));
  const auto batch = torch::randn({4, 2});
  EXPECT_TRUE(torch::equal(accelerator.gather(batch), batch));
  for (auto r : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
    EXPECT_TRUE(torch::equal(accelerator.reduce(batch, r), batch));
  }
}

TEST(AcceleratorTest, PrintWritesOneSpaceSeparatedLine) {
  Accelerator accelerator(quiet());
  testing::internal::CaptureStdout();
  accelerator.print("epoch", 3, "loss", 0.25);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "epoch 3 loss 0.25\n");
}

TEST(AcceleratorTest, StartUpTablePrintsOnTheMainProcess) {
  testing::internal::CaptureStderr();
  Accelerator accelerator(AcceleratorOptions().mixed_precision("no"));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, testing::HasSubstr("ampkit: Accelerator settings"));
  EXPECT_THAT(err, testing::HasSubstr("mixed_precision"));
  // What tune_malloc did is a row of its own (and so of the logged config).
  EXPECT_THAT(err, testing::HasSubstr("tune_malloc"));
  EXPECT_THAT(err, testing::ContainsRegex("malloc +(mmap threshold|kept)"));
}

TEST(AcceleratorTest, TuneMallocFalseKeepsTheProcessSettings) {
  testing::internal::CaptureStderr();
  Accelerator accelerator(AcceleratorOptions().tune_malloc(false));
  EXPECT_THAT(
      testing::internal::GetCapturedStderr(),
      testing::ContainsRegex("malloc +the process's own settings"));
}

TEST(AcceleratorTest, EnvironmentSetByALauncherIsUsed) {
  struct EnvGuard {
    EnvGuard() {
      setenv("AMPKIT_MIXED_PRECISION", "bf16", 1);
    }
    ~EnvGuard() {
      unsetenv("AMPKIT_MIXED_PRECISION");
    }
  } guard;
  Accelerator from_env(quiet());
  EXPECT_EQ(from_env.mixed_precision(), Precision::bf16);
  Accelerator explicit_wins(quiet().mixed_precision("no"));
  EXPECT_EQ(explicit_wins.mixed_precision(), Precision::no);
}

TEST(AcceleratorTest, SeedOptionMakesRunsRepeatable) {
  Accelerator first(quiet().seed(42));
  const auto a = torch::randn({5});
  Accelerator second(quiet().seed(42));
  EXPECT_TRUE(torch::equal(a, torch::randn({5})));
}

}  // namespace
}  // namespace ampkit

namespace ampkit {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

class AcceleratorDirTest : public testing_util::TempDirTest {};

// accelerate's free_memory: the prepared objects are released (using one is
// an error naming the fix), the step count restarts, and freshly prepared
// ones train (find_executable_batch_size's retries rely on it).
TEST(AcceleratorTest, FreeMemoryReleasesPreparedObjectsAndResetsTheSteps) {
  Accelerator accelerator(quiet());
  auto net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  accelerator.backward(model(torch::ones({2, 6})).sum());
  optimizer.step();
  EXPECT_EQ(accelerator.optimizer_steps(), 1);
  accelerator.free_memory();
  EXPECT_EQ(accelerator.optimizer_steps(), 0);
  auto old_step = [&optimizer = optimizer] { optimizer.step(); };
  EXPECT_THAT(
      old_step,
      ThrowsMessage<UsageError>(HasSubstr("Prepare the optimizer again")));
  auto old_forward = [&model = model] { model(torch::ones({2, 6})); };
  EXPECT_THAT(
      old_forward,
      ThrowsMessage<UsageError>(HasSubstr("Prepare the model again")));
  auto fresh_net = make_net(1);
  torch::optim::SGD fresh_sgd(fresh_net->parameters(), 0.1);
  auto [fresh_model, fresh_optimizer] =
      accelerator.prepare(fresh_net, fresh_sgd);
  const auto before = snapshot(fresh_net);
  accelerator.backward(fresh_model(torch::ones({2, 6})).sum());
  fresh_optimizer.step();
  EXPECT_EQ(accelerator.optimizer_steps(), 1);
  EXPECT_FALSE(torch::equal(before[0], fresh_net->fc1->weight));
  accelerator.clear();  // accelerate's alias
  EXPECT_EQ(accelerator.optimizer_steps(), 0);
}

// len(dataloader) and skip_first_batches on a loader prepare_data_loader
// built; a loader prepared without a ShardedSampler cannot answer.
TEST(AcceleratorTest, SkipFirstBatchesAndSizeOfAPreparedLoader) {
  Accelerator accelerator(quiet());
  const auto data = torch::arange(10).to(torch::kFloat).reshape({10, 1});
  auto loader = accelerator.prepare_data_loader(
      torch::data::datasets::TensorDataset(data).map(
          torch::data::transforms::Stack<torch::data::TensorExample>()),
      torch::data::DataLoaderOptions(3),
      data::ShardedSamplerOptions().shuffle(false));
  EXPECT_EQ(loader.size(), 4u);
  auto& same = accelerator.skip_first_batches(loader, 2);
  EXPECT_EQ(&same, &loader);
  std::vector<torch::Tensor> first;
  for (auto& batch : loader) {
    first.push_back(batch.data);
  }
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0][0].item<float>(), 6);
  int64_t second = 0;
  for (auto& batch : loader) {
    (void)batch;
    ++second;
  }
  EXPECT_EQ(second, 4) << "the skip applies to one epoch";
  EXPECT_THAT(
      [&] { accelerator.skip_first_batches(loader, -1); },
      ThrowsMessage<InvalidArgument>(HasSubstr("got -1")));
  auto plain = accelerator.prepare(
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          torch::data::datasets::TensorDataset(data).map(
              torch::data::transforms::Stack<torch::data::TensorExample>()),
          torch::data::DataLoaderOptions(4)));
  EXPECT_THAT(
      [&] { plain.size(); },
      ThrowsMessage<UsageError>(HasSubstr("prepare_data_loader")));
}

// accelerate's GeneralTracker: a tracker of the user's own in log_with
// receives the run's configuration and every log call, beside the
// built-in ones, and is finished by end_training.
class RecordingTracker : public track::Tracker {
 public:
  std::string name() const override {
    return "recording";
  }
  void store_init_configuration(const track::RunConfig& config) override {
    configs.push_back(config);
  }
  void log(const track::Metrics& m, int64_t step, double) override {
    logged.emplace_back(step, m);
  }
  void finish() override {
    finished = true;
  }
  std::vector<track::RunConfig> configs;
  std::vector<std::pair<int64_t, track::Metrics>> logged;
  bool finished = false;
};

TEST_F(AcceleratorDirTest, CustomTrackerGetsTheConfigAndLogsBesideBuiltIns) {
  const auto& dir = dir_;
  auto tracker = std::make_shared<RecordingTracker>();
  Accelerator accelerator(
      quiet().project_dir(dir.string()).log_with("jsonl").trackers({tracker}));
  EXPECT_THAT(accelerator.options().table(), HasSubstr("jsonl,recording"));
  accelerator.init_trackers("run", {{"lr", "0.1"}});
  ASSERT_EQ(tracker->configs.size(), 1u);
  EXPECT_EQ(tracker->configs[0].at("lr"), "0.1");
  EXPECT_EQ(tracker->configs[0].count("mixed_precision"), 1u);
  accelerator.log({{"loss", 0.5}}, 3);
  ASSERT_EQ(tracker->logged.size(), 1u);
  EXPECT_EQ(tracker->logged[0].first, 3);
  EXPECT_EQ(tracker->logged[0].second.at("loss"), 0.5);
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / track::kJsonlFile));
  accelerator.end_training();
  EXPECT_TRUE(tracker->finished);

  // Custom trackers alone are enough for init_trackers.
  auto alone = std::make_shared<RecordingTracker>();
  Accelerator only(quiet().project_dir(dir.string()).trackers({alone}));
  only.init_trackers("alone");
  EXPECT_EQ(alone->configs.size(), 1u);
  EXPECT_THAT(
      [&] { Accelerator bad(quiet().trackers({nullptr})); },
      ThrowsMessage<InvalidArgument>(HasSubstr("null tracker")));
}

// One process: gather_object is [object] (a vector, itself), and
// broadcast_object_list from process 0 keeps the list; another process is
// refused.
TEST(AcceleratorTest, ObjectCollectivesWithOneProcess) {
  Accelerator accelerator(quiet());
  EXPECT_EQ(
      accelerator.gather_object(std::string("only")),
      std::vector<std::string>{"only"});
  EXPECT_EQ(
      accelerator.gather_object(std::vector<double>{1.5, 2.5}),
      (std::vector<double>{1.5, 2.5}));
  std::vector<int64_t> list{3, 4};
  EXPECT_EQ(
      accelerator.broadcast_object_list(list), (std::vector<int64_t>{3, 4}));
  EXPECT_THAT(
      [&] { accelerator.broadcast_object_list(list, 1); },
      ThrowsMessage<InvalidArgument>(HasSubstr("got 1")));
}

// accelerate's `accelerator.gradient_accumulation_steps = n`.
TEST(AcceleratorTest, GradientAccumulationStepsCanBeSetBetweenTries) {
  Accelerator accelerator(quiet().gradient_accumulation_steps(4));
  accelerator.set_gradient_accumulation_steps(2);
  EXPECT_EQ(accelerator.gradient_accumulation_steps(), 2);
  auto net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  for (int i = 0; i < 4; ++i) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(torch::ones({2, 6})).sum());
    optimizer.step();
    optimizer.zero_grad();
  }
  EXPECT_EQ(accelerator.optimizer_steps(), 2);
  EXPECT_THAT(
      [&] { accelerator.set_gradient_accumulation_steps(0); },
      ThrowsMessage<InvalidArgument>(HasSubstr("got 0")));
  {
    auto scope = accelerator.accumulate(model);
    EXPECT_THAT(
        [&] { accelerator.set_gradient_accumulation_steps(3); },
        ThrowsMessage<UsageError>(HasSubstr("inside an accumulate()")));
  }
}

// accelerate's profile(): the ops of a training step are counted with
// their times, the table is sorted by self CPU time, and the Chrome trace
// is written as profile_<rank>.json.
TEST_F(AcceleratorDirTest, ProfileCountsTheStepsOpsAndWritesAChromeTrace) {
  const auto& dir = dir_;
  Accelerator accelerator(quiet().profile_options(
      diag::ProfileOptions().output_trace_dir(dir.string())));
  auto net = make_net();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto prof = accelerator.profile();
  for (int i = 0; i < 3; ++i) {
    accelerator.backward(model(torch::ones({4, 6})).sum());
    optimizer.step();
    optimizer.zero_grad();
  }
  prof.stop();
  const auto stats = prof.key_averages();
  auto addmm = std::find_if(stats.begin(), stats.end(), [](const auto& s) {
    return s.name == "aten::addmm";
  });
  ASSERT_NE(addmm, stats.end());
  EXPECT_EQ(addmm->calls, 6) << "two Linear layers, three forwards";
  for (size_t i = 1; i < stats.size(); ++i) {
    EXPECT_GE(
        stats[i - 1].self_cpu_time_total_us, stats[i].self_cpu_time_total_us);
  }
  for (const auto& s : stats) {
    EXPECT_LE(s.self_cpu_time_total_us, s.cpu_time_total_us + 1e-9) << s.name;
  }
  EXPECT_THAT(prof.table(), HasSubstr("aten::addmm"));
  EXPECT_EQ(prof.trace_path(), (dir / "profile_0.json").string());
  std::ifstream trace(prof.trace_path());
  const std::string text(
      (std::istreambuf_iterator<char>(trace)),
      std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("aten::addmm"));
  EXPECT_THAT(
      [&] { prof.key_averages("wall"); },
      ThrowsMessage<InvalidArgument>(HasSubstr("got 'wall'")));
  // /dev/full takes the open and fails every write with ENOSPC, as a full
  // disk does.
  EXPECT_THAT(
      [&] { prof.export_chrome_trace("/dev/full"); },
      ThrowsMessage<IoError>(
          HasSubstr("cannot write the trace /dev/full: the disk is full (")));
}

// accelerate's ProfileKwargs(schedule_option={wait: 1, warmup: 1, active: 2,
// repeat: 2}): of 10 steps, 2-3 and 6-7 are recorded, each cycle writes its
// trace, and the ops of the 4 recorded steps are counted. On LibTorch 2.x
// this is Kineto's CPU trace, on 1.13 the legacy profiler's.
TEST_F(
    AcceleratorDirTest,
    ProfileScheduleRecordsItsActiveStepsWithATracePerCycle) {
  const auto& dir = dir_;
  Accelerator accelerator(
      quiet().profile_options(diag::ProfileOptions()
                                  .output_trace_dir(dir.string())
                                  .schedule_wait(1)
                                  .schedule_warmup(1)
                                  .schedule_active(2)
                                  .schedule_repeat(2)));
  torch::nn::Linear net(6, 2);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto prof = accelerator.profile();
  for (int i = 0; i < 10; ++i) {
    accelerator.backward(model(torch::ones({4, 6})).sum());
    optimizer.step();
    optimizer.zero_grad();
    prof.step();
  }
  prof.stop();
  EXPECT_EQ(prof.cycles(), 2);
  const auto stats = prof.key_averages();
  auto addmm = std::find_if(stats.begin(), stats.end(), [](const auto& s) {
    return s.name == "aten::addmm";
  });
  ASSERT_NE(addmm, stats.end());
  EXPECT_EQ(addmm->calls, 4) << "one Linear, four recorded steps";
  for (const auto& s : stats) {
    EXPECT_LE(s.self_cpu_time_total_us, s.cpu_time_total_us + 1e-6) << s.name;
    EXPECT_GE(s.self_cpu_time_total_us, -1e-6) << s.name;
  }
  for (const char* name : {"profile_0.json", "profile_0_cycle1.json"}) {
    const std::string text = testing_util::read_file(dir / name);
    EXPECT_THAT(text, HasSubstr("aten::addmm")) << name;
    if (std::string(diag::Profiler::backend()) == "kineto") {
      EXPECT_THAT(text, HasSubstr("traceEvents")) << name;
    }
  }
  EXPECT_EQ(
      std::string(diag::Profiler::backend()),
      TORCH_VERSION_MAJOR >= 2 ? "kineto" : "legacy");
  EXPECT_THAT(
      [] { diag::Profiler bad(diag::ProfileOptions().schedule_active(-1)); },
      ThrowsMessage<InvalidArgument>(HasSubstr("must be >= 0, got 0, 0, -1")));
}

}  // namespace
}  // namespace ampkit

namespace ampkit {
namespace {

// The gradient of a linear model's mean squared error over `x`, `y`.
std::vector<torch::Tensor> reference_gradient(
    const torch::nn::Linear& like,
    const torch::Tensor& x,
    const torch::Tensor& y) {
  torch::nn::Linear copy(like->options);
  {
    torch::NoGradGuard no_grad;
    copy->weight.copy_(like->weight);
    copy->bias.copy_(like->bias);
  }
  torch::mse_loss(copy(x), y).backward();
  return {copy->weight.grad().clone(), copy->bias.grad().clone()};
}

// count_short_window: the last window of an epoch, cut short by the
// loader's end, averages over the micro-steps it had; by default (as
// accelerate) it is divided by the full count.
TEST(AcceleratorTest, ShortLastWindowAveragesOverItsMicroStepsWhenAsked) {
  const auto data = torch::randn({5, 3});
  const auto target = torch::randn({5, 1});
  for (const bool count : {false, true}) {
    Accelerator accelerator(
        quiet().gradient_accumulation_steps(2).count_short_window(count));
    torch::manual_seed(1);
    torch::nn::Linear net(3, 1);
    auto model = accelerator.prepare(net);
    auto loader = accelerator.prepare_data_loader(
        torch::data::datasets::TensorDataset(torch::cat({data, target}, 1))
            .map(torch::data::transforms::Stack<torch::data::TensorExample>()),
        torch::data::DataLoaderOptions(1));
    int64_t micro = 0;
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate(model);
      const auto x = batch.data.narrow(1, 0, 3);
      const auto y = batch.data.narrow(1, 3, 1);
      accelerator.backward(torch::mse_loss(model(x), y));
      if (++micro < 5) {
        if (accelerator.sync_gradients()) {
          net->zero_grad();  // windows [0, 1] and [2, 3]
        }
        continue;
      }
      // The fifth batch alone, the window's only micro-step.
      ASSERT_TRUE(accelerator.sync_gradients());
      const auto want =
          reference_gradient(net, data[4].unsqueeze(0), target[4].unsqueeze(0));
      const double share = count ? 1.0 : 0.5;
      EXPECT_TRUE(torch::allclose(net->weight.grad(), want[0] * share, 0, 1e-6))
          << "count_short_window " << count;
      EXPECT_TRUE(torch::allclose(net->bias.grad(), want[1] * share, 0, 1e-6));
    }
  }
}

// accumulate(model, num_items) with sum losses: the window's gradient is
// the mean over all its items, however unevenly the micro-batches hold
// them (padding masked out).
TEST(AcceleratorTest, CountedItemsGiveTheMeanOverTheWholeWindow) {
  Accelerator accelerator(quiet().gradient_accumulation_steps(2));
  torch::manual_seed(2);
  torch::nn::Linear net(3, 1);
  auto model = accelerator.prepare(net);
  const auto x = torch::randn({10, 3});
  const auto y = torch::randn({10, 1});
  // Micro-batches of 6 and 4 rows, of which 5 and 1 are real items.
  const auto mask = torch::tensor({1, 1, 1, 0, 1, 1, 0, 0, 1, 0}, torch::kBool);
  for (const auto& [begin, length] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {6, 4}}) {
    const auto m = mask.narrow(0, begin, length);
    auto scope = accelerator.accumulate(model, m.sum());
    const auto err =
        (model(x.narrow(0, begin, length)) - y.narrow(0, begin, length))
            .pow(2)
            .squeeze(1);
    accelerator.backward(err.masked_select(m).sum());
  }
  const auto want = reference_gradient(net, x.index({mask}), y.index({mask}));
  EXPECT_TRUE(torch::allclose(net->weight.grad(), want[0], 0, 1e-6));
  EXPECT_TRUE(torch::allclose(net->bias.grad(), want[1], 0, 1e-6));
  // The same window, in the other order, with the last micro-step's loss
  // (5 items) in two backward calls: the second comes after the window's
  // gradients were divided.
  net->zero_grad();
  for (const auto& [begin, length] :
       std::vector<std::pair<int64_t, int64_t>>{{6, 4}, {0, 6}}) {
    const auto m = mask.narrow(0, begin, length);
    auto scope = accelerator.accumulate(model, m.sum());
    const auto err =
        (model(x.narrow(0, begin, length)) - y.narrow(0, begin, length))
            .pow(2)
            .squeeze(1)
            .masked_select(m);
    if (begin == 6) {
      accelerator.backward(err.sum());
    } else {
      // The first share of the items, then the rest.
      accelerator.backward(err.narrow(0, 0, 1).sum(), /*retain_graph=*/true);
      accelerator.backward(err.narrow(0, 1, err.size(0) - 1).sum());
    }
  }
  EXPECT_TRUE(torch::allclose(net->weight.grad(), want[0], 0, 1e-6));
  EXPECT_TRUE(torch::allclose(net->bias.grad(), want[1], 0, 1e-6));
  // A window counts every micro-step or none.
  net->zero_grad();
  {
    auto scope = accelerator.accumulate(model, 3);
    accelerator.backward(model(x).sum());
  }
  EXPECT_THAT(
      [&] { auto scope = accelerator.accumulate(model); },
      ThrowsMessage<UsageError>(HasSubstr("Count the items of every")));
  EXPECT_THAT(
      [&] { auto scope = accelerator.accumulate(model, -1); },
      ThrowsMessage<InvalidArgument>(HasSubstr("got -1 items")));
  EXPECT_THAT(
      [&] { auto scope = accelerator.accumulate(model, torch::ones({2})); },
      ThrowsMessage<InvalidArgument>(HasSubstr("needs one integer count")));
}

}  // namespace
}  // namespace ampkit
