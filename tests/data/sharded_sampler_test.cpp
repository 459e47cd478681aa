// ShardedSampler: epoch orders against torch.randperm's, the shards of 1-3
// processes for every option, save/load, and a LibTorch data loader driving
// it (n, W, B as in the header).
#include "ampkit/data/sharded_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "ampkit/error.h"

namespace ampkit::data {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using Batches = std::vector<std::vector<size_t>>;

// Printed by tests/data/generate_sampler_golden.py with Debian's torch 1.13.1
// (its torch.__version__ reads 1.13.0a0): randperm(10) seeded 5 + epoch.
const std::vector<size_t> kGoldenSeed5Epoch0{1, 4, 9, 6, 3, 5, 0, 2, 8, 7};
const std::vector<size_t> kGoldenSeed5Epoch1{0, 7, 5, 1, 8, 3, 9, 2, 4, 6};
// randperm(25) seeded 1234567890123 + 2 (epoch 2).
const std::vector<size_t> kGoldenLargeSeedEpoch2{
    8,  22, 21, 23, 4, 12, 9, 15, 16, 24, 19, 17, 5,
    20, 13, 0,  6,  2, 11, 1, 10, 3,  14, 18, 7};

// Shuffled, as most tests here want (the default is torch's: not).
ShardedSamplerOptions shuffled() {
  return ShardedSamplerOptions().shuffle(true);
}

ShardedSamplerOptions rank(int64_t w, int64_t r) {
  return shuffled().num_processes(w).process_index(r);
}

// reset() and every batch of the epoch, as the data loader does.
Batches run_epoch(ShardedSampler& sampler, size_t batch_size) {
  sampler.reset();
  Batches out;
  while (auto batch = sampler.next(batch_size)) {
    out.push_back(*batch);
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

std::vector<size_t> iota(size_t n) {
  std::vector<size_t> out(n);
  std::iota(out.begin(), out.end(), size_t{0});
  return out;
}

// Each step's batches of ranks 0..W-1 concatenated in rank order, step
// after step: what gathering every step over the processes gives.
std::vector<size_t> gathered(const std::vector<Batches>& per_rank) {
  std::vector<size_t> out;
  for (size_t step = 0;; ++step) {
    bool any = false;
    for (const auto& batches : per_rank) {
      if (step < batches.size()) {
        any = true;
        out.insert(out.end(), batches[step].begin(), batches[step].end());
      }
    }
    if (!any) {
      return out;
    }
  }
}

void round_trip(const ShardedSampler& from, ShardedSampler& to) {
  torch::serialize::OutputArchive out;
  from.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  to.load(in);
}

TEST(ShardedSamplerTest, ShuffleMatchesTorchRandpermSeededWithSeedPlusEpoch) {
  ShardedSampler sampler(10, shuffled().seed(5));
  EXPECT_EQ(flat(run_epoch(sampler, 10)), kGoldenSeed5Epoch0);
  EXPECT_EQ(sampler.epoch(), 0);
  EXPECT_EQ(flat(run_epoch(sampler, 10)), kGoldenSeed5Epoch1);
  EXPECT_EQ(sampler.epoch(), 1);

  ShardedSampler large(25, shuffled().seed(1234567890123));
  large.set_epoch(2);
  EXPECT_EQ(flat(run_epoch(large, 5)), kGoldenLargeSeedEpoch2);
}

TEST(ShardedSamplerTest, ReshufflesEachEpochAndReproducesFromTheSeed) {
  ShardedSampler a(50, shuffled().seed(11));
  ShardedSampler b(50, shuffled().seed(11));
  ShardedSampler other_seed(50, shuffled().seed(12));
  std::vector<std::vector<size_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    const auto order = flat(run_epoch(a, 50));
    EXPECT_EQ(flat(run_epoch(b, 50)), order) << "epoch " << epoch;
    EXPECT_NE(flat(run_epoch(other_seed, 50)), order) << "epoch " << epoch;
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, iota(50)) << "not a permutation, epoch " << epoch;
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);

  ShardedSampler unshuffled(10, ShardedSamplerOptions().shuffle(false));
  EXPECT_EQ(flat(run_epoch(unshuffled, 5)), iota(10));
  EXPECT_EQ(flat(run_epoch(unshuffled, 5)), iota(10));
  // Not shuffled unless asked, as torch's DataLoader and DistributedSampler
  // (shuffle=False): a ported evaluation loader keeps its order.
  ShardedSampler by_default(10);
  EXPECT_FALSE(by_default.options().shuffle());
  EXPECT_EQ(flat(run_epoch(by_default, 5)), iota(10));
}

TEST(ShardedSamplerTest, ProcessesGetDisjointShardsThatCoverTheDatasetOnce) {
  ShardedSampler one(100, shuffled().seed(3));
  const auto order = flat(run_epoch(one, 100));
  for (int64_t w : {2, 3}) {
    std::vector<Batches> per_rank;
    for (int64_t r = 0; r < w; ++r) {
      ShardedSampler s(100, rank(w, r).seed(3));
      per_rank.push_back(run_epoch(s, 8));
      EXPECT_EQ(per_rank[r].size(), per_rank[0].size()) << "w=" << w;
      for (const auto& batch : per_rank[r]) {
        EXPECT_EQ(batch.size(), 8u) << "w=" << w << " r=" << r;
      }
    }
    // 100 real samples, then padding from the start up to a multiple of 8w.
    const auto all = gathered(per_rank);
    const size_t global = 8 * static_cast<size_t>(w);
    ASSERT_EQ(all.size(), (100 + global - 1) / global * global) << "w=" << w;
    auto expected = order;
    expected.insert(
        expected.end(), order.begin(), order.begin() + (all.size() - 100));
    EXPECT_EQ(all, expected) << "w=" << w;
    std::vector<size_t> real(all.begin(), all.begin() + 100);
    std::sort(real.begin(), real.end());
    EXPECT_EQ(real, iota(100)) << "w=" << w;
  }
}

TEST(ShardedSamplerTest, EvenBatchesPadFromTheStartAndGatherInGlobalOrder) {
  // Global batches of 6: [0..5], [6, 7, 8, 9, 0, 1].
  ShardedSampler r0(10, rank(2, 0).shuffle(false));
  ShardedSampler r1(10, rank(2, 1).shuffle(false));
  EXPECT_EQ(r0.remainder(), 0u) << "no next() yet";
  const auto b0 = run_epoch(r0, 3);
  const auto b1 = run_epoch(r1, 3);
  EXPECT_EQ(b0, (Batches{{0, 1, 2}, {6, 7, 8}}));
  EXPECT_EQ(b1, (Batches{{3, 4, 5}, {9, 0, 1}}));
  EXPECT_EQ(
      gathered({b0, b1}),
      (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}));
  EXPECT_EQ(r0.remainder(), 4u);
  EXPECT_EQ(r1.remainder(), 4u);
  EXPECT_EQ(r0.batches_per_epoch(3), 2u);
  EXPECT_EQ(r1.batches_per_epoch(3), 2u);
}

