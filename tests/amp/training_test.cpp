// End-to-end: a tiny regression model trained with bf16 autocast (and a
// GradScaler) ends close to the same model trained in fp32.
#include <torch/torch.h>

#include "ampkit/amp/autocast.h"
#include "ampkit/amp/grad_scaler.h"
#include "test_util.h"

namespace ampkit {
namespace {

// y = X w* + 0.01 noise; X [N, 8], y [N, 1]; an MLP 8 -> 32 -> 1.
struct Problem {
  torch::Tensor x;
  torch::Tensor y;
};

Problem make_problem() {
  torch::manual_seed(1);
  Problem p;
  p.x = torch::randn({256, 8});
  p.y = p.x.matmul(torch::randn({8, 1})) + 0.01 * torch::randn({256, 1});
  return p;
}

double train(const Problem& p, bool autocast, bool scaler_on) {
  torch::manual_seed(2);
  torch::nn::Sequential model(
      torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Linear(32, 1));
  torch::optim::Adam opt(model->parameters(), 1e-2);
  GradScaler scaler(GradScalerOptions().enabled(scaler_on));
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      Autocast guard(torch::kCPU, torch::kBFloat16, autocast);
      auto out = model->forward(p.x);
      EXPECT_EQ(out.scalar_type(), autocast ? torch::kBFloat16 : torch::kFloat);
      loss = torch::mse_loss(out.to(torch::kFloat), p.y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  // Evaluate both in fp32 so the comparison is about the trained weights.
  torch::NoGradGuard no_grad;
  return torch::mse_loss(model->forward(p.x), p.y).item<double>();
}

// Stated tolerance: after 200 Adam steps both runs, evaluated in fp32, sit
// near the noise floor (fp32 ~0.0102 from an initial ~8); bf16 training may
// end at most 0.002 (20% of that) away. Measured here: 0.010171 vs 0.010189.
constexpr double kBf16LossTolerance = 0.002;

TEST(TrainingTest, Bf16AutocastEndsWithinToleranceOfFp32) {
  const Problem p = make_problem();
  const double fp32 = train(p, false, false);
  const double bf16 = train(p, true, false);
  RecordProperty("fp32_loss", std::to_string(fp32));
  RecordProperty("bf16_loss", std::to_string(bf16));
  EXPECT_LT(fp32, 0.1) << "the fp32 baseline did not learn";
  EXPECT_NEAR(bf16, fp32, kBf16LossTolerance);
}

TEST(TrainingTest, Bf16AutocastWithGradScalerMatchesWithout) {
  const Problem p = make_problem();
  // Power-of-two scales make scaling and unscaling exact in fp32, so the
  // scaler changes nothing when no step overflows.
  EXPECT_EQ(train(p, true, true), train(p, true, false));
}

}  // namespace
}  // namespace ampkit
