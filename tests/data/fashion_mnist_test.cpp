// Fashion-MNIST datasets through torch::data::make_data_loader, on the real
// files from Debian's dataset-fashion-mnist, and their errors.
#include "ampkit/data/fashion_mnist.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit::data {
namespace {

namespace fs = std::filesystem;
using torch::data::samplers::SequentialSampler;

#define AMPKIT_SKIP_WITHOUT_FASHION_MNIST()                          \
  do {                                                               \
    if (!fs::exists(kFashionMnistDir)) {                             \
      GTEST_SKIP() << kFashionMnistDir << " is missing; install "    \
                   << "Debian's dataset-fashion-mnist to run this."; \
    }                                                                \
  } while (0)

TEST(FashionMnistDatasetTest, GetReturnsOneImageAndItsScalarLabel) {
  AMPKIT_SKIP_WITHOUT_FASHION_MNIST();
  const FashionMnist raw = load_fashion_mnist(false);
  FashionMnistDataset dataset(raw);
  EXPECT_EQ(*dataset.size(), 10000u);
  const auto example = dataset.get(9999);
  EXPECT_EQ(example.data.sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(example.data.scalar_type(), torch::kFloat);
  EXPECT_EQ(example.target.dim(), 0);
  EXPECT_EQ(example.target.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(example.data, raw.images[9999]));
  EXPECT_EQ(example.target.item<int64_t>(), raw.labels[9999].item<int64_t>());
  AMPKIT_EXPECT_THROWS_WITH(
      dataset.get(10000),
      InvalidArgument,
      "FashionMnistDataset: index out of range, got 10000 for a dataset of "
      "10000 samples.");
}

TEST(FashionMnistDatasetTest, StackedLoaderYieldsTheTestSplitInOrder) {
  AMPKIT_SKIP_WITHOUT_FASHION_MNIST();
  const FashionMnist raw = load_fashion_mnist(false);
  auto loader = torch::data::make_data_loader<SequentialSampler>(
      FashionMnistDataset(false).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(64));
  int64_t count = 0;
  for (auto& batch : *loader) {
    const int64_t b = batch.target.size(0);
    if (count == 0) {
      EXPECT_EQ(batch.data.sizes(), (std::vector<int64_t>{64, 1, 28, 28}));
      EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{64}));
      EXPECT_TRUE(torch::equal(batch.target, raw.labels.narrow(0, 0, 64)));
      EXPECT_TRUE(torch::equal(batch.data, raw.images.narrow(0, 0, 64)));
    }
    EXPECT_EQ(batch.data.size(0), b);
    count += b;
  }
  EXPECT_EQ(count, 10000);  // 156 batches of 64 and one of 16
}

TEST(FashionMnistBatchDatasetTest, LoaderYieldsStackedBatchesWithoutStack) {
  AMPKIT_SKIP_WITHOUT_FASHION_MNIST();
  const FashionMnist raw = load_fashion_mnist(false);
  auto loader = torch::data::make_data_loader<SequentialSampler>(
      FashionMnistBatchDataset(raw), torch::data::DataLoaderOptions(64));
  int64_t count = 0;
  int64_t batches = 0;
  for (torch::data::Example<>& batch : *loader) {
    const int64_t b = batch.target.size(0);
    EXPECT_EQ(batch.data.sizes(), (std::vector<int64_t>{b, 1, 28, 28}));
    EXPECT_EQ(batch.target.scalar_type(), torch::kLong);
    EXPECT_TRUE(torch::equal(batch.target, raw.labels.narrow(0, count, b)));
    EXPECT_TRUE(torch::equal(batch.data, raw.images.narrow(0, count, b)));
    EXPECT_EQ(b, batches < 156 ? 64 : 16);
    count += b;
    ++batches;
  }
  EXPECT_EQ(count, 10000);
  EXPECT_EQ(batches, 157);
}

