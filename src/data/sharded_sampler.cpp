// ShardedSampler: the epoch order from seed + epoch, its padding or cut, and
// this process's slice of each global batch (letters as in the header).
#include "ampkit/data/sharded_sampler.h"

#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <utility>

#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit::data {
namespace {

// The global batch and this process's part of it: {W*B, B}, or {B, B/W}
// with split_batches.
std::pair<size_t, size_t> batch_sizes(
    const ShardedSamplerOptions& options, size_t batch_size) {
  const auto w = static_cast<size_t>(options.num_processes());
  if (batch_size == 0) {
    throw InvalidArgument(
        component::kShardedSampler,
        "the batch size must be at least 1, got 0. Give the data loader a "
        "batch_size of 1 or more.");
  }
  if (!options.split_batches()) {
    return {batch_size * w, batch_size};
  }
  if (batch_size % w != 0) {
    throw InvalidArgument(
        component::kShardedSampler,
        "split_batches needs the batch size divisible by num_processes, got "
        "batch size " +
            std::to_string(batch_size) + " and num_processes " +
            std::to_string(w) + ". Use a batch size that is a multiple of " +
            std::to_string(w) +
            ", or split_batches(false) to give each process batches of " +
            std::to_string(batch_size) + ".");
  }
  return {batch_size, batch_size / w};
}

// even_batches pads the epoch so that the processes get equally many
// batches; one process has no one to match, and keeps its short last
// batch, as accelerate's loader does with one process (it shards
// nothing).
bool pads(const ShardedSamplerOptions& options) {
  return options.even_batches() && options.num_processes() > 1;
}

size_t count_batches(
    size_t n, const ShardedSamplerOptions& options, size_t batch_size) {
  const auto [global, part] = batch_sizes(options, batch_size);
  const size_t full = n / global;
  const size_t rest = n % global;
  if (options.drop_last() || rest == 0) {
    return full;
  }
  if (pads(options)) {
    return full + 1;
  }
  const auto r = static_cast<size_t>(options.process_index());
  return full + (rest > r * part ? 1 : 0);
}

int64_t read_int(torch::serialize::InputArchive& archive, const char* key) {
  torch::Tensor value;
  if (!archive.try_read(key, value, /*is_buffer=*/true)) {
    throw IoError(
        component::kShardedSampler,
        std::string("the archive has no '") + key +
            "' entry, got an archive ShardedSampler::save did not write. "
            "Load the archive the sampler's save() wrote.");
  }
  return value.item<int64_t>();
}

void write_int(
    torch::serialize::OutputArchive& archive, const char* key, int64_t value) {
  archive.write(key, torch::tensor(value, torch::kLong), /*is_buffer=*/true);
}

// A saved value that must equal the running sampler's.
void check_same(const char* what, int64_t saved, int64_t now) {
  if (saved != now) {
    throw InvalidArgument(
        component::kShardedSampler,
        std::string("the saved sampler's ") + what +
            " differs from this one's, got " + std::to_string(saved) +
            " saved and " + std::to_string(now) + " now. Resume with the " +
            what + " the checkpoint was saved with.");
  }
}

}  // namespace

struct ShardedSampler::State {
  size_t n = 0;
  ShardedSamplerOptions options;
  int64_t epoch = 0;
  int64_t resets = 0;
  // set_epoch() or load() chose the epoch of the next reset().
  bool epoch_chosen = false;
  // B of this epoch, 0 until its first next(); last_batch survives reset().
  size_t batch = 0;
  size_t last_batch = 0;
  // This process's batches of this epoch, and how many were yielded.
  std::vector<std::vector<size_t>> batches;
  size_t position = 0;
  // Where this epoch's batches begin in its order: 0, or for an epoch
  // resumed by load() the samples consumed before the save.
  size_t start = 0;
  // From skip_first_batches(): batches the next epoch's first next() skips.
  size_t skip = 0;
  // From load(): the sample the next epoch's batches begin at.
  size_t skip_samples = 0;

  // The global batch for B.
  size_t global(size_t batch_size) const {
    return batch_sizes(options, batch_size).first;
  }

