#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ampkit/diag/memory_estimate.h"
#include "ampkit/error.h"

namespace {

using ::testing::HasSubstr;

TEST(MemoryEstimateTest, Fp32AdamWIsSixteenBytesPerParameter) {
  const auto e = ampkit::estimate_memory(1000, "adamw", ampkit::Precision::no);
  EXPECT_EQ(e.weights, 4000);
  EXPECT_EQ(e.gradients, 4000);
  EXPECT_EQ(e.optimizer_state, 8000);
  EXPECT_EQ(e.master_weights, 0);
  EXPECT_EQ(e.total(), 16000);
}

TEST(MemoryEstimateTest, MixedPrecisionKeepsFp32MasterWeightsAndHalfCopies) {
  for (auto p : {ampkit::Precision::bf16, ampkit::Precision::fp16}) {
    const auto e = ampkit::estimate_memory(1000, "sgd", p);
    EXPECT_EQ(e.weights, 2000);
    EXPECT_EQ(e.master_weights, 4000);
    EXPECT_EQ(e.gradients, 6000);
    EXPECT_EQ(e.optimizer_state, 4000);
    EXPECT_EQ(e.total(), 16000);
  }
}

TEST(MemoryEstimateTest, ParameterCountsTakeSuffixes) {
  EXPECT_EQ(ampkit::parse_parameter_count("125000"), 125000);
  EXPECT_EQ(ampkit::parse_parameter_count("350M"), 350000000);
  EXPECT_EQ(ampkit::parse_parameter_count("1.5b"), 1500000000);
  EXPECT_EQ(ampkit::parse_parameter_count("7K"), 7000);
  for (const char* bad : {"", "M", "1.2.3M", "-5", "7X", "0", ".", ".M"}) {
    EXPECT_THAT(
        [bad] { ampkit::parse_parameter_count(bad); },
        ::testing::ThrowsMessage<ampkit::InvalidArgument>(
            HasSubstr("--params must be a count")))
        << bad;
  }
}

TEST(MemoryEstimateTest, BadOptimizerAndAutoAreErrors) {
  EXPECT_THAT(
      [] { ampkit::estimate_memory(10, "lamb", ampkit::Precision::no); },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("optimizer must be adamw or sgd, got 'lamb'")));
  EXPECT_THAT(
      [] {
        ampkit::estimate_memory(10, "adamw", ampkit::Precision::automatic);
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(HasSubstr("got auto")));
}

// ZeRO's arithmetic, per process, as ShardedOptimizer holds it.
TEST(MemoryEstimateTest, ZeroDividesTheStateAndWithStageTwoTheGradients) {
  const int64_t n = 1000;
  const auto ddp = ampkit::estimate_memory(n, "adamw", ampkit::Precision::no);
  const auto one =
      ampkit::estimate_memory(n, "adamw", ampkit::Precision::no, 1, 4);
  EXPECT_EQ(one.optimizer_state, 8 * n / 4);
  EXPECT_EQ(one.gradients, ddp.gradients);
  EXPECT_EQ(one.weights, ddp.weights);
  const auto two =
      ampkit::estimate_memory(n, "adamw", ampkit::Precision::bf16, 2, 4);
  EXPECT_EQ(two.optimizer_state, 8 * n / 4);
  EXPECT_EQ(two.gradients, 4 * n / 4 + 2 * n);  // fp32 shard + half GEMM grads
  EXPECT_EQ(two.master_weights, 4 * n);
  const auto table = ampkit::memory_table(n, {two});
  EXPECT_THAT(table, HasSubstr("Per process, ZeRO stage 2 over 4 processes"));
  // Stage 3 (FSDP FULL_SHARD): the weights and gradients divided too.
  const auto three =
      ampkit::estimate_memory(n, "adamw", ampkit::Precision::no, 3, 4);
  EXPECT_EQ(three.total(), 16 * n / 4);
  const auto three_bf16 =
      ampkit::estimate_memory(n, "adamw", ampkit::Precision::bf16, 3, 4);
  EXPECT_EQ(three_bf16.master_weights, 4 * n / 4);
  EXPECT_EQ(three_bf16.weights, 0);
  EXPECT_THAT(
      ampkit::memory_table(n, {three}),
      HasSubstr("ZeRO stage 3 (FSDP FULL_SHARD) over 4 processes"));
  EXPECT_THAT(
      [] { ampkit::estimate_memory(10, "adamw", ampkit::Precision::no, 4, 2); },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("0, 1, 2 or 3")));
}

TEST(MemoryEstimateTest, TableHasEveryColumn) {
  const auto t = ampkit::memory_table(
      1000000,
      {ampkit::estimate_memory(1000000, "adamw", ampkit::Precision::no),
       ampkit::estimate_memory(1000000, "adamw", ampkit::Precision::bf16)});
  EXPECT_THAT(t, HasSubstr("fp32 master weights"));
  EXPECT_THAT(t, HasSubstr("15.26 MB"));  // 16 MB of fp32 training state
  EXPECT_THAT(t, HasSubstr("19.07 MB"));  // 20 MB in bf16
  // accelerate's figure, the largest stage for Adam: 16 MB in fp32 (the
  // step's 4 x 4 MB), 8 MB in bf16 (the state's 2 x 4 MB).
  EXPECT_THAT(
      t,
      HasSubstr("shows the largest single stage, not this sum of what is "
                "held at once at the optimizer step: 15.26 MB in fp32, "
                "7.63 MB in fp16/bf16"));
}

}  // namespace