TEST(FashionMnistBatchDatasetTest, GathersArbitraryIndicesAndChecksThem) {
  AMPKIT_SKIP_WITHOUT_FASHION_MNIST();
  const FashionMnist raw = load_fashion_mnist(false);
  FashionMnistBatchDataset dataset(raw);
  const std::vector<size_t> indices = {7, 0, 9999, 7};
  const auto batch = dataset.get_batch(indices);
  const auto expected = torch::tensor({7, 0, 9999, 7}, torch::kLong);
  EXPECT_TRUE(torch::equal(batch.data, raw.images.index_select(0, expected)));
  EXPECT_TRUE(torch::equal(batch.target, raw.labels.index_select(0, expected)));
  const std::vector<size_t> bad = {3, 10000};
  AMPKIT_EXPECT_THROWS_WITH(
      dataset.get_batch(bad),
      InvalidArgument,
      "FashionMnistBatchDataset: index out of range, got 10000 for a dataset "
      "of 10000 samples.");
}

TEST(FashionMnistDatasetTest, LimitKeepsTheFirstSamples) {
  AMPKIT_SKIP_WITHOUT_FASHION_MNIST();
  const FashionMnist raw = load_fashion_mnist(false);
  auto loader = torch::data::make_data_loader<SequentialSampler>(
      FashionMnistDataset(raw, 100).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(64));
  std::vector<int64_t> sizes;
  torch::Tensor labels;
  for (auto& batch : *loader) {
    sizes.push_back(batch.target.size(0));
    labels =
        labels.defined() ? torch::cat({labels, batch.target}) : batch.target;
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{64, 36}));
  EXPECT_TRUE(torch::equal(labels, raw.labels.narrow(0, 0, 100)));
  EXPECT_EQ(*FashionMnistBatchDataset(raw, 10000).size(), 10000u);
  AMPKIT_EXPECT_THROWS_WITH(
      FashionMnistDataset(raw, 10001),
      InvalidArgument,
      "FashionMnistDataset: limit must be between 1 and the 10000 samples of "
      "the split, got 10001.");
  AMPKIT_EXPECT_THROWS_WITH(
      FashionMnistBatchDataset(raw, 0),
      InvalidArgument,
      "FashionMnistBatchDataset: limit must be between 1");
}

TEST(FashionMnistDatasetTest, MissingDirectoryErrorNamesTheFile) {
  AMPKIT_EXPECT_THROWS_WITH(
      FashionMnistDataset(false, "/nonexistent/fashion"),
      IoError,
      "IDX reader: cannot open /nonexistent/fashion/t10k-images-idx3-ubyte.gz");
  AMPKIT_EXPECT_THROWS_WITH(
      FashionMnistBatchDataset(true, "/nonexistent/fashion"),
      IoError,
      "cannot open /nonexistent/fashion/train-images-idx3-ubyte.gz");
}

TEST(FashionMnistDatasetTest, CorruptFileErrorNamesTheFile) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("ampkit_fashion_mnist_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string images = (dir / "t10k-images-idx3-ubyte.gz").string();
  // A valid header for [10000, 28, 28] uint8 with no data after it.
  std::ofstream(images, std::ios::binary) << std::string(
      "\x00\x00\x08\x03\x00\x00\x27\x10\x00\x00\x00\x1c\x00\x00\x00\x1c", 16);
  AMPKIT_EXPECT_THROWS_WITH(
      FashionMnistDataset(false, dir.string()),
      IoError,
      images + ": file ends inside the data");
  fs::remove_all(dir);
}

TEST(FashionMnistDatasetTest, RejectsMismatchedImagesAndLabels) {
  FashionMnist data;
  data.images = torch::zeros({4, 1, 28, 28});
  data.labels = torch::zeros({3}, torch::kLong);
  AMPKIT_EXPECT_THROWS_WITH(
      FashionMnistDataset{data},
      InvalidArgument,
      "FashionMnistDataset: expected images [N, ...] and labels [N], got "
      "images [4, 1, 28, 28] and labels [3].");
  AMPKIT_EXPECT_THROWS_WITH(
      FashionMnistBatchDataset(FashionMnist{}),
      InvalidArgument,
      "got images undefined and labels undefined.");
}

}  // namespace
}  // namespace ampkit::data
