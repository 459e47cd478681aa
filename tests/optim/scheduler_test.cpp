// LR schedulers: lr sequences against PyTorch's (golden_schedules.h), state
// round-trips mid-schedule, and every constructor, step and load error.
#include "ampkit/optim/scheduler.h"

#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "ampkit/error.h"
#include "golden_schedules.h"
#include "test_util.h"

namespace ampkit::optim {
namespace {

// An SGD or AdamW optimizer with one param group per lr (default: the
// golden base lrs), the parameters owned by its groups.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::string& kind,
    std::vector<double> lrs = {golden::kBaseLrs[0], golden::kBaseLrs[1]}) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (double lr : lrs) {
    std::vector<torch::Tensor> params{torch::zeros({2}).requires_grad_()};
    if (kind == "sgd") {
      groups.emplace_back(
          params, std::make_unique<torch::optim::SGDOptions>(lr));
    } else {
      groups.emplace_back(
          params, std::make_unique<torch::optim::AdamWOptions>(lr));
    }
  }
  if (kind == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        groups, torch::optim::SGDOptions(lrs[0]));
  }
  return std::make_unique<torch::optim::AdamW>(
      groups, torch::optim::AdamWOptions(lrs[0]));
}

std::vector<double> group_lrs(torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) {
    lrs.push_back(group.options().get_lr());
  }
  return lrs;
}

std::unique_ptr<LRScheduler> make_warmup(
    torch::optim::Optimizer& optimizer, const golden::WarmupSchedule& g) {
  const std::string kind = g.scheduler;
  if (kind == "constant_with_warmup") {
    return std::make_unique<ConstantWithWarmup>(optimizer, g.num_warmup_steps);
  }
  if (kind == "linear_with_warmup") {
    return std::make_unique<LinearWithWarmup>(
        optimizer, g.num_warmup_steps, g.num_training_steps);
  }
  return std::make_unique<CosineWithWarmup>(
      optimizer, g.num_warmup_steps, g.num_training_steps, g.num_cycles);
}

ReduceLROnPlateauOptions plateau_options(const golden::PlateauSchedule& g) {
  return ReduceLROnPlateauOptions()
      .mode(parse_plateau_mode(g.mode))
      .factor(g.factor)
      .patience(g.patience)
      .threshold(g.threshold)
      .threshold_mode(parse_threshold_mode(g.threshold_mode))
      .cooldown(g.cooldown)
      .min_lr(g.min_lr)
      .eps(g.eps);
}

// The lrs are PyTorch's double operations in the same order, so they agree
// to a few ulps at most (StepLR: closed form against PyTorch's chained
// products); 1e-12 relative, and a golden 0 must be exactly 0.
constexpr double kRelTol = 1e-12;

// Compares the scheduler's and the optimizer's lrs with golden[0..1];
// returns false (after reporting) on a mismatch.
bool matches(
    LRScheduler& scheduler, const double* golden, const std::string& where) {
  const std::vector<double>& lrs = scheduler.get_last_lr();
  EXPECT_EQ(lrs, group_lrs(scheduler.optimizer())) << where;
  if (lrs.size() != 2) {
    ADD_FAILURE() << where << ": " << lrs.size() << " lrs";
    return false;
  }
  for (size_t g = 0; g < 2; ++g) {
    if (!(std::abs(lrs[g] - golden[g]) <= kRelTol * std::abs(golden[g]))) {
      ADD_FAILURE() << where << ", group " << g << ": lr " << lrs[g]
                    << ", PyTorch " << golden[g];
      return false;
    }
  }
  return true;
}

std::vector<std::string> keys_of(const StateDict& state) {
  std::vector<std::string> keys;
  for (const auto& kv : state) {
    keys.push_back(kv.first);
  }
  return keys;
}

bool same_state(const StateDict& a, const StateDict& b) {
  if (keys_of(a) != keys_of(b)) {
    return false;
  }
  for (const auto& [key, value] : a) {
    if (!(value == b.at(key))) {
      return false;
    }
  }
  return true;
}

TEST(SchedulerTest, WarmupSchedulesFollowTransformersFormulasAsPyTorchRuns) {
  for (const auto& g : golden::kWarmupSchedules) {
    for (const std::string kind : {"sgd", "adamw"}) {
      SCOPED_TRACE(std::string(g.name) + " on " + kind);
      auto optimizer = make_optimizer(kind);
      auto scheduler = make_warmup(*optimizer, g);
      EXPECT_EQ(scheduler->name(), g.scheduler);
      for (int i = 0; i < g.n; ++i) {
        if (i > 0) {
          scheduler->step();
        }
        EXPECT_EQ(scheduler->last_epoch(), i);
        if (!matches(*scheduler, g.lr + 2 * i, "step " + std::to_string(i))) {
          break;
        }
      }
    }
  }
}

