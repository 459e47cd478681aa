// FSDP in one process: units, training equal to the plain model's,
// activation checkpointing, freed parameters, checkpoints and refusals.
// Several processes: tests/distributed (DistTest.Fsdp*) and examples/gpt.
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/checkpoint/model_io.h"
#include "ampkit/distributed/fsdp.h"
#include "ampkit/error.h"
#include "ampkit/utils/memory.h"
#include "test_util.h"
#include "utils/optimizer_state.h"

namespace ampkit::fsdp_test {

// A residual block: a unit under FSDP.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t d, double dropout)
      : fc1(register_module("fc1", torch::nn::Linear(d, 2 * d))),
        fc2(register_module("fc2", torch::nn::Linear(2 * d, d))),
        drop(register_module("drop", torch::nn::Dropout(dropout))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return x + fc2(drop(torch::tanh(fc1(x))));
  }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Block);

// in -> two blocks -> out; `in` and `out` are the root's.
struct TowerImpl : torch::nn::Module {
  explicit TowerImpl(double dropout)
      : in(register_module("in", torch::nn::Linear(6, 8))),
        b0(register_module("b0", Block(8, dropout))),
        b1(register_module("b1", Block(8, dropout))),
        out(register_module("out", torch::nn::Linear(8, 1))),
        seen(register_buffer("seen", torch::zeros({3}))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = in(x);
    h = dist::fsdp_forward(b0, h);   // a holder
    h = dist::fsdp_forward(*b1, h);  // an Impl
    return out(h);
  }
  torch::nn::Linear in;
  Block b0;
  Block b1;
  torch::nn::Linear out;
  torch::Tensor seen;  // a buffer, as running statistics are
};
TORCH_MODULE(Tower);

Tower make_tower(uint64_t seed, double dropout = 0.0) {
  torch::manual_seed(seed);
  return Tower(dropout);
}

AcceleratorOptions quiet() {
  return AcceleratorOptions().quiet(true);
}

// Sets an environment variable for a scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
    }
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

void expect_close_to(
    const std::vector<torch::Tensor>& want,
    const std::vector<torch::Tensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], want[i], 0, 1e-6))
        << "parameter " << i << " differs by "
        << (got[i] - want[i]).abs().max().item<double>();
  }
}

dist::FsdpOptions blocks(dist::ShardingStrategy s) {
  return dist::FsdpOptions().strategy(s).wrap_types({"Block"});
}

std::vector<torch::Tensor> weights(Tower& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t->parameters()) {
    out.push_back(p.detach().clone());
  }
  return out;
}

// AdamW with weight decay on matrices only (two groups, as GPT trains),
// gradient accumulation 2 and clipping: the same weights as without FSDP.
std::vector<torch::Tensor> train(std::optional<dist::FsdpOptions> fsdp) {
  auto options = quiet().gradient_accumulation_steps(2);
  if (fsdp) {
    options.fsdp(*fsdp);
  }
  Accelerator accelerator(options);
  Tower net = make_tower(7);
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : net->parameters()) {
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      decay,
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  groups.emplace_back(
      no_decay,
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).weight_decay(0.0)));
  torch::optim::AdamW adamw(std::move(groups));
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  for (int step = 0; step < 20; ++step) {
    torch::manual_seed(100 + step);
    auto x = torch::randn({8, 6});
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(x).square().mean());
    if (accelerator.sync_gradients()) {
      accelerator.clip_grad_norm_(net->parameters(), 0.05);
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  const auto full = accelerator.summon_full_params();
  return weights(net);
}

