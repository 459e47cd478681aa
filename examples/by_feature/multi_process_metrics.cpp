// Twin of accelerate's examples/by_feature/multi_process_metrics.py:
// evaluation across processes with gather(), dropping by hand the samples
// the sampler repeated to make the last batches even (gather_for_metrics
// does this by itself).
#include "by_feature/common.h"

namespace by_feature::multi_process_metrics {

void training_function(Config config, const Args& args) {
  config = testing(config);
  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
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
  const auto eval_dataset_len =
      static_cast<int64_t>(eval_dataloader.sampler()->dataset_size());
  const auto eval_batches = static_cast<int64_t>(eval_dataloader.size());

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
    }
    model->eval();
    int64_t samples_seen = 0;
    step = 0;
    for (auto& batch : eval_dataloader) {
      torch::Tensor logits;
      {
        torch::NoGradGuard no_grad;
        logits = model(batch.data);
      }
      auto [predictions, references] =
          accelerator.gather(std::make_tuple(logits.argmax(-1), batch.target));
      // New Code #
      // First we check if it's a distributed system
      if (accelerator.use_distributed()) {
        // Then see if we're on the last batch of our eval dataloader
        if (step == eval_batches - 1) {
          // Last batch needs to be truncated on distributed systems as it
          // contains additional samples
          predictions =
              predictions.slice(0, 0, eval_dataset_len - samples_seen);
          references = references.slice(0, 0, eval_dataset_len - samples_seen);
        } else {
          // Otherwise we add the number of samples seen
          samples_seen += references.size(0);
        }
      }
      // All of this can be avoided if you use
      // `Accelerator::gather_for_metrics` instead of `Accelerator::gather`:
      // accelerator.gather_for_metrics(std::make_tuple(predictions, ...))
      metric.add_batch(predictions, references);
      ++step;
    }
    const int64_t gathered = metric.samples();
    const auto eval_metric = metric.compute();
    // Use accelerator.print to print only on the main process.
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
    accelerator.print("gathered samples:", gathered, "of", eval_dataset_len);
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

}  // namespace by_feature::multi_process_metrics
