// What the by_feature twins share, standing in for what their Python
// originals import: the data (get_dataloaders over Fashion-MNIST instead of
// GLUE MRPC), the model (a small MLP instead of bert-base-cased), the metric
// (evaluate's accuracy and F1, macro-averaged over the 10 classes) and the
// flags every original declares (--mixed_precision, --cpu).
#pragma once

#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/example_support.h"

namespace by_feature {

inline constexpr int64_t kEvalBatchSize = 32;  // EVAL_BATCH_SIZE

// accelerate's TESTING_MOCKED_DATALOADERS=1: the tests run every example on
// a slice of the data, for 2 epochs.
inline bool mocked() {
  const char* v = std::getenv("TESTING_MOCKED_DATALOADERS");
  return v != nullptr && std::string(v) == "1";
}

// The dict the originals build in main().
struct Config {
  double lr = 1e-3;  // the originals' 2e-5 is bert's; this is the MLP's
  int64_t num_epochs = 3;
  uint64_t seed = 42;
  int64_t batch_size = 16;
};

inline Config testing(Config config) {
  if (mocked()) {
    config.num_epochs = 2;
  }
  return config;
}

// Fashion-MNIST's splits, the training one cut to 2048 and the test one
// to 500 (not a multiple of the evaluation batch: the last batches are
// padded, and gather_for_metrics drops the padding) under
// TESTING_MOCKED_DATALOADERS.
struct Splits {
  ampkit::data::FashionMnist train;
  ampkit::data::FashionMnist test;
};

inline Splits load_splits() {
  const std::optional<size_t> train_limit =
      mocked() ? std::optional<size_t>(2048) : std::nullopt;
  const std::optional<size_t> test_limit =
      mocked() ? std::optional<size_t>(500) : std::nullopt;
  return {
      ampkit::data::FashionMnistDataset(
          true, ampkit::data::kFashionMnistDir, train_limit)
          .data(),
      ampkit::data::FashionMnistDataset(
          false, ampkit::data::kFashionMnistDir, test_limit)
          .data()};
}

// len(train_dataloader) before prepare: batches per epoch of one process.
inline int64_t num_batches(const ampkit::data::FashionMnist& split, int64_t b) {
  return (split.images.size(0) + b - 1) / b;
}

// The training loader (shuffled from the seed each epoch) and the
// evaluation one (in order), each prepared: this process's shard.
inline auto prepare_loader(
    ampkit::Accelerator& accelerator,
    const ampkit::data::FashionMnist& split,
    int64_t batch_size,
    bool shuffle,
    uint64_t seed = 42) {
  return accelerator.prepare_data_loader(
      ampkit::data::FashionMnistBatchDataset(split),
      torch::data::DataLoaderOptions(batch_size),
      ampkit::data::ShardedSamplerOptions().shuffle(shuffle).seed(seed));
}

inline auto get_dataloaders(
    ampkit::Accelerator& accelerator, int64_t batch_size = 16) {
  const Splits splits = load_splits();
  return std::make_pair(
      prepare_loader(accelerator, splits.train, batch_size, true),
      prepare_loader(accelerator, splits.test, kEvalBatchSize, false));
}

// [B, 1, 28, 28] -> [B, 10] logits.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

// The CV examples' model (theirs: timm's resnet50d): two conv/batch-norm/
// pool stages and a classifier, [B, 1, 28, 28] -> [B, 10].
struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : features(register_module(
            "features",
            torch::nn::Sequential(
                torch::nn::Conv2d(
                    torch::nn::Conv2dOptions(1, 32, 3).padding(1)),
                torch::nn::BatchNorm2d(32),
                torch::nn::Functional(torch::relu),
                torch::nn::MaxPool2d(2),
                torch::nn::Conv2d(
                    torch::nn::Conv2dOptions(32, 64, 3).padding(1)),
                torch::nn::BatchNorm2d(64),
                torch::nn::Functional(torch::relu),
                torch::nn::MaxPool2d(2)))),
        classifier(
            register_module("classifier", torch::nn::Linear(64 * 7 * 7, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return classifier(features->forward(x).flatten(1));
  }
  torch::nn::Sequential features;
  torch::nn::Linear classifier;
};
TORCH_MODULE(Cnn);

// The CV examples' split: a seeded permutation of the training images,
// 80% to train and 20% to evaluate (theirs: of the Oxford pets files).
inline std::pair<ampkit::data::FashionMnist, ampkit::data::FashionMnist>
random_split(const ampkit::data::FashionMnist& all, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t n = all.images.size(0);
  const auto random_perm = torch::randperm(n, torch::kLong);
  const int64_t cut = static_cast<int64_t>(0.8 * static_cast<double>(n));
  auto take = [&](const torch::Tensor& idx) {
    return ampkit::data::FashionMnist{
        all.images.index_select(0, idx), all.labels.index_select(0, idx)};
  };
  return {take(random_perm.slice(0, 0, cut)), take(random_perm.slice(0, cut))};
}

// Fashion-MNIST's pixel mean and standard deviation (theirs: the
// pretrained model's default_cfg mean and std).
inline constexpr double kMean = 0.2860;
inline constexpr double kStd = 0.3530;

// evaluate.load("glue", "mrpc") for 10 classes: accuracy and macro F1 over
// the predictions and references added since the last compute().
class Metric {
 public:
  void add_batch(
      const torch::Tensor& predictions, const torch::Tensor& references) {
    predictions_.push_back(predictions.to(torch::kCPU, torch::kLong));
    references_.push_back(references.to(torch::kCPU, torch::kLong));
  }
  std::map<std::string, double> compute() {
    const auto p = torch::cat(predictions_);
    const auto r = torch::cat(references_);
    predictions_.clear();
    references_.clear();
    return compute(p, r);
  }
  static std::map<std::string, double> compute(
      const torch::Tensor& predictions, const torch::Tensor& references) {
    const auto p = predictions.to(torch::kCPU, torch::kLong);
    const auto r = references.to(torch::kCPU, torch::kLong);
    double f1_sum = 0;
    for (int64_t c = 0; c < 10; ++c) {
      const double tp = (p.eq(c) & r.eq(c)).sum().item<double>();
      const double predicted = p.eq(c).sum().item<double>();
      const double actual = r.eq(c).sum().item<double>();
      f1_sum += predicted + actual > 0 ? 2 * tp / (predicted + actual) : 0;
    }
    return {
        {"accuracy", p.eq(r).to(torch::kDouble).mean().item<double>()},
        {"f1", f1_sum / 10}};
  }
  int64_t samples() const {
    int64_t n = 0;
    for (const auto& t : references_) {
      n += t.size(0);
    }
    return n;
  }

 private:
  std::vector<torch::Tensor> predictions_;
  std::vector<torch::Tensor> references_;
};

// Python's repr of a float: the shortest digits that read back the same.
inline std::string repr(double v) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, v).ptr;
  std::string s(buffer, end);
  if (s.find_first_of(".en") == std::string::npos) {
    s += ".0";
  }
  return s;
}

