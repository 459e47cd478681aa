// Fashion-MNIST as torch::data datasets, for torch::data::make_data_loader:
// one that yields single examples and one that yields whole batches.
#pragma once

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ampkit/data/idx.h"

namespace ampkit::data {

namespace detail {
/// `data` cut to its first `limit` samples (views, no copy). Throws
/// ampkit::InvalidArgument, naming `component`, when images and labels do not
/// hold the same number of samples or `limit` is 0 or more than there are.
FashionMnist take_first(
    FashionMnist data, std::optional<size_t> limit, const char* component);
}  // namespace detail

/// Fashion-MNIST one example at a time: get(i) is {image [1, 28, 28] float32
/// in [0, 1], label int64 scalar}. Batch it with
/// `.map(torch::data::transforms::Stack<>())`:
///
///   auto loader = torch::data::make_data_loader<
///       torch::data::samplers::SequentialSampler>(
///       FashionMnistDataset(/*train=*/false)
///           .map(torch::data::transforms::Stack<>()),
///       64);
///
/// get_batch is torch's default (get() per index): Stack needs a
/// std::vector<Example<>>, and get() returns views, so the only copy is
/// Stack's. For batches gathered in one index_select, with no per-example
/// tensors at all, use FashionMnistBatchDataset.
class FashionMnistDataset
    : public torch::data::datasets::Dataset<FashionMnistDataset> {
 public:
  /// Loads the training (60000) or test (10000) split from `dir`; the
  /// ampkit::IoError of load_fashion_mnist, naming the file, propagates for a
  /// missing or corrupt one. `limit` keeps only the first `limit` samples.
  explicit FashionMnistDataset(
      bool train,
      const std::string& dir = kFashionMnistDir,
      std::optional<size_t> limit = std::nullopt);
  /// Wraps already loaded data (shared, not copied).
  explicit FashionMnistDataset(
      FashionMnist data, std::optional<size_t> limit = std::nullopt);

  /// Sample `index` as views into the dataset's tensors. Throws
  /// ampkit::InvalidArgument when `index` >= size().
  torch::data::Example<> get(size_t index) override;
  torch::optional<size_t> size() const override;
  /// All samples: images [N, 1, 28, 28], labels [N].
  const FashionMnist& data() const {
    return data_;
  }

 private:
  FashionMnist data_;
};

/// Fashion-MNIST a batch at a time: get_batch(indices) is one Example<> of
/// images [B, 1, 28, 28] and labels [B], gathered with index_select, so the
/// loader needs no Stack transform:
///
///   auto loader = torch::data::make_data_loader<
///       torch::data::samplers::RandomSampler>(
///       FashionMnistBatchDataset(/*train=*/true), 64);
///   for (torch::data::Example<>& batch : *loader) { ... }
class FashionMnistBatchDataset
    : public torch::data::datasets::
          BatchDataset<FashionMnistBatchDataset, torch::data::Example<>> {
 public:
  /// As FashionMnistDataset's constructors.
  explicit FashionMnistBatchDataset(
      bool train,
      const std::string& dir = kFashionMnistDir,
      std::optional<size_t> limit = std::nullopt);
  explicit FashionMnistBatchDataset(
      FashionMnist data, std::optional<size_t> limit = std::nullopt);

  /// The samples at `indices`, stacked: images [B, 1, 28, 28], labels [B].
  /// Throws ampkit::InvalidArgument when an index is >= size().
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override;
  torch::optional<size_t> size() const override;
  const FashionMnist& data() const {
    return data_;
  }

 private:
  FashionMnist data_;
};

}  // namespace ampkit::data