TEST(SchedulerTest, StepLRMatchesPyTorchsChainedDecay) {
  for (const auto& g : golden::kStepSchedules) {
    for (const std::string kind : {"sgd", "adamw"}) {
      SCOPED_TRACE(std::string(g.name) + " on " + kind);
      auto optimizer = make_optimizer(kind);
      StepLR scheduler(*optimizer, g.step_size, g.gamma);
      for (int i = 0; i < g.n; ++i) {
        if (i > 0) {
          scheduler.step();
        }
        if (!matches(scheduler, g.lr + 2 * i, "step " + std::to_string(i))) {
          break;
        }
      }
    }
  }
}

TEST(SchedulerTest, ReduceLROnPlateauMatchesPyTorchOnScriptedMetrics) {
  for (const auto& g : golden::kPlateauSchedules) {
    for (const std::string kind : {"sgd", "adamw"}) {
      SCOPED_TRACE(std::string(g.name) + " on " + kind);
      auto optimizer = make_optimizer(kind);
      ReduceLROnPlateau scheduler(*optimizer, plateau_options(g));
      EXPECT_EQ(scheduler.last_epoch(), 0);
      EXPECT_EQ(
          scheduler.get_last_lr(),
          std::vector<double>({golden::kBaseLrs[0], golden::kBaseLrs[1]}));
      for (int i = 0; i < g.n; ++i) {
        scheduler.step(g.metric[i]);
        EXPECT_EQ(scheduler.last_epoch(), i + 1);
        if (!matches(scheduler, g.lr + 2 * i, "metric " + std::to_string(i))) {
          break;
        }
      }
    }
  }
}

TEST(SchedulerTest, ConstructionAppliesTheLrOfEpochZeroAsPyTorchDoes) {
  auto optimizer = make_optimizer("sgd");
  LinearWithWarmup warmup(*optimizer, 4, 20);
  EXPECT_EQ(warmup.last_epoch(), 0);
  EXPECT_EQ(group_lrs(*optimizer), std::vector<double>({0.0, 0.0}));
  EXPECT_EQ(warmup.state_dict().at("_step_count").toInt(), 1);
  warmup.step();
  EXPECT_EQ(
      group_lrs(*optimizer),
      std::vector<double>(
          {golden::kBaseLrs[0] * 0.25, golden::kBaseLrs[1] * 0.25}));
  EXPECT_EQ(warmup.state_dict().at("_step_count").toInt(), 2);

  // base_lrs are the lrs at construction; without warmup lr(0) is the base.
  auto plain = make_optimizer("adamw", {0.5});
  StepLR step(*plain, 2, 0.5);
  EXPECT_EQ(step.get_last_lr(), std::vector<double>({0.5}));
  EXPECT_EQ(
      step.state_dict().at("base_lrs").toDoubleVector(), step.get_last_lr());
}

TEST(SchedulerTest, NameAndTakesMetricTellTheKinds) {
  auto optimizer = make_optimizer("sgd");
  EXPECT_EQ(ConstantWithWarmup(*optimizer, 1).name(), "constant_with_warmup");
  EXPECT_EQ(LinearWithWarmup(*optimizer, 1, 2).name(), "linear_with_warmup");
  EXPECT_EQ(CosineWithWarmup(*optimizer, 1, 2).name(), "cosine_with_warmup");
  EXPECT_EQ(StepLR(*optimizer, 1).name(), "step");
  EXPECT_FALSE(StepLR(*optimizer, 1).takes_metric());
  EXPECT_EQ(ReduceLROnPlateau(*optimizer).name(), "reduce_on_plateau");
  EXPECT_TRUE(ReduceLROnPlateau(*optimizer).takes_metric());
}

