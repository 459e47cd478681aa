// GPU checks of the Accelerator and c10d (label gpu): fp16 loss scaling on
// the device, one-process NCCL collectives, the CUDA RNG in checkpoints.
// Skipped where LibTorch sees no GPU; run by scripts/gpu_check/run.sh.
#include <torch/torch.h>

#include "ampkit/version.h"
#if AMPKIT_BUILT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <unistd.h>

#include <cmath>

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/distributed/process_group.h"
#include "ampkit/track/system_stats.h"
#include "test_util.h"

namespace ampkit {
namespace {

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

#if AMPKIT_BUILT_WITH_CUDA
// A training step queues its work and returns: 20 micro-steps (fp16 with
// the GradScaler, then bf16; accumulation 2, clipping, fused AdamW) under
// CUDA's sync debug mode set to error, so any read by the host in the step
// (found_inf, step counts, the loss) fails the test. What reads on purpose
// (optimizer_step_was_skipped, a printed loss) runs after the checked steps.
TEST_F(AcceleratorGpuTest, TrainingStepsNeedNoHostSync) {
  AMPKIT_REQUIRE_CUDA();
  for (const std::string precision : {"fp16", "bf16"}) {
    SCOPED_TRACE(precision);
    Accelerator accelerator(on_gpu(precision).gradient_accumulation_steps(2));
    torch::nn::Sequential net(
        torch::nn::Linear(32, 64), torch::nn::ReLU(), torch::nn::Linear(64, 8));
    torch::optim::AdamW adamw(net->parameters(), 1e-3);
    auto [model, optimizer] = accelerator.prepare(net, adamw);
    const auto device = accelerator.device();
    std::vector<torch::Tensor> xs;
    for (int i = 0; i < 20; ++i) {
      xs.push_back(torch::randn({16, 32}, device));
    }
    torch::cuda::synchronize();
    auto& warnings = c10::cuda::warning_state();
    warnings.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    try {
      for (const auto& x : xs) {
        auto scope = accelerator.accumulate(model);
        accelerator.backward(model(x).pow(2).mean());
        accelerator.clip_grad_norm_(net->parameters(), 1.0);
        optimizer.step();
        optimizer.zero_grad();
      }
    } catch (...) {
      warnings.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      throw;
    }
    warnings.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
    EXPECT_TRUE(torch::isfinite(net[0]->as<torch::nn::Linear>()->weight)
                    .all()
                    .item<bool>());
  }
}

// The Accelerator makes its device the process's current CUDA device
// before it creates anything there, so bare kCUDA tensors, NCCL and the
// autocast cache all use this process's GPU (accelerate's PartialState
// does the same).
TEST_F(AcceleratorGpuTest, TheAcceleratorsDeviceIsTheCurrentDevice) {
  AMPKIT_REQUIRE_CUDA();
  Accelerator accelerator(on_gpu("no"));
  ASSERT_TRUE(accelerator.device().is_cuda());
  EXPECT_EQ(
      static_cast<int>(c10::cuda::current_device()),
      static_cast<int>(accelerator.device().index()));
}

// A prepared loader on the GPU copies one batch ahead from pinned memory on
// a side stream (non_blocking, pin_memory; the default) and hands out the
// same batches, in order, as without it; end_of_dataloader still marks the
// last one, and a mid-epoch save resumes at the right batch.
TEST_F(AcceleratorGpuTest, PrefetchingLoaderHandsOutTheSameBatches) {
  AMPKIT_REQUIRE_CUDA();
  const auto data = torch::arange(20).to(torch::kFloat).reshape({10, 2});
  auto epoch = [&](bool prefetch) {
    Accelerator accelerator(
        on_gpu("no").non_blocking(prefetch).pin_memory(prefetch));
    auto loader = accelerator.prepare_data_loader(
        torch::data::datasets::TensorDataset(data).map(
            torch::data::transforms::Stack<torch::data::TensorExample>()),
        torch::data::DataLoaderOptions(3),
        data::ShardedSamplerOptions().shuffle(false));
    std::vector<torch::Tensor> batches;
    std::vector<bool> ends;
    for (auto& batch : loader) {
      EXPECT_TRUE(batch.data.is_cuda());
      // Work on the compute stream right away: it must see the copy.
      batches.push_back((batch.data * 2).cpu());
      ends.push_back(accelerator.end_of_dataloader());
    }
    return std::make_pair(batches, ends);
  };
  const auto [with, with_ends] = epoch(true);
  const auto [without, without_ends] = epoch(false);
  ASSERT_EQ(with.size(), 4u);
  ASSERT_EQ(without.size(), 4u);
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_TRUE(torch::equal(with[i], without[i])) << i;
  }
  EXPECT_EQ(with_ends, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(with_ends, without_ends);
}

// NVML finds the Accelerator's GPU by its PCI bus id (CUDA's index is not
// NVML's once CUDA_VISIBLE_DEVICES renumbers): memory in use reads > 0.
TEST_F(AcceleratorGpuTest, NvmlReadsTheAcceleratorsGpuByPciBusId) {
  AMPKIT_REQUIRE_CUDA();
  Accelerator accelerator(on_gpu("no"));
  const std::string& bus_id = accelerator.options().gpu_pci_bus_id;
  EXPECT_THAT(
      bus_id, testing::MatchesRegex("[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\\.0"));
  const auto held = torch::ones({1024, 1024}, accelerator.device());
  const auto stats = track::gpu_stats(bus_id);
  ASSERT_TRUE(stats.has_value()) << "NVML did not find " << bus_id;
  EXPECT_GT(stats->memory_used_mb, 0);
}
#endif  // AMPKIT_BUILT_WITH_CUDA

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
