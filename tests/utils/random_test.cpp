// set_seed, get_rng_state and set_rng_state: reproducible draws, bit-exact
// restores, and the errors for states that do not fit this machine.
#include "ampkit/utils/random.h"

#include <torch/torch.h>

#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit {
namespace {

// One draw from each kind of sampling a training step makes.
std::vector<torch::Tensor> draw() {
  return {
      torch::rand({64}),
      torch::randn({64}),
      torch::randperm(100),
      torch::dropout(torch::ones({256}), /*p=*/0.5, /*train=*/true),
      torch::randint(0, 1000, {16})};
}

void expect_identical(
    const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "draw " << i << " differs";
  }
}

TEST(RandomTest, SameSeedGivesIdenticalRandRandnRandpermAndDropoutMasks) {
  set_seed(1234);
  const auto first = draw();
  set_seed(1234);
  const auto second = draw();
  expect_identical(first, second);
}

TEST(RandomTest, DifferentSeedsGiveDifferentDraws) {
  set_seed(1);
  const auto one = draw();
  set_seed(2);
  const auto two = draw();
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_FALSE(torch::equal(one[i], two[i])) << "draw " << i;
  }
}

TEST(RandomTest, RestoringAStateRepeatsTheDrawsBitForBit) {
  set_seed(7);
  torch::rand({10});  // move away from the freshly seeded state
  const RngState state = get_rng_state();
  EXPECT_EQ(state.cpu.scalar_type(), torch::kByte);
  EXPECT_EQ(state.cuda.size(), torch::cuda::device_count());
  const auto before = draw();
  set_rng_state(state);
  const auto after = draw();
  expect_identical(before, after);
}

TEST(RandomTest, StateSurvivesAnotherSeedInBetween) {
  set_seed(11);
  const RngState state = get_rng_state();
  const auto expected = draw();
  set_seed(99);
  draw();
  set_rng_state(state);
  expect_identical(draw(), expected);
}

TEST(RandomTest, RejectsAStateWithAnotherNumberOfCudaDevices) {
  RngState state = get_rng_state();
  const size_t devices = state.cuda.size();
  state.cuda.push_back(state.cpu.clone());
  AMPKIT_EXPECT_THROWS_WITH(
      set_rng_state(state),
      InvalidArgument,
      "set_rng_state: the number of CUDA generator states does not match the "
      "visible CUDA devices, got " +
          std::to_string(devices + 1) + " states for " +
          std::to_string(devices) + " visible devices.");
}

TEST(RandomTest, RejectsAnUndefinedOrWrongTypeCpuState) {
  RngState state = get_rng_state();
  state.cpu = torch::Tensor();
  AMPKIT_EXPECT_THROWS_WITH(
      set_rng_state(state),
      InvalidArgument,
      "set_rng_state: the cpu state is undefined");
  state.cpu = torch::zeros({8}, torch::kFloat);
  AMPKIT_EXPECT_THROWS_WITH(
      set_rng_state(state),
      InvalidArgument,
      "the cpu state must be a CPU uint8 tensor, got Float on cpu.");
}

TEST(RandomTest, RejectsACpuStateOfTheWrongSizeAndKeepsTheGenerator) {
  set_seed(5);
  const auto expected = draw();
  set_seed(5);
  RngState state = get_rng_state();
  state.cpu = torch::zeros({3}, torch::kByte);
  AMPKIT_EXPECT_THROWS_WITH(
      set_rng_state(state),
      InvalidArgument,
      "set_rng_state: the cpu generator rejected its state");
  expect_identical(draw(), expected);
}

}  // namespace
}  // namespace ampkit