TEST(SchedulerTest, StateDictHasPyTorchsKeysAndTheSchedulersOwn) {
  using ::testing::UnorderedElementsAre;
  auto optimizer = make_optimizer("sgd");
  EXPECT_THAT(
      keys_of(ConstantWithWarmup(*optimizer, 3).state_dict()),
      UnorderedElementsAre(
          "scheduler",
          "last_epoch",
          "base_lrs",
          "_last_lr",
          "_step_count",
          "num_warmup_steps"));
  EXPECT_THAT(
      keys_of(LinearWithWarmup(*optimizer, 3, 9).state_dict()),
      UnorderedElementsAre(
          "scheduler",
          "last_epoch",
          "base_lrs",
          "_last_lr",
          "_step_count",
          "num_warmup_steps",
          "num_training_steps"));
  EXPECT_THAT(
      keys_of(CosineWithWarmup(*optimizer, 3, 9).state_dict()),
      UnorderedElementsAre(
          "scheduler",
          "last_epoch",
          "base_lrs",
          "_last_lr",
          "_step_count",
          "num_warmup_steps",
          "num_training_steps",
          "num_cycles"));
  const StateDict step = StepLR(*optimizer, 5, 0.5).state_dict();
  EXPECT_THAT(
      keys_of(step),
      UnorderedElementsAre(
          "scheduler",
          "last_epoch",
          "base_lrs",
          "_last_lr",
          "_step_count",
          "step_size",
          "gamma"));
  EXPECT_EQ(step.at("scheduler").toStringRef(), "step");
  EXPECT_EQ(step.at("step_size").toInt(), 5);
  EXPECT_EQ(step.at("gamma").toDouble(), 0.5);
  // PyTorch 1.13's ReduceLROnPlateau has no base_lrs and no _step_count.
  const StateDict plateau = ReduceLROnPlateau(*optimizer).state_dict();
  EXPECT_THAT(
      keys_of(plateau),
      UnorderedElementsAre(
          "scheduler",
          "last_epoch",
          "_last_lr",
          "mode",
          "factor",
          "patience",
          "threshold",
          "threshold_mode",
          "cooldown",
          "min_lrs",
          "eps",
          "best",
          "num_bad_epochs",
          "cooldown_counter"));
  EXPECT_EQ(plateau.at("best").toDouble(), INFINITY);
  EXPECT_EQ(
      plateau.at("min_lrs").toDoubleVector(), std::vector<double>(2, 0.0));
}

// Runs `steps` steps, saves, loads the state into a scheduler made by `make`
// (with other arguments) on a fresh optimizer of the other kind, and expects
// both to give the same lrs from then on.
template <typename Make>
void expect_resumes_exactly(Make make, int steps) {
  auto first_optimizer = make_optimizer("sgd");
  auto first = make(*first_optimizer, false);
  for (int i = 0; i < steps; ++i) {
    first->step();
  }
  const StateDict state = first->state_dict();
  auto second_optimizer = make_optimizer("adamw", {0.7, 0.2});
  auto second = make(*second_optimizer, true);
  second->load_state_dict(state);
  EXPECT_TRUE(same_state(second->state_dict(), state));
  EXPECT_EQ(group_lrs(*second_optimizer), first->get_last_lr());
  EXPECT_EQ(second->get_last_lr(), first->get_last_lr());
  for (int i = 0; i < 20; ++i) {
    first->step();
    second->step();
    ASSERT_EQ(second->get_last_lr(), first->get_last_lr()) << "step " << i;
    ASSERT_EQ(group_lrs(*second_optimizer), group_lrs(*first_optimizer));
    ASSERT_EQ(second->last_epoch(), first->last_epoch());
  }
}

TEST(SchedulerTest, LoadedStateContinuesTheScheduleExactly) {
  using Opt = torch::optim::Optimizer;
  {
    SCOPED_TRACE("constant_with_warmup");
    expect_resumes_exactly(
        [](Opt& o, bool other) {
          return std::make_unique<ConstantWithWarmup>(o, other ? 1 : 8);
        },
        4);
  }
  {
    SCOPED_TRACE("linear_with_warmup");
    expect_resumes_exactly(
        [](Opt& o, bool other) {
          return std::make_unique<LinearWithWarmup>(
              o, other ? 0 : 5, other ? 100 : 25);
        },
        12);
  }
  {
    SCOPED_TRACE("cosine_with_warmup");
    expect_resumes_exactly(
        [](Opt& o, bool other) {
          return std::make_unique<CosineWithWarmup>(
              o, other ? 0 : 5, other ? 100 : 25, other ? 0.5 : 1.5);
        },
        12);
  }
  {
    SCOPED_TRACE("step");
    expect_resumes_exactly(
        [](Opt& o, bool other) {
          return std::make_unique<StepLR>(o, other ? 2 : 4, other ? 0.5 : 0.3);
        },
        9);
  }
}

