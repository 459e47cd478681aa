// The Autocast guard: state set and restored like Python's torch.autocast,
// refusals of what LibTorch cannot do, and op output dtypes against Python.
#include "ampkit/amp/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <functional>
#include <map>

#include "amp/compat.h"
#include "ampkit/error.h"
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

// The same ATen calls as autocast_ops() in generate_golden.py.
using OpTable = std::map<std::string, std::function<torch::Tensor()>>;

OpTable autocast_ops(torch::ScalarType dt) {
  auto r = [dt](std::vector<int64_t> shape) {
    return torch::randn(shape).to(dt);
  };
  namespace F = torch::nn::functional;
  auto x48 = r({4, 8});
  auto img = r({2, 3, 8, 8});
  auto target = torch::tensor({0, 2, 1, 4}, torch::kLong);
  return {
      {"linear",
       [=] {
         return at::linear(x48, r({6, 8}), r({6}));
       }},
      {"matmul",
       [=] {
         return at::matmul(x48, r({8, 5}));
       }},
      {"mm",
       [=] {
         return at::mm(x48, r({8, 5}));
       }},
      {"bmm",
       [=] {
         return at::bmm(r({2, 4, 8}), r({2, 8, 5}));
       }},
      {"addmm",
       [=] {
         return at::addmm(r({4, 5}), x48, r({8, 5}));
       }},
      {"baddbmm",
       [=] {
         return at::baddbmm(r({2, 4, 5}), r({2, 4, 8}), r({2, 8, 5}));
       }},
      {"conv1d",
       [=] {
         return at::conv1d(r({2, 3, 16}), r({4, 3, 3}));
       }},
      {"conv2d",
       [=] {
         return at::conv2d(img, r({4, 3, 3, 3}), r({4}));
       }},
      {"conv3d",
       [=] {
         return at::conv3d(r({1, 2, 4, 4, 4}), r({3, 2, 2, 2, 2}));
       }},
      {"conv_transpose2d",
       [=] {
         return at::conv_transpose2d(img, r({3, 4, 3, 3}));
       }},
      {"relu", [=] { return at::relu(x48); }},
      {"gelu", [=] { return at::gelu(x48); }},
      {"sigmoid", [=] { return at::sigmoid(x48); }},
      {"tanh", [=] { return at::tanh(x48); }},
      {"exp", [=] { return at::exp(x48); }},
      {"sum", [=] { return at::sum(x48); }},
      {"mean", [=] { return at::mean(x48); }},
      {"softmax", [=] { return at::softmax(x48, 1); }},
      {"log_softmax", [=] { return at::log_softmax(x48, 1); }},
      {"mse_loss",
       [=] {
         return F::mse_loss(x48, r({4, 8}));
       }},
      {"l1_loss",
       [=] {
         return F::l1_loss(x48, r({4, 8}));
       }},
      {"smooth_l1_loss",
       [=] {
         return F::smooth_l1_loss(x48, r({4, 8}));
       }},
      {"cross_entropy",
       [=] {
         return F::cross_entropy(r({4, 5}), target);
       }},
      {"nll_loss",
       [=] {
         return F::nll_loss(r({4, 5}), target);
       }},
      {"binary_cross_entropy_with_logits",
       [=] {
         return F::binary_cross_entropy_with_logits(
             x48, torch::rand({4, 8}).to(dt));
       }},
      {"layer_norm", [=] { return at::layer_norm(x48, {8}, r({8}), r({8})); }},
      {"group_norm", [=] { return at::group_norm(img, 3, r({3}), r({3})); }},
      {"batch_norm",
       [=] {
         return at::batch_norm(
             img,
             r({3}),
             r({3}),
             r({3}),
             torch::rand({3}).to(dt) + 1,
             false,
             0.1,
             1e-5,
             false);
       }},
      {"max_pool2d", [=] { return at::max_pool2d(img, {2}); }},
      {"avg_pool2d", [=] { return at::avg_pool2d(img, {2}); }},
      {"embedding",
       [=] {
         return at::embedding(r({5, 3}), target);
       }},
      {"cat",
       [=] {
         return at::cat({x48, x48.to(torch::kFloat)});
       }},
      {"stack",
       [=] {
         return at::stack({x48, x48.to(torch::kFloat)});
       }},
      {"add", [=] { return at::add(x48, x48.to(torch::kFloat)); }},
      {"mul", [=] { return at::mul(x48, x48.to(torch::kFloat)); }},
  };
}

// Runs every op of a golden table under CPU autocast to `dtype` and compares
// its output dtype with what Python torch of the same version gives.
template <size_t N>
void expect_cpu_autocast_matches(
    const golden::AutocastDtype (&table)[N],
    torch::ScalarType dtype,
    const std::string& short_name) {
  const OpTable fp32_ops = autocast_ops(torch::kFloat);
  const OpTable reduced_ops = autocast_ops(dtype);
  size_t checked = 0;
  Autocast guard(torch::kCPU, dtype);
  for (const auto& row : table) {
    const bool fp32_input = std::string(row.input) == "fp32";
    ASSERT_TRUE(fp32_input || row.input == short_name) << row.input;
    const OpTable& ops = fp32_input ? fp32_ops : reduced_ops;
    auto op = ops.find(row.op);
    ASSERT_NE(op, ops.end()) << "no C++ op for golden entry " << row.op;
    const std::string output = row.output;
    const std::string expected = output == "bfloat16"  ? "BFloat16"
                                 : output == "float16" ? "Half"
                                 : output == "float32" ? "Float"
                                                       : output;
    EXPECT_EQ(c10::toString(op->second().scalar_type()), expected)
        << row.op << " on " << row.input << " inputs";
    ++checked;
  }
  EXPECT_EQ(checked, fp32_ops.size() + reduced_ops.size());
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