TEST(FsdpTest, OneProcessTrainsLikeThePlainModel) {
  const auto plain = train(std::nullopt);
  for (auto s :
       {dist::ShardingStrategy::full_shard,
        dist::ShardingStrategy::shard_grad_op,
        dist::ShardingStrategy::no_shard,
        dist::ShardingStrategy::hybrid_shard,
        dist::ShardingStrategy::hybrid_shard_zero2}) {
    SCOPED_TRACE(dist::to_string(s));
    expect_close_to(plain, train(blocks(s)));
  }
  // One unit (no wrap policy) and units by size (the blocks: 280
  // parameters each, their Linears 144 and 136) train the same too.
  expect_close_to(plain, train(dist::FsdpOptions()));
  expect_close_to(plain, train(dist::FsdpOptions().min_num_params(200)));
}

// The recompute sees the random state of the first run: dropout masks,
// and so the gradients, are bit-identical.
TEST(FsdpTest, ActivationCheckpointingGivesBitIdenticalGradients) {
  std::vector<std::vector<torch::Tensor>> grads;
  for (bool checkpointing : {false, true}) {
    Tower net = make_tower(3, /*dropout=*/0.3);
    dist::FullyShardedModel fsdp(
        net.ptr(),
        nullptr,
        blocks(dist::ShardingStrategy::full_shard)
            .activation_checkpointing(checkpointing));
    torch::manual_seed(11);
    auto x = torch::randn({16, 6});
    fsdp.before_forward();
    auto loss = net(x).square().mean();
    loss.backward();
    fsdp.after_backward();
    std::vector<torch::Tensor> g;
    for (const auto& s : fsdp.shards()) {
      g.push_back(s.grad().clone());
    }
    g.push_back(torch::randn({4}));  // the random state after backward
    grads.push_back(g);
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << "shard " << i;
  }
}

// What activation checkpointing is for: a forward leaves only each unit's
// input and output allocated for backward, not the activations inside it.
TEST(FsdpTest, ActivationCheckpointingKeepsOnlyTheUnitsInputsForBackward) {
  track_memory(torch::kCPU);
  std::vector<int64_t> kept;
  for (bool checkpointing : {false, true}) {
    Tower net = make_tower(3);
    dist::FullyShardedModel fsdp(
        net.ptr(),
        nullptr,
        blocks(dist::ShardingStrategy::full_shard)
            .activation_checkpointing(checkpointing));
    auto x = torch::randn({4096, 6});
    fsdp.before_forward();
    const int64_t before = memory_stats(torch::kCPU).allocated;
    auto y = net(x);
    kept.push_back(memory_stats(torch::kCPU).allocated - before);
    y.sum().backward();
    fsdp.after_backward();
  }
  // Both keep each block's output (8 wide), the input layer's (8) and the
  // model's (1); without checkpointing each block keeps tanh's output (16
  // wide) too, with it the random state for the recompute (5 KB): 57 per
  // row against 25.
  EXPECT_GT(kept[0], 0);
  EXPECT_LT(kept[1] * 2, kept[0]) << kept[0] << " vs " << kept[1];
}