TEST(ShardedSamplerTest, EvenBatchesCycleWhenTheDatasetIsSmallerThanAStep) {
  ShardedSampler r0(3, rank(2, 0).shuffle(false));
  ShardedSampler r1(3, rank(2, 1).shuffle(false));
  EXPECT_EQ(run_epoch(r0, 4), (Batches{{0, 1, 2, 0}}));
  EXPECT_EQ(run_epoch(r1, 4), (Batches{{1, 2, 0, 1}}));
  EXPECT_EQ(r1.remainder(), 3u);
}

TEST(
    ShardedSamplerTest,
    WithoutEvenBatchesTheLastProcessesGetAShortBatchOrNone) {
  // Global batches of 9: [0..8], [9].
  auto uneven = [](int64_t r) {
    return rank(3, r).shuffle(false).even_batches(false);
  };
  ShardedSampler r0(10, uneven(0));
  ShardedSampler r1(10, uneven(1));
  ShardedSampler r2(10, uneven(2));
  EXPECT_EQ(run_epoch(r0, 3), (Batches{{0, 1, 2}, {9}}));
  EXPECT_EQ(run_epoch(r1, 3), (Batches{{3, 4, 5}}));
  EXPECT_EQ(run_epoch(r2, 3), (Batches{{6, 7, 8}}));
  EXPECT_EQ(r0.batches_per_epoch(3), 2u);
  EXPECT_EQ(r1.batches_per_epoch(3), 1u);
  EXPECT_EQ(r0.remainder(), 0u) << "the last step holds only real samples";
}

