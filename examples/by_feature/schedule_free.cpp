// Twin of accelerate's examples/by_feature/schedule_free.py: the
// schedulefree package's AdamWScheduleFree (ampkit::optim::
// ScheduleFreeAdamW) with no LR scheduler, switched between train() and
// eval() with the model.
#include "by_feature/common.h"

namespace by_feature::schedule_free {

void training_function(Config config, const Args& args) {
  config = testing(config);
  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  Metric metric;
  // If the batch size is too big we use gradient accumulation
  const auto [batch_size, gradient_accumulation_steps] =
      split_batch(config.batch_size);
  ampkit::set_seed(config.seed);
  auto [train_dataloader, eval_dataloader] =
      get_dataloaders(accelerator, batch_size);
  Net net;
  // Instantiate optimizer with warmup steps
  ampkit::optim::ScheduleFreeAdamW schedule_free(
      net->parameters(),
      ampkit::optim::ScheduleFreeAdamWOptions(lr).warmup_steps(100));
  auto [model, optimizer] = accelerator.prepare(net, schedule_free);

  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    schedule_free.train();
    int64_t step = 0;
    for (auto& batch : train_dataloader) {
      auto loss = loss_of(model, batch);
      loss = loss / static_cast<double>(gradient_accumulation_steps);
      accelerator.backward(loss);
      if (step % gradient_accumulation_steps == 0) {
        optimizer.step();
        optimizer.zero_grad();
      }
      ++step;
    }
    model->eval();
    schedule_free.eval();
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

}  // namespace by_feature::schedule_free