// Resuming on another process count: AdamW's state saved by 3 processes
// (each buffer's state in three padded parts) is joined for this process's
// shards, element for element.
TEST(FsdpTest, OptimizerStateSavedByAnotherProcessCountIsResharded) {
  Tower net = make_tower(4);
  torch::optim::AdamW adamw(net->parameters(), 0.01);
  dist::FullyShardedModel fsdp(
      net.ptr(), nullptr, blocks(dist::ShardingStrategy::full_shard));
  fsdp.take_over(adamw);
  const auto shards = adamw.param_groups()[0].params();
  ASSERT_EQ(shards.size(), 3u);  // the root, b0, b1
  constexpr int64_t kSaved = 3;
  // What each of the 3 processes saved: AdamW after one step on its part.
  std::vector<std::string> files;
  std::vector<torch::Tensor> expected;  // each buffer's whole exp_avg
  for (int64_t q = 0; q < kSaved; ++q) {
    std::vector<torch::Tensor> parts;
    for (const auto& shard : shards) {
      const int64_t part = (shard.numel() + kSaved - 1) / kSaved;
      auto p = torch::zeros({part}, torch::requires_grad());
      p.mutable_grad() = torch::randn({part});
      parts.push_back(p);
    }
    torch::optim::AdamW saved(parts, 0.01);
    saved.step();
    torch::serialize::OutputArchive archive;
    saved.save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    files.push_back(bytes.str());
    for (size_t k = 0; k < parts.size(); ++k) {
      const auto& state = static_cast<torch::optim::AdamWParamState&>(
          *saved.state().at(detail::state_key(parts[k])));
      expected.resize(parts.size());
      expected[k] = expected[k].defined()
                        ? torch::cat({expected[k], state.exp_avg()})
                        : state.exp_avg().clone();
    }
  }
  fsdp.load_resharded(adamw, kSaved, [&](int64_t q) {
    std::istringstream in(files[static_cast<size_t>(q)]);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    adamw.load(archive);
  });
  EXPECT_EQ(adamw.param_groups()[0].params().size(), 3u);
  for (size_t k = 0; k < shards.size(); ++k) {
    const auto& state = static_cast<torch::optim::AdamWParamState&>(
        *adamw.state().at(detail::state_key(shards[k])));
    EXPECT_EQ(state.step(), 1);
    EXPECT_TRUE(torch::equal(
        state.exp_avg(), expected[k].narrow(0, 0, shards[k].numel())))
        << "buffer " << k;
  }
  // Saved parts that cover less than the buffers: refused, state as before.
  adamw.state().clear();
  AMPKIT_EXPECT_THROWS_WITH(
      fsdp.load_resharded(
          adamw,
          1,
          [&](int64_t) {
            std::istringstream in(files[0]);
            torch::serialize::InputArchive archive;
            archive.load_from(in);
            adamw.load(archive);
          }),
      InvalidArgument,
      "saved by 1 processes holds");
  EXPECT_TRUE(adamw.state().empty());
  EXPECT_EQ(
      adamw.param_groups()[0].params()[0].data_ptr(), shards[0].data_ptr());
}

// SHARDED_STATE_DICT: what 3 processes saved (each its part of every
// buffer) loads into a run of 1, joined element for element; a model with
// other buffers, or parts missing, is refused with the weights unchanged.
TEST(FsdpTest, ShardedWeightsSavedByAnotherProcessCountAreJoined) {
  Tower net = make_tower(4);
  dist::FullyShardedModel fsdp(
      net.ptr(), nullptr, blocks(dist::ShardingStrategy::full_shard));
  const auto mine = fsdp.local_shards();
  ASSERT_EQ(mine.tensors.size(), 3u);  // the root, b0, b1
  EXPECT_EQ(mine.layout.at("fsdp_parts"), "1");
  constexpr int64_t kSaved = 3;
  // What 3 processes held: each buffer, perturbed, split in 3 padded parts.
  std::vector<torch::Tensor> wanted;
  std::vector<dist::FullyShardedModel::SavedShards> files(kSaved);
  for (const auto& [name, shard] : mine.tensors) {
    auto values = shard + torch::randn_like(shard);
    wanted.push_back(values);
    const int64_t part = (values.numel() + kSaved - 1) / kSaved;
    auto padded = torch::zeros({part * kSaved});
    padded.narrow(0, 0, values.numel()).copy_(values);
    for (int64_t q = 0; q < kSaved; ++q) {
      auto& file = files[static_cast<size_t>(q)];
      file.tensors.emplace_back(name, padded.narrow(0, q * part, part).clone());
      file.layout[name] = mine.layout.at(name);
      file.layout["fsdp_part"] = std::to_string(q);
      file.layout["fsdp_parts"] = std::to_string(kSaved);
    }
  }
  std::vector<torch::Tensor> before;
  for (const auto& s : fsdp.shards()) {
    before.push_back(s.detach().clone());
  }
  // A part missing: refused, nothing changed.
  auto short_of_one = files;
  short_of_one[2].layout["fsdp_part"] = "1";
  AMPKIT_EXPECT_THROWS_WITH(
      fsdp.shards_from_saved(
          kSaved,
          [&](int64_t q) { return short_of_one[static_cast<size_t>(q)]; }),
      InvalidArgument,
      "lack part 2 of 3");
  // Another model's buffer (other parameters): refused.
  auto other = files;
  for (auto& f : other) {
    f.layout[mine.tensors[1].first] = "12 something.else";
  }
  AMPKIT_EXPECT_THROWS_WITH(
      fsdp.shards_from_saved(
          kSaved, [&](int64_t q) { return other[static_cast<size_t>(q)]; }),
      InvalidArgument,
      "hold buffer '" + mine.tensors[1].first + "' as '12 something.else'");
  for (size_t k = 0; k < before.size(); ++k) {
    EXPECT_TRUE(torch::equal(fsdp.shards()[k], before[k])) << "buffer " << k;
  }
  fsdp.load_shards(fsdp.shards_from_saved(
      kSaved, [&](int64_t q) { return files[static_cast<size_t>(q)]; }));
  for (size_t k = 0; k < wanted.size(); ++k) {
    EXPECT_TRUE(torch::equal(fsdp.shards()[k], wanted[k])) << "buffer " << k;
  }
  // Saved by this layout (1 process, part 0 of 1): its own file only.
  int64_t reads = 0;
  const auto now = fsdp.local_shards();
  fsdp.load_shards(fsdp.shards_from_saved(1, [&](int64_t q) {
    ++reads;
    EXPECT_EQ(q, 0);
    return now;
  }));
  EXPECT_EQ(reads, 1);
}

