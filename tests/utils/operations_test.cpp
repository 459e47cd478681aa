// The batch visitor (ampkit/utils/operations.h) through every container it
// walks: what prepare_data_loader's device move, the prepared model's fp32
// outputs and DDP's output search rely on.
#include "ampkit/utils/operations.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ampkit {
namespace {

torch::Tensor half(std::vector<int64_t> shape) {
  return torch::ones(shape, torch::kHalf);
}

bool is_fp32(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat;
}

TEST(OperationsTest, ConvertToFp32ReachesEveryContainer) {
  EXPECT_TRUE(is_fp32(convert_to_fp32(half({2}))));
  auto pair = convert_to_fp32(std::make_pair(half({2}), 7));
  EXPECT_TRUE(is_fp32(pair.first));
  EXPECT_EQ(pair.second, 7);
  auto tuple = convert_to_fp32(std::make_tuple(
      half({2}), std::string("x"), torch::ones({2}, torch::kBFloat16)));
  EXPECT_TRUE(is_fp32(std::get<0>(tuple)));
  EXPECT_EQ(std::get<1>(tuple), "x");
  EXPECT_TRUE(is_fp32(std::get<2>(tuple)));
  auto vec = convert_to_fp32(std::vector<torch::Tensor>{half({1}), half({3})});
  EXPECT_TRUE(is_fp32(vec[0]) && is_fp32(vec[1]));
  auto map = convert_to_fp32(std::map<std::string, torch::Tensor>{
      {"logits", half({2})}, {"labels", torch::ones({2}, torch::kLong)}});
  EXPECT_TRUE(is_fp32(map.at("logits")));
  EXPECT_EQ(map.at("labels").scalar_type(), torch::kLong);  // not a float
  auto umap = convert_to_fp32(
      std::unordered_map<std::string, torch::Tensor>{{"a", half({2})}});
  EXPECT_TRUE(is_fp32(umap.at("a")));
  auto example = convert_to_fp32(torch::data::Example<>(half({2}), half({2})));
  EXPECT_TRUE(is_fp32(example.data) && is_fp32(example.target));
  // Nested: a vector of pairs of a map and a tuple.
  using Inner = std::pair<
      std::map<std::string, torch::Tensor>,
      std::tuple<torch::Tensor, int>>;
  auto nested = convert_to_fp32(std::vector<Inner>{
      Inner{{{"k", half({1})}}, std::make_tuple(half({1}), 3)}});
  EXPECT_TRUE(is_fp32(nested[0].first.at("k")));
  EXPECT_TRUE(is_fp32(std::get<0>(nested[0].second)));
  EXPECT_EQ(std::get<1>(nested[0].second), 3);
}

TEST(OperationsTest, SendToDeviceMovesPairsTuplesAndMaps) {
  // The meta device shows the move without a GPU.
  const c10::Device meta(c10::DeviceType::Meta);
  auto pair =
      send_to_device(std::make_pair(torch::ones({2}), torch::ones({3})), meta);
  EXPECT_TRUE(pair.first.is_meta() && pair.second.is_meta());
  auto tuple = send_to_device(std::make_tuple(torch::ones({2}), 1.5), meta);
  EXPECT_TRUE(std::get<0>(tuple).is_meta());
  EXPECT_EQ(std::get<1>(tuple), 1.5);
  auto map = send_to_device(
      std::map<std::string, torch::Tensor>{{"x", torch::ones({2})}}, meta);
  EXPECT_TRUE(map.at("x").is_meta());
  auto examples = send_to_device(
      std::vector<torch::data::Example<>>{{torch::ones({2}), torch::ones({1})}},
      meta);
  EXPECT_TRUE(examples[0].data.is_meta() && examples[0].target.is_meta());
  // An Example without a target, and an undefined tensor, pass.
  auto no_target = send_to_device(
      torch::data::Example<torch::Tensor, torch::data::example::NoTarget>(
          torch::ones({2})),
      meta);
  EXPECT_TRUE(no_target.data.is_meta());
  EXPECT_FALSE(send_to_device(torch::Tensor(), meta).defined());
}

TEST(OperationsTest, CollectTensorsFindsThemInOrderAndSkipsUndefined) {
  const auto a = torch::ones({1}), b = torch::zeros({2}), c = torch::ones({3});
  const auto found = collect_tensors(std::make_tuple(
      a,
      std::vector<torch::Tensor>{b, torch::Tensor()},
      std::map<std::string, torch::Tensor>{{"c", c}},
      5));
  ASSERT_EQ(found.size(), 3u);
  EXPECT_TRUE(found[0].is_same(a));
  EXPECT_TRUE(found[1].is_same(b));
  EXPECT_TRUE(found[2].is_same(c));
  EXPECT_TRUE(collect_tensors(std::string("no tensors")).empty());
}

TEST(OperationsTest, FindBatchSizeLikeAccelerate) {
  EXPECT_EQ(find_batch_size(torch::ones({8, 3})), 8);
  EXPECT_EQ(
      find_batch_size(
          torch::data::Example<>(torch::ones({4, 2}), torch::ones({4}))),
      4);
  EXPECT_EQ(
      find_batch_size(std::make_pair(torch::ones({5}), torch::ones({9}))), 5);
  EXPECT_EQ(
      find_batch_size(
          std::map<std::string, torch::Tensor>{{"x", torch::ones({6, 1})}}),
      6);
  // A vector is a list of samples.
  EXPECT_EQ(find_batch_size(std::vector<torch::data::Example<>>(3)), 3);
  EXPECT_EQ(find_batch_size(torch::ones({})), 0);
  EXPECT_EQ(find_batch_size(42), 0);
}

TEST(OperationsTest, RecursivelyApplyCallsTheFunctionOnEveryTensor) {
  int calls = 0;
  auto doubled = recursively_apply(
      [&calls](torch::Tensor t) {
        ++calls;
        return t * 2;
      },
      std::make_pair(
          torch::ones({2}),
          std::vector<torch::Tensor>{torch::ones({1}), torch::ones({1})}));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(doubled.first.sum().item<float>(), 4.0f);
  EXPECT_EQ(doubled.second[1].item<float>(), 2.0f);
}

}  // namespace
}  // namespace ampkit