// Python's repr of the metric dict: {'accuracy': 0.8125, 'f1': 0.8}.
inline std::string repr(const std::map<std::string, double>& metrics) {
  std::string out = "{";
  for (const auto& [name, value] : metrics) {
    out += (out.size() > 1 ? ", '" : "'") + name + "': " + repr(value);
  }
  return out + "}";
}

// --checkpointing_steps: "" (none), a number of steps, or "epoch".
struct CheckpointingSteps {
  bool every_epoch = false;
  std::optional<int64_t> steps;
};
inline CheckpointingSteps parse_checkpointing_steps(const std::string& s) {
  if (s.empty()) {
    return {};
  }
  if (s == "epoch") {
    return {true, std::nullopt};
  }
  if (s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18 ||
      std::stoll(s) == 0) {
    throw ampkit::InvalidArgument(
        "checkpointing",
        "Argument `checkpointing_steps` must be either a number or `epoch`. "
        "`" +
            s + "` passed.");
  }
  return {false, std::stoll(s)};
}

// Where training resumes from a folder named epoch_E or step_S (the
// originals' naming): the epoch, and the batches of it already done.
struct ResumePoint {
  int64_t starting_epoch = 0;
  std::optional<int64_t> resume_step;
};
inline ResumePoint resume_point(const std::string& folder, int64_t len_train) {
  std::filesystem::path path(folder);
  if (path.filename().empty()) {
    path = path.parent_path();  // "step_5/"
  }
  const std::string training_difference = path.filename().string();
  auto number = [&](size_t prefix) {
    const std::string digits = training_difference.substr(prefix);
    if (digits.empty() ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      throw ampkit::InvalidArgument(
          "checkpointing",
          "--resume_from_checkpoint must name an epoch_N or step_N folder "
          "this example saved, got '" +
              folder + "'.");
    }
    return std::stoll(digits);
  };
  if (training_difference.rfind("epoch_", 0) == 0) {
    return {number(6) + 1, std::nullopt};
  }
  if (training_difference.rfind("step_", 0) != 0) {
    number(training_difference.size());  // throws with the message
  }
  const int64_t step = number(5);
  return {step / len_train, step - step / len_train * len_train};
}

// --resume_from_checkpoint FOLDER: load_state, then where the loop resumes
// (nothing to do for ""). The originals' block, shared by checkpointing
// and complete_cv_example.
template <typename Loader>
ResumePoint resume_from_checkpoint(
    ampkit::Accelerator& accelerator,
    const std::string& folder,
    const Loader& train_dataloader) {
  if (folder.empty()) {
    return {};
  }
  accelerator.print("Resumed from checkpoint: " + folder);
  accelerator.load_state(folder);
  return resume_point(folder, static_cast<int64_t>(train_dataloader.size()));
}

