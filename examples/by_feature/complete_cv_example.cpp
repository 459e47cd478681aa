// Twin of accelerate's examples/complete_cv_example.py: cv_example with
// checkpointing (--checkpointing_steps, --resume_from_checkpoint,
// --output_dir) and tracking (--with_tracking, --project_dir).
#include "by_feature/common.h"

namespace by_feature::complete_cv_example {

struct Args : by_feature::Args {
  std::string data_dir = ampkit::data::kFashionMnistDir;
  std::string checkpointing_steps;
  std::string output_dir = ".";
  std::string resume_from_checkpoint;
  bool use_stateful_dataloader = false;
  bool with_tracking = false;
  std::string project_dir = "logs";
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  // Initialize accelerator
  ampkit::AcceleratorOptions o = options(args);
  if (args.with_tracking) {
    o.log_with("all").project_dir(args.project_dir);
  }
  ampkit::Accelerator accelerator(o);
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  const int64_t batch_size = config.batch_size;

  // Parse out whether we are saving every epoch or after a certain number
  // of batches
  const auto checkpointing_steps =
      parse_checkpointing_steps(args.checkpointing_steps);

  // We need to initialize the trackers we use, and also store our
  // configuration
  if (args.with_tracking) {
    accelerator.init_trackers(
        "complete_cv_example",
        {{"lr", repr(lr)},
         {"num_epochs", std::to_string(num_epochs)},
         {"seed", std::to_string(config.seed)},
         {"batch_size", std::to_string(batch_size)}});
  }

  // Grab all the image filenames (here: the IDX training split)
  auto all = ampkit::data::FashionMnistDataset(
                 true,
                 args.data_dir,
                 mocked() ? std::optional<size_t>(2048) : std::nullopt)
                 .data();
  // Set the seed before splitting the data.
  ampkit::set_seed(config.seed);
  auto [train_split, eval_split] = random_split(all, config.seed);
  auto train_dataloader =
      prepare_loader(accelerator, train_split, batch_size, true, config.seed);
  auto eval_dataloader =
      prepare_loader(accelerator, eval_split, batch_size, false);

  Cnn net;
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(lr));
  const int64_t steps = num_epochs *
                        static_cast<int64_t>(train_dataloader.size()) *
                        accelerator.num_processes();
  ampkit::optim::CosineWithWarmup one_cycle(adam, steps * 3 / 10, steps);
  auto [model, optimizer, lr_scheduler] =
      accelerator.prepare(net, adam, one_cycle);

  // We need to keep track of how many total steps we have iterated over
  int64_t overall_step = 0;
  // We also need to keep track of the starting epoch so files are named
  // properly
  // We need to load the checkpoint back in before training here with
  // `load_state`. The total number of epochs is adjusted based on where
  // the state is being loaded from, as we assume it is being called from
  // the same directory the checkpoints were saved to.
  const auto [starting_epoch, resume_step] = resume_from_checkpoint(
      accelerator, args.resume_from_checkpoint, train_dataloader);

  // Now we train the model
  for (int64_t epoch = starting_epoch; epoch < num_epochs; ++epoch) {
    model->train();
    torch::Tensor total_loss = torch::zeros({}, accelerator.device());
    if (resume_step && epoch == starting_epoch) {
      // We need to skip steps until we reach the resumed step
      if (!args.use_stateful_dataloader) {
        accelerator.skip_first_batches(train_dataloader, *resume_step);
      }
      overall_step += *resume_step;
    }
    for (auto& batch : train_dataloader) {
      const auto inputs = (batch.data - kMean) / kStd;
      const auto outputs = model(inputs);
      const auto loss =
          torch::nn::functional::cross_entropy(outputs, batch.target);
      // We keep track of the loss at each epoch
      if (args.with_tracking) {
        total_loss += loss.detach().to(torch::kFloat);
      }
      accelerator.backward(loss);
      optimizer.step();
      lr_scheduler.step();
      optimizer.zero_grad();
      ++overall_step;
      if (checkpointing_steps.steps &&
          overall_step % *checkpointing_steps.steps == 0) {
        save_state_as(
            accelerator,
            args.output_dir,
            "step_" + std::to_string(overall_step));
      }
    }
    // Use accelerator.print to print only on the main process.
    const double eval_metric =
        cv_accuracy(accelerator, model, eval_dataloader, epoch);
    if (args.with_tracking) {
      accelerator.log(
          {{"accuracy", 100 * eval_metric},
           {"train_loss",
            total_loss.item<double>() /
                static_cast<double>(train_dataloader.size())},
           {"epoch", static_cast<double>(epoch)}},
          overall_step);
    }
    if (checkpointing_steps.every_epoch) {
      save_state_as(
          accelerator, args.output_dir, "epoch_" + std::to_string(epoch));
    }
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
  app.add_option(
      "--checkpointing_steps",
      args.checkpointing_steps,
      "Whether the various states should be saved at the end of every n "
      "steps, or 'epoch' for each epoch.");
  app.add_option(
      "--output_dir",
      args.output_dir,
      "Optional save directory where all checkpoint folders will be stored. "
      "Default is the current working directory.");
  app.add_option(
      "--resume_from_checkpoint",
      args.resume_from_checkpoint,
      "If the training should continue from a checkpoint folder.");
  app.add_flag(
      "--use_stateful_dataloader",
      args.use_stateful_dataloader,
      "Do not skip batches after resuming: the loader resumes its own "
      "position (ampkit's prepared loaders always do).");
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
  CLI11_PARSE(app, argc, argv);
  set_threads();
  Config config;
  config.lr = 3e-3;
  config.batch_size = 64;
  training_function(config, args);
  return 0;
}

}  // namespace by_feature::complete_cv_example