TEST(ShardedSamplerTest, DropLastDropsTheIncompleteGlobalBatch) {
  ShardedSampler r0(10, rank(2, 0).shuffle(false).drop_last(true));
  ShardedSampler r1(10, rank(2, 1).shuffle(false).drop_last(true));
  EXPECT_EQ(run_epoch(r0, 3), (Batches{{0, 1, 2}}));
  EXPECT_EQ(run_epoch(r1, 3), (Batches{{3, 4, 5}}));
  EXPECT_EQ(r1.batches_per_epoch(3), 1u);
  EXPECT_EQ(r1.remainder(), 0u);
}

TEST(ShardedSamplerTest, SplitBatchesGiveEachProcessASliceOfTheGlobalBatch) {
  // Global batches of 4 padded to 12: [0..3], [4..7], [8, 9, 0, 1].
  ShardedSampler r0(10, rank(2, 0).shuffle(false).split_batches(true));
  ShardedSampler r1(10, rank(2, 1).shuffle(false).split_batches(true));
  EXPECT_EQ(run_epoch(r0, 4), (Batches{{0, 1}, {4, 5}, {8, 9}}));
  EXPECT_EQ(run_epoch(r1, 4), (Batches{{2, 3}, {6, 7}, {0, 1}}));
  EXPECT_EQ(r1.remainder(), 2u);
  EXPECT_EQ(r1.batches_per_epoch(4), 3u);

  auto uneven = rank(2, 1).shuffle(false).split_batches(true);
  ShardedSampler cut(10, uneven.even_batches(false));
  EXPECT_EQ(run_epoch(cut, 4), (Batches{{2, 3}, {6, 7}}));
  ShardedSampler dropped(
      10, rank(2, 1).shuffle(false).split_batches(true).drop_last(true));
  EXPECT_EQ(run_epoch(dropped, 4), (Batches{{2, 3}, {6, 7}}));
}

TEST(ShardedSamplerTest, SplitBatchesRefuseABatchSizeNotDivisibleByProcesses) {
  ShardedSampler s(8, rank(2, 0).split_batches(true));
  s.reset();
  EXPECT_THAT(
      [&] { s.next(3); },
      ThrowsMessage<InvalidArgument>(HasSubstr(
          "ShardedSampler: split_batches needs the batch size divisible by "
          "num_processes, got batch size 3 and num_processes 2. Use a batch "
          "size that is a multiple of 2")));
  EXPECT_THAT(
      [&] { s.batches_per_epoch(5); },
      ThrowsMessage<InvalidArgument>(HasSubstr("got batch size 5")));
}

