// torch.save's format, written and read back by ampkit's own pickle code
// (checkpoint/torch_pickle.h); Python's torch.load reading it is
// crosscheck_accelerate_checkpoint's part.
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ampkit/error.h"
#include "checkpoint/torch_pickle.h"
#include "test_util.h"

namespace ampkit::checkpoint {
namespace {

class TorchPickleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ampkit_pickle_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(TorchPickleTest, ValuesAndTensorsRoundTrip) {
  const auto strided = torch::arange(12, torch::kFloat).reshape({3, 4}).t();
  const auto value = py_dict(
      {py_str("state"),
       py_dict(
           {py_int(0),
            py_dict(
                {py_str("step"),
                 py_tensor(torch::tensor(20.0f)),
                 py_str("moment"),
                 py_tensor(strided)})}),
       py_str("numbers"),
       py_list(
           {py_int(-1),
            py_int(255),
            py_int(256),
            py_int(int64_t(1) << 40),
            py_int(-(int64_t(1) << 40)),
            py_float(-2.5e-8),
            py_bool(true),
            py_none()}),
       py_str("pair"),
       py_tuple({py_float(0.9), py_float(0.999)}),
       py_str("empty"),
       py_list({}),
       py_str("bytes"),
       py_tensor(torch::tensor({1, 2, 255}, torch::kByte)),
       py_str("halves"),
       py_tensor(torch::ones({2}, torch::kBFloat16))});
  const auto path = (dir_ / "state.bin").string();
  save_torch_file(path, value);
  const PyRef back = load_torch_file(path);

  const PyRef step = back->get("state")->get(int64_t{0})->get("step");
  ASSERT_EQ(step->kind, PyValue::Kind::tensor);
  EXPECT_EQ(step->tensor.item<float>(), 20.0f);
  const auto moment =
      back->get("state")->get(int64_t{0})->get("moment")->tensor;
  EXPECT_TRUE(moment.equal(strided));
  const auto& numbers = back->get("numbers")->items;
  ASSERT_EQ(numbers.size(), 8u);
  EXPECT_EQ(numbers[0]->integer, -1);
  EXPECT_EQ(numbers[1]->integer, 255);
  EXPECT_EQ(numbers[2]->integer, 256);
  EXPECT_EQ(numbers[3]->integer, int64_t(1) << 40);
  EXPECT_EQ(numbers[4]->integer, -(int64_t(1) << 40));
  EXPECT_EQ(numbers[5]->floating, -2.5e-8);
  EXPECT_TRUE(numbers[6]->boolean);
  EXPECT_EQ(numbers[7]->kind, PyValue::Kind::none);
  EXPECT_EQ(back->get("pair")->kind, PyValue::Kind::tuple);
  EXPECT_EQ(back->get("pair")->items[1]->floating, 0.999);
  EXPECT_TRUE(back->get("empty")->items.empty());
  EXPECT_TRUE(back->get("bytes")->tensor.equal(
      torch::tensor({1, 2, 255}, torch::kByte)));
  EXPECT_EQ(back->get("halves")->tensor.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(back->get("missing"), nullptr);
}

TEST_F(TorchPickleTest, WhatIsNotTorchSaveIsAnIoErrorNamingTheFile) {
  const auto path = (dir_ / "not_a_zip.bin").string();
  std::ofstream(path) << "plain text";
  AMPKIT_EXPECT_THROWS_WITH(
      load_torch_file(path),
      IoError,
      "cannot read " + path + " as a torch.save");
  // A pickle cut short, and one with an opcode outside the subset.
  auto storage = [](const std::string&, at::ScalarType, int64_t) {
    return at::Tensor();
  };
  AMPKIT_EXPECT_THROWS_WITH(
      unpickle(std::string("\x80\x02}(X", 5), "cut.pkl", storage),
      IoError,
      "cut.pkl: ampkit cannot read a pickle that ends early");
  AMPKIT_EXPECT_THROWS_WITH(
      unpickle(std::string("\x80\x02I1\n.", 6), "int.pkl", storage),
      IoError,
      "the pickle opcode 0x49");
}

}  // namespace
}  // namespace ampkit::checkpoint
