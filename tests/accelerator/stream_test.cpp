// prepare_data_loader over a stream in one process: the pass ends where the
// stream does, on an empty batch (StreamDataset) or nullopt (a
// StatefulDataset, reset each epoch), with the last batch marked as the
// loader's end; what a stream cannot do is refused. Several processes:
// DistTest.StreamsEndAtTheSameStepOnEveryProcess.
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"
#include "test_util.h"

namespace ampkit {
namespace {

// `n` numbers 0..n-1 in batches of vectors of examples; an empty vector
// ends the stream.
class Count : public torch::data::datasets::
                  StreamDataset<Count, std::vector<torch::data::Example<>>> {
 public:
  explicit Count(int64_t n) : n_(n) {}
  std::vector<torch::data::Example<>> get_batch(size_t size) override {
    std::vector<torch::data::Example<>> batch;
    for (size_t i = 0; i < size && next_ < n_; ++i, ++next_) {
      const auto x = torch::full({1}, static_cast<float>(next_));
      batch.push_back({x, x});
    }
    return batch;
  }
  torch::optional<size_t> size() const override {
    return torch::nullopt;
  }

 private:
  int64_t n_, next_ = 0;
};

AcceleratorOptions cpu() {
  return AcceleratorOptions().cpu(true).quiet(true);
}

TEST(StreamTest, OneProcessReadsTheWholeStreamAndKnowsItsLastBatch) {
  Accelerator accelerator(cpu().gradient_accumulation_steps(4));
  auto loader = accelerator.prepare_data_loader(
      Count(10), torch::data::DataLoaderOptions(3));
  std::vector<size_t> sizes;
  std::string syncs;
  torch::nn::Linear net(1, 1);
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  for (auto& batch : loader) {
    sizes.push_back(batch.size());
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(batch[0].data).sum());
    syncs += accelerator.sync_gradients() ? "s" : ".";
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 3, 1}));
  // A window of 4 micro-steps, and the pass's last batch ends it.
  EXPECT_EQ(syncs, "...s");
  EXPECT_EQ(loader.loader().last_end().steps, 4);
  EXPECT_EQ(loader.loader().last_end().dropped, 0);
}

TEST(StreamTest, WhatAStreamCannotDoIsRefused) {
  Accelerator accelerator(cpu());
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.prepare_data_loader(
          Count(4),
          torch::data::DataLoaderOptions(2),
          data::ShardedSamplerOptions().shuffle(true)),
      UsageError,
      "got a stream with ShardedSamplerOptions shuffle");
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.prepare_data_loader(
          Count(4), torch::data::DataLoaderOptions(2).workers(2)),
      UsageError,
      "DataLoaderOptions workers(2): a stream is read on the training thread");
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.prepare_data_loader(
          Count(4), torch::data::DataLoaderOptions(0)),
      InvalidArgument,
      "batch_size must be at least 1, got 0");
  auto loader = accelerator.prepare_data_loader(
      Count(4), torch::data::DataLoaderOptions(2));
  AMPKIT_EXPECT_THROWS_WITH(
      loader.size(), UsageError, "a stream (it has no length");
}

TEST(StreamTest, SaveStateSaysThatAStreamsPositionIsNotSaved) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ampkit_stream_" + std::to_string(::getpid()));
  std::vector<std::string> said;
  auto previous =
      set_warning_handler([&](const Warning& w) { said.push_back(w.message); });
  {
    Accelerator accelerator(cpu());
    auto loader = accelerator.prepare_data_loader(
        Count(4), torch::data::DataLoaderOptions(2));
    accelerator.save_state((dir / "a").string());
    accelerator.save_state((dir / "b").string());
  }
  set_warning_handler(previous);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(
      std::count_if(
          said.begin(),
          said.end(),
          [](const std::string& m) {
            return m.find(
                       "save_state does not save where the 1 prepared "
                       "stream(s) are") != std::string::npos;
          }),
      1);
}

}  // namespace
}  // namespace ampkit