// Prefetch: from the second step on, the next unit's gather is issued while
// the current one computes (two units gathered at once, the memory it
// costs), and training is the same.
TEST(FsdpTest, PrefetchGathersTheNextUnitAheadAndTrainsTheSame) {
  std::vector<int64_t> peaks;
  std::vector<std::vector<torch::Tensor>> grads;
  for (bool prefetch : {false, true}) {
    Tower net = make_tower(6);
    dist::FullyShardedModel fsdp(
        net.ptr(),
        nullptr,
        blocks(dist::ShardingStrategy::full_shard)
            .forward_prefetch(prefetch)
            .backward_prefetch(
                prefetch ? dist::BackwardPrefetch::backward_pre
                         : dist::BackwardPrefetch::none));
    torch::manual_seed(2);
    std::vector<torch::Tensor> g;
    for (int step = 0; step < 2; ++step) {
      fsdp.take_peak_gathered_bytes();
      fsdp.before_forward();
      net(torch::randn({4, 6})).square().mean().backward();
      fsdp.after_backward();
      for (const auto& s : fsdp.shards()) {
        g.push_back(s.grad().clone());
      }
    }
    peaks.push_back(fsdp.take_peak_gathered_bytes());
    grads.push_back(g);
    // Nothing stays gathered after the step but the root's, freed too.
    for (const auto& p : net->b0->parameters()) {
      EXPECT_EQ(p.numel(), 0);
    }
  }
  // The root (in 6x8, out 8x1) and one block (8x16, 16x8 and biases) at
  // most without; a second block with prefetch.
  const int64_t root = (6 * 8 + 8 + 8 + 1) * 4;
  const int64_t block = (8 * 16 + 16 + 16 * 8 + 8) * 4;
  EXPECT_EQ(peaks[0], root + block);
  EXPECT_EQ(peaks[1], root + 2 * block);
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << i;
  }
}

