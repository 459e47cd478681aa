// Capability queries against this machine, and the refusal rules with
// injected capability data for hardware CI does not have.
#include "ampkit/amp/capability.h"

#include <fstream>
#include <sstream>

#include <torch/version.h>

#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit {
namespace {

using testing_util::with_gpu;

TEST(CapabilityTest, Bf16OnAGpuBelowComputeCapability80IsRefused) {
  const auto caps = with_gpu(7, 0);
  const auto reason = autocast_unsupported_reason(
      c10::DeviceType::CUDA, c10::ScalarType::BFloat16, caps);
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(
      *reason,
      ::testing::HasSubstr(
          "bf16 autocast needs a GPU of compute capability 8.0 or newer, got "
          "Test GPU (cuda:0, compute capability 7.0). Use fp16"));
  EXPECT_FALSE(autocast_unsupported_reason(
                   c10::DeviceType::CUDA, c10::ScalarType::Half, caps)
                   .has_value());
  AMPKIT_EXPECT_THROWS_WITH(
      check_autocast_supported(
          c10::DeviceType::CUDA, c10::ScalarType::BFloat16, caps),
      Unsupported,
      "Autocast: bf16 autocast needs a GPU of compute capability 8.0");
}

TEST(CapabilityTest, AmpereAndHopperRunBf16) {
  for (auto [major, minor] : {std::pair{8, 0}, std::pair{9, 0}}) {
    EXPECT_FALSE(autocast_unsupported_reason(
                     c10::DeviceType::CUDA,
                     c10::ScalarType::BFloat16,
                     with_gpu(major, minor))
                     .has_value());
  }
}

TEST(CapabilityTest, ComputeCapabilityImpliesFp16Bf16AndFp8) {
  auto dev = [](int major, int minor) {
    return with_gpu(major, minor).cuda_devices.front();
  };
  EXPECT_FALSE(dev(6, 1).fp16_tensor_cores());
  EXPECT_TRUE(dev(7, 0).fp16_tensor_cores());
  EXPECT_FALSE(dev(7, 5).bf16());
  EXPECT_TRUE(dev(8, 0).bf16());
  EXPECT_FALSE(dev(8, 6).fp8());
  EXPECT_TRUE(dev(8, 9).fp8());
  EXPECT_TRUE(dev(9, 0).fp8());
}

TEST(CapabilityTest, CpuFp16AutocastDependsOnTheLibTorchVersion) {
  Capabilities old_torch;
  old_torch.torch_major = 1;
  old_torch.torch_minor = 13;
  EXPECT_THAT(
      autocast_unsupported_reason(
          c10::DeviceType::CPU, c10::ScalarType::Half, old_torch)
          .value_or(""),
      ::testing::HasSubstr("needs LibTorch 2.2 or newer, got LibTorch 1.13"));
  EXPECT_FALSE(autocast_unsupported_reason(
                   c10::DeviceType::CPU, c10::ScalarType::BFloat16, old_torch)
                   .has_value());
  Capabilities torch_21 = old_torch;
  torch_21.torch_major = 2;
  torch_21.torch_minor = 1;
  EXPECT_THAT(
      autocast_unsupported_reason(
          c10::DeviceType::CPU, c10::ScalarType::Half, torch_21)
          .value_or(""),
      ::testing::HasSubstr("needs LibTorch 2.2 or newer, got LibTorch 2.1"));
  Capabilities new_torch = old_torch;
  new_torch.torch_major = 2;
  new_torch.torch_minor = 2;
  EXPECT_FALSE(autocast_unsupported_reason(
                   c10::DeviceType::CPU, c10::ScalarType::Half, new_torch)
                   .has_value());
}

TEST(CapabilityTest, CudaWithoutADeviceIsRefused) {
  Capabilities caps;
  caps.torch_major = 2;
  caps.torch_minor = 11;
  EXPECT_THAT(
      autocast_unsupported_reason(
          c10::DeviceType::CUDA, c10::ScalarType::Half, caps)
          .value_or(""),
      ::testing::HasSubstr("has no CUDA or sees no GPU"));
}

// The CPUID reading agrees with what the kernel reports in /proc/cpuinfo
// (which also masks features the OS does not enable).
TEST(CapabilityTest, CpuFlagsAgreeWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  }
  if (flags.empty()) {
    GTEST_SKIP() << "no x86 flags line in /proc/cpuinfo";
  }
  auto has = [&](const char* f) {
    return flags.find(std::string(" ") + f + " ") != std::string::npos;
  };
  const CpuCapability cpu = cpu_capability();
  EXPECT_EQ(cpu.avx2, has("avx2"));
  EXPECT_EQ(cpu.f16c, has("f16c"));
  EXPECT_EQ(cpu.avx512f, has("avx512f"));
  EXPECT_EQ(cpu.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(cpu.avx512_fp16, has("avx512_fp16"));
  EXPECT_EQ(cpu.amx_bf16, has("amx_bf16"));
  EXPECT_EQ(cpu.native_bf16(), has("avx512_bf16") || has("amx_bf16"));
}

TEST(CapabilityTest, DescribeListsTheCpuAndEachGpu) {
  auto caps = with_gpu(9, 0);
  caps.cpu.avx2 = true;
  caps.cpu.amx_bf16 = true;
  const std::string text = describe(caps);
  EXPECT_THAT(text, ::testing::HasSubstr("avx2 amx_bf16; native bf16: yes"));
  EXPECT_THAT(
      text,
      ::testing::HasSubstr(
          "cuda:0 (Test GPU): compute capability 9.0; fp16 tensor cores: yes, "
          "bf16: yes, fp8: yes"));
}

TEST(CapabilityTest, CurrentReportsTheRunningLibTorch) {
  const Capabilities caps = Capabilities::current();
  EXPECT_EQ(caps.torch_major, TORCH_VERSION_MAJOR);
  EXPECT_EQ(caps.torch_minor, TORCH_VERSION_MINOR);
  EXPECT_EQ(caps.cuda_available, !caps.cuda_devices.empty());
}

}  // namespace
}  // namespace ampkit
