#include "ampkit/data/sharded_sampler.h"

#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <algorithm>

#include "ampkit/error.h"

namespace ampkit::data {
namespace {
constexpr const char* kComponent = "ShardedSampler";
}  // namespace

struct ShardedSampler::State {
  size_t n = 0;
  ShardedSamplerOptions options;
  int64_t epoch = 0;
  int64_t resets = 0;
  bool epoch_chosen = false;
  size_t batch = 0;  // 0 until the first next() of the epoch
  std::vector<std::vector<size_t>> batches;  // this process's, this epoch
  size_t position = 0;

  // The global batch and this process's part of it.
  std::pair<size_t, size_t> sizes(size_t b) const {
    const auto w = static_cast<size_t>(options.num_processes());
    if (options.split_batches()) {
      if (b % w != 0) {
        throw InvalidArgument(
            kComponent,
            "split_batches needs the batch size divisible by num_processes, "
            "got batch size " + std::to_string(b) + " and " +
                std::to_string(w) + " processes. Use a batch size that is a "
                "multiple of " + std::to_string(w) + ".");
      }
      return {b, b / w};
    }
    return {b * w, b};
  }

  std::vector<std::vector<size_t>> shard(size_t b) const {
    std::vector<size_t> order(n);
    if (options.shuffle()) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(
          options.seed() + static_cast<uint64_t>(epoch));
      auto perm = torch::randperm(static_cast<int64_t>(n), gen, torch::kLong);
      const int64_t* p = perm.data_ptr<int64_t>();
      for (size_t i = 0; i < n; ++i) {
        order[i] = static_cast<size_t>(p[i]);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        order[i] = i;
      }
    }
    const auto [global, part] = sizes(b);
    const size_t full = n / global * global;
    if (options.drop_last()) {
      order.resize(full);
    } else if (options.even_batches() && n % global != 0 && n > 0) {
      const size_t padded = full + global;
      for (size_t i = n; i < padded; ++i) {
        order.push_back(order[(i - n) % n]);
      }
    }
    const size_t r = static_cast<size_t>(options.process_index());
    std::vector<std::vector<size_t>> out;
    for (size_t start = 0; start < order.size(); start += global) {
      const size_t from = std::min(order.size(), start + r * part);
      const size_t to = std::min(order.size(), start + (r + 1) * part);
      if (from < to) {
        out.emplace_back(order.begin() + from, order.begin() + to);
      }
    }
    return out;
  }
};

ShardedSampler::ShardedSampler(size_t dataset_size, ShardedSamplerOptions options)
    : state_(std::make_shared<State>()) {
  if (options.num_processes() < 1) {
    throw InvalidArgument(
        kComponent,
        "num_processes must be at least 1, got " +
            std::to_string(options.num_processes()) + ".");
  }
  if (options.process_index() < 0 ||
      options.process_index() >= options.num_processes()) {
    throw InvalidArgument(
        kComponent,
        "process_index must be in [0, " +
            std::to_string(options.num_processes()) + "), got " +
            std::to_string(options.process_index()) + ".");
  }
  state_->n = dataset_size;
  state_->options = options;
}

void ShardedSampler::reset(torch::optional<size_t> new_size) {
  auto& s = *state_;
  if (new_size) {
    s.n = *new_size;
  }
  if (s.epoch_chosen) {
    s.epoch_chosen = false;
  } else if (s.resets > 0) {
    ++s.epoch;
  }
  ++s.resets;
  s.batches.clear();
  s.batch = 0;
  s.position = 0;
}

torch::optional<std::vector<size_t>> ShardedSampler::next(size_t batch_size) {
  auto& s = *state_;
  if (batch_size == 0) {
    throw InvalidArgument(
        kComponent, "batch_size must be at least 1, got 0.");
  }
  if (s.batch == 0) {
    s.batches = s.shard(batch_size);
    s.batch = batch_size;
  } else if (batch_size != s.batch) {
    throw UsageError(
        kComponent,
        "the batch size changed within an epoch, from " +
            std::to_string(s.batch) + " to " + std::to_string(batch_size) +
            ". Keep one batch size per epoch.");
  }
  if (s.position >= s.batches.size()) {
    return torch::nullopt;
  }
  return s.batches[s.position++];
}

void ShardedSampler::save(torch::serialize::OutputArchive& archive) const {
  const auto& s = *state_;
  archive.write("epoch", torch::tensor(s.epoch), true);
  archive.write("batches_yielded", torch::tensor(static_cast<int64_t>(s.position)), true);
  archive.write("dataset_size", torch::tensor(static_cast<int64_t>(s.n)), true);
  archive.write("num_processes", torch::tensor(s.options.num_processes()), true);
  archive.write("seed", torch::tensor(static_cast<int64_t>(s.options.seed())), true);
}

void ShardedSampler::load(torch::serialize::InputArchive& archive) {
  auto& s = *state_;
  torch::Tensor epoch, yielded, size, processes, seed;
  archive.read("epoch", epoch, true);
  archive.read("batches_yielded", yielded, true);
  archive.read("dataset_size", size, true);
  archive.read("num_processes", processes, true);
  archive.read("seed", seed, true);
  if (processes.item<int64_t>() != s.options.num_processes()) {
    throw InvalidArgument(
        kComponent,
        "the saved sampler ran on " + std::to_string(processes.item<int64_t>()) +
            " processes, this one on " +
            std::to_string(s.options.num_processes()) +
            ". Resume with the same number of processes.");
  }
  s.epoch = epoch.item<int64_t>();
  s.epoch_chosen = true;
  s.n = static_cast<size_t>(size.item<int64_t>());
  s.options.seed(static_cast<uint64_t>(seed.item<int64_t>()));
  s.position = 0;
  s.batch = 0;
}

int64_t ShardedSampler::epoch() const {
  return state_->epoch;
}

void ShardedSampler::set_epoch(int64_t epoch) {
  state_->epoch = epoch;
  state_->epoch_chosen = true;
}

size_t ShardedSampler::dataset_size() const {
  return state_->n;
}

size_t ShardedSampler::remainder() const {
  const auto& s = *state_;
  if (s.batch == 0 || s.options.drop_last() || !s.options.even_batches()) {
    return 0;
  }
  return s.n % s.sizes(s.batch).first;
}

size_t ShardedSampler::batches_per_epoch(size_t batch_size) const {
  State probe = *state_;
  probe.options.shuffle(false);
  return probe.shard(batch_size).size();
}

size_t ShardedSampler::batches_yielded() const {
  return state_->position;
}

const ShardedSamplerOptions& ShardedSampler::options() const {
  return state_->options;
}

}  // namespace ampkit::data
