// Unsized data in distributed training: a torch::data stream shared by the
// processes of a run, as accelerate's IterableDatasetShard shares an
// IterableDataset. A stream is
//  - a StreamDataset (torch::data::datasets::StreamDataset): get_batch(n)
//    returns up to n examples, and an empty batch at the end of the data;
//  - or a StatefulDataset such as ChunkDataset: get_batch(n) returns
//    nullopt at the end of an epoch, and reset() starts the next one.
// Accelerator::prepare_data_loader takes either and builds a StreamLoader.
#pragma once

#include <torch/arg.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ampkit::data {

/// How the processes share a stream.
enum class StreamSharding {
  /// Every process reads the same stream and keeps every W-th batch from
  /// its own index r on (accelerate's IterableDatasetShard): the W batches
  /// k*W .. k*W+W-1 are step k's global batch, and process r trains on
  /// batch k*W+r. Every process reads (and drops) the others' batches.
  stride,
  /// Each process's stream is its own (the data already split, for example
  /// a file per process); only the end is agreed.
  per_process,
};

struct StreamLoaderOptions {
  /// Examples per batch asked of the stream (per process); >= 1.
  TORCH_ARG(size_t, batch_size) = 1;
  /// Processes that share the stream (W); >= 1.
  TORCH_ARG(int64_t, num_processes) = 1;
  /// This process (r); in [0, num_processes).
  TORCH_ARG(int64_t, process_index) = 0;
  TORCH_ARG(StreamSharding, sharding) = StreamSharding::stride;
};

/// What a finished pass over a stream did, the same on every process.
struct StreamEpochEnd {
  /// Steps taken (batches each process trained on).
  int64_t steps = 0;
  /// Processes that still had a batch at the step where another had none:
  /// those batches were read but not used, so that every process stopped
  /// at the same step (DDP's Join with throw_on_early_termination stops
  /// the same way, with an error instead).
  int64_t dropped = 0;
};

namespace detail {
/// Checks the options; throws InvalidArgument naming the bad value.
void check_stream_options(const StreamLoaderOptions& options);
/// Warns (main process only) when `end.dropped` batches were not used.
void report_stream_end(const StreamEpochEnd& end, int64_t num_processes);

// std::optional or c10::optional (one type from LibTorch 2.x on, two in
// 1.13): what a StatefulDataset's get_batch returns.
template <typename T, typename = void>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<
    T,
    std::void_t<
        decltype(std::declval<T&>().has_value()),
        decltype(*std::declval<T&>())>> : std::true_type {};

template <typename T, bool = IsOptional<T>::value>
struct Unwrap {
  using type = T;
};
template <typename T>
struct Unwrap<T, true> {
  using type = std::decay_t<decltype(*std::declval<T&>())>;
};

template <typename D, typename = void>
struct IsStream : std::false_type {};
template <typename D>
struct IsStream<D, std::void_t<typename D::BatchRequestType>>
    : std::is_same<typename D::BatchRequestType, size_t> {};

/// Whether a StreamDataset's batch is the empty one that ends the data.
inline bool batch_is_empty(const torch::Tensor& t) {
  return !t.defined() || t.dim() == 0 || t.size(0) == 0;
}
template <typename Data, typename Target>
bool batch_is_empty(const torch::data::Example<Data, Target>& e) {
  return batch_is_empty(e.data);
}
template <typename T>
bool batch_is_empty(const std::vector<T>& v) {
  return v.empty();
}
}  // namespace detail

/// Whether D is a stream: a torch::data dataset asked for a batch by its
/// size (StreamDataset, StatefulDataset, and map()s of them), not by the
/// indices of its examples.
template <typename D>
inline constexpr bool is_stream_v = detail::IsStream<D>::value;

/// Reads a stream in batches, each process its share, and ends every pass
/// at the same step on every process: after each read the processes count
/// how many of them got a batch (one all-reduce of one integer); when not
/// all did, the pass ends for all of them. `count` is that collective:
/// given this process's 0 or 1, the sum over the processes (with one
/// process, the value itself).
template <typename Stream>
class StreamLoader {
  using Raw = decltype(std::declval<Stream&>().get_batch(size_t{1}));

 public:
  using Batch = typename detail::Unwrap<Raw>::type;
  using Count = std::function<int64_t(int64_t)>;
  /// What PreparedDataLoader reads (LibTorch's FullDataLoaderOptions has
  /// the same field).
  struct Options {
    size_t batch_size;
  };

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Batch& operator*() {
      return *current_;
    }
    Iterator& operator++() {
      owner_->next(current_);
      return *this;
    }
    bool operator==(const Iterator& other) const {
      return !current_.has_value() && !other.current_.has_value();
    }
    bool operator!=(const Iterator& other) const {
      return !(*this == other);
    }

   private:
    friend class StreamLoader;
    Iterator() = default;
    explicit Iterator(StreamLoader* owner) : owner_(owner) {
      owner_->next(current_);
    }
    StreamLoader* owner_ = nullptr;
    std::optional<Batch> current_;
  };

  StreamLoader(Stream stream, StreamLoaderOptions options, Count count)
      : stream_(std::move(stream)),
        options_(options),
        count_(std::move(count)) {
    detail::check_stream_options(options_);
  }

  /// Starts a pass: a StatefulDataset is reset() first (a new epoch), a
  /// StreamDataset goes on where the last pass stopped.
  Iterator begin() {
    if constexpr (detail::IsOptional<Raw>::value) {
      stream_.reset();
    }
    steps_ = 0;
    return Iterator(this);
  }
  Iterator end() {
    return Iterator();
  }
  Options options() const {
    return {options_.batch_size()};
  }
  const StreamLoaderOptions& stream_options() const {
    return options_;
  }
  Stream& stream() {
    return stream_;
  }
  /// How the last pass ended (steps 0 and dropped 0 before the first).
  const StreamEpochEnd& last_end() const {
    return last_end_;
  }

 private:
  // One read of the stream; nullopt at its end.
  std::optional<Batch> read() {
    auto batch = stream_.get_batch(options_.batch_size());
    if constexpr (detail::IsOptional<Raw>::value) {
      if (!batch.has_value()) {
        return std::nullopt;
      }
      return std::optional<Batch>(std::move(*batch));
    } else {
      if (detail::batch_is_empty(batch)) {
        return std::nullopt;
      }
      return std::optional<Batch>(std::move(batch));
    }
  }

  // This process's next batch into `out`, or nullopt when any process has
  // none (the pass ends for all).
  void next(std::optional<Batch>& out) {
    out.reset();
    if (options_.sharding() == StreamSharding::per_process) {
      out = read();
    } else {
      for (int64_t j = 0; j < options_.num_processes(); ++j) {
        auto batch = read();
        if (!batch) {
          break;
        }
        if (j == options_.process_index()) {
          out = std::move(batch);
        }
      }
    }
    const int64_t have = count_(out.has_value() ? 1 : 0);
    if (have == options_.num_processes()) {
      ++steps_;
      return;
    }
    out.reset();
    last_end_ = StreamEpochEnd{steps_, have};
    detail::report_stream_end(last_end_, options_.num_processes());
  }

  Stream stream_;
  StreamLoaderOptions options_;
  Count count_;
  int64_t steps_ = 0;
  StreamEpochEnd last_end_;
};

namespace detail {
template <typename T>
struct IsStreamLoader : std::false_type {};
template <typename Stream>
struct IsStreamLoader<StreamLoader<Stream>> : std::true_type {};
}  // namespace detail

}  // namespace ampkit::data