  // This epoch's batches from sample `from` of its order on: the rest is
  // padded or cut as a whole epoch is, so that from = 0, or any multiple of
  // the global batch, gives exactly the batches a whole epoch has there.
  // A checkpoint saved by another number of processes resumes at a sample
  // that need not be such a multiple; every sample after it is still seen
  // once.
  std::vector<std::vector<size_t>> shard(size_t batch_size, size_t from) const {
    const auto [global, part] = batch_sizes(options, batch_size);
    std::vector<size_t> order(n);
    if (options.shuffle()) {
      // torch.Generator().manual_seed(seed + epoch); torch.randperm(n, g).
      auto gen = at::make_generator<at::CPUGeneratorImpl>(
          options.seed() + static_cast<uint64_t>(epoch));
      const auto perm =
          torch::randperm(static_cast<int64_t>(n), gen, torch::kLong);
      const int64_t* p = perm.data_ptr<int64_t>();
      for (size_t i = 0; i < n; ++i) {
        order[i] = static_cast<size_t>(p[i]);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        order[i] = i;
      }
    }
    std::vector<size_t> rest(order.begin() + std::min(from, n), order.end());
    const size_t m = rest.size();
    if (options.drop_last()) {
      rest.resize(m / global * global);
    } else if (pads(options) && m % global != 0) {
      // Padding repeats the epoch's order from its start.
      const size_t padded = (m / global + 1) * global;
      for (size_t i = m; i < padded; ++i) {
        rest.push_back(order[(i - m) % n]);
      }
    }
    const auto r = static_cast<size_t>(options.process_index());
    std::vector<std::vector<size_t>> out;
    for (size_t begin = 0; begin < rest.size(); begin += global) {
      const size_t lo = std::min(rest.size(), begin + r * part);
      const size_t hi = std::min(rest.size(), begin + (r + 1) * part);
      if (lo < hi) {
        out.emplace_back(rest.begin() + lo, rest.begin() + hi);
      }
    }
    return out;
  }
};

ShardedSampler::ShardedSampler(
    size_t dataset_size, ShardedSamplerOptions options)
    : state_(std::make_shared<State>()) {
  if (options.num_processes() < 1) {
    throw InvalidArgument(
        component::kShardedSampler,
        "num_processes must be at least 1, got " +
            std::to_string(options.num_processes()) +
            ". Pass the number of processes (torch's world_size), e.g. "
            "ShardedSamplerOptions().num_processes(2).");
  }
  if (options.process_index() < 0 ||
      options.process_index() >= options.num_processes()) {
    throw InvalidArgument(
        component::kShardedSampler,
        "process_index must be in [0, " +
            std::to_string(options.num_processes()) + "), got " +
            std::to_string(options.process_index()) +
            ". Pass this process's rank, from 0 to num_processes - 1.");
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
  } else {
    s.skip = 0;
    s.skip_samples = 0;
    if (s.resets > 0) {
      ++s.epoch;
    }
  }
  ++s.resets;
  s.batches.clear();
  s.batch = 0;
  s.position = 0;
  s.start = 0;
}

torch::optional<std::vector<size_t>> ShardedSampler::next(size_t batch_size) {
  auto& s = *state_;
  if (s.batch == 0) {
    s.start = std::min(s.skip_samples, s.n);
    s.batches = s.shard(batch_size, s.start);
    s.batch = batch_size;
    s.position = std::min(s.skip, s.batches.size());
    s.skip = 0;
    s.skip_samples = 0;
  } else if (batch_size != s.batch) {
    throw UsageError(
        component::kShardedSampler,
        "the batch size changed within epoch " + std::to_string(s.epoch) +
            ", got " + std::to_string(batch_size) + " after " +
            std::to_string(s.batch) +
            ". Keep one batch size per epoch; a new one may start with the "
            "next reset().");
  }
  s.last_batch = batch_size;
  if (s.position >= s.batches.size()) {
    return torch::nullopt;
  }
  return s.batches[s.position++];
}

void ShardedSampler::save(torch::serialize::OutputArchive& archive) const {
  save_position(archive, state_->position);
}

size_t ShardedSampler::pending_skip() const {
  return state_->skip;
}

