// The sampler of distributed training: each process reads a disjoint shard
// of every epoch, reshuffled from seed + epoch (torch's DistributedSampler)
// and cut into batches as accelerate's BatchSamplerShard does.
#pragma once

#include <torch/arg.h>
#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ampkit::data {

// Letters in the comments of this file and its .cpp: n the dataset size,
// W = num_processes, r = process_index, B the batch size next() is asked
// for (the loader's batch_size).
struct ShardedSamplerOptions {
  /// Processes that share the dataset (W, torch's world_size); >= 1;
  /// default 1.
  TORCH_ARG(int64_t, num_processes) = 1;
  /// This process (r, torch's rank); in [0, num_processes); default 0.
  TORCH_ARG(int64_t, process_index) = 0;
  /// Shuffle each epoch with torch::randperm seeded seed + epoch, as
  /// torch.utils.data.DistributedSampler; false keeps 0..n-1; default
  /// false, as torch's DataLoader (shuffle=False), whose setting
  /// accelerate's prepare keeps: a training loader says shuffle(true).
  TORCH_ARG(bool, shuffle) = false;
  /// Base of the per-epoch shuffle seed; the same on every process;
  /// default 0.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Pad the epoch by repeating samples from its start (cycling when n is
  /// smaller than a global batch) so every process gets the same number of
  /// full batches; false cuts the last global batch as it falls; default
  /// true (accelerate's default). Ignored with drop_last, and with one
  /// process, whose last batch stays short (as accelerate's loader).
  TORCH_ARG(bool, even_batches) = true;
  /// The loader's batch size is the global batch, each process gets a
  /// contiguous B/W of it (B must be a multiple of W); false gives each
  /// process batches of B, a global batch of W*B; default false.
  TORCH_ARG(bool, split_batches) = false;
  /// Drop the incomplete last global batch instead of padding it; default
  /// false.
  TORCH_ARG(bool, drop_last) = false;
};

/// Gives process r its batches of each epoch. The epoch order (randperm or
/// 0..n-1) is padded or cut as the options say and cut into global batches
/// of W*B (split_batches: B); process r takes positions [r*B, (r+1)*B) of
/// each (split_batches: [r*B/W, (r+1)*B/W)). So the processes' batches of
/// one step, gathered in rank order, are the global batch in order, and
/// padding duplicates sit at the end of the last step. Every process
/// computes the same order, so they agree without communicating.
///
/// Copies share their state: the copy torch::data::make_data_loader holds
/// and one kept by the user or the Accelerator see the same epoch and
/// position. The loader's begin() calls reset(): the first reset() starts
/// epoch 0, each later one the next epoch, unless set_epoch() chose one
/// since the last reset().
class ShardedSampler : public torch::data::samplers::Sampler<> {
 public:
  /// Throws ampkit::InvalidArgument for num_processes < 1 or process_index
  /// outside [0, num_processes).
  ShardedSampler(size_t dataset_size, ShardedSamplerOptions options = {});

  /// Starts an epoch (see the class comment); `new_size` changes n.
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  /// This process's next batch of indices, nullopt at the end of the epoch.
  /// The first call of an epoch fixes B; another B within the epoch is an
  /// ampkit::UsageError, B = 0 an ampkit::InvalidArgument.
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// Writes the epoch, its position as samples consumed of the epoch's
  /// order (and batches yielded, B), n and the options.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// save() as if `batches` of the current epoch had been yielded: the
  /// training loop's position, behind next()'s by what the loader
  /// prefetched. `batches` beyond batches_yielded() is an InvalidArgument.
  void save_position(
      torch::serialize::OutputArchive& archive, size_t batches) const;
  /// Batches the next epoch skips (a resumed one's position), else 0.
  size_t pending_skip() const;
  /// Resumes what save() wrote: the next reset() restarts the saved epoch
  /// at the first sample not yet consumed (an epoch saved finished resumes
  /// at the following epoch). The position is in samples, so any number of
  /// processes and any batch size continue the epoch with every remaining
  /// sample once: the rest of the epoch's order is padded or cut as a
  /// whole epoch is, then shared out. Restores the seed; a different
  /// dataset size, shuffle, even_batches, split_batches or drop_last is an
  /// ampkit::InvalidArgument. Call it before iterating the loader.
  void load(torch::serialize::InputArchive& archive) override;

  /// The epoch the last reset() started (before any reset(): the one the
  /// first reset() will start).
  int64_t epoch() const;
  /// The epoch the next reset() starts.
  void set_epoch(int64_t epoch);
  /// accelerate's skip_first_batches: the next epoch starts at batch `n`
  /// (an epoch resumed by load() keeps its epoch, and `n` replaces the
  /// position load() set, so a ported script that skips its resume step
  /// after load_state skips it once; resumed with another number of
  /// processes, such a script's `n` counts the old batches, so let load()
  /// alone place it). n beyond the epoch yields nothing.
  void skip_first_batches(size_t n);
  size_t dataset_size() const;
  /// Real samples in the last step's batches gathered over all processes:
  /// m % (W*B) (split_batches: m % B), m the epoch's samples (n, or what
  /// a resumed epoch had left), for dropping the padding from
  /// gathered results. 0 when the last gathered step holds only real
  /// samples, with drop_last or without even_batches. B is the batch size
  /// of the last next() call; before any next() call, 0.
  size_t remainder() const;
  /// Batches this process yields per epoch for loader batch size B.
  size_t batches_per_epoch(size_t batch_size) const;
  /// Batches next() has yielded in the current epoch (a resumed epoch
  /// counts from where it resumed). With loader workers
  /// this runs ahead of the training loop by the loader's prefetched jobs.
  size_t batches_yielded() const;
  const ShardedSamplerOptions& options() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ampkit::data
