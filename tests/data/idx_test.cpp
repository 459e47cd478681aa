// IDX reading: real Fashion-MNIST files from Debian's package, and small files
// written here, plain, gzip-compressed, truncated and malformed.
#include "ampkit/data/idx.h"

#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit::data {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() /
          ("ampkit_idx_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A [2, 3] int16 IDX file: magic 0 0 0x0B 2, dims, big-endian values.
std::string idx_bytes() {
  std::string b = {0, 0, 0x0B, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  for (int16_t v : {1, -2, 300, 4, 5, -32768}) {
    b.push_back(static_cast<char>((v >> 8) & 0xff));
    b.push_back(static_cast<char>(v & 0xff));
  }
  return b;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(IdxTest, ReadsAPlainFileWithShapeDtypeAndBigEndianValues) {
  const auto path = temp_path("plain.idx");
  write_file(path, idx_bytes());
  const auto t = read_idx(path);
  EXPECT_EQ(t.scalar_type(), torch::kShort);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(torch::equal(
      t,
      torch::tensor({1, -2, 300, 4, 5, -32768}, torch::kShort).view({2, 3})));
  fs::remove(path);
}

TEST(IdxTest, ReadsAGzipCompressedFile) {
  const auto path = temp_path("packed.idx.gz");
  const std::string bytes = idx_bytes();
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  EXPECT_EQ(read_idx(path).sum().item<int64_t>(), 1 - 2 + 300 + 4 + 5 - 32768);
  fs::remove(path);
}

TEST(IdxTest, MissingTruncatedAndMalformedFilesNameTheFile) {
  AMPKIT_EXPECT_THROWS_WITH(
      read_idx("/nonexistent/file.idx"),
      IoError,
      "IDX reader: cannot open /nonexistent/file.idx");
  const auto path = temp_path("bad.idx");
  write_file(path, idx_bytes().substr(0, 15));
  AMPKIT_EXPECT_THROWS_WITH(
      read_idx(path), IoError, path + ": file ends inside the data");
  write_file(path, std::string("\x01\x00\x08\x01", 4));
  AMPKIT_EXPECT_THROWS_WITH(read_idx(path), IoError, "not an IDX file");
  write_file(path, std::string("\x00\x00\x07\x01\x00\x00\x00\x01\x00", 9));
  AMPKIT_EXPECT_THROWS_WITH(
      read_idx(path), IoError, "unknown IDX element type, got 7");
  fs::remove(path);
}

TEST(IdxTest, LoadsFashionMnistFromTheDebianPackage) {
  const FashionMnist test = load_fashion_mnist(false);
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(test.images.scalar_type(), torch::kFloat);
  EXPECT_EQ(test.labels.sizes(), (std::vector<int64_t>{10000}));
  EXPECT_EQ(test.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(test.labels.max().item<int64_t>(), 9);
  EXPECT_LE(test.images.max().item<float>(), 1.0f);
  EXPECT_GE(test.images.min().item<float>(), 0.0f);
  // Fashion-MNIST's test split is balanced: 1000 images per class.
  EXPECT_TRUE(torch::equal(
      torch::bincount(test.labels), torch::full({10}, 1000, torch::kLong)));
}

}  // namespace
}  // namespace ampkit::data