// FSDP's MixedPrecision: units are gathered in bf16 (half the bytes), the
// shards and their gradients stay fp32, and the full parameters summoned
// for saving are the fp32 shards' values.
TEST(FsdpTest, MixedPrecisionGathersInTheComputeDtypeAndKeepsFp32Shards) {
  Tower net = make_tower(7);
  const auto before = weights(net);
  dist::FullyShardedModel fsdp(
      net.ptr(),
      nullptr,
      blocks(dist::ShardingStrategy::full_shard)
          .param_dtype(torch::kBFloat16)
          .reduce_dtype(torch::kBFloat16));
  {
    Autocast bf16(AutocastOptions(c10::DeviceType::CPU, torch::kBFloat16));
    fsdp.take_peak_gathered_bytes();
    fsdp.before_forward();
    EXPECT_EQ(net->in->weight.scalar_type(), torch::kBFloat16);
    net(torch::randn({4, 6})).to(torch::kFloat).square().mean().backward();
    fsdp.after_backward();
  }
  const int64_t root = (6 * 8 + 8 + 8 + 1) * 2;
  const int64_t block = (8 * 16 + 16 + 16 * 8 + 8) * 2;
  EXPECT_EQ(fsdp.take_peak_gathered_bytes(), root + block);
  for (const auto& s : fsdp.shards()) {
    EXPECT_EQ(s.scalar_type(), torch::kFloat);
    ASSERT_TRUE(s.grad().defined());
    EXPECT_EQ(s.grad().scalar_type(), torch::kFloat);
    EXPECT_GT(s.grad().abs().sum().item<float>(), 0.0f);
  }
  fsdp.gather_all();
  const auto during = weights(net);
  ASSERT_EQ(during.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(during[i].scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(before[i], during[i])) << i;
  }
  fsdp.release_all(false);
  fsdp.before_forward();  // in bf16 again
  EXPECT_EQ(net->in->weight.scalar_type(), torch::kBFloat16);
  fsdp.after_forward_without_grad();
  // An optimizer with two param groups splits the buffers by group: from
  // the fp32 values, not the bf16 ones a gathered unit holds.
  torch::optim::AdamW adamw(
      {torch::optim::OptimizerParamGroup({net->in->weight}),
       torch::optim::OptimizerParamGroup({net->in->bias})},
      torch::optim::AdamWOptions(0.01));
  fsdp.take_over(adamw);
  for (const auto& s : fsdp.shards()) {
    EXPECT_EQ(s.scalar_type(), torch::kFloat);
  }
  fsdp.gather_all();
  EXPECT_TRUE(torch::equal(net->in->weight, before[0]));
  fsdp.release_all(false);
  // NO_SHARD steps the parameters themselves: no other dtype for them.
  Tower other = make_tower(7);
  AMPKIT_EXPECT_THROWS_WITH(
      dist::FullyShardedModel(
          other.ptr(),
          nullptr,
          blocks(dist::ShardingStrategy::no_shard)
              .param_dtype(torch::kBFloat16)),
      InvalidArgument,
      "param_dtype BFloat16 with NO_SHARD");
}

