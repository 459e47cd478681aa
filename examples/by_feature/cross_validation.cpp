// Twin of accelerate's examples/by_feature/cross_validation.py: k-fold
// cross validation (stratified, as sklearn's StratifiedKFold without
// shuffling), each fold trained and evaluated, and the folds' test logits
// averaged into one prediction.
#include "by_feature/common.h"

namespace by_feature::cross_validation {

struct Args : by_feature::Args {
  int64_t num_folds = 3;
};

// sklearn's StratifiedKFold(n_splits).split without shuffling: the labels
// sorted and dealt round-robin give each fold's count per class, and each
// class's samples, in order, fill the folds in turn. Returns each sample's
// test fold.
std::vector<int64_t> stratified_folds(const torch::Tensor& labels, int64_t k) {
  const auto y = labels.to(torch::kLong).contiguous();
  const int64_t n = y.size(0);
  const int64_t classes = y.max().item<int64_t>() + 1;
  const auto sorted = std::get<0>(y.sort()).contiguous();
  const auto* sp = sorted.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> allocation(
      k, std::vector<int64_t>(classes, 0));
  for (int64_t i = 0; i < n; ++i) {
    ++allocation[i % k][sp[i]];
  }
  std::vector<int64_t> fold(n);
  std::vector<int64_t> next_fold(classes, 0), used(classes, 0);
  const auto* yp = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = yp[i];
    while (used[c] == allocation[next_fold[c]][c]) {
      ++next_fold[c];
      used[c] = 0;
    }
    fold[i] = next_fold[c];
    ++used[c];
  }
  return fold;
}

ampkit::data::FashionMnist select(
    const ampkit::data::FashionMnist& split, const std::vector<int64_t>& idx) {
  const auto index = torch::tensor(idx, torch::kLong);
  return {
      split.images.index_select(0, index), split.labels.index_select(0, index)};
}

// The train, validation and test loaders of one fold.
auto get_fold_dataloaders(
    ampkit::Accelerator& accelerator,
    const Splits& datasets,
    const std::vector<int64_t>& train_idxs,
    const std::vector<int64_t>& valid_idxs,
    int64_t batch_size = 16) {
  return std::make_tuple(
      prepare_loader(
          accelerator, select(datasets.train, train_idxs), batch_size, true),
      prepare_loader(
          accelerator,
          select(datasets.train, valid_idxs),
          kEvalBatchSize,
          false),
      prepare_loader(accelerator, datasets.test, kEvalBatchSize, false));
}

void training_function(Config config, const Args& args) {
  config = testing(config);
  // New Code #
  // We need to load the dataset and create the folds
  std::vector<torch::Tensor> test_predictions;
  const Splits datasets = load_splits();
  const auto folds = stratified_folds(datasets.train.labels, args.num_folds);

  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  Metric metric;
  // If the batch size is too big we use gradient accumulation
  const auto [batch_size, gradient_accumulation_steps] =
      split_batch(config.batch_size);
  ampkit::set_seed(config.seed);

  // New Code #
  // Create our folds:
  std::vector<torch::Tensor> test_references;
  // Iterate over them
  for (int64_t i = 0; i < args.num_folds; ++i) {
    std::vector<int64_t> train_idxs, valid_idxs;
    for (int64_t s = 0; s < static_cast<int64_t>(folds.size()); ++s) {
      (folds[s] == i ? valid_idxs : train_idxs).push_back(s);
    }
    auto [train_dataloader, eval_dataloader, test_dataloader] =
        get_fold_dataloaders(
            accelerator, datasets, train_idxs, valid_idxs, batch_size);
    Net net;
    torch::optim::AdamW adamw(
        net->parameters(), torch::optim::AdamWOptions(lr));
    ampkit::optim::LinearWithWarmup linear(
        adamw,
        100,
        (static_cast<int64_t>(train_idxs.size()) + batch_size - 1) /
            batch_size * num_epochs / gradient_accumulation_steps);
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
      }
      const auto eval_metric =
          evaluate(accelerator, model, eval_dataloader, metric);
      accelerator.print(
          "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
    }

    // New Code #
    // We also run predictions on the test set at the very end
    std::vector<torch::Tensor> fold_predictions;
    for (auto& batch : test_dataloader) {
      torch::Tensor logits;
      {
        torch::NoGradGuard no_grad;
        logits = model(batch.data);
      }
      auto [predictions, references] =
          accelerator.gather_for_metrics(std::make_tuple(logits, batch.target));
      fold_predictions.push_back(predictions.cpu());
      if (i == 0) {
        // We need all of the test predictions
        test_references.push_back(references.cpu());
      }
    }
    // Use accelerator.print to print only on the main process.
    test_predictions.push_back(torch::cat(fold_predictions, 0));
    // We now need to release all our memory and get rid of the current
    // model, optimizer, etc
    accelerator.free_memory();
  }
  // New Code #
  // Finally we check the accuracy of our folded results:
  const auto references = torch::cat(test_references, 0);
  const auto preds = torch::stack(test_predictions, 0)
                         .sum(0)
                         .div(static_cast<double>(args.num_folds))
                         .argmax(-1);
  const auto test_metric = Metric::compute(preds, references);
  accelerator.print("Average test metrics from all folds:", repr(test_metric));
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  add_common_flags(app, args);
  // New Code #
  app.add_option(
         "--num_folds",
         args.num_folds,
         "The number of splits to perform across the dataset")
      ->check(CLI::Range(int64_t(2), int64_t(100)));
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::cross_validation