TEST(SchedulerTest, LoadedPlateauStateKeepsBestAndCountersExactly) {
  // Saved in a cooldown, with bad epochs counted: the resumed run must give
  // the rest of PyTorch's sequence.
  const golden::PlateauSchedule& g = golden::kPlateauSchedules[1];
  ASSERT_GT(g.cooldown, 0);
  auto first_optimizer = make_optimizer("sgd");
  ReduceLROnPlateau first(*first_optimizer, plateau_options(g));
  const int saved_at = 15;
  for (int i = 0; i < saved_at; ++i) {
    first.step(g.metric[i]);
  }
  const StateDict state = first.state_dict();
  EXPECT_GT(state.at("cooldown_counter").toInt(), 0);
  auto second_optimizer = make_optimizer("adamw");
  ReduceLROnPlateau second(*second_optimizer);  // defaults, overwritten
  second.load_state_dict(state);
  EXPECT_TRUE(same_state(second.state_dict(), state));
  EXPECT_EQ(second.last_epoch(), saved_at);
  for (int i = saved_at; i < g.n; ++i) {
    second.step(g.metric[i]);
    if (!matches(second, g.lr + 2 * i, "metric " + std::to_string(i))) {
      break;
    }
  }
}

TEST(SchedulerTest, LoadingABadStateIsAnErrorAndChangesNothing) {
  auto optimizer = make_optimizer("sgd");
  LinearWithWarmup scheduler(*optimizer, 4, 20);
  auto twin_optimizer = make_optimizer("sgd");
  LinearWithWarmup twin(*twin_optimizer, 4, 20);
  for (int i = 0; i < 3; ++i) {
    scheduler.step();
    twin.step();
  }
  const StateDict before = scheduler.state_dict();
  // A valid state of another point of the schedule, each case breaking it in
  // one place.
  auto other_optimizer = make_optimizer("sgd");
  LinearWithWarmup other(*other_optimizer, 2, 10);
  for (int i = 0; i < 7; ++i) {
    other.step();
  }
  const StateDict good = other.state_dict();
  ASSERT_FALSE(same_state(good, before));

  StateDict state = good;
  state.erase("num_training_steps");
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "LinearWithWarmup: state is missing the key \"num_training_steps\", got "
      "the keys _last_lr, _step_count, base_lrs, last_epoch, "
      "num_warmup_steps, scheduler. A \"linear_with_warmup\" state has the "
      "keys _last_lr, _step_count, base_lrs, last_epoch, num_training_steps, "
      "num_warmup_steps, scheduler.");
  state = good;
  state["num_trainig_steps"] = int64_t(10);
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "LinearWithWarmup: state has an unknown key, got "
      "\"num_trainig_steps\". A \"linear_with_warmup\" state has the keys");
  state = good;
  state.erase("scheduler");
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state is missing the key \"scheduler\"");
  state = good;
  state["scheduler"] = int64_t(1);
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"scheduler\" must be a string, got a value of type Int.");
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(StepLR(*other_optimizer, 3).state_dict()),
      InvalidArgument,
      "LinearWithWarmup: state is from another kind of scheduler, got "
      "\"step\" for a \"linear_with_warmup\" scheduler. Load it into a "
      "scheduler of its kind (constant_with_warmup, linear_with_warmup, "
      "cosine_with_warmup, step, reduce_on_plateau).");
  state = good;
  state["last_epoch"] = std::string("seven");
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"last_epoch\" must be an integer, got a value of type "
      "String.");
  state = good;
  state["num_warmup_steps"] = 2.5;
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"num_warmup_steps\" must be an integer, got 2.5.");
  state = good;
  state["_last_lr"] = 0.1;
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"_last_lr\" must be a list of numbers, one per param group, "
      "got a value of type Double.");
  auto one_group = make_optimizer("sgd", {0.1});
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(
          LinearWithWarmup(*one_group, 2, 9).state_dict()),
      InvalidArgument,
      "state key \"_last_lr\" has one entry per param group, got 1 entries "
      "for an optimizer with 2 param groups. Load a state saved with the same "
      "param groups.");
  state = good;
  state["last_epoch"] = int64_t(-1);
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"last_epoch\" must be >= 0, got -1.");
  state = good;
  state["_last_lr"] = std::vector<double>{0.1, -0.5};
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"_last_lr\" must hold finite lrs >= 0, got -0.5 for param "
      "group 1.");
  // Everything but the scheduler's own parameter is valid here: nothing of
  // it may be applied either.
  state = good;
  state["num_warmup_steps"] = int64_t(-2);
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "LinearWithWarmup: num_warmup_steps must be >= 0, got -2.");

  EXPECT_TRUE(same_state(scheduler.state_dict(), before));
  EXPECT_EQ(group_lrs(*optimizer), group_lrs(*twin_optimizer));
  for (int i = 0; i < 20; ++i) {
    scheduler.step();
    twin.step();
    ASSERT_EQ(scheduler.get_last_lr(), twin.get_last_lr());
  }
  // Integral doubles and integer lists load, as numbers saved by Python do.
  state = good;
  state["last_epoch"] = 7.0;
  state["base_lrs"] = std::vector<int64_t>{1, 2};
  EXPECT_NO_THROW(scheduler.load_state_dict(state));
  EXPECT_EQ(scheduler.last_epoch(), 7);
}

