// The ops whose autocast output dtype is checked against Python torch: the
// same ATen calls as autocast_ops() in generate_golden.py, on any device.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ampkit/amp/autocast.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ampkit::testing_util {

using OpTable = std::map<std::string, std::function<torch::Tensor()>>;

inline OpTable autocast_ops(
    torch::ScalarType dt, c10::Device device = torch::kCPU) {
  auto r = [dt, device](std::vector<int64_t> shape) {
    return torch::randn(shape).to(device, dt);
  };
  namespace F = torch::nn::functional;
  auto x48 = r({4, 8});
  auto img = r({2, 3, 8, 8});
  auto target = torch::tensor({0, 2, 1, 4}, torch::kLong).to(device);
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
             x48, torch::rand({4, 8}).to(device, dt));
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
             torch::rand({3}).to(device, dt) + 1,
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

// Runs each row's op under autocast to `dtype` on `device` and compares its
// output dtype with the row's, which Python torch gave: rows have op, input
// ("fp32" or short_name) and output (Python's dtype name, "bfloat16"...).
template <typename Rows>
void expect_autocast_matches(
    const Rows& rows,
    c10::Device device,
    torch::ScalarType dtype,
    const std::string& short_name) {
  const OpTable fp32_ops = autocast_ops(torch::kFloat, device);
  const OpTable reduced_ops = autocast_ops(dtype, device);
  size_t checked = 0;
  Autocast guard(device.type(), dtype);
  for (const auto& row : rows) {
    const std::string input = row.input;
    const bool fp32_input = input == "fp32";
    ASSERT_TRUE(fp32_input || input == short_name) << input;
    const OpTable& ops = fp32_input ? fp32_ops : reduced_ops;
    auto op = ops.find(row.op);
    ASSERT_NE(op, ops.end()) << "no C++ op for golden entry " << row.op;
    const std::string output = row.output;
    const std::string expected = output == "bfloat16"  ? "BFloat16"
                                 : output == "float16" ? "Half"
                                 : output == "float32" ? "Float"
                                                       : output;
    EXPECT_EQ(c10::toString(op->second().scalar_type()), expected)
        << row.op << " on " << input << " inputs on " << device;
    ++checked;
  }
  EXPECT_EQ(checked, fp32_ops.size() + reduced_ops.size());
}

}  // namespace ampkit::testing_util
