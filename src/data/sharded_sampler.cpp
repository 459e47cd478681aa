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
  // From load(): batches the resumed epoch's first next() skips, at B =
  // skip_batch.
  size_t skip = 0;
  size_t skip_batch = 0;

  std::vector<std::vector<size_t>> shard(size_t batch_size) const {
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
    if (options.drop_last()) {
      order.resize(n / global * global);
    } else if (pads(options) && n % global != 0) {
      const size_t padded = (n / global + 1) * global;
      for (size_t i = n; i < padded; ++i) {
        order.push_back(order[(i - n) % n]);
      }
    }
    const auto r = static_cast<size_t>(options.process_index());
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
    if (s.resets > 0) {
      ++s.epoch;
    }
  }
  ++s.resets;
  s.batches.clear();
  s.batch = 0;
  s.position = 0;
}

torch::optional<std::vector<size_t>> ShardedSampler::next(size_t batch_size) {
  auto& s = *state_;
  if (s.batch == 0) {
    if (s.skip > 0 && s.skip_batch != 0 && batch_size != s.skip_batch) {
      throw UsageError(
          component::kShardedSampler,
          "the resumed epoch " + std::to_string(s.epoch) + " was saved after " +
              std::to_string(s.skip) + " batches of size " +
              std::to_string(s.skip_batch) + ", got batch size " +
              std::to_string(batch_size) +
              ". Resume with the loader's batch_size " +
              std::to_string(s.skip_batch) + ".");
    }
    s.batches = s.shard(batch_size);
    s.batch = batch_size;
    s.position = std::min(s.skip, s.batches.size());
    s.skip = 0;
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
  write_int(archive, "epoch", s.epoch);
  // Whether `epoch` is under way (else the next reset() starts it).
  write_int(archive, "epoch_started", s.resets > 0 && !s.epoch_chosen);
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
      "num_processes", read_int(archive, "num_processes"), o.num_processes());
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
  // process_index is not checked: every rank may resume from one file.
  read_int(archive, "process_index");
  const auto seed = static_cast<uint64_t>(read_int(archive, "seed"));
  int64_t epoch = read_int(archive, "epoch");
  const bool started = read_int(archive, "epoch_started") != 0;
  const auto yielded =
      static_cast<size_t>(read_int(archive, "batches_yielded"));
  const auto batch = static_cast<size_t>(read_int(archive, "batch_size"));

  size_t skip = 0;
  if (started && batch > 0) {
    if (yielded >= count_batches(s.n, o, batch)) {
      ++epoch;
    } else {
      skip = yielded;
    }
  }
  o.seed(seed);
  s.epoch = epoch;
  s.epoch_chosen = true;
  s.skip = skip;
  s.skip_batch = batch;
  s.batches.clear();
  s.batch = 0;
  s.position = 0;
}

int64_t ShardedSampler::epoch() const {
  return state_->epoch;
}

void ShardedSampler::set_epoch(int64_t epoch) {
  state_->epoch = epoch;
  state_->epoch_chosen = true;
  state_->skip = 0;
}

void ShardedSampler::skip_first_batches(size_t n) {
  auto& s = *state_;
  if (!s.epoch_chosen) {
    // The epoch the next reset() would start, chosen so that reset() keeps
    // the skip.
    s.epoch += s.resets > 0 ? 1 : 0;
    s.epoch_chosen = true;
  }
  s.skip = n;
  s.skip_batch = 0;  // counted in whatever batch size the loader asks
}

size_t ShardedSampler::dataset_size() const {
  return state_->n;
}

size_t ShardedSampler::remainder() const {
  const auto& s = *state_;
  if (s.last_batch == 0 || s.options.drop_last() || !pads(s.options)) {
    return 0;
  }
  return s.n % batch_sizes(s.options, s.last_batch).first;
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
