// IDX reader over zlib's gz* API, which reads plain and gzip files alike.
#include "ampkit/data/idx.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit::data {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const {
    gzclose(f);
  }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

void read_exact(
    gzFile f, void* out, size_t n, const std::string& path, const char* what) {
  auto* dst = static_cast<unsigned char*>(out);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    const int got = gzread(f, dst, chunk);
    if (got <= 0) {
      throw IoError(
          component::kIdxReader,
          path + ": file ends inside the " + what +
              " (truncated or not an IDX file). Reinstall the dataset "
              "(apt-get install --reinstall dataset-fashion-mnist) or check "
              "the path.");
    }
    dst += got;
    n -= static_cast<size_t>(got);
  }
}

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) |
         (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) {
    throw IoError(
        component::kIdxReader,
        "cannot open " + path +
            ". For Fashion-MNIST install Debian's dataset-fashion-mnist "
            "(files under " +
            kFashionMnistDir + ").");
  }
  std::array<unsigned char, 4> magic{};
  read_exact(file.get(), magic.data(), magic.size(), path, "header");
  if (magic[0] != 0 || magic[1] != 0) {
    throw IoError(
        component::kIdxReader,
        path + ": not an IDX file, got magic bytes " +
            std::to_string(magic[0]) + " " + std::to_string(magic[1]) +
            " where 0 0 was expected.");
  }
  // IDX type codes and the tensor dtypes they become.
  constexpr std::pair<unsigned char, at::ScalarType> kTypes[] = {
      {0x08, at::kByte},
      {0x09, at::kChar},
      {0x0B, at::kShort},
      {0x0C, at::kInt},
      {0x0D, at::kFloat},
      {0x0E, at::kDouble}};
  const auto* type =
      std::find_if(std::begin(kTypes), std::end(kTypes), [&](const auto& t) {
        return t.first == magic[2];
      });
  if (type == std::end(kTypes)) {
    throw IoError(
        component::kIdxReader,
        path + ": unknown IDX element type, got " + std::to_string(magic[2]) +
            "; valid: 8 (uint8), 9 (int8), 11 (int16), 12 (int32), 13 "
            "(float32), 14 (float64).");
  }
  const at::ScalarType dtype = type->second;
  const size_t element_size = c10::elementSize(dtype);
  const int ndims = magic[3];
  if (ndims == 0) {
    throw IoError(
        component::kIdxReader, path + ": IDX file with 0 dimensions.");
  }
  std::vector<int64_t> shape(ndims);
  size_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    std::array<unsigned char, 4> dim{};
    read_exact(file.get(), dim.data(), dim.size(), path, "header");
    shape[d] = big_endian(dim.data());
    count *= static_cast<size_t>(shape[d]);
  }
  constexpr size_t kMaxBytes = size_t(1) << 34;
  if (count * element_size > kMaxBytes) {
    throw IoError(
        component::kIdxReader,
        path + ": header declares " + std::to_string(count * element_size) +
            " bytes of data, more than the 16 GiB this reader accepts.");
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(dtype));
  read_exact(file.get(), out.data_ptr(), count * element_size, path, "data");
  if (element_size > 1) {
    // IDX stores elements big-endian.
    auto* bytes = static_cast<unsigned char*>(out.data_ptr());
    for (size_t i = 0; i < count; ++i) {
      std::reverse(bytes + i * element_size, bytes + (i + 1) * element_size);
    }
  }
  return out;
}

FashionMnist load_fashion_mnist(bool train, const std::string& dir) {
  const std::string prefix = dir + (train ? "/train" : "/t10k");
  at::Tensor images = read_idx(prefix + "-images-idx3-ubyte.gz");
  at::Tensor labels = read_idx(prefix + "-labels-idx1-ubyte.gz");
  if (images.dim() != 3 || labels.dim() != 1 ||
      images.size(0) != labels.size(0)) {
    throw IoError(
        component::kIdxReader,
        prefix + "-*: expected images [N, 28, 28] and labels [N], got " +
            std::to_string(images.dim()) + "-d images and " +
            std::to_string(labels.dim()) + "-d labels.");
  }
  FashionMnist out;
  out.images = images.unsqueeze(1).to(at::kFloat).div_(255.0);
  out.labels = labels.to(at::kLong);
  return out;
}

}  // namespace ampkit::data
