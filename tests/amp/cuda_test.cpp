// GPU checks (label gpu): ATen's CUDA GradScaler kernels against ampkit's host
// rule, and fp16 autocast on CUDA. Skipped where LibTorch sees no GPU.
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "amp/compat.h"
#include "amp/scale_update.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/amp/capability.h"
#include "ampkit/amp/grad_scaler.h"
#include "autocast_ops.h"
#include "golden_scale_trajectory.h"
#include "test_util.h"

namespace ampkit {
namespace {

TEST(CudaTest, KernelUpdateMatchesGoldenTrajectories) {
  AMPKIT_REQUIRE_CUDA();
  for (const auto& golden : golden::kScaleTrajectories) {
    SCOPED_TRACE(golden.name);
    auto scale = torch::full(
        {},
        golden.init_scale,
        torch::dtype(torch::kFloat).device(torch::kCUDA));
    auto tracker =
        torch::zeros({}, torch::dtype(torch::kInt).device(torch::kCUDA));
    for (int i = 0; i < golden.n; ++i) {
      auto found = torch::full(
          {},
          golden.overflow[i] == '1' ? 1.0 : 0.0,
          torch::dtype(torch::kFloat).device(torch::kCUDA));
      at::_amp_update_scale_(
          scale,
          tracker,
          found,
          golden.growth_factor,
          golden.backoff_factor,
          golden.growth_interval);
      ASSERT_EQ(scale.item<float>(), golden.scale[i]) << "update " << i;
      ASSERT_EQ(tracker.item<int>(), golden.tracker[i]) << "update " << i;
    }
  }
}

TEST(CudaTest, KernelUnscaleMatchesTheCpuPath) {
  AMPKIT_REQUIRE_CUDA();
  auto cpu = torch::randn({100000});
  cpu[777] = std::numeric_limits<float>::infinity();
  auto gpu = cpu.to(torch::kCUDA);
  auto found_cpu = torch::zeros({});
  auto found_gpu = torch::zeros({}, torch::kCUDA);
  detail::non_finite_check_and_unscale_(
      {cpu}, found_cpu, torch::full({}, 0.25f));
  detail::non_finite_check_and_unscale_(
      {gpu}, found_gpu, torch::full({}, 0.25f, torch::kCUDA));
  EXPECT_EQ(found_gpu.item<float>(), 1.0f);
  EXPECT_EQ(found_cpu.item<float>(), 1.0f);
  EXPECT_TRUE(torch::equal(gpu.cpu(), cpu));
}

TEST(CudaTest, Fp16AutocastWithGradScalerTrainsOnTheGpu) {
  AMPKIT_REQUIRE_CUDA();
  torch::manual_seed(0);
  torch::nn::Linear model(16, 4);
  model->to(torch::kCUDA);
  torch::optim::SGD opt(model->parameters(), 0.1);
  GradScaler scaler;
  auto x = torch::randn({8, 16}, torch::kCUDA);
  for (int i = 0; i < 5; ++i) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      Autocast guard(torch::kCUDA, torch::kHalf);
      auto out = model(x);
      EXPECT_EQ(out.scalar_type(), torch::kHalf);
      loss = out.to(torch::kFloat).pow(2).mean();
    }
    scaler.scale(loss).backward();
    EXPECT_EQ(model->weight.grad().scalar_type(), torch::kFloat);
    scaler.step(opt);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale_async().device().type(), torch::kCUDA);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

// CUDA autocast's output dtype per op, against what Python torch gives on
// the same GPU: scripts/gpu_check/run.sh writes the table with
// `generate_golden.py --cuda-table FILE` and passes it in
// AMPKIT_CUDA_AUTOCAST_TABLE.
TEST(CudaTest, AutocastOutputDtypesMatchPythonTorchOnThisGpu) {
  AMPKIT_REQUIRE_CUDA();
  const char* path = std::getenv("AMPKIT_CUDA_AUTOCAST_TABLE");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set AMPKIT_CUDA_AUTOCAST_TABLE to the output of "
                    "tests/amp/generate_golden.py --cuda-table FILE, run with "
                    "the Python torch of this LibTorch on this GPU";
  }
  struct Row {
    std::string op, input, output;
  };
  std::map<std::string, std::vector<Row>> by_precision;
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string precision;
    Row row;
    ASSERT_TRUE(fields >> precision >> row.op >> row.input >> row.output)
        << path << ": malformed line '" << line << "'";
    by_precision[precision].push_back(row);
  }
  ASSERT_EQ(by_precision.size(), 2u) << path << " must have fp16 and bf16 rows";
  testing_util::expect_autocast_matches(
      by_precision["fp16"], torch::kCUDA, torch::kHalf, "fp16");
  testing_util::expect_autocast_matches(
      by_precision["bf16"], torch::kCUDA, torch::kBFloat16, "bf16");
}

TEST(CudaTest, CapabilityOfEachDeviceIsReported) {
  AMPKIT_REQUIRE_CUDA();
  const auto caps = Capabilities::current();
  ASSERT_FALSE(caps.cuda_devices.empty());
  EXPECT_GT(caps.cuda_devices.front().major, 0);
}

}  // namespace
}  // namespace ampkit
