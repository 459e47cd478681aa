// Twin of accelerate's examples/by_feature/
// gradient_accumulation_for_autoregressive_models.py: with sequences of
// different lengths, the loss of an accumulated step is normalised by the
// number of target tokens of all its micro-batches on all processes, so
// that it equals the loss of one big batch (a per-micro-batch mean would
// weigh a short sequence's tokens more).
#include <cmath>
#include <fstream>

#include "by_feature/common.h"
#include "gpt/model.h"

namespace by_feature::gradient_accumulation_for_autoregressive_models {

struct Args : by_feature::Args {
  int64_t gradient_accumulation_steps = 1;
  int64_t per_device_batch_size = 2;
  bool with_accumulate = false;  // ampkit's accumulate(model, num_items)
};

constexpr int64_t kPad = 0;        // the tokenizer's pad (= eos) token id
constexpr int64_t kIgnore = -100;  // labels the loss skips

// Lines of text (the original: wikitext-2 lines, here the King James Bible
// that Debian's bible-kjv prints), one byte per token.
class TextLines : public torch::data::datasets::
                      BatchDataset<TextLines, torch::data::Example<>> {
 public:
  TextLines(std::vector<std::string> lines, int64_t pad_to_multiple_of)
      : lines_(std::move(lines)), multiple_(pad_to_multiple_of) {}
  // collate_fn: pad to the longest line + 1 (to a multiple of 8 under mixed
  // precision), labels the input shifted by one with padding ignored.
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    int64_t longest = 0;
    for (size_t i : indices) {
      longest = std::max<int64_t>(longest, lines_[i].size());
    }
    int64_t length = longest + 1;
    if (multiple_ > 0) {
      length = (length + multiple_ - 1) / multiple_ * multiple_;
    }
    auto ids = torch::full(
        {static_cast<int64_t>(indices.size()), length}, kPad, torch::kLong);
    auto acc = ids.accessor<int64_t, 2>();
    for (size_t b = 0; b < indices.size(); ++b) {
      const auto& line = lines_[indices[b]];
      for (size_t t = 0; t < line.size(); ++t) {
        acc[static_cast<int64_t>(b)][static_cast<int64_t>(t)] =
            static_cast<unsigned char>(line[t]);
      }
    }
    auto labels = ids.slice(1, 1).clone();
    labels.masked_fill_(labels.eq(kPad), kIgnore);
    return {ids.slice(1, 0, -1).contiguous(), labels};
  }
  torch::optional<size_t> size() const override {
    return lines_.size();
  }

 private:
  std::vector<std::string> lines_;
  int64_t multiple_;
};

// The corpus's non-empty lines [first, first + count).
std::vector<std::string> read_lines(size_t first, size_t count) {
  std::ifstream in(AMPKIT_GPT_CORPUS);
  if (!in) {
    throw ampkit::IoError(
        "autoregressive",
        std::string("cannot read the corpus ") + AMPKIT_GPT_CORPUS +
            ". Install Debian's bible-kjv (apt-get install bible-kjv) and "
            "rebuild.");
  }
  std::vector<std::string> lines;
  std::string line;
  size_t seen = 0;
  while (lines.size() < count && std::getline(in, line)) {
    if (!line.empty() && seen++ >= first) {
      lines.push_back(line);
    }
  }
  return lines;
}

auto get_dataloaders(
    ampkit::Accelerator& accelerator,
    int64_t batch_size = 16,
    size_t max_training_samples = 500) {
  const int64_t multiple =
      accelerator.mixed_precision() != ampkit::Precision::no ? 8 : 0;
  const size_t eval_lines = mocked() ? 64 : 256;
  auto loader = [&](std::vector<std::string> lines, int64_t b) {
    return accelerator.prepare_data_loader(
        TextLines(std::move(lines), multiple),
        torch::data::DataLoaderOptions(b),
        ampkit::data::ShardedSamplerOptions().shuffle(false));
  };
  return std::make_pair(
      loader(read_lines(0, max_training_samples), batch_size),
      loader(read_lines(60000, eval_lines), kEvalBatchSize));
}