TEST(SchedulerTest, LoadingABadPlateauStateIsAnErrorAndChangesNothing) {
  auto optimizer = make_optimizer("sgd");
  ReduceLROnPlateau scheduler(
      *optimizer, ReduceLROnPlateauOptions().patience(0).cooldown(2));
  scheduler.step(1.0);
  const StateDict before = scheduler.state_dict();
  StateDict state = before;
  state["cooldown_counter"] = int64_t(3);
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "ReduceLROnPlateau: state key \"cooldown_counter\" must be in [0, "
      "cooldown=2], got 3.");
  state = before;
  state["mode"] = std::string("avg");
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "mode must be one of \"min\", \"max\", got \"avg\".");
  state = before;
  state["min_lrs"] = std::vector<double>{0.0};
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"min_lrs\" has one entry per param group, got 1 entries");
  state = before;
  state["base_lrs"] = std::vector<double>{0.1, 0.1};
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state has an unknown key, got \"base_lrs\".");
  state = before;
  state["num_bad_epochs"] = int64_t(-1);
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.load_state_dict(state),
      InvalidArgument,
      "state key \"num_bad_epochs\" must be >= 0, got -1.");
  EXPECT_TRUE(same_state(scheduler.state_dict(), before));
}

TEST(SchedulerTest, RejectsInvalidArgumentsWithTheValueAndTheValidRange) {
  auto optimizer = make_optimizer("sgd");
  const std::vector<double> lrs = group_lrs(*optimizer);
  AMPKIT_EXPECT_THROWS_WITH(
      ConstantWithWarmup(*optimizer, -1),
      InvalidArgument,
      "ConstantWithWarmup: num_warmup_steps must be >= 0, got -1. It is the "
      "number of steps over which the lr rises from 0 to the base lr; 0 means "
      "no warmup.");
  AMPKIT_EXPECT_THROWS_WITH(
      LinearWithWarmup(*optimizer, -3, 10),
      InvalidArgument,
      "LinearWithWarmup: num_warmup_steps must be >= 0, got -3.");
  AMPKIT_EXPECT_THROWS_WITH(
      LinearWithWarmup(*optimizer, 0, -10),
      InvalidArgument,
      "LinearWithWarmup: num_training_steps must be >= 0, got -10. It is the "
      "total number of optimizer steps, warmup included.");
  AMPKIT_EXPECT_THROWS_WITH(
      CosineWithWarmup(*optimizer, 0, -1),
      InvalidArgument,
      "CosineWithWarmup: num_training_steps must be >= 0, got -1.");
  AMPKIT_EXPECT_THROWS_WITH(
      CosineWithWarmup(*optimizer, 0, 10, -0.5),
      InvalidArgument,
      "CosineWithWarmup: num_cycles must be >= 0 and finite, got -0.5. It "
      "counts the cosine waves after warmup; 0.5 (the default) decays once "
      "from the base lr to 0.");
  AMPKIT_EXPECT_THROWS_WITH(
      CosineWithWarmup(*optimizer, 0, 10, NAN),
      InvalidArgument,
      "num_cycles must be >= 0 and finite, got nan.");
  AMPKIT_EXPECT_THROWS_WITH(
      StepLR(*optimizer, 0),
      InvalidArgument,
      "StepLR: step_size must be >= 1, got 0. It is the number of steps "
      "between two decays by gamma.");
  AMPKIT_EXPECT_THROWS_WITH(
      StepLR(*optimizer, 5, 0.0),
      InvalidArgument,
      "StepLR: gamma must be > 0 and finite, got 0. It multiplies the lr "
      "every step_size steps; PyTorch's default is 0.1.");
  AMPKIT_EXPECT_THROWS_WITH(
      StepLR(*optimizer, 5, -0.5), InvalidArgument, "got -0.5.");
  // A rejected scheduler leaves the optimizer's lrs alone.
  EXPECT_EQ(group_lrs(*optimizer), lrs);
}