void ShardedSampler::save_position(
    torch::serialize::OutputArchive& archive, size_t batches) const {
  const auto& s = *state_;
  const auto& o = s.options;
  if (batches > s.position) {
    throw InvalidArgument(
        component::kShardedSampler,
        "save_position: " + std::to_string(batches) +
            " batches consumed, but the sampler has yielded only " +
            std::to_string(s.position) + " in epoch " +
            std::to_string(s.epoch) + ".");
  }
  // The position as samples of the epoch's order, which any number of
  // processes can continue from; the epoch is finished when this process
  // (the one writing the file: process 0, or a machine's local main) has
  // had all of its batches.
  size_t samples = s.start;
  bool finished = false;
  if (s.batch > 0) {
    samples = std::min(s.n, s.start + batches * s.global(s.batch));
    finished = batches >= count_batches(s.n - s.start, o, s.batch);
  }
  write_int(archive, "epoch", s.epoch);
  // Whether `epoch` is under way (else the next reset() starts it).
  write_int(archive, "epoch_started", s.resets > 0 && !s.epoch_chosen);
  write_int(archive, "samples_consumed", static_cast<int64_t>(samples));
  write_int(archive, "epoch_finished", finished);
  write_int(archive, "batches_yielded", static_cast<int64_t>(batches));
  write_int(archive, "batch_size", static_cast<int64_t>(s.batch));
  write_int(archive, "dataset_size", static_cast<int64_t>(s.n));
  write_int(archive, "num_processes", o.num_processes());
  write_int(archive, "process_index", o.process_index());
  write_int(archive, "shuffle", o.shuffle());
  write_int(archive, "seed", static_cast<int64_t>(o.seed()));
  write_int(archive, "even_batches", o.even_batches());
  write_int(archive, "split_batches", o.split_batches());
  write_int(archive, "drop_last", o.drop_last());
}

void ShardedSampler::load(torch::serialize::InputArchive& archive) {
  auto& s = *state_;
  auto& o = s.options;
  check_same(
      "dataset size",
      read_int(archive, "dataset_size"),
      static_cast<int64_t>(s.n));
  check_same("shuffle", read_int(archive, "shuffle"), o.shuffle());
  check_same(
      "even_batches", read_int(archive, "even_batches"), o.even_batches());
  check_same(
      "split_batches", read_int(archive, "split_batches"), o.split_batches());
  check_same("drop_last", read_int(archive, "drop_last"), o.drop_last());
  // num_processes and process_index are not checked: the position is in
  // samples, which any number of processes continues from.
  const int64_t saved_processes = read_int(archive, "num_processes");
  read_int(archive, "process_index");
  const auto seed = static_cast<uint64_t>(read_int(archive, "seed"));
  int64_t epoch = read_int(archive, "epoch");
  const bool started = read_int(archive, "epoch_started") != 0;
  const auto yielded =
      static_cast<size_t>(read_int(archive, "batches_yielded"));
  const auto batch = static_cast<size_t>(read_int(archive, "batch_size"));
  size_t samples = 0;
  bool finished = false;
  torch::Tensor value;
  if (archive.try_read("samples_consumed", value, /*is_buffer=*/true)) {
    samples = static_cast<size_t>(value.item<int64_t>());
    finished = read_int(archive, "epoch_finished") != 0;
  } else if (batch > 0) {
    // Written before positions were samples: whole epochs of batches.
    auto then = o;
    then.num_processes(saved_processes).process_index(0);
    samples = std::min(s.n, yielded * batch_sizes(then, batch).first);
    finished = yielded >= count_batches(s.n, then, batch);
  }
  size_t skip_samples = 0;
  if (started && batch > 0) {
    if (finished) {
      ++epoch;
    } else {
      skip_samples = samples;
    }
  }
  o.seed(seed);
  s.epoch = epoch;
  s.epoch_chosen = true;
  s.skip = 0;
  s.skip_samples = skip_samples;
  s.batches.clear();
  s.batch = 0;
  s.position = 0;
  s.start = 0;
}

int64_t ShardedSampler::epoch() const {
  return state_->epoch;
}

void ShardedSampler::set_epoch(int64_t epoch) {
  state_->epoch = epoch;
  state_->epoch_chosen = true;
  state_->skip = 0;
  state_->skip_samples = 0;
}

void ShardedSampler::skip_first_batches(size_t n) {
  auto& s = *state_;
  if (!s.epoch_chosen) {
    // The epoch the next reset() would start, chosen so that reset() keeps
    // the skip.
    s.epoch += s.resets > 0 ? 1 : 0;
    s.epoch_chosen = true;
  }
  s.skip = n;  // counted in whatever batch size the loader asks
  s.skip_samples = 0;
}

size_t ShardedSampler::dataset_size() const {
  return state_->n;
}

size_t ShardedSampler::remainder() const {
  const auto& s = *state_;
  if (s.last_batch == 0 || s.options.drop_last() || !pads(s.options)) {
    return 0;
  }
  return (s.n - std::min(s.start, s.n)) % s.global(s.last_batch);
}

size_t ShardedSampler::batches_per_epoch(size_t batch_size) const {
  return count_batches(state_->n, state_->options, batch_size);
}

size_t ShardedSampler::batches_yielded() const {
  return state_->position;
}

const ShardedSamplerOptions& ShardedSampler::options() const {
  return state_->options;
}

}  // namespace ampkit::data
