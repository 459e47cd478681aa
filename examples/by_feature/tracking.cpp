// Twin of accelerate's examples/by_feature/tracking.py: log_with="all",
// init_trackers, log and end_training; with --custom_tracker, also a tracker
// of our own (accelerate's GeneralTracker) plugged in beside the built-in
// ones.
#include <filesystem>
#include <fstream>

#include "by_feature/common.h"

namespace by_feature::tracking {

struct Args : by_feature::Args {
  bool with_tracking = false;
  std::string project_dir = "logs";
  bool custom_tracker = false;
};

// A custom tracker, as accelerate's docs write one: it receives the run's
// configuration and every log call. This one appends plain text lines to
// PROJECT_DIR/tracking/custom_tracker.log.
class TextTracker : public ampkit::track::Tracker {
 public:
  explicit TextTracker(std::filesystem::path file) : file_(std::move(file)) {}
  std::string name() const override {
    return "text";
  }
  void store_init_configuration(const ampkit::track::RunConfig& c) override {
    std::filesystem::create_directories(file_.parent_path());
    out_.open(file_, std::ios::app);
    out_ << "config: " << c.size() << " values, lr " << c.at("lr") << "\n";
  }
  void log(const ampkit::track::Metrics& m, int64_t step, double) override {
    out_ << "step " << step << ":";
    for (const auto& [name, value] : m) {
      out_ << " " << name << "=" << repr(value);
    }
    out_ << "\n" << std::flush;
  }
  void finish() override {
    out_.close();
  }

 private:
  std::filesystem::path file_;
  std::ofstream out_;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  // Initialize Accelerator

  // New Code #
  // We pass in "all" to `log_with` to grab all available trackers in the
  // environment, and our own when asked
  ampkit::AcceleratorOptions o = options(args);
  if (args.with_tracking) {
    o.log_with("all").project_dir(args.project_dir);
    if (args.custom_tracker) {
      o.trackers({std::make_shared<TextTracker>(
          std::filesystem::path(args.project_dir) / "tracking" /
          "custom_tracker.log")});
    }
  }
  ampkit::Accelerator accelerator(o);
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  ampkit::set_seed(config.seed);

  // If the batch size is too big we use gradient accumulation
  const auto [batch_size, gradient_accumulation_steps] =
      split_batch(config.batch_size);
  auto [train_dataloader, eval_dataloader] =
      get_dataloaders(accelerator, batch_size);
  Metric metric;
  Net net;
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(lr));
  ampkit::optim::LinearWithWarmup linear(
      adamw,
      100,
      num_batches(load_splits().train, batch_size) * num_epochs /
          gradient_accumulation_steps);
  auto [model, optimizer, lr_scheduler] =
      accelerator.prepare(net, adamw, linear);

  // New Code #
  // We need to initialize the trackers we use. Overall configurations can
  // also be stored
  if (args.with_tracking) {
    accelerator.init_trackers(
        "tracking",
        {{"lr", repr(lr)},
         {"num_epochs", std::to_string(num_epochs)},
         {"seed", std::to_string(config.seed)},
         {"batch_size", std::to_string(config.batch_size)}});
  }

  // Now we train the model
  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    // New Code #
    // For our tracking example, we will log the total loss of each epoch
    torch::Tensor total_loss = torch::zeros({}, accelerator.device());
    int64_t step = 0;
    for (auto& batch : train_dataloader) {
      auto loss = loss_of(model, batch);
      // New Code #
      if (args.with_tracking) {
        total_loss += loss.detach().to(torch::kFloat);
      }
      loss = loss / static_cast<double>(gradient_accumulation_steps);
      accelerator.backward(loss);
      if (step % gradient_accumulation_steps == 0) {
        optimizer.step();
        lr_scheduler.step();
        optimizer.zero_grad();
      }
      ++step;
    }
    const auto eval_metric =
        evaluate(accelerator, model, eval_dataloader, metric);
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":", repr(eval_metric));

    // New Code #
    // To actually log, we call `log`; the values are logged at `step`
    if (args.with_tracking) {
      accelerator.log(
          {{"accuracy", eval_metric.at("accuracy")},
           {"f1", eval_metric.at("f1")},
           {"train_loss",
            total_loss.item<double>() /
                static_cast<double>(train_dataloader.size())},
           {"epoch", static_cast<double>(epoch)}},
          epoch);
    }
  }

  // New Code #
  // When a run is finished, you should call `end_training()` to close all
  // of the open trackers
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  add_common_flags(app, args);
  app.add_flag(
      "--with_tracking",
      args.with_tracking,
      "Whether to load in all available experiment trackers from the "
      "environment and use them for logging.");
  app.add_option(
      "--project_dir",
      args.project_dir,
      "Location on where to store experiment tracking logs` and relevent "
      "project information");
  app.add_flag(
      "--custom_tracker",
      args.custom_tracker,
      "With --with_tracking: also log through a custom tracker (a "
      "GeneralTracker of our own) into PROJECT_DIR/tracking.");
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::tracking