// Every combination of n, W, B and the options: the gathered steps are the
// epoch order, padded, cut or dropped as the options say, and
// batches_per_epoch() and remainder() agree with what next() yielded.
TEST(ShardedSamplerTest, ShardsGatherToTheEpochOrderForEveryOptionCombination) {
  for (size_t n : {0, 1, 5, 10, 24, 25}) {
    for (int64_t w : {1, 2, 3}) {
      for (size_t b : {1, 2, 3, 4, 6}) {
        for (int flags = 0; flags < 8; ++flags) {
          const bool even = flags & 1, drop = flags & 2, split = flags & 4;
          if (split && b % static_cast<size_t>(w) != 0) {
            continue;
          }
          const std::string where =
              "n=" + std::to_string(n) + " w=" + std::to_string(w) +
              " b=" + std::to_string(b) + " even=" + std::to_string(even) +
              " drop=" + std::to_string(drop) +
              " split=" + std::to_string(split);
          // One process has no one to even out with: no padding.
          const bool pads = even && w > 1;
          const size_t global = split ? b : b * static_cast<size_t>(w);
          const size_t part = global / static_cast<size_t>(w);
          std::vector<Batches> per_rank;
          for (int64_t r = 0; r < w; ++r) {
            ShardedSampler s(
                n,
                rank(w, r)
                    .shuffle(false)
                    .even_batches(even)
                    .drop_last(drop)
                    .split_batches(split));
            per_rank.push_back(run_epoch(s, b));
            EXPECT_EQ(s.batches_per_epoch(b), per_rank[r].size()) << where;
            EXPECT_EQ(s.batches_yielded(), per_rank[r].size()) << where;
            EXPECT_EQ(s.remainder(), pads && !drop ? n % global : 0) << where;
            if (pads || drop) {
              EXPECT_EQ(per_rank[r].size(), per_rank[0].size()) << where;
              for (const auto& batch : per_rank[r]) {
                EXPECT_EQ(batch.size(), part) << where;
              }
            }
          }
          std::vector<size_t> expected = iota(n);
          if (drop) {
            expected.resize(n / global * global);
          } else if (pads && n % global != 0) {
            for (size_t i = n; i < (n / global + 1) * global; ++i) {
              expected.push_back((i - n) % n);
            }
          }
          EXPECT_EQ(gathered(per_rank), expected) << where;
        }
      }
    }
  }
}

TEST(ShardedSamplerTest, CopiesShareEpochAndPosition) {
  ShardedSampler a(10, rank(2, 0).shuffle(false));
  ShardedSampler b = a;
  a.reset();
  a.next(4);
  EXPECT_EQ(b.batches_yielded(), 1u);
  EXPECT_EQ(b.remainder(), 2u);  // 10 % (2 x 4)
  a.reset();
  EXPECT_EQ(b.epoch(), 1);
  EXPECT_EQ(b.batches_yielded(), 0u);
  b.set_epoch(7);
  a.reset();
  EXPECT_EQ(a.epoch(), 7);
  ShardedSampler moved = std::move(b);
  moved.reset();
  EXPECT_EQ(a.epoch(), 8);
}

TEST(ShardedSamplerTest, SetEpochChoosesTheEpochOfTheNextResetOnly) {
  ShardedSampler s(10, shuffled().seed(5));
  s.set_epoch(1);
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_EQ(flat(run_epoch(s, 5)), kGoldenSeed5Epoch1);
  EXPECT_EQ(flat(run_epoch(s, 5)).size(), 10u);
  EXPECT_EQ(s.epoch(), 2);
  s.set_epoch(0);
  EXPECT_EQ(flat(run_epoch(s, 5)), kGoldenSeed5Epoch0);
}

TEST(ShardedSamplerTest, ResetWithANewSizeChangesTheDataset) {
  ShardedSampler s(10, rank(2, 1).shuffle(false));
  s.reset(4);
  EXPECT_EQ(s.dataset_size(), 4u);
  Batches got;
  while (auto batch = s.next(2)) {
    got.push_back(*batch);
  }
  EXPECT_EQ(got, (Batches{{2, 3}}));
  EXPECT_EQ(s.batches_per_epoch(2), 1u);
}

// Yields example i as data [i]: a batch's data is its indices, [B, 1].
struct IndexDataset
    : torch::data::datasets::Dataset<IndexDataset, torch::data::Example<>> {
  explicit IndexDataset(size_t n) : n(n) {}
  torch::data::Example<> get(size_t index) override {
    return {torch::tensor({static_cast<int64_t>(index)}), torch::tensor(0)};
  }
  torch::optional<size_t> size() const override {
    return n;
  }
  size_t n;
};

// Each pass over `loader`, its batches' indices.
template <typename Loader>
Batches pass(Loader& loader) {
  Batches out;
  for (auto& batch : loader) {
    std::vector<size_t> indices;
    for (int64_t i = 0; i < batch.data.size(0); ++i) {
      indices.push_back(
          static_cast<size_t>(batch.data[i][0].template item<int64_t>()));
    }
    out.push_back(indices);
  }
  return out;
}

