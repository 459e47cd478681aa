// Twin of accelerate's examples/cv_example.py: an image classifier trained
// with the Accelerator (theirs: a pretrained resnet50d on Oxford pets with
// its backbone frozen; here a small CNN, all of it trained, on
// Fashion-MNIST).
#include "by_feature/common.h"

namespace by_feature::cv_example {

struct Args : by_feature::Args {
  std::string data_dir = ampkit::data::kFashionMnistDir;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  // Initialize accelerator
  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  const int64_t batch_size = config.batch_size;

  // Grab all the image filenames (here: the IDX training split)
  auto all = ampkit::data::FashionMnistDataset(
                 true,
                 args.data_dir,
                 mocked() ? std::optional<size_t>(2048) : std::nullopt)
                 .data();
  // Set the seed before splitting the data.
  ampkit::set_seed(config.seed);
  // Split our filenames between train and validation
  auto [train_split, eval_split] = random_split(all, config.seed);
  // Instantiate dataloaders.
  auto train_dataloader =
      prepare_loader(accelerator, train_split, batch_size, true, config.seed);
  auto eval_dataloader =
      prepare_loader(accelerator, eval_split, batch_size, false);

  // Instantiate the model (we build the model here so that the seed also
  // controls new weights initialization)
  Cnn net;
  // The pretrained model's backbone is frozen in the original; this one
  // starts from random weights, so all of it trains.
  // Instantiate optimizer
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(lr));
  // Instantiate learning rate scheduler: OneCycleLR's shape (30% rising,
  // then cosine annealing) from transformers' cosine with warmup.
  const int64_t steps = num_epochs *
                        static_cast<int64_t>(train_dataloader.size()) *
                        accelerator.num_processes();
  ampkit::optim::CosineWithWarmup one_cycle(adam, steps * 3 / 10, steps);
  // Prepare everything
  auto [model, optimizer, lr_scheduler] =
      accelerator.prepare(net, adam, one_cycle);

  // Now we train the model
  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    for (auto& batch : train_dataloader) {
      const auto inputs = (batch.data - kMean) / kStd;
      const auto outputs = model(inputs);
      const auto loss =
          torch::nn::functional::cross_entropy(outputs, batch.target);
      accelerator.backward(loss);
      optimizer.step();
      lr_scheduler.step();
      optimizer.zero_grad();
    }
    // Prints "epoch N: accuracy" on the main process.
    cv_accuracy(accelerator, model, eval_dataloader, epoch);
  }
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  app.add_option(
      "--data_dir",
      args.data_dir,
      "The data folder on disk (default: Debian's dataset-fashion-mnist).");
  add_common_flags(app, args);
  CLI11_PARSE(app, argc, argv);
  set_threads();
  Config config;
  config.lr = 3e-3;  // theirs 3e-2, for a pretrained model's new head
  config.batch_size = 64;
  training_function(config, args);
  return 0;
}

}  // namespace by_feature::cv_example