// FULL_SHARD: between uses a unit's parameters hold nothing; inside a
// summon_full_params scope every one holds its value.
// Whole weights by name (FULL_STATE_DICT, save_model's files) are cut into
// the shards parameter by parameter: nothing is gathered, and weights of
// another model are refused with the shards unchanged.
TEST(FsdpTest, WholeWeightsAreCutIntoShardsWithoutGathering) {
  Tower net = make_tower(11);
  dist::FullyShardedModel fsdp(
      net.ptr(), nullptr, blocks(dist::ShardingStrategy::full_shard));
  Tower source = make_tower(12);
  const auto whole = checkpoint::model_state(*source);
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& p : source->named_parameters()) {
    shapes.emplace_back(p.key(), p.value().sizes().vec());
  }
  EXPECT_EQ(fsdp.parameter_shapes(), shapes);
  std::vector<torch::Tensor> before;
  for (const auto& s : fsdp.shards()) {
    before.push_back(s.detach().clone());
  }
  auto without = whole;
  without.erase(without.begin() + 2);
  AMPKIT_EXPECT_THROWS_WITH(
      fsdp.shards_from_full(without),
      InvalidArgument,
      "have no '" + whole[2].first + "'");
  auto reshaped = whole;
  reshaped[0].second = reshaped[0].second.reshape({-1});
  AMPKIT_EXPECT_THROWS_WITH(
      fsdp.shards_from_full(reshaped),
      InvalidArgument,
      "hold '" + whole[0].first + "' in another shape");
  AMPKIT_EXPECT_THROWS_WITH(
      fsdp.load_shards({torch::zeros({3})}),
      InvalidArgument,
      "got 1 shards for 3 flat buffers");
  for (size_t k = 0; k < before.size(); ++k) {
    EXPECT_TRUE(torch::equal(fsdp.shards()[k], before[k])) << "buffer " << k;
  }
  fsdp.take_peak_gathered_bytes();
  fsdp.load_shards(fsdp.shards_from_full(whole));
  EXPECT_EQ(fsdp.take_peak_gathered_bytes(), 0);
  fsdp.gather_all();
  const auto loaded = weights(net);
  const auto wanted = weights(source);
  for (size_t i = 0; i < wanted.size(); ++i) {
    EXPECT_TRUE(torch::equal(loaded[i], wanted[i])) << "parameter " << i;
  }
  fsdp.release_all(false);
}

TEST(FsdpTest, ParametersAreFreedBetweenUses) {
  Tower net = make_tower(5);
  const auto before = weights(net);
  int64_t total = 0;
  for (const auto& p : before) {
    total += p.numel();
  }
  dist::FullyShardedModel fsdp(
      net.ptr(), nullptr, blocks(dist::ShardingStrategy::full_shard));
  EXPECT_EQ(fsdp.unit_names(), (std::vector<std::string>{"", "b0", "b1"}));
  for (const auto& p : net->parameters()) {
    EXPECT_EQ(p.numel(), 0);
  }
  int64_t held = 0;
  for (const auto& s : fsdp.shards()) {
    held += s.numel();
  }
  EXPECT_EQ(held, total);  // one process holds every shard
  EXPECT_EQ(fsdp.held_bytes(), total * 4);
  fsdp.gather_all();
  const auto during = weights(net);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(before[i], during[i]));
  }
  EXPECT_EQ(fsdp.held_bytes(), 2 * total * 4);
  fsdp.release_all(false);
  EXPECT_EQ(net->parameters()[0].numel(), 0);
  // Evaluation without gradients gathers and frees again.
  torch::NoGradGuard no_grad;
  fsdp.before_forward();
  auto y = net(torch::randn({2, 6}));
  fsdp.after_forward_without_grad();
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(fsdp.held_bytes(), total * 4);
}

class FsdpSaveTest : public testing_util::TempDirTest {};

TEST_F(FsdpSaveTest, SaveModelWritesTheWholeModelAndLoadShardsIt) {
  const std::string dir = (dir_ / "model").string();
  std::vector<torch::Tensor> saved;
  {
    Accelerator accelerator(
        quiet().fsdp(blocks(dist::ShardingStrategy::full_shard)));
    Tower net = make_tower(9);
    saved = weights(net);
    auto model = accelerator.prepare(net);
    accelerator.save_model(model, dir);
  }
  Accelerator accelerator(
      quiet().fsdp(blocks(dist::ShardingStrategy::full_shard)));
  Tower other = make_tower(10);
  auto model = accelerator.prepare(other);
  accelerator.load_model(model, dir);
  // Forward and backward use the loaded values.
  accelerator.backward(model(torch::randn({2, 6})).sum());
  const auto full = accelerator.summon_full_params();
  const auto loaded = weights(other);
  ASSERT_EQ(loaded.size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_TRUE(torch::equal(saved[i], loaded[i])) << "parameter " << i;
  }
}