TEST(ShardedSamplerTest, DrivesALibTorchDataLoaderOnEachRank) {
  std::vector<Batches> first, second;
  for (int64_t r = 0; r < 2; ++r) {
    ShardedSampler sampler(10, rank(2, r).seed(5));
    auto loader = torch::data::make_data_loader(
        IndexDataset(10).map(torch::data::transforms::Stack<>()),
        sampler,
        torch::data::DataLoaderOptions(5).workers(r));
    first.push_back(pass(*loader));
    EXPECT_EQ(sampler.epoch(), 0) << "r=" << r;
    EXPECT_EQ(sampler.batches_yielded(), 1u) << "r=" << r;
    second.push_back(pass(*loader));
    EXPECT_EQ(sampler.epoch(), 1) << "r=" << r;
  }
  // One step of 2 x 5 is the whole epoch: rank r has its half of randperm.
  EXPECT_EQ(gathered(first), kGoldenSeed5Epoch0);
  EXPECT_EQ(gathered(second), kGoldenSeed5Epoch1);
  EXPECT_EQ(first[1].size(), 1u);

  std::vector<Batches> padded;
  for (int64_t r = 0; r < 2; ++r) {
    ShardedSampler sampler(10, rank(2, r).shuffle(false));
    auto loader = torch::data::make_data_loader(
        IndexDataset(10).map(torch::data::transforms::Stack<>()),
        sampler,
        torch::data::DataLoaderOptions(3));
    padded.push_back(pass(*loader));
  }
  EXPECT_EQ(padded[0], (Batches{{0, 1, 2}, {6, 7, 8}}));
  EXPECT_EQ(padded[1], (Batches{{3, 4, 5}, {9, 0, 1}}));
}

TEST(ShardedSamplerTest, LoadResumesMidEpochAfterTheBatchesYielded) {
  ShardedSampler a(20, rank(2, 1).seed(5));
  run_epoch(a, 2);
  a.reset();
  a.next(2);
  a.next(2);
  ShardedSampler b(20, rank(2, 1).seed(99));
  round_trip(a, b);
  EXPECT_EQ(b.options().seed(), 5u) << "the seed is restored";
  b.reset();
  EXPECT_EQ(b.epoch(), 1);
  Batches rest_a, rest_b;
  while (auto batch = a.next(2)) {
    rest_a.push_back(*batch);
  }
  while (auto batch = b.next(2)) {
    rest_b.push_back(*batch);
  }
  EXPECT_EQ(rest_a.size(), 3u);
  EXPECT_EQ(rest_b, rest_a);
  EXPECT_EQ(b.batches_yielded(), 3u) << "counted from where it resumed";
  // The epoch after the resumed one is whole.
  EXPECT_EQ(run_epoch(b, 2), run_epoch(a, 2));
}

TEST(
    ShardedSamplerTest,
    LoadResumesAFinishedEpochAtTheNextAndAnUnstartedAtItself) {
  ShardedSampler finished(10, shuffled().seed(5));
  run_epoch(finished, 5);
  ShardedSampler b(10, shuffled().seed(5));
  round_trip(finished, b);
  EXPECT_EQ(flat(run_epoch(b, 5)), kGoldenSeed5Epoch1);
  EXPECT_EQ(b.epoch(), 1);

  ShardedSampler chosen(10, shuffled().seed(5));
  chosen.set_epoch(1);
  ShardedSampler c(10, shuffled().seed(5));
  round_trip(chosen, c);
  EXPECT_EQ(flat(run_epoch(c, 5)), kGoldenSeed5Epoch1);

  ShardedSampler fresh(10, shuffled().seed(5));
  ShardedSampler d(10, shuffled().seed(5));
  round_trip(fresh, d);
  EXPECT_EQ(flat(run_epoch(d, 5)), kGoldenSeed5Epoch0);
}

