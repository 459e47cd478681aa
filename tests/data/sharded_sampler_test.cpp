#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <vector>

#include "ampkit/data/sharded_sampler.h"
#include "ampkit/error.h"

namespace {

using ampkit::data::ShardedSampler;
using ampkit::data::ShardedSamplerOptions;
using ::testing::HasSubstr;
using Batches = std::vector<std::vector<size_t>>;

// tests/data/generate_sampler_golden.py: randperm(10) seeded 5 and 6.
const std::vector<size_t> kGoldenEpoch0{1, 4, 9, 6, 3, 5, 0, 2, 8, 7};
const std::vector<size_t> kGoldenEpoch1{0, 7, 5, 1, 8, 3, 9, 2, 4, 6};

Batches epoch(ShardedSampler& sampler, size_t batch) {
  sampler.reset();
  Batches out;
  while (auto b = sampler.next(batch)) {
    out.push_back(*b);
  }
  return out;
}

std::vector<size_t> flat(const Batches& batches) {
  std::vector<size_t> out;
  for (const auto& b : batches) {
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

TEST(ShardedSamplerTest, ShuffleMatchesTorchRandpermSeededWithSeedPlusEpoch) {
  ShardedSampler sampler(10, ShardedSamplerOptions().seed(5));
  EXPECT_EQ(flat(epoch(sampler, 10)), kGoldenEpoch0);
  EXPECT_EQ(flat(epoch(sampler, 10)), kGoldenEpoch1);
  EXPECT_EQ(sampler.epoch(), 1);
  ShardedSampler again(10, ShardedSamplerOptions().seed(5));
  EXPECT_EQ(flat(epoch(again, 10)), kGoldenEpoch0) << "not reproducible";
}

TEST(ShardedSamplerTest, ProcessesGetDisjointShardsThatCoverTheDataset) {
  for (int64_t w : {2, 3}) {
    std::multiset<size_t> seen;
    size_t batches = 0;
    for (int64_t r = 0; r < w; ++r) {
      ShardedSampler s(
          100, ShardedSamplerOptions().num_processes(w).process_index(r).seed(3));
      const auto b = epoch(s, 8);
      batches = r == 0 ? b.size() : batches;
      EXPECT_EQ(b.size(), batches) << "uneven batch counts, w=" << w;
      for (const auto& batch : b) {
        EXPECT_EQ(batch.size(), 8u);
        seen.insert(batch.begin(), batch.end());
      }
    }
    std::set<size_t> unique(seen.begin(), seen.end());
    EXPECT_EQ(unique.size(), 100u) << "w=" << w;
    // Padding repeats from the start: only n % (w*8) fill-ins are extra.
    EXPECT_EQ(seen.size(), ((100 + 8 * w - 1) / (8 * w)) * 8 * w);
  }
}

TEST(ShardedSamplerTest, EvenBatchesPadFromTheStartAndGatherInGlobalOrder) {
  // n=10, 2 processes, batch 3: global batches [0..5], [6,7,8,9,0,1].
  ShardedSampler r0(10, ShardedSamplerOptions().num_processes(2).process_index(0).shuffle(false));
  ShardedSampler r1(10, ShardedSamplerOptions().num_processes(2).process_index(1).shuffle(false));
  EXPECT_EQ(epoch(r0, 3), (Batches{{0, 1, 2}, {6, 7, 8}}));
  EXPECT_EQ(epoch(r1, 3), (Batches{{3, 4, 5}, {9, 0, 1}}));
  EXPECT_EQ(r0.remainder(), 4u);
  EXPECT_EQ(r0.batches_per_epoch(3), 2u);
}

TEST(ShardedSamplerTest, WithoutEvenBatchesTheLastProcessesGetLess) {
  auto o = ShardedSamplerOptions().num_processes(2).shuffle(false).even_batches(false);
  ShardedSampler r0(10, ShardedSamplerOptions(o).process_index(0));
  ShardedSampler r1(10, ShardedSamplerOptions(o).process_index(1));
  EXPECT_EQ(epoch(r0, 3), (Batches{{0, 1, 2}, {6, 7, 8}}));
  EXPECT_EQ(epoch(r1, 3), (Batches{{3, 4, 5}, {9}}));
  EXPECT_EQ(r0.remainder(), 0u);
}

TEST(ShardedSamplerTest, DropLastDropsTheIncompleteGlobalBatch) {
  ShardedSampler r1(10, ShardedSamplerOptions().num_processes(2).process_index(1).shuffle(false).drop_last(true));
  EXPECT_EQ(epoch(r1, 3), (Batches{{3, 4, 5}}));
}

TEST(ShardedSamplerTest, SplitBatchesSplitsEachGlobalBatch) {
  ShardedSampler r1(8, ShardedSamplerOptions().num_processes(2).process_index(1).shuffle(false).split_batches(true));
  EXPECT_EQ(epoch(r1, 4), (Batches{{2, 3}, {6, 7}}));
  ShardedSampler odd(8, ShardedSamplerOptions().num_processes(2).split_batches(true));
  odd.reset();
  EXPECT_THAT(
      [&] { odd.next(3); },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(HasSubstr("divisible by num_processes")));
}

TEST(ShardedSamplerTest, CopiesShareEpochAndPosition) {
  ShardedSampler a(10, ShardedSamplerOptions().shuffle(false));
  ShardedSampler b = a;
  a.reset();
  a.next(4);
  EXPECT_EQ(b.batches_yielded(), 1u);
  a.reset();
  EXPECT_EQ(b.epoch(), 1);
  b.set_epoch(7);
  a.reset();
  EXPECT_EQ(a.epoch(), 7);
}

struct Indices : torch::data::datasets::Dataset<Indices, torch::data::Example<>> {
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor({static_cast<int64_t>(i)}), torch::tensor(0)};
  }
  torch::optional<size_t> size() const override {
    return 10;
  }
};

TEST(ShardedSamplerTest, DrivesALibTorchDataLoader) {
  ShardedSampler sampler(10, ShardedSamplerOptions().num_processes(2).process_index(1).shuffle(false));
  auto loader = torch::data::make_data_loader(
      Indices().map(torch::data::transforms::Stack<>()), sampler,
      torch::data::DataLoaderOptions(3));
  std::vector<int64_t> got;
  for (auto& batch : *loader) {
    for (int64_t i = 0; i < batch.data.size(0); ++i) {
      got.push_back(batch.data[i][0].item<int64_t>());
    }
  }
  EXPECT_EQ(got, (std::vector<int64_t>{3, 4, 5, 9, 0, 1}));
  EXPECT_EQ(sampler.epoch(), 0);
}

TEST(ShardedSamplerTest, BadOptionsAreErrors) {
  EXPECT_THAT(
      [] { ShardedSampler(10, ShardedSamplerOptions().num_processes(0)); },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(HasSubstr("num_processes must be at least 1, got 0")));
  EXPECT_THAT(
      [] { ShardedSampler(10, ShardedSamplerOptions().num_processes(2).process_index(2)); },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(HasSubstr("process_index must be in [0, 2), got 2")));
  ShardedSampler s(10);
  s.reset();
  EXPECT_THAT(
      [&] { s.next(0); },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(HasSubstr("batch_size must be at least 1")));
  s.next(4);
  EXPECT_THAT(
      [&] { s.next(5); },
      ::testing::ThrowsMessage<ampkit::UsageError>(HasSubstr("batch size changed within an epoch")));
}

}  // namespace
