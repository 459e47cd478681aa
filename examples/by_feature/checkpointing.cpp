// Twin of accelerate's examples/by_feature/checkpointing.py: save_state
// every N steps or every epoch, and resume from a checkpoint folder.
#include "by_feature/common.h"

namespace by_feature::checkpointing {

struct Args : by_feature::Args {
  std::string checkpointing_steps;  // "", a number, or "epoch"
  std::string output_dir = ".";
  std::string resume_from_checkpoint;
  bool use_stateful_dataloader = false;
};

void training_function(Config config, const Args& args) {
  config = testing(config);
  // ampkit's prepared loaders always resume their position from
  // load_state (accelerate's use_stateful_dataloader); the flag only
  // chooses whether this script also skips the batches itself.
  ampkit::Accelerator accelerator(options(args));
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;

  // New Code #
  // Parse out whether we are saving every epoch or after a certain number
  // of batches
  const auto checkpointing_steps =
      parse_checkpointing_steps(args.checkpointing_steps);

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
    if (resume_step && epoch == starting_epoch) {
      // New Code #
      // We need to skip steps until we reach the resumed step (load_state
      // already put the loader there: skipping again is harmless).
      if (!args.use_stateful_dataloader) {
        accelerator.skip_first_batches(train_dataloader, *resume_step);
      }
      overall_step += *resume_step;
    }
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
      // New Code #
      // We save the model, optimizer, lr_scheduler, and seed states by
      // calling `save_state`
      ++overall_step;
      if (checkpointing_steps.steps &&
          overall_step % *checkpointing_steps.steps == 0) {
        save_state_as(
            accelerator,
            args.output_dir,
            "step_" + std::to_string(overall_step));
      }
    }
    const auto eval_metric =
        evaluate(accelerator, model, eval_dataloader, metric);
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":", repr(eval_metric));
    // New Code #
    // We save the model, optimizer, lr_scheduler, and seed states by
    // calling `save_state`
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
  CLI11_PARSE(app, argc, argv);
  set_threads();
  training_function(Config{}, args);
  return 0;
}

}  // namespace by_feature::checkpointing