// MAX_GPU_BATCH_SIZE: a batch size above 16 becomes batches of 16 and
// gradient accumulation, as the originals do it.
struct BatchSplit {
  int64_t batch_size;
  int64_t gradient_accumulation_steps;
};
inline BatchSplit split_batch(int64_t batch_size) {
  constexpr int64_t kMaxGpuBatchSize = 16;
  if (batch_size > kMaxGpuBatchSize) {
    return {kMaxGpuBatchSize, batch_size / kMaxGpuBatchSize};
  }
  return {batch_size, 1};
}

// --simulate_memory_limit: what LibTorch's CPU allocator throws when it
// cannot allocate, for batch sizes above `limit` (0: never), so that
// find_executable_batch_size's retries show on a machine with memory to
// spare.
inline void simulate_out_of_memory(int64_t batch_size, int64_t limit) {
  if (limit > 0 && batch_size > limit) {
    TORCH_CHECK(
        false,
        "DefaultCPUAllocator: can't allocate memory: simulated for batch "
        "size ",
        batch_size,
        " (--simulate_memory_limit ",
        limit,
        ")");
  }
}

// save_state into OUTPUT_DIR/NAME (step_N, epoch_N).
inline void save_state_as(
    ampkit::Accelerator& accelerator,
    const std::string& output_dir,
    const std::string& name) {
  accelerator.save_state((std::filesystem::path(output_dir) / name).string());
}

// The CV examples' evaluation: the share of correct predictions over every
// process, printed as theirs print it ("epoch 0: 84.38").
template <typename Model, typename Loader>
double cv_accuracy(
    ampkit::Accelerator& accelerator,
    Model& model,
    Loader& eval_dataloader,
    int64_t epoch) {
  model->eval();
  torch::Tensor accurate = torch::zeros({}, torch::kLong);
  int64_t num_elems = 0;
  for (auto& batch : eval_dataloader) {
    const auto inputs = (batch.data - kMean) / kStd;
    torch::Tensor outputs;
    {
      torch::NoGradGuard no_grad;
      outputs = model(inputs);
    }
    auto [predictions, references] = accelerator.gather_for_metrics(
        std::make_tuple(outputs.argmax(-1), batch.target));
    const auto accurate_preds = predictions.eq(references);
    num_elems += accurate_preds.size(0);
    accurate += accurate_preds.to(torch::kLong).sum().cpu();
  }
  const double eval_metric = static_cast<double>(accurate.item<int64_t>()) /
                             static_cast<double>(num_elems);
  char line[64];
  std::snprintf(
      line,
      sizeof line,
      "epoch %lld: %.2f",
      static_cast<long long>(epoch),
      100 * eval_metric);
  accelerator.print(line);
  return eval_metric;
}

// The flags every original declares.
struct Args {
  std::optional<std::string> mixed_precision;
  bool cpu = false;
};

inline void add_common_flags(CLI::App& app, Args& args) {
  app.add_option(
         examples::flags("mixed-precision"),
         args.mixed_precision,
         "Whether to use mixed precision: no, fp16 or bf16 (fp8 is "
         "refused: no LibTorch CPU or CUDA autocast takes it), or ampkit's "
         "auto (the fastest on this model, measured)")
      ->check(CLI::IsMember({"no", "fp16", "bf16", "auto"}));
  app.add_flag("--cpu", args.cpu, "If passed, will train on the CPU.");
}

// Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision).
inline ampkit::AcceleratorOptions options(const Args& args) {
  ampkit::AcceleratorOptions o;
  if (args.mixed_precision) {
    o.mixed_precision(*args.mixed_precision);
  }
  if (args.cpu) {
    o.cpu(true);
  }
  return o;
}

// Intra-op threads: ampkit launch's OMP_NUM_THREADS, else every core.
inline void set_threads() {
  examples::set_threads(0);
}

// The training step every original shares: forward, cross-entropy.
template <typename Model, typename Batch>
torch::Tensor loss_of(Model& model, const Batch& batch) {
  return torch::nn::functional::cross_entropy(model(batch.data), batch.target);
}

// The evaluation loop every original shares: argmax predictions gathered
// with gather_for_metrics into `metric`.
template <typename Model, typename Loader>
std::map<std::string, double> evaluate(
    ampkit::Accelerator& accelerator,
    Model& model,
    Loader& eval_dataloader,
    Metric& metric) {
  model->eval();
  for (auto& batch : eval_dataloader) {
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = model(batch.data);
    }
    auto [predictions, references] = accelerator.gather_for_metrics(
        std::make_tuple(logits.argmax(-1), batch.target));
    metric.add_batch(predictions, references);
  }
  return metric.compute();
}

}  // namespace by_feature
