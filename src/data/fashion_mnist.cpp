// Fashion-MNIST datasets over the tensors load_fashion_mnist returns: single
// examples are views, batches one index_select.
#include "ampkit/data/fashion_mnist.h"

#include <ATen/ATen.h>

#include <sstream>
#include <string>
#include <utility>

#include "ampkit/error.h"

namespace ampkit::data {

namespace {

constexpr const char* kDataset = "FashionMnistDataset";
constexpr const char* kBatchDataset = "FashionMnistBatchDataset";

void check_index(size_t index, size_t size, const char* component) {
  if (index >= size) {
    throw InvalidArgument(
        component,
        "index out of range, got " + std::to_string(index) +
            " for a dataset of " + std::to_string(size) +
            " samples. Use a sampler built with the dataset's size().");
  }
}

size_t sample_count(const FashionMnist& data) {
  return static_cast<size_t>(data.labels.size(0));
}

}  // namespace

namespace detail {

FashionMnist take_first(
    FashionMnist data, std::optional<size_t> limit, const char* component) {
  if (!data.images.defined() || !data.labels.defined() ||
      data.images.dim() < 1 || data.labels.dim() != 1 ||
      data.images.size(0) != data.labels.size(0)) {
    const auto describe = [](const at::Tensor& t) {
      if (!t.defined()) {
        return std::string("undefined");
      }
      std::ostringstream out;
      out << t.sizes();
      return out.str();
    };
    throw InvalidArgument(
        component,
        "expected images [N, ...] and labels [N], got images " +
            describe(data.images) + " and labels " + describe(data.labels) +
            ". Pass the result of load_fashion_mnist().");
  }
  if (limit) {
    const size_t n = sample_count(data);
    if (*limit == 0 || *limit > n) {
      throw InvalidArgument(
          component,
          "limit must be between 1 and the " + std::to_string(n) +
              " samples of the split, got " + std::to_string(*limit) +
              ". Pass a smaller limit, or none for every sample.");
    }
    const auto count = static_cast<int64_t>(*limit);
    data.images = data.images.narrow(0, 0, count);
    data.labels = data.labels.narrow(0, 0, count);
  }
  return data;
}

}  // namespace detail

FashionMnistDataset::FashionMnistDataset(
    bool train, const std::string& dir, std::optional<size_t> limit)
    : FashionMnistDataset(load_fashion_mnist(train, dir), limit) {}

FashionMnistDataset::FashionMnistDataset(
    FashionMnist data, std::optional<size_t> limit)
    : data_(detail::take_first(std::move(data), limit, kDataset)) {}

torch::data::Example<> FashionMnistDataset::get(size_t index) {
  check_index(index, sample_count(data_), kDataset);
  const auto i = static_cast<int64_t>(index);
  return {data_.images[i], data_.labels[i]};
}

torch::optional<size_t> FashionMnistDataset::size() const {
  return sample_count(data_);
}

FashionMnistBatchDataset::FashionMnistBatchDataset(
    bool train, const std::string& dir, std::optional<size_t> limit)
    : FashionMnistBatchDataset(load_fashion_mnist(train, dir), limit) {}

FashionMnistBatchDataset::FashionMnistBatchDataset(
    FashionMnist data, std::optional<size_t> limit)
    : data_(detail::take_first(std::move(data), limit, kBatchDataset)) {}

torch::data::Example<> FashionMnistBatchDataset::get_batch(
    c10::ArrayRef<size_t> indices) {
  const size_t n = sample_count(data_);
  // [B] int64, the index type index_select takes.
  at::Tensor index = at::empty(
      {static_cast<int64_t>(indices.size())}, at::TensorOptions(at::kLong));
  auto* out = index.data_ptr<int64_t>();
  for (size_t b = 0; b < indices.size(); ++b) {
    check_index(indices[b], n, kBatchDataset);
    out[b] = static_cast<int64_t>(indices[b]);
  }
  return {
      data_.images.index_select(0, index), data_.labels.index_select(0, index)};
}

torch::optional<size_t> FashionMnistBatchDataset::size() const {
  return sample_count(data_);
}

}  // namespace ampkit::data