// SHARDED_STATE_DICT keeps the module's buffers, and load_state reads
// every model's files before it loads any: a damaged file of the second
// model leaves the first unchanged.
TEST_F(
    FsdpSaveTest, ShardedCheckpointKeepsBuffersAndLoadsNothingFromADamagedOne) {
  const std::string dir = (dir_ / "ckpt").string();
  auto options = quiet().fsdp(
      blocks(dist::ShardingStrategy::full_shard)
          .state_dict_type(dist::StateDictType::sharded_state_dict));
  Tower first = make_tower(13);
  Tower second = make_tower(14);
  Accelerator accelerator(options);
  auto a = accelerator.prepare(first);
  auto b = accelerator.prepare(second);
  first->seen.copy_(torch::tensor({1.0f, 2.0f, 3.0f}));
  std::vector<torch::Tensor> saved;
  {
    const auto full = accelerator.summon_full_params();
    saved = weights(first);
  }
  accelerator.save_state(dir);
  ASSERT_TRUE(std::filesystem::exists(dir + "/model_1_rank0.safetensors"));
  // Another model's weights and buffer in model 0, through the full
  // parameters.
  Tower other = make_tower(15);
  const auto replacement = weights(other);
  auto overwrite = [&] {
    first->seen.fill_(7.0f);
    const auto full = accelerator.summon_full_params();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < replacement.size(); ++i) {
      first->parameters()[i].copy_(replacement[i]);
    }
  };
  auto expect_weights = [&](const std::vector<torch::Tensor>& want) {
    const auto full = accelerator.summon_full_params();
    const auto held = weights(first);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::equal(held[i], want[i])) << "parameter " << i;
    }
  };
  overwrite();
  accelerator.load_state(dir);
  EXPECT_TRUE(torch::equal(first->seen, torch::tensor({1.0f, 2.0f, 3.0f})));
  expect_weights(saved);
  // Model 1's file damaged: model 0 keeps what it holds now.
  overwrite();
  {
    std::fstream f(
        dir + "/model_1_rank0.safetensors",
        std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("XXXX", 4);
  }
  EXPECT_THROW(accelerator.load_state(dir), IoError);
  EXPECT_TRUE(torch::equal(first->seen, torch::full({3}, 7.0f)));
  expect_weights(replacement);
}

TEST(FsdpTest, WhatItCannotDoIsRefusedWithTheReason) {
  Tower net = make_tower(1);
  EXPECT_THROW(
      {
        try {
          dist::FullyShardedModel f(
              net.ptr(), nullptr, dist::FsdpOptions().wrap_types({"Layer"}));
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("Layer"), std::string::npos);
          throw;
        }
      },
      InvalidArgument);
  EXPECT_THROW(
      Accelerator(quiet().fsdp(dist::FsdpOptions()).zero_stage(2)),
      InvalidArgument);
  EXPECT_THROW(
      Accelerator(quiet()
                      .fsdp(dist::FsdpOptions())
                      .gradient_compression(Precision::bf16)),
      InvalidArgument);
  EXPECT_EQ(
      dist::parse_sharding_strategy("HYBRID_SHARD"),
      dist::ShardingStrategy::hybrid_shard);
  EXPECT_EQ(
      dist::parse_sharding_strategy("_HYBRID_SHARD_ZERO2"),
      dist::ShardingStrategy::hybrid_shard_zero2);
  EXPECT_EQ(
      dist::parse_sharding_strategy("5"),
      dist::ShardingStrategy::hybrid_shard_zero2);
  AMPKIT_EXPECT_THROWS_WITH(
      dist::parse_sharding_strategy("HYBRID_SHARD_ZERO3"),
      InvalidArgument,
      "got 'HYBRID_SHARD_ZERO3'");
  // An optimizer over tensors that are not the model's.
  Accelerator accelerator(quiet().fsdp(dist::FsdpOptions()));
  auto model = accelerator.prepare(net);
  auto stray = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD sgd(std::vector<torch::Tensor>{stray}, 0.1);
  EXPECT_THROW(accelerator.prepare(sgd), UsageError);
}

