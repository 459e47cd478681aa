// ScheduleFreeAdamW against the schedulefree package's AdamWScheduleFree
// (tests/optim/golden_schedule_free.h, generate_schedule_free_golden.py):
// the train-mode trajectory step by step and the eval-mode average, with
// and without warmup, weight decay and polynomial weighting; its state
// round trip and its refusals.
#include "ampkit/optim/schedule_free.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <string>

#include "ampkit/error.h"
#include "golden_schedule_free.h"

namespace ampkit::optim {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

struct Problem {
  torch::Tensor w, b, x, t;
  Problem() {
    // As the generator: no randomness.
    x = torch::sin(torch::arange(32, torch::kFloat) * 0.37).reshape({8, 4});
    t = torch::cos(torch::arange(24, torch::kFloat) * 0.53).reshape({8, 3});
    w = ((torch::arange(12, torch::kFloat).reshape({3, 4}) - 5.5) * 0.1)
            .requires_grad_(true);
    b = torch::tensor({0.2f, -0.1f, 0.05f}).requires_grad_(true);
  }
  void backward() {
    torch::mse_loss(x.matmul(w.t()) + b, t).backward();
  }
  // weight row-major, then bias, as the golden rows.
  torch::Tensor flat() const {
    return torch::cat({w.detach().flatten(), b.detach()}).to(torch::kDouble);
  }
};

ScheduleFreeAdamWOptions options_of(const golden::ScheduleFreeCase& c) {
  return ScheduleFreeAdamWOptions(c.lr)
      .warmup_steps(c.warmup_steps)
      .weight_decay(c.weight_decay)
      .r(c.r)
      .weight_lr_power(c.weight_lr_power)
      .betas(std::make_tuple(c.beta1, c.beta2));
}

torch::Tensor row(const double* values, int index) {
  return torch::from_blob(
             const_cast<double*>(values) + index * 15, {15}, torch::kDouble)
      .clone();
}

TEST(ScheduleFreeAdamWTest, FollowsTheSchedulefreePackageStepByStep) {
  for (const auto& c : golden::kScheduleFreeCases) {
    SCOPED_TRACE(c.name);
    Problem p;
    ScheduleFreeAdamW optimizer({p.w, p.b}, options_of(c));
    optimizer.train();
    int evals = 0;
    for (int step = 1; step <= golden::kScheduleFreeSteps; ++step) {
      optimizer.zero_grad();
      p.backward();
      optimizer.step();
      ASSERT_TRUE(torch::allclose(p.flat(), row(c.train, step - 1), 1e-5, 1e-6))
          << "train-mode parameters after step " << step << ": " << p.flat()
          << " against " << row(c.train, step - 1);
      if (step == golden::kScheduleFreeEvalAt ||
          step == golden::kScheduleFreeSteps) {
        optimizer.eval();
        EXPECT_FALSE(optimizer.train_mode());
        EXPECT_TRUE(torch::allclose(p.flat(), row(c.eval_, evals), 1e-5, 1e-6))
            << "eval-mode parameters after step " << step;
        ++evals;
        if (step != golden::kScheduleFreeSteps) {
          optimizer.train();
        }
      }
    }
  }
}

TEST(ScheduleFreeAdamWTest, SavedStateResumesTheSameTrajectory) {
  const auto& c = golden::kScheduleFreeCases[0];
  Problem p;
  ScheduleFreeAdamW optimizer({p.w, p.b}, options_of(c));
  optimizer.train();
  for (int step = 0; step < 15; ++step) {
    optimizer.zero_grad();
    p.backward();
    optimizer.step();
  }
  torch::serialize::OutputArchive out;
  optimizer.save(out);
  std::stringstream bytes;
  out.save_to(bytes);

  Problem q;
  {
    torch::NoGradGuard no_grad;
    q.w.copy_(p.w);
    q.b.copy_(p.b);
  }
  ScheduleFreeAdamW resumed({q.w, q.b}, options_of(c));
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  resumed.load(in);
  EXPECT_TRUE(resumed.train_mode()) << "the mode is part of the state";
  for (int step = 15; step < golden::kScheduleFreeSteps; ++step) {
    for (auto* o : {&optimizer, &resumed}) {
      o->zero_grad();
    }
    p.backward();
    q.backward();
    optimizer.step();
    resumed.step();
  }
  EXPECT_TRUE(p.flat().equal(q.flat()));
  EXPECT_TRUE(torch::allclose(
      q.flat(), row(c.train, golden::kScheduleFreeSteps - 1), 1e-5, 1e-6));
}

TEST(ScheduleFreeAdamWTest, StepInEvalModeAndBadOptionsAreRefused) {
  Problem p;
  ScheduleFreeAdamW optimizer({p.w, p.b});
  p.backward();
  EXPECT_THAT(
      [&] { optimizer.step(); },
      ThrowsMessage<UsageError>(HasSubstr("optimizer.train()")));
  EXPECT_THAT(
      [&] {
        ScheduleFreeAdamW bad(
            {p.w}, ScheduleFreeAdamWOptions().betas(std::make_tuple(0.0, 0.9)));
      },
      ThrowsMessage<InvalidArgument>(HasSubstr("beta1 must be in (0, 1)")));
  EXPECT_THAT(
      [&] { ScheduleFreeAdamW bad({p.w}, ScheduleFreeAdamWOptions(-1)); },
      ThrowsMessage<InvalidArgument>(HasSubstr("lr must be >= 0")));
}

}  // namespace
}  // namespace ampkit::optim