// AutoModelForCausalLM's loss: the summed next-token cross-entropy over
// the labelled tokens, divided by num_items_in_batch when given (else
// their mean).
struct CausalLMImpl : torch::nn::Module {
  CausalLMImpl()
      : gpt(register_module("gpt", gpt::Gpt(gpt::Config{256, 128, 2, 2, 64}))) {
  }
  torch::Tensor forward(
      const torch::Tensor& input_ids,
      const torch::Tensor& labels,
      double num_items_in_batch = 0) {
    const auto logits = gpt->logits(input_ids);
    const auto sum = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
        labels.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions()
            .ignore_index(kIgnore)
            .reduction(torch::kSum));
    return num_items_in_batch > 0 ? sum / num_items_in_batch
                                  : sum / labels.ne(kIgnore).sum();
  }
  gpt::Gpt gpt;
};
TORCH_MODULE(CausalLM);

void training_function(Config config, double max_grad_norm, const Args& args) {
  config = testing(config);
  const int64_t gradient_accumulation_steps = args.gradient_accumulation_steps;
  // ampkit refuses backward() outside accumulate() when the Accelerator
  // accumulates; the original's loop accumulates by hand (no_sync and its
  // own optimizer steps), so its Accelerator keeps 1 and the loss is not
  // multiplied back by gradient_accumulation_steps below. With
  // --with_accumulate the Accelerator accumulates instead (ampkit's way).
  auto accelerator_options = options(args);
  if (args.with_accumulate) {
    accelerator_options.gradient_accumulation_steps(
        gradient_accumulation_steps);
  }
  ampkit::Accelerator accelerator(accelerator_options);
  const double lr = config.lr;
  const int64_t num_epochs = config.num_epochs;
  const int64_t batch_size = config.batch_size;

  ampkit::set_seed(config.seed);
  auto [train_dataloader, eval_dataloader] =
      get_dataloaders(accelerator, batch_size);
  CausalLM net;
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(lr));
  ampkit::optim::ConstantWithWarmup constant(
      adamw, 0);  // get_constant_schedule
  auto [model, optimizer, lr_scheduler] =
      accelerator.prepare(net, adamw, constant);

  // We need to compute the number of batches per accumulated step
  const auto num_samples_in_epoch =
      static_cast<int64_t>(train_dataloader.size());
  int64_t remainder = num_samples_in_epoch % gradient_accumulation_steps;
  remainder = remainder != 0 ? remainder : gradient_accumulation_steps;
  const int64_t total_gradient_updates =
      (num_samples_in_epoch + gradient_accumulation_steps - 1) /
      gradient_accumulation_steps;

  int64_t total_batched_samples = 0;
  for (int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    model->train();
    if (args.with_accumulate) {
      // ampkit's way, the same arithmetic: each micro-step's loss is summed
      // over its labelled tokens, and accumulate(model, num_items)
      // all-reduces the window's token count once and divides the
      // gradients by it. No pre-loading, no no_sync, no scaling by hand.
      int64_t update_step = 0;
      auto losses = torch::zeros({}, accelerator.device());
      auto items = torch::zeros(
          {}, torch::TensorOptions(accelerator.device()).dtype(torch::kLong));
      torch::Tensor grad_norm;
      for (auto& batch : train_dataloader) {
        const auto num_items = batch.target.ne(kIgnore).sum();
        auto scope = accelerator.accumulate(model, num_items);
        ++total_batched_samples;
        auto loss = model(batch.data, batch.target, /*summed=*/1.0);
        accelerator.backward(loss);
        losses += loss.detach();
        items += num_items;
        if (accelerator.sync_gradients()) {
          grad_norm =
              accelerator.clip_grad_norm_(model->parameters(), max_grad_norm);
        }
        optimizer.step();
        lr_scheduler.step();
        optimizer.zero_grad();
        if (!accelerator.sync_gradients()) {
          continue;
        }
        const double train_loss =
            accelerator.gather(losses).sum().item<double>() /
            accelerator.gather(items).sum().item<double>();
        accelerator.print(
            "epoch " + std::to_string(epoch) + " - update step " +
            std::to_string(update_step++) +
            ":: grad norm: " + repr(grad_norm.item<double>()) +
            " ::train loss: " + repr(train_loss));
        losses.zero_();
        items.zero_();
      }
    } else {
      auto training_iterator = train_dataloader.begin();
      for (int64_t update_step = 0; update_step < total_gradient_updates;
           ++update_step) {
        // To count the non-padded tokens the cross-entropy loss is computed
        // on, we first pre-load the full local batch - i.e the next
        // per_device_batch_size * accumulation_steps samples
        std::vector<torch::data::Example<>> batch_samples;
        const int64_t num_batches_in_step =
            update_step != total_gradient_updates - 1
                ? gradient_accumulation_steps
                : remainder;
        for (int64_t i = 0; i < num_batches_in_step; ++i) {
          batch_samples.push_back(*training_iterator);
          ++training_iterator;
        }
        // get local num items in batch
        torch::Tensor local_num_items_in_batch = torch::zeros(
            {}, torch::TensorOptions(accelerator.device()).dtype(torch::kLong));
        for (const auto& batch : batch_samples) {
          local_num_items_in_batch += batch.target.ne(kIgnore).sum();
        }
        // to compute it correctly in a multi-device DDP training, we need to
        // gather the total number of items in the full batch
        const double num_items_in_batch =
            accelerator.gather(local_num_items_in_batch).sum().item<double>();
        torch::Tensor losses = torch::zeros({}, accelerator.device());
        for (size_t i = 0; i < batch_samples.size(); ++i) {
          // if we perform gradient accumulation in a multi-devices set-up,
          // we want to avoid unnecessary communications when accumulating
          std::unique_ptr<ampkit::Accelerator::NoSyncScope> ctx;
          if (i + 1 < batch_samples.size() && accelerator.num_processes() > 1) {
            ctx.reset(new ampkit::Accelerator::NoSyncScope(
                accelerator.no_sync(model)));
          }
          ++total_batched_samples;
          auto loss = model(
              batch_samples[i].data,
              batch_samples[i].target,
              num_items_in_batch);
          // We multiply by num_processes because the DDP calculates the
          // average gradient across all devices whereas dividing by
          // num_items_in_batch already takes into account all devices
          loss = loss * static_cast<double>(accelerator.num_processes());
          accelerator.backward(loss);
          losses += loss.detach();
        }
        // Sync gradients and perform optimization steps once every
        // gradient_accumulation_steps
        const auto grad_norm =
            accelerator.clip_grad_norm_(model->parameters(), max_grad_norm);
        optimizer.step();
        lr_scheduler.step();
        optimizer.zero_grad();
        const double train_loss =
            accelerator.gather(losses).sum().item<double>() /
            static_cast<double>(accelerator.num_processes());
        accelerator.print(
            "epoch " + std::to_string(epoch) + " - update step " +
            std::to_string(update_step) +
            ":: grad norm: " + repr(grad_norm.item<double>()) +
            " ::train loss: " + repr(train_loss));
      }
    }
    model->eval();
    std::vector<torch::Tensor> losses;
    for (auto& batch : eval_dataloader) {
      torch::Tensor eval_loss;
      {
        torch::NoGradGuard no_grad;
        eval_loss = model(batch.data, batch.target);
      }
      // The original gathers `loss`, the last training loss, here; the
      // evaluation's own loss is meant.
      losses.push_back(accelerator.gather_for_metrics(
          eval_loss.reshape({1}).repeat({batch.data.size(0)})));
    }
    const double eval_loss = torch::cat(losses).mean().item<double>();
    const double perplexity = std::exp(eval_loss);  // inf on overflow
    accelerator.print(
        "epoch " + std::to_string(epoch) + ":: eval perplexity: " +
        repr(perplexity) + " eval_loss: " + repr(eval_loss));
  }
  accelerator.print("batches:", total_batched_samples);
  accelerator.end_training();
}

int main(int argc, char** argv) {
  CLI::App app("Simple example of training script.");
  Args args;
  add_common_flags(app, args);
  app.add_option(
         "--gradient_accumulation_steps",
         args.gradient_accumulation_steps,
         "The number of minibatches to be ran before gradients are "
         "accumulated.")
      ->check(cli_checks::positive());
  app.add_option(
         "--per_device_batch_size",
         args.per_device_batch_size,
         "The size of each minibatch")
      ->check(cli_checks::positive());
  app.add_flag(
      "--with_accumulate",
      args.with_accumulate,
      "ampkit only: let the Accelerator accumulate, with "
      "accumulate(model, num_items), instead of the original's loop by hand "
      "(the same losses and weights)");
  CLI11_PARSE(app, argc, argv);
  set_threads();
  Config config;
  config.batch_size = args.per_device_batch_size;
  training_function(config, /*max_grad_norm=*/1.0, args);
  return 0;
}

}  // namespace by_feature::gradient_accumulation_for_autoregressive_models
