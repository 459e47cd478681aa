// The warning sink and non-finite attribution: the one format of each, the
// rank-aware default and a replaceable handler.
#include "ampkit/utils/warnings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "utils/non_finite.h"

namespace ampkit {
namespace {

using ::testing::HasSubstr;

// Restores the default handler and a single process after each test.
class WarningsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    set_warning_handler(nullptr);
    set_warning_rank(0, 1);
  }
};

TEST_F(WarningsTest, DefaultPrintsOneLineWithTheComponent) {
  testing::internal::CaptureStderr();
  warn("GradScaler", "something to know");
  EXPECT_EQ(
      testing::internal::GetCapturedStderr(),
      "ampkit GradScaler: warning: something to know\n");
}

TEST_F(WarningsTest, DefaultNamesTheRankAndKeepsMainProcessOnlyOnRankZero) {
  set_warning_rank(1, 4);
  testing::internal::CaptureStderr();
  warn("Accelerator", "said by every rank alike");
  warn("find_executable_batch_size", "this rank's own", false);
  EXPECT_EQ(
      testing::internal::GetCapturedStderr(),
      "ampkit find_executable_batch_size [rank 1/4]: warning: this rank's "
      "own\n");
  set_warning_rank(0, 4);
  testing::internal::CaptureStderr();
  warn("Accelerator", "said by every rank alike");
  EXPECT_EQ(
      testing::internal::GetCapturedStderr(),
      "ampkit Accelerator [rank 0/4]: warning: said by every rank alike\n");
}

TEST_F(WarningsTest, AReplacedHandlerGetsEveryWarningAndCanBeRestored) {
  set_warning_rank(2, 3);
  std::vector<Warning> got;
  const WarningHandler previous =
      set_warning_handler([&](const Warning& w) { got.push_back(w); });
  EXPECT_FALSE(previous);  // the default is no handler
  testing::internal::CaptureStderr();
  warn("ProcessGroup", "a", true);
  warn("ProcessGroup", "b", false);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].message, "a");
  EXPECT_TRUE(got[0].main_process_only);
  EXPECT_FALSE(got[1].main_process_only);
  EXPECT_EQ(got[1].rank, 2);
  EXPECT_EQ(got[1].world_size, 3);
  EXPECT_EQ(
      format_warning(got[1]), "ampkit ProcessGroup [rank 2/3]: warning: b");
  EXPECT_TRUE(set_warning_handler(nullptr));  // gives back the replaced one
  testing::internal::CaptureStderr();
  warn("ProcessGroup", "c", false);
  EXPECT_THAT(testing::internal::GetCapturedStderr(), HasSubstr("warning: c"));
  EXPECT_EQ(got.size(), 2u);
}

TEST(NonFiniteTest, FindsOnlyTheTensorsWithInfOrNanAndCountsThem) {
  const float inf = std::numeric_limits<float>::infinity();
  auto a = torch::ones({4});
  auto b = torch::tensor({1.0f, inf, -inf, std::nanf("")});
  auto c = torch::tensor({std::nanf("")});
  auto sparse = torch::sparse_coo_tensor(
      torch::tensor({{0, 2}}), torch::tensor({inf, 1.0f}), {5});
  const auto found = detail::find_non_finite(
      {{"a", a},
       {"undefined", torch::Tensor()},
       {"b", b},
       {"c", c},
       {"sparse", sparse}});
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].name, "b");
  EXPECT_EQ(found[0].nan, 1);
  EXPECT_EQ(found[0].inf, 2);
  EXPECT_EQ(found[0].numel, 4);
  EXPECT_EQ(found[2].name, "sparse");
  EXPECT_EQ(found[2].numel, 2);  // the stored values
  EXPECT_EQ(
      detail::describe_non_finite(found),
      "b (1 NaN, 2 inf of 4 values), c (1 NaN of 1 value), sparse (1 inf of 2 "
      "values)");
  EXPECT_TRUE(detail::find_non_finite({{"a", a}, {"none", {}}}).empty());
  EXPECT_TRUE(detail::find_non_finite({}).empty());
}

TEST(NonFiniteTest, SkippedStepLineWritesTheScalesExactly) {
  EXPECT_EQ(
      detail::skipped_step_line(3, "w (1 inf of 2 values)", 65536.0, 0.5),
      "step 3 skipped: non-finite gradients in w (1 inf of 2 values); loss "
      "scale 65536 -> 0.5");
}

}  // namespace
}  // namespace ampkit