TEST(SchedulerTest, RejectsInvalidPlateauOptionsWithTheValidValues) {
  auto optimizer = make_optimizer("sgd");
  using O = ReduceLROnPlateauOptions;
  AMPKIT_EXPECT_THROWS_WITH(
      parse_plateau_mode("minimum"),
      InvalidArgument,
      "ReduceLROnPlateau: mode must be one of \"min\", \"max\", got "
      "\"minimum\". Use \"min\" for a metric that should decrease (a loss), "
      "\"max\" for one that should increase (an accuracy).");
  AMPKIT_EXPECT_THROWS_WITH(
      parse_threshold_mode("relative"),
      InvalidArgument,
      "ReduceLROnPlateau: threshold_mode must be one of \"rel\", \"abs\", got "
      "\"relative\".");
  AMPKIT_EXPECT_THROWS_WITH(
      ReduceLROnPlateau(*optimizer, O().factor(1.0)),
      InvalidArgument,
      "ReduceLROnPlateau: factor must be in [0, 1), got 1. It multiplies the "
      "lr on a plateau; PyTorch's default is 0.1.");
  AMPKIT_EXPECT_THROWS_WITH(
      ReduceLROnPlateau(*optimizer, O().factor(-0.1)),
      InvalidArgument,
      "factor must be in [0, 1), got -0.10000000000000001.");
  AMPKIT_EXPECT_THROWS_WITH(
      ReduceLROnPlateau(*optimizer, O().patience(-1)),
      InvalidArgument,
      "patience must be >= 0, got -1.");
  AMPKIT_EXPECT_THROWS_WITH(
      ReduceLROnPlateau(*optimizer, O().threshold(-1e-4)),
      InvalidArgument,
      "threshold must be >= 0 and finite, got -0.0001.");
  AMPKIT_EXPECT_THROWS_WITH(
      ReduceLROnPlateau(*optimizer, O().cooldown(-2)),
      InvalidArgument,
      "cooldown must be >= 0, got -2.");
  AMPKIT_EXPECT_THROWS_WITH(
      ReduceLROnPlateau(*optimizer, O().min_lr(-1)),
      InvalidArgument,
      "min_lr must be >= 0 and finite, got -1.");
  AMPKIT_EXPECT_THROWS_WITH(
      ReduceLROnPlateau(*optimizer, O().eps(INFINITY)),
      InvalidArgument,
      "eps must be >= 0 and finite, got inf.");
}

TEST(SchedulerTest, StepWithAMetricIsOnlyForReduceLROnPlateau) {
  auto optimizer = make_optimizer("sgd");
  CosineWithWarmup scheduler(*optimizer, 2, 10);
  scheduler.step();
  const std::vector<double> lrs = scheduler.get_last_lr();
  AMPKIT_EXPECT_THROWS_WITH(
      scheduler.step(0.5),
      UsageError,
      "CosineWithWarmup: step(metric) is only for ReduceLROnPlateau, got "
      "step(0.5) on a \"cosine_with_warmup\" scheduler. Call step() after "
      "each optimizer step; this schedule depends on the step count alone.");
  EXPECT_EQ(scheduler.last_epoch(), 1);
  EXPECT_EQ(scheduler.get_last_lr(), lrs);
  StepLR step(*optimizer, 3);
  AMPKIT_EXPECT_THROWS_WITH(
      step.step(1.0), UsageError, "StepLR: step(metric) is only for");
}

TEST(SchedulerTest, ReduceLROnPlateauNeedsTheMetricInStep) {
  auto optimizer = make_optimizer("sgd");
  ReduceLROnPlateau scheduler(
      *optimizer, ReduceLROnPlateauOptions().mode(PlateauMode::max));
  LRScheduler& base = scheduler;
  AMPKIT_EXPECT_THROWS_WITH(
      base.step(),
      UsageError,
      "ReduceLROnPlateau: step() needs the metric this scheduler watches, got "
      "no metric. Call step(metric) once per evaluation with the monitored "
      "value (mode \"max\").");
  EXPECT_EQ(scheduler.last_epoch(), 0);
  base.step(0.5);
  EXPECT_EQ(scheduler.last_epoch(), 1);
  EXPECT_EQ(scheduler.state_dict().at("best").toDouble(), 0.5);
}

}  // namespace
}  // namespace ampkit::optim
