// Readers for IDX files (the MNIST family's format, plain or gzip-compressed)
// and the Fashion-MNIST dataset that Debian's dataset-fashion-mnist ships.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace ampkit::data {

/// Where Debian's dataset-fashion-mnist package puts the IDX .gz files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Reads an IDX file (gzip-compressed or not) into a tensor with its shape and
/// element type (uint8 -> kByte, int8 -> kChar, int16 -> kShort, int32 ->
/// kInt, float32 -> kFloat, float64 -> kDouble). Throws ampkit::IoError
/// naming the file for a missing, truncated or malformed one.
at::Tensor read_idx(const std::string& path);

struct FashionMnist {
  at::Tensor images;  ///< [N, 1, 28, 28] float32 in [0, 1]
  at::Tensor labels;  ///< [N] int64 in [0, 10)
};

/// The training (60000) or test (10000) split from `dir`.
FashionMnist load_fashion_mnist(
    bool train, const std::string& dir = kFashionMnistDir);

}  // namespace ampkit::data
