// GPU checks of the Accelerator and c10d (label gpu): fp16 loss scaling on
// the device, one-process NCCL collectives, the CUDA RNG in checkpoints.
// Skipped where LibTorch sees no GPU; run by scripts/gpu_check/run.sh.
#include <torch/torch.h>

#include <unistd.h>

#include <cmath>

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/dist/process_group.h"
#include "test_util.h"

namespace ampkit {
namespace {

#define AMPKIT_REQUIRE_CUDA()                       \
  if (!torch::cuda::is_available()) {               \
    GTEST_SKIP() << "LibTorch sees no CUDA device"; \
  }

AcceleratorOptions on_gpu(const std::string& precision) {
  return AcceleratorOptions().mixed_precision(precision).quiet(true).seed(0);
}

class AcceleratorGpuTest : public testing_util::TempDirTest {};

// fp16 on the GPU: an inf in one gradient (put there on the device) skips
// that step, leaves the weights as they were, halves the scale; the next
// step trains again.
TEST_F(AcceleratorGpuTest, InjectedInfOnTheGpuSkipsTheStep) {
  AMPKIT_REQUIRE_CUDA();
  Accelerator accelerator(on_gpu("fp16"));
  ASSERT_TRUE(accelerator.device().is_cuda());
  ASSERT_NE(accelerator.scaler(), nullptr);
  torch::nn::Linear net(16, 4);
  torch::optim::AdamW adamw(net->parameters(), 1e-2);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  const auto x = torch::randn({8, 16}, accelerator.device());
  auto step = [&](bool inject_inf) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(x).pow(2).mean());
    if (inject_inf) {
      torch::NoGradGuard no_grad;
      net->weight.grad()[1][2].fill_(INFINITY);
    }
    optimizer.step();
    optimizer.zero_grad();
  };
  step(false);
  EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
  const auto before = net->weight.detach().clone();
  const double scale = accelerator.scaler()->get_scale();
  step(true);
  EXPECT_TRUE(accelerator.optimizer_step_was_skipped());
  EXPECT_TRUE(torch::equal(net->weight.detach(), before));
  EXPECT_EQ(accelerator.scaler()->get_scale(), scale * 0.5);
  step(false);
  EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
  EXPECT_FALSE(torch::equal(net->weight.detach(), before));
  EXPECT_TRUE(torch::isfinite(net->weight).all().item<bool>());
}

// bf16 autocast on the GPU: matmuls run in bf16, the prepared model's
// output comes back in fp32, the gradients stay fp32.
TEST_F(AcceleratorGpuTest, Bf16AutocastOnTheGpuKeepsFp32Gradients) {
  AMPKIT_REQUIRE_CUDA();
  Accelerator accelerator(on_gpu("bf16"));
  torch::nn::Linear net(16, 4);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto out = model(torch::randn({8, 16}, accelerator.device()));
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  EXPECT_TRUE(out.is_cuda());
  accelerator.backward(out.pow(2).mean());
  EXPECT_EQ(net->weight.grad().scalar_type(), torch::kFloat);
}

// One process over NCCL: every collective on CUDA tensors, and the trigger
// pattern (a flag summed across processes) on the device.
TEST_F(AcceleratorGpuTest, NcclOneProcessCollectives) {
  AMPKIT_REQUIRE_CUDA();
  dist::DistEnv env;
  env.rank = 0;
  env.world_size = 1;
  env.local_rank = 0;
  env.local_world_size = 1;
  env.master_addr = "127.0.0.1";
  env.master_port = 29400 + ::getpid() % 500;
  dist::ProcessGroup group(
      env,
      dist::GroupOptions().backend("nccl"),
      torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(group.backend(), "nccl");
  auto t = torch::arange(6, torch::dtype(torch::kFloat).device(torch::kCUDA));
  group.all_reduce(t, dist::ReduceOp::sum);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(6, torch::kFloat)));
  group.all_reduce(t, dist::ReduceOp::max);
  group.all_reduce(t, dist::ReduceOp::mean);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(6, torch::kFloat)));
  const auto gathered = group.all_gather(t);
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(torch::equal(gathered[0], t));
  group.broadcast(t, 0);
  EXPECT_TRUE(t.is_cuda());
  auto trigger =
      torch::ones({}, torch::dtype(torch::kInt).device(torch::kCUDA));
  group.all_reduce(trigger, dist::ReduceOp::sum);
  EXPECT_EQ(trigger.item<int>(), 1);
  // NCCL refuses CPU tensors; the group takes them through its GPU and
  // gives them back on the CPU (a count built with torch::tensor).
  auto count = torch::tensor({7L});
  group.all_reduce(count, dist::ReduceOp::sum);
  EXPECT_TRUE(count.device().is_cpu());
  EXPECT_EQ(count.item<int64_t>(), 7);
  const auto cpu_gathered = group.all_gather(torch::arange(3));
  ASSERT_EQ(cpu_gathered.size(), 1u);
  EXPECT_TRUE(cpu_gathered[0].device().is_cpu());
  EXPECT_TRUE(torch::equal(cpu_gathered[0], torch::arange(3)));
  auto cpu_root = torch::full({2}, 5.0);
  group.broadcast(cpu_root, 0);
  EXPECT_TRUE(cpu_root.device().is_cpu());
  EXPECT_TRUE(torch::equal(cpu_root, torch::full({2}, 5.0)));
  std::vector<torch::Tensor> coalesced = {
      torch::ones({3}, torch::kCUDA), torch::zeros({2, 2}, torch::kCUDA)};
  group.broadcast_coalesced(coalesced, 0);
  EXPECT_EQ(coalesced[0].sum().item<float>(), 3.0f);
  group.barrier();
}

TEST_F(AcceleratorGpuTest, CheckTriggerOnTheGpu) {
  AMPKIT_REQUIRE_CUDA();
  Accelerator accelerator(on_gpu("no"));
  EXPECT_FALSE(accelerator.check_trigger());
  accelerator.set_trigger();
  EXPECT_TRUE(accelerator.check_trigger());
  EXPECT_FALSE(accelerator.check_trigger());
}

// save_state keeps the CUDA generator: after load_state the GPU draws the
// same numbers as right after the save.
TEST_F(AcceleratorGpuTest, SaveAndLoadStateRestoreTheCudaRng) {
  AMPKIT_REQUIRE_CUDA();
  Accelerator accelerator(on_gpu("no"));
  torch::nn::Linear net(4, 2);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  (void)torch::randn({10}, torch::kCUDA);  // move the generator on
  const auto dir = (dir_ / "checkpoint").string();
  accelerator.save_state(dir);
  const auto expected = torch::randn({1000}, torch::kCUDA);
  (void)torch::randn({77}, torch::kCUDA);
  accelerator.load_state(dir);
  EXPECT_TRUE(torch::equal(torch::randn({1000}, torch::kCUDA), expected));
}

}  // namespace
}  // namespace ampkit