TEST(ShardedSamplerTest, LoadRefusesAnotherSizeOrLayout) {
  ShardedSampler saved(10, rank(2, 0));
  ShardedSampler bigger(12, rank(2, 0));
  EXPECT_THAT(
      [&] { round_trip(saved, bigger); },
      ThrowsMessage<InvalidArgument>(HasSubstr(
          "ShardedSampler: the saved sampler's dataset size differs from "
          "this one's, got 10 saved and 12 now. Resume with the dataset "
          "size")));
  ShardedSampler split(10, rank(2, 0).split_batches(true));
  EXPECT_THAT(
      [&] { round_trip(saved, split); },
      ThrowsMessage<InvalidArgument>(HasSubstr("split_batches differs")));
  ShardedSampler other_rank(10, rank(2, 1));
  EXPECT_NO_THROW(round_trip(saved, other_rank));

  torch::serialize::OutputArchive out;
  out.write("something", torch::tensor(1));
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  EXPECT_THAT(
      [&] { other_rank.load(in); },
      ThrowsMessage<IoError>(HasSubstr("the archive has no 'dataset_size'")));
}

// Saved by W processes part-way through an epoch, resumed by W' processes
// (or with another batch size): the samples the saved run had, followed by
// what the resumed processes gather, are the epoch's order, each sample
// once, then only padding.
void expect_resume_sees_each_sample_once(
    size_t n,
    int64_t saved_w,
    size_t saved_b,
    size_t saved_steps,
    int64_t resumed_w,
    size_t resumed_b,
    bool even_batches) {
  SCOPED_TRACE(
      "n " + std::to_string(n) + ", " + std::to_string(saved_w) + "x" +
      std::to_string(saved_b) + " for " + std::to_string(saved_steps) +
      " steps, resumed " + std::to_string(resumed_w) + "x" +
      std::to_string(resumed_b));
  auto options = [&](int64_t w, int64_t r) {
    return rank(w, r).seed(7).even_batches(even_batches);
  };
  ShardedSampler whole(n, options(1, 0));
  const std::vector<size_t> order = flat(run_epoch(whole, n));

  std::vector<Batches> before(static_cast<size_t>(saved_w));
  std::vector<ShardedSampler> saving;
  for (int64_t r = 0; r < saved_w; ++r) {
    saving.emplace_back(n, options(saved_w, r));
    saving.back().reset();
    for (size_t step = 0; step < saved_steps; ++step) {
      before[static_cast<size_t>(r)].push_back(*saving.back().next(saved_b));
    }
  }
  std::vector<Batches> after;
  for (int64_t r = 0; r < resumed_w; ++r) {
    ShardedSampler resumed(n, options(resumed_w, r));
    round_trip(saving[0], resumed);  // every rank loads process 0's file
    after.push_back(run_epoch(resumed, resumed_b));
    EXPECT_EQ(resumed.epoch(), 0);
  }
  std::vector<size_t> seen = gathered(before);
  const std::vector<size_t> rest = gathered(after);
  seen.insert(seen.end(), rest.begin(), rest.end());
  ASSERT_GE(seen.size(), n);
  EXPECT_EQ(std::vector<size_t>(seen.begin(), seen.begin() + n), order);
  // What follows the epoch's n samples is padding: repeats from its start,
  // less than one global batch of the resumed run.
  const size_t global = resumed_b * static_cast<size_t>(resumed_w);
  EXPECT_LT(seen.size() - n, global);
  for (size_t i = n; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i], order[i - n]);
  }
}

TEST(ShardedSamplerTest, ResumesOnAnotherNumberOfProcessesAtTheSample) {
  for (const bool even : {true, false}) {
    // 2 processes x 4 for 3 steps (24 samples), resumed by 1 and 3.
    expect_resume_sees_each_sample_once(96, 2, 4, 3, 1, 4, even);
    expect_resume_sees_each_sample_once(96, 2, 4, 3, 3, 4, even);
    // A dataset that pads, and a resumed global batch that does not
    // divide what was consumed.
    expect_resume_sees_each_sample_once(50, 2, 3, 5, 3, 4, even);
    expect_resume_sees_each_sample_once(50, 3, 2, 4, 2, 3, even);
    // Another batch size on the same processes.
    expect_resume_sees_each_sample_once(50, 2, 4, 2, 2, 5, even);
  }
}

