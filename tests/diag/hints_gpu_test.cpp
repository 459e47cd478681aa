// GPU test of the error hints: a real device mismatch between a CUDA tensor
// and a CPU tensor gets the hint to move inputs to accelerator.device().
#include "ampkit/diag/hints.h"

#include <torch/torch.h>

#include <string>

#include "test_util.h"

namespace ampkit::diag {
namespace {

using ::testing::HasSubstr;

TEST(HintsGpuTest, DeviceMismatchSaysToMoveInputsToTheAcceleratorDevice) {
  AMPKIT_REQUIRE_CUDA();
  const auto gpu = torch::ones({2, 2}, torch::Device(torch::kCUDA, 0));
  const auto cpu = torch::ones({2, 2});
  try {
    try {
      torch::mm(gpu, cpu);
    } catch (...) {
      rethrow_with_hint();
    }
    ADD_FAILURE() << "expected c10::Error from mm of a CUDA and a CPU tensor";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_THAT(
        message, HasSubstr("Expected all tensors to be on the same device"));
    EXPECT_THAT(message, HasSubstr(".to(accelerator.device())"));
    EXPECT_THAT(message, HasSubstr("accelerator.prepare"));
  }
}

}  // namespace
}  // namespace ampkit::diag
