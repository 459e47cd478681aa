// The sampler of distributed training: each process reads a disjoint shard
// of every epoch, reshuffled from seed + epoch (torch's DistributedSampler),
// cut into batches as accelerate's BatchSamplerShard does, so that the
// processes' batches of one step, gathered in rank order, are the global
// batch in order.
#pragma once

#include <torch/data/samplers/base.h>
#include <torch/arg.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ampkit::data {

struct ShardedSamplerOptions {
  TORCH_ARG(int64_t, num_processes) = 1;
  TORCH_ARG(int64_t, process_index) = 0;
  /// Shuffle each epoch with a generator seeded seed + epoch.
  TORCH_ARG(bool, shuffle) = true;
  TORCH_ARG(uint64_t, seed) = 0;
  /// Pad the epoch by repeating samples from its start, so that every
  /// process gets the same number of full batches (accelerate's default).
  TORCH_ARG(bool, even_batches) = true;
  /// The loader's batch size is the global batch; each process gets a
  /// contiguous 1/num_processes of it.
  TORCH_ARG(bool, split_batches) = false;
  /// Drop the incomplete last global batch instead of padding it.
  TORCH_ARG(bool, drop_last) = false;
};

/// Copies share their state: the one the data loader holds and one kept
/// by the Accelerator see the same epoch and position. The loader's begin()
/// calls reset(): the first is epoch 0, each later one the next epoch
/// (unless set_epoch chose one).
class ShardedSampler : public torch::data::samplers::Sampler<> {
 public:
  ShardedSampler(size_t dataset_size, ShardedSamplerOptions options = {});

  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  int64_t epoch() const;
  /// The epoch the next reset() starts.
  void set_epoch(int64_t epoch);
  size_t dataset_size() const;
  /// Real samples in the last step gathered over all processes when the
  /// epoch was padded (n % (N*B), or n % B with split_batches); 0 when that
  /// step holds only real samples. B is the batch size last asked for.
  size_t remainder() const;
  /// Batches this process yields per epoch at loader batch size B.
  size_t batches_per_epoch(size_t batch_size) const;
  size_t batches_yielded() const;
  const ShardedSamplerOptions& options() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace ampkit::data