TEST(ShardedSamplerTest, AnEpochFinishedByOneCountIsFinishedForAnother) {
  ShardedSampler a(10, rank(2, 0).seed(5));
  ShardedSampler b(10, rank(2, 1).seed(5));
  run_epoch(a, 3);  // 2 padded batches of 3 each, the epoch done
  run_epoch(b, 3);
  ShardedSampler three(10, rank(3, 0).seed(5));
  round_trip(a, three);
  three.reset();
  EXPECT_EQ(three.epoch(), 1);
}

TEST(ShardedSamplerTest, BadOptionsAreErrors) {
  EXPECT_THAT(
      [] { ShardedSampler(10, ShardedSamplerOptions().num_processes(0)); },
      ThrowsMessage<InvalidArgument>(HasSubstr(
          "ShardedSampler: num_processes must be at least 1, got 0. Pass")));
  EXPECT_THAT(
      [] { ShardedSampler(10, rank(2, 2)); },
      ThrowsMessage<InvalidArgument>(HasSubstr(
          "ShardedSampler: process_index must be in [0, 2), got 2. Pass")));
  EXPECT_THAT(
      [] { ShardedSampler(10, rank(2, -1)); },
      ThrowsMessage<InvalidArgument>(HasSubstr("got -1")));
  ShardedSampler s(10);
  s.reset();
  EXPECT_THAT(
      [&] { s.next(0); },
      ThrowsMessage<InvalidArgument>(HasSubstr(
          "ShardedSampler: the batch size must be at least 1, got 0")));
  EXPECT_THAT(
      [&] { s.batches_per_epoch(0); },
      ThrowsMessage<InvalidArgument>(HasSubstr("at least 1, got 0")));
  s.next(4);
  EXPECT_THAT(
      [&] { s.next(5); },
      ThrowsMessage<UsageError>(HasSubstr(
          "ShardedSampler: the batch size changed within epoch 0, got 5 "
          "after 4. Keep one batch size per epoch")));
}

}  // namespace
}  // namespace ampkit::data

namespace ampkit::data {
namespace {

// accelerate's skip_first_batches: the next epoch starts at batch n, once;
// after load() it replaces the resumed position instead of adding to it.
TEST(ShardedSamplerTest, SkipFirstBatchesStartsTheNextEpochAtBatchN) {
  ShardedSampler reference(20, shuffled().seed(3));
  const Batches epoch0 = run_epoch(reference, 4);
  const Batches epoch1 = run_epoch(reference, 4);

  ShardedSampler fresh(20, shuffled().seed(3));
  fresh.skip_first_batches(2);
  EXPECT_EQ(run_epoch(fresh, 4), Batches(epoch0.begin() + 2, epoch0.end()));
  EXPECT_EQ(run_epoch(fresh, 4), epoch1) << "the skip applies once";

  ShardedSampler later(20, shuffled().seed(3));
  run_epoch(later, 4);
  later.skip_first_batches(3);
  EXPECT_EQ(later.batches_per_epoch(4), 5u);
  EXPECT_EQ(run_epoch(later, 4), Batches(epoch1.begin() + 3, epoch1.end()));

  // Saved after 2 batches of epoch 0; load() resumes there, and skipping 2
  // more after it (a ported script's skip_first_batches) changes nothing.
  ShardedSampler saver(20, shuffled().seed(3));
  saver.reset();
  saver.next(4);
  saver.next(4);
  ShardedSampler resumed(20, shuffled().seed(3));
  round_trip(saver, resumed);
  resumed.skip_first_batches(2);
  EXPECT_EQ(run_epoch(resumed, 4), Batches(epoch0.begin() + 2, epoch0.end()));

  ShardedSampler beyond(20, shuffled().seed(3));
  beyond.skip_first_batches(9);
  EXPECT_TRUE(run_epoch(beyond, 4).empty());
}

}  // namespace
}  // namespace ampkit::data
