// The Autocast guard: state set and restored like Python's torch.autocast,
// refusals of what LibTorch cannot do, and op output dtypes against Python.
#include "ampkit/amp/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <functional>
#include <map>

#include "amp/compat.h"
#include "ampkit/error.h"
#include "autocast_ops.h"
#include "golden_autocast.h"
#include "test_util.h"

namespace ampkit {
namespace {

struct AutocastState {
  bool enabled;
  c10::ScalarType dtype;
  bool cache_enabled;
  bool operator==(const AutocastState& o) const {
    return enabled == o.enabled && dtype == o.dtype &&
           cache_enabled == o.cache_enabled;
  }
};

AutocastState cpu_state() {
  return {
      detail::autocast_is_enabled(c10::DeviceType::CPU),
      detail::autocast_get_dtype(c10::DeviceType::CPU),
      at::autocast::is_autocast_cache_enabled()};
}

// The nesting depth, read by bumping the counter and putting it back.
int nesting() {
  const int depth = at::autocast::increment_nesting() - 1;
  at::autocast::decrement_nesting();
  return depth;
}

TEST(AutocastTest, GuardEnablesBf16OnCpuAndRestoresOnExit) {
  const AutocastState before = cpu_state();
  ASSERT_FALSE(before.enabled);
  {
    Autocast guard(torch::kCPU, torch::kBFloat16);
    EXPECT_TRUE(detail::autocast_is_enabled(c10::DeviceType::CPU));
    EXPECT_EQ(
        detail::autocast_get_dtype(c10::DeviceType::CPU), torch::kBFloat16);
    EXPECT_EQ(nesting(), 1);
    auto out = torch::mm(torch::ones({2, 3}), torch::ones({3, 2}));
    EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(cpu_state(), before);
  EXPECT_EQ(nesting(), 0);
  EXPECT_EQ(
      torch::mm(torch::ones({2, 3}), torch::ones({3, 2})).scalar_type(),
      torch::kFloat);
}

TEST(AutocastTest, NestedGuardsWithDifferentSettingsRestoreEachLevel) {
  const AutocastState before = cpu_state();
  {
    Autocast outer(
        AutocastOptions(torch::kCPU, torch::kBFloat16).cache_enabled(true));
    const AutocastState in_outer = cpu_state();
    EXPECT_EQ(in_outer, (AutocastState{true, torch::kBFloat16, true}));
    {
      Autocast inner(AutocastOptions(torch::kCPU, torch::kBFloat16)
                         .enabled(false)
                         .cache_enabled(false));
      EXPECT_EQ(cpu_state(), (AutocastState{false, torch::kBFloat16, false}));
      EXPECT_EQ(nesting(), 2);
      EXPECT_EQ(
          torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(),
          torch::kFloat);
      {
        Autocast innermost(torch::kCPU, torch::kBFloat16, true, true);
        EXPECT_EQ(nesting(), 3);
        EXPECT_TRUE(cpu_state().enabled);
      }
      EXPECT_EQ(cpu_state(), (AutocastState{false, torch::kBFloat16, false}));
    }
    EXPECT_EQ(cpu_state(), in_outer);
    EXPECT_EQ(nesting(), 1);
  }
  EXPECT_EQ(cpu_state(), before);
  EXPECT_EQ(nesting(), 0);
}

TEST(AutocastTest, ExceptionThrownInsideGuardLeavesStateAsBefore) {
  const AutocastState before = cpu_state();
  try {
    Autocast outer(torch::kCPU, torch::kBFloat16);
    Autocast inner(torch::kCPU, torch::kBFloat16, true, false);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(cpu_state(), before);
  EXPECT_EQ(nesting(), 0);
}

TEST(AutocastTest, PrecisionNoGivesADisabledGuardAndAutoIsRejected) {
  const AutocastState before = cpu_state();
  {
    Autocast guard(torch::kCPU, Precision::no);
    EXPECT_FALSE(cpu_state().enabled);
    EXPECT_FALSE(guard.options().enabled());
  }
  {
    Autocast guard(torch::kCPU, Precision::bf16);
    EXPECT_TRUE(cpu_state().enabled);
  }
  AMPKIT_EXPECT_THROWS_WITH(
      Autocast(torch::kCPU, Precision::automatic),
      InvalidArgument,
      "precision auto must be resolved before autocast");
  EXPECT_EQ(cpu_state(), before);
}

TEST(AutocastTest, RefusesFp16OnCpuWithLibTorchBefore22) {
  const AutocastState before = cpu_state();
  if (AMPKIT_TORCH_AT_LEAST(2, 2)) {
    Autocast guard(torch::kCPU, torch::kHalf);
    EXPECT_EQ(detail::autocast_get_dtype(c10::DeviceType::CPU), torch::kHalf);
  } else {
    AMPKIT_EXPECT_THROWS_WITH(
        Autocast(torch::kCPU, torch::kHalf),
        Unsupported,
        "fp16 autocast on CPU needs LibTorch 2.2 or newer, got LibTorch 1.13, "
        "whose CPU autocast supports only bf16. Use torch::kBFloat16");
  }
  EXPECT_EQ(cpu_state(), before);
}

TEST(AutocastTest, DisabledGuardAcceptsAnyReducedDtypeAndChangesNothing) {
  const AutocastState before = cpu_state();
  {
    Autocast guard(torch::kCPU, torch::kHalf, /*enabled=*/false);
    EXPECT_EQ(cpu_state().dtype, before.dtype);
    EXPECT_FALSE(cpu_state().enabled);
  }
  EXPECT_EQ(cpu_state(), before);
}

TEST(AutocastTest, RefusesCudaWithoutCuda) {
  if (torch::cuda::is_available()) {
    GTEST_SKIP() << "this machine has CUDA";
  }
  AMPKIT_EXPECT_THROWS_WITH(
      Autocast(torch::kCUDA, torch::kHalf),
      Unsupported,
      "CUDA autocast was requested, but this LibTorch");
}

TEST(AutocastTest, RefusesNonReducedDtypesAndOtherDevices) {
  AMPKIT_EXPECT_THROWS_WITH(
      Autocast(torch::kCPU, torch::kFloat),
      InvalidArgument,
      "got dtype Float; valid dtypes: torch::kBFloat16, torch::kHalf");
  AMPKIT_EXPECT_THROWS_WITH(
      Autocast(c10::DeviceType::Meta, torch::kBFloat16),
      InvalidArgument,
      "autocast supports the device types CPU and CUDA, got META");
  EXPECT_FALSE(cpu_state().enabled);
}

// Runs every op of a golden table under CPU autocast to `dtype` and compares
// its output dtype with what Python torch of the same version gives.
template <size_t N>
void expect_cpu_autocast_matches(
    const golden::AutocastDtype (&table)[N],
    torch::ScalarType dtype,
    const std::string& short_name) {
  testing_util::expect_autocast_matches(
      std::vector<golden::AutocastDtype>(table, table + N),
      torch::kCPU,
      dtype,
      short_name);
}

TEST(AutocastTest, CpuBf16OutputDtypesMatchPythonTorchOpByOp) {
#ifdef AMPKIT_GOLDEN_AUTOCAST
  expect_cpu_autocast_matches(
      golden::kAutocastCpuBf16, torch::kBFloat16, "bf16");
#else
  GTEST_SKIP() << "no golden table for LibTorch " << TORCH_VERSION
               << "; run tests/amp/generate_golden.py with that Python torch";
#endif
}

TEST(AutocastTest, CpuFp16OutputDtypesMatchPythonTorchOpByOp) {
#ifdef AMPKIT_GOLDEN_CPU_FP16_AUTOCAST
  expect_cpu_autocast_matches(golden::kAutocastCpuFp16, torch::kHalf, "fp16");
#else
  GTEST_SKIP() << "CPU autocast has no fp16 in LibTorch " << TORCH_VERSION;
#endif
}

}  // namespace
}  // namespace ampkit