// A unit called with its own forward instead of fsdp_forward: its
// parameters hold nothing, and the error names it and the fix.
struct DirectImpl : torch::nn::Module {
  DirectImpl() : b0(register_module("b0", Block(6, 0.0))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return b0->forward(x).sum();
  }
  Block b0;
};
TORCH_MODULE(Direct);

TEST(FsdpTest, AUnitCalledWithoutFsdpForwardIsNamed) {
  Accelerator accelerator(
      quiet().fsdp(blocks(dist::ShardingStrategy::full_shard)));
  Direct net;
  auto model = accelerator.prepare(net);
  try {
    model(torch::randn({2, 6}));
    ADD_FAILURE() << "the forward did not fail";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("b0 ("), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("fsdp_forward"), std::string::npos);
  }
}

// accelerate launch's variables, and DeepSpeed's zero_stage 3.
TEST(FsdpTest, AccelerateLaunchVariablesSelectIt) {
  ScopedEnv use("ACCELERATE_USE_FSDP", "true");
  ScopedEnv strategy("FSDP_SHARDING_STRATEGY", "2");
  ScopedEnv policy("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP");
  ScopedEnv types("FSDP_TRANSFORMER_CLS_TO_WRAP", "Block");
  ScopedEnv ckpt("FSDP_ACTIVATION_CHECKPOINTING", "true");
  // accelerate's defaults for these train the same in ampkit.
  ScopedEnv ram("FSDP_CPU_RAM_EFFICIENT_LOADING", "true");
  ScopedEnv sync("FSDP_SYNC_MODULE_STATES", "true");
  ScopedEnv prefetch("FSDP_BACKWARD_PREFETCH", "BACKWARD_POST");
  ScopedEnv forward("FSDP_FORWARD_PREFETCH", "true");
  ScopedEnv state_dict("FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT");
  {
    Accelerator accelerator(quiet());
    const auto& f = accelerator.options().fsdp;
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->state_dict_type(), dist::StateDictType::sharded_state_dict);
    EXPECT_EQ(f->strategy(), dist::ShardingStrategy::shard_grad_op);
    EXPECT_EQ(f->wrap_types(), (std::vector<std::string>{"Block"}));
    EXPECT_TRUE(f->activation_checkpointing());
    EXPECT_EQ(f->backward_prefetch(), dist::BackwardPrefetch::backward_post);
    EXPECT_TRUE(f->forward_prefetch());
  }
  {
    ScopedEnv bad("FSDP_BACKWARD_PREFETCH", "SOMETIMES");
    AMPKIT_EXPECT_THROWS_WITH(
        Accelerator{quiet()}, InvalidArgument, "got 'SOMETIMES'");
  }
  {
    ScopedEnv local("FSDP_STATE_DICT_TYPE", "LOCAL_STATE_DICT");
    AMPKIT_EXPECT_THROWS_WITH(
        Accelerator{quiet()}, Unsupported, "LOCAL_STATE_DICT (deprecated");
  }
  {
    ScopedEnv offload("FSDP_OFFLOAD_PARAMS", "true");
    try {
      Accelerator accelerator(quiet());
      ADD_FAILURE() << "offloading was not refused";
    } catch (const Unsupported& e) {
      EXPECT_NE(
          std::string(e.what()).find("FSDP_OFFLOAD_PARAMS"), std::string::npos);
    }
  }
  ScopedEnv off("ACCELERATE_USE_FSDP", "false");
  Accelerator zero3(quiet().zero_stage(3));
  ASSERT_TRUE(zero3.options().fsdp.has_value());
  EXPECT_EQ(
      zero3.options().fsdp->strategy(), dist::ShardingStrategy::full_shard);
}

}  // namespace ampkit::fsdp_test
