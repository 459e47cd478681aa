// ampkit's own example in the by_feature style (accelerate's by_feature
// has no streaming one; its IterableDatasetShard does the sharding): a
// training set that is a stream read from files on disk, as a simulator's
// output, a robot's logs or sharded files are, with no length known ahead.
// FashionMnistStream reads Fashion-MNIST's training IDX .gz files with zlib
// a batch at a time and never asks how many images they hold. Every
// process reads the stream and trains on its stride of the batches;
// where the stream ends, every process stops at the same step.
#include <zlib.h>

#include <array>
#include <memory>

#include "by_feature/common.h"

namespace by_feature::streaming {

struct Args : by_feature::Args {
  int64_t gradient_accumulation_steps = 1;
  int64_t limit = 0;  // images to read (0: all); a stream knows no size
};

// Reads the images and labels files side by side. A StatefulDataset (as
// LibTorch's ChunkDataset): get_batch returns nullopt at the end, and
// reset(), which the loader calls at each epoch's start, opens the files
// again.
class FashionMnistStream
    : public torch::data::datasets::
          StatefulDataset<FashionMnistStream, torch::data::Example<>> {
 public:
  FashionMnistStream(std::string dir, int64_t limit)
      : dir_(std::move(dir)), limit_(limit) {}

  torch::optional<torch::data::Example<>> get_batch(size_t size) override {
    if (!images_) {
      reset();
    }
    int64_t n = static_cast<int64_t>(size);
    if (limit_ > 0) {
      n = std::min(n, limit_ - read_);
    }
    auto pixels = torch::empty({n, 1, 28, 28}, torch::kUInt8);
    auto labels = torch::empty({n}, torch::kUInt8);
    // Whole images and their labels only: a short read ends the stream.
    const int64_t got = std::min(
        read(images_.get(), pixels.data_ptr<uint8_t>(), n * 784, "images") /
            784,
        read(labels_.get(), labels.data_ptr<uint8_t>(), n, "labels"));
    if (got <= 0) {
      return torch::nullopt;
    }
    read_ += got;
    return torch::data::Example<>{
        pixels.narrow(0, 0, got).to(torch::kFloat) / 255.0,
        labels.narrow(0, 0, got).to(torch::kLong)};
  }

  void reset() override {
    images_ = open("train-images-idx3-ubyte.gz", 16, 2051);
    labels_ = open("train-labels-idx1-ubyte.gz", 8, 2049);
    read_ = 0;
  }
  torch::optional<size_t> size() const override {
    return torch::nullopt;
  }
  // Resuming a stream mid-way is the stream's business (this example
  // starts each epoch from the files' start).
  void save(torch::serialize::OutputArchive&) const override {}
  void load(torch::serialize::InputArchive&) override {}

 private:
  struct Close {
    void operator()(gzFile f) const {
      gzclose(f);
    }
  };
  using File = std::unique_ptr<std::remove_pointer_t<gzFile>, Close>;

  // Opens dir/name and checks its IDX header (`magic`, `header` bytes).
  File open(const std::string& name, int header, uint32_t magic) {
    const std::string path = dir_ + "/" + name;
    File f(gzopen(path.c_str(), "rb"));
    std::array<unsigned char, 16> head{};
    if (!f || gzread(f.get(), head.data(), header) != header ||
        (uint32_t(head[0]) << 24 | uint32_t(head[1]) << 16 |
         uint32_t(head[2]) << 8 | uint32_t(head[3])) != magic) {
      throw ampkit::IoError(
          "streaming",
          "cannot read the IDX file " + path +
              " (missing, or not IDX). Install Debian's dataset-fashion-mnist "
              "(apt-get install dataset-fashion-mnist).");
    }
    return f;
  }

  // Up to `bytes` bytes; fewer at the end of the file.
  static int64_t read(gzFile f, uint8_t* out, int64_t bytes, const char* what) {
    int64_t done = 0;
    while (done < bytes) {
      const int got = gzread(
          f,
          out + done,
          static_cast<unsigned>(std::min<int64_t>(bytes - done, 1 << 20)));
      if (got < 0) {
        throw ampkit::IoError(
            "streaming", std::string("reading the ") + what + " file failed");
      }
      if (got == 0) {
        break;
      }
      done += got;
    }
    return done;
  }

  std::string dir_;
  int64_t limit_;
  int64_t read_ = 0;
  File images_;
  File labels_;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  ampkit::Accelerator accelerator(options(args).gradient_accumulation_steps(
      args.gradient_accumulation_steps));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  Metric metric;
  ampkit::set_seed(config.seed);
  // The stream: no size, so no length of the loader and no scheduler
  // horizon from it. The evaluation split has a size and is sharded as
  // usual.
  const int64_t limit = args.limit > 0 ? args.limit : (mocked() ? 2045 : 0);
  auto train_dataloader = accelerator.prepare_data_loader(
      FashionMnistStream(ampkit::data::kFashionMnistDir, limit),
      torch::data::DataLoaderOptions(config.batch_size));
  auto eval_dataloader = prepare_loader(
      accelerator, load_splits().test, kEvalBatchSize, /*shuffle=*/false);
  Net net;
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(lr));
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    for (auto& batch : train_dataloader) {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(loss_of(model, batch));
      optimizer.step();
      optimizer.zero_grad();
    }
    const auto& end = train_dataloader.loader().last_end();
    accelerator.print(
        "epoch " + std::to_string(epoch) + ": " + std::to_string(end.steps) +
        " steps on each of " + std::to_string(accelerator.num_processes()) +
        " processes, " + std::to_string(end.dropped) +
        " batches at the stream's end unused");
    const auto eval_metric =
        evaluate(accelerator, model, eval_dataloader, metric);
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
  }
  accelerator.print("optimizer steps:", accelerator.optimizer_steps());
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Training on a stream read from files on disk.");
  Args args;
  add_common_flags(app, args);
  app.add_option(
         "--gradient_accumulation_steps,--gradient-accumulation-steps",
         args.gradient_accumulation_steps,
         "The number of minibatches to be ran before gradients are "
         "accumulated.")
      ->check(cli_checks::positive());
  app.add_option(
         "--limit",
         args.limit,
         "Read only the first N training images of the stream (default: all; "
         "2045 under TESTING_MOCKED_DATALOADERS)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::streaming
