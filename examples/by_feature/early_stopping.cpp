// Twin of accelerate's examples/by_feature/early_stopping.py: any process
// can stop training (set_trigger), and every process sees it
// (check_trigger) and leaves the epoch's loop at the same step.
#include <limits>

#include "by_feature/common.h"

namespace by_feature::early_stopping {

// New code #
// A callback class that helps with early stopping
class EarlyStoppingCallback {
 public:
  explicit EarlyStoppingCallback(double min_delta = 0, int64_t patience = 5)
      : min_delta_(min_delta), patience_(patience) {}
  // Returns true if the training should stop
  bool check_early_stopping(double eval_loss) {
    const double delta = lowest_loss_ - eval_loss;
    if (delta >= min_delta_) {
      lowest_loss_ = eval_loss;
      counter_ = 0;
    } else {
      counter_ += 1;
      if (counter_ >= patience_) {
        return true;
      }
    }
    return false;
  }

 private:
  double min_delta_;
  int64_t patience_;
  int64_t counter_ = 0;
  double lowest_loss_ = std::numeric_limits<double>::infinity();
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  EarlyStoppingCallback callback;

  // If the batch size is too big we use gradient accumulation
  const auto [batch_size, gradient_accumulation_steps] =
      split_batch(config.batch_size);
  ampkit::set_seed(config.seed);
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

  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    int64_t step = 0;
    for (auto& batch : train_dataloader) {
      auto loss = loss_of(model, batch);
      loss = loss / static_cast<double>(gradient_accumulation_steps);
      accelerator.backward(loss);
      if (step % gradient_accumulation_steps == 0) {
        optimizer.step();
        lr_scheduler.step();
        optimizer.zero_grad();
      }
      ++step;

      // New code #
      // Check if we should stop the training on any processes
      if (callback.check_early_stopping(loss.item<double>())) {
        accelerator.set_trigger();
      }
      // If so, we break the loop
      if (accelerator.check_trigger()) {
        accelerator.print("early stop in epoch", epoch, "after", step, "steps");
        break;
      }
    }
    const auto eval_metric =
        evaluate(accelerator, model, eval_dataloader, metric);
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
  }
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  by_feature::Args args;
  add_common_flags(app, args);
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::early_stopping
