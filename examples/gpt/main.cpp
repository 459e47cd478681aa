// examples/gpt: a GPT-2-architecture decoder trained by the Accelerator as a
// character-level language model on the King James Bible (Debian's
// bible-kjv). The flags are the demo's (precision, accumulation,
// checkpointing, resume, log-with, summary.json) plus the model's size:
// --config tiny trains in CI in seconds, --config gpt2 is GPT-2 small
// (124M parameters, 1024-token context), the GPU benchmark.
#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <numeric>
#include <thread>

#include "common/example_support.h"
#include "model.h"

#ifndef AMPKIT_GPT_CORPUS
#define AMPKIT_GPT_CORPUS "kjv.txt"
#endif

namespace {

// The text as token ids: each distinct byte of the corpus is one token, in
// byte order (KJV is ASCII, so tokens are characters).
struct Corpus {
  std::vector<unsigned char> alphabet;  // token id -> byte
  torch::Tensor train;                  // int64 ids, the first 90%
  torch::Tensor val;                    // the last 10%

  static Corpus read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      throw std::runtime_error(
          "cannot read the corpus " + path +
          ": build the gpt target (it writes kjv.txt from Debian's "
          "bible-kjv: apt-get install bible-kjv) or pass --data-file");
    }
    const std::string text(
        (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() < 10000) {
      throw std::runtime_error(
          "the corpus " + path + " has " + std::to_string(text.size()) +
          " bytes; a language model needs at least 10000");
    }
    std::array<int64_t, 256> id{};
    id.fill(-1);
    for (unsigned char ch : text) {
      id[ch] = 0;
    }
    Corpus c;
    for (int b = 0; b < 256; ++b) {
      if (id[b] == 0) {
        id[b] = static_cast<int64_t>(c.alphabet.size());
        c.alphabet.push_back(static_cast<unsigned char>(b));
      }
    }
    auto ids = torch::empty({static_cast<int64_t>(text.size())}, torch::kLong);
    auto* out = ids.data_ptr<int64_t>();
    for (size_t i = 0; i < text.size(); ++i) {
      out[i] = id[static_cast<unsigned char>(text[i])];
    }
    const int64_t split = ids.size(0) * 9 / 10;
    c.train = ids.slice(0, 0, split);
    c.val = ids.slice(0, split);
    return c;
  }

  std::string decode(const torch::Tensor& ids) const {
    std::string s;
    auto cpu = ids.to(torch::kCPU, torch::kLong).contiguous();
    for (int64_t i = 0; i < cpu.numel(); ++i) {
      s.push_back(static_cast<char>(alphabet.at(cpu.data_ptr<int64_t>()[i])));
    }
    return s;
  }

  // The entropy of the validation text's byte frequencies, in nats: the loss
  // of a model that ignores context. A trained model must beat it.
  double unigram_entropy() const {
    auto counts =
        torch::bincount(val, {}, static_cast<int64_t>(alphabet.size()))
            .to(torch::kDouble);
    auto p = counts / counts.sum();
    p = p.masked_select(p > 0);
    return -(p * p.log()).sum().item<double>();
  }
};

// Sample i is the i-th non-overlapping window: data = ids[i*T, i*T + T),
// target = the same shifted by one token.
class Windows : public torch::data::datasets::
                    BatchDataset<Windows, torch::data::Example<>> {
 public:
  Windows(
      torch::Tensor ids,
      int64_t seq_len,
      std::optional<int64_t> limit = std::nullopt)
      : ids_(std::move(ids)), seq_len_(seq_len) {
    count_ = (ids_.size(0) - 1) / seq_len_;
    if (limit && *limit > 0) {
      count_ = std::min(count_, *limit);
    }
    if (count_ < 1) {
      throw std::runtime_error(
          "the text has " + std::to_string(ids_.size(0)) +
          " tokens, fewer than one window of --seq-len " +
          std::to_string(seq_len) + " + 1");
    }
  }

  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    std::vector<torch::Tensor> data, target;
    data.reserve(indices.size());
    target.reserve(indices.size());
    for (size_t i : indices) {
      const int64_t start = static_cast<int64_t>(i) * seq_len_;
      data.push_back(ids_.slice(0, start, start + seq_len_));
      target.push_back(ids_.slice(0, start + 1, start + seq_len_ + 1));
    }
    return {torch::stack(data), torch::stack(target)};
  }
  torch::optional<size_t> size() const override {
    return static_cast<size_t>(count_);
  }

 private:
  torch::Tensor ids_;
  int64_t seq_len_;
  int64_t count_ = 0;
};

struct Args : examples::RunFlags {
  Args() {
    output_dir = "gpt_output";
  }
  std::string config = "tiny";
  int64_t seq_len = 0;     // 0: the configuration's block size
  int64_t batch_size = 0;  // 0: the configuration's
  int64_t epochs = 1;
  int64_t max_steps = 0;  // 0 = no limit
  double lr = 0;          // 0: the configuration's
  double weight_decay = 0.1;
  double dropout = 0;
  int64_t eval_interval = 0;  // 0: only at the end
  int64_t eval_windows = 64;
  int64_t log_interval = 20;
  int64_t untimed_steps = 0;
  int64_t limit_train = 0;
  double max_val_loss = 0;  // exit 1 above this (for CI); 0: no bound
  int64_t sample_chars = 200;
  std::string data_file = AMPKIT_GPT_CORPUS;
  std::string tf32 = "default";  // on, off, or LibTorch's default
  std::string fsdp;  // FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD
  bool activation_checkpointing = false;
  std::string backward_prefetch = "NO_PREFETCH";
  std::string fsdp_state_dict_type = "FULL_STATE_DICT";
  bool forward_prefetch = false;
};

struct Preset {
  gpt::Config model;
  int64_t batch_size;
  double lr;
};

Preset preset(const std::string& name, int64_t vocab) {
  if (name == "tiny") {  // ~0.1M parameters: CI, seconds on a CPU
    return {{vocab, 64, 2, 2, 64, 0.0}, 32, 3e-3};
  }
  if (name == "small") {  // ~0.8M: a few minutes on a CPU
    return {{vocab, 128, 4, 4, 128, 0.0}, 32, 1e-3};
  }
  if (name == "gpt2") {
    // GPT-2 small: 12 layers, 12 heads, 768 wide, 1024 positions. The
    // embedding keeps GPT-2's 50257 tokens padded to 50304 (a multiple of
    // 64, as nanoGPT does), so the parameter count (124M) and the FLOPs are
    // GPT-2's; only the first vocab_size ids occur in character-level text.
    return {{std::max<int64_t>(vocab, 50304), 1024, 12, 12, 768, 0.0}, 8, 6e-4};
  }
  throw std::runtime_error(
      "unknown --config '" + name + "': use tiny, small or gpt2");
}

// The mean loss over the first `windows` validation windows, each process
// scoring its share; the sums are reduced on the Accelerator's device.
template <typename Model>
double validation_loss(
    Model& model,
    const Corpus& corpus,
    int64_t seq_len,
    int64_t windows,
    ampkit::Accelerator& accelerator) {
  torch::NoGradGuard no_grad;
  model->eval();
  Windows val(corpus.val, seq_len, windows);
  std::vector<size_t> all(*val.size());
  std::iota(all.begin(), all.end(), size_t{0});
  auto sums = torch::zeros(
      {2}, torch::dtype(torch::kDouble).device(accelerator.device()));
  const auto mine = accelerator.split_between_processes(all);
  for (size_t i = 0; i < mine.size(); i += 16) {
    const auto end = std::min(mine.size(), i + 16);
    auto batch = val.get_batch(c10::ArrayRef<size_t>(mine.data() + i, end - i));
    auto loss = model(
        batch.data.to(accelerator.device()),
        batch.target.to(accelerator.device()));
    sums[0] += loss.detach().to(torch::kDouble) * double(end - i);
    sums[1] += double(end - i);
  }
  model->train();
  const auto total = accelerator.reduce(sums).cpu();
  return total[0].item<double>() / total[1].item<double>();
}

// Greedy-free sampling: `n` characters drawn from the model's distribution
// (temperature 1), the context cropped to block_size.
std::string sample(
    gpt::Gpt& model, const Corpus& corpus, int64_t n, c10::Device device) {
  torch::NoGradGuard no_grad;
  model->eval();
  const auto& alphabet = corpus.alphabet;
  const auto newline = std::find(alphabet.begin(), alphabet.end(), '\n');
  auto idx = torch::full(
      {1, 1},
      int64_t(newline - alphabet.begin()),
      torch::dtype(torch::kLong).device(device));
  for (int64_t i = 0; i < n; ++i) {
    auto context = idx.size(1) > model->config.block_size
                       ? idx.slice(1, idx.size(1) - model->config.block_size)
                       : idx;
    auto logits = model->logits(context).select(1, -1).to(torch::kFloat);
    // Only the corpus's characters (the gpt2 preset pads the vocabulary).
    logits = logits.slice(1, 0, static_cast<int64_t>(alphabet.size()));
    auto next = torch::multinomial(torch::softmax(logits, -1), 1);
    idx = torch::cat({idx, next}, 1);
  }
  model->train();
  return corpus.decode(idx.slice(1, 1));
}

int run(const Args& args) {
  const int threads = examples::set_threads(args.threads);
  const std::filesystem::path output_dir(args.output_dir);
  ampkit::AcceleratorOptions options = examples::accelerator_options(args);
  if (!args.fsdp.empty() || args.activation_checkpointing) {
    // FSDP with the transformer blocks as units (accelerate's
    // TRANSFORMER_BASED_WRAP with fsdp_transformer_layer_cls_to_wrap:
    // Block); model.h runs each block through ampkit::dist::fsdp_forward.
    // Activation checkpointing alone: NO_SHARD with the same units.
    options.fsdp(ampkit::dist::FsdpOptions()
                     .strategy(ampkit::dist::parse_sharding_strategy(
                         args.fsdp.empty() ? "NO_SHARD" : args.fsdp))
                     .wrap_types({"Block"})
                     .activation_checkpointing(args.activation_checkpointing)
                     .backward_prefetch(ampkit::dist::parse_backward_prefetch(
                         args.backward_prefetch))
                     .forward_prefetch(args.forward_prefetch)
                     .state_dict_type(ampkit::dist::parse_state_dict_type(
                         args.fsdp_state_dict_type)));
  }
  if (args.tf32 != "default") {
    // fp32 matmuls and convolutions on TF32 tensor cores (on), or strict
    // IEEE fp32 (off): torch.backends.cuda.matmul/cudnn.allow_tf32.
    at::globalContext().setAllowTF32CuBLAS(args.tf32 == "on");
    at::globalContext().setAllowTF32CuDNN(args.tf32 == "on");
  }
  ampkit::Accelerator accelerator(options);
  // Tensor bytes, for the summary's peak_step_bytes and activation_bytes.
  ampkit::track_memory(accelerator.device());
  std::cerr << "gpt: ampkit " << AMPKIT_VERSION << ", LibTorch "
            << TORCH_VERSION << ", " << threads << " threads\n";

  const auto corpus = Corpus::read(args.data_file);
  auto p = preset(args.config, static_cast<int64_t>(corpus.alphabet.size()));
  p.model.dropout = args.dropout;
  const int64_t seq_len = args.seq_len > 0 ? args.seq_len : p.model.block_size;
  if (seq_len > p.model.block_size) {
    throw std::runtime_error(
        "--seq-len " + std::to_string(seq_len) + " is longer than the " +
        args.config + " configuration's context of " +
        std::to_string(p.model.block_size));
  }
  const int64_t batch_size =
      args.batch_size > 0 ? args.batch_size : p.batch_size;
  const double lr = args.lr > 0 ? args.lr : p.lr;

  gpt::Gpt net(p.model);
  const int64_t n_params = gpt::parameter_count(net);
  // Weight decay on matrices only (not biases, LayerNorms), as GPT-2 and
  // nanoGPT train it.
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& param : net->parameters()) {
    (param.dim() >= 2 ? decay : no_decay).push_back(param);
  }
  const auto adamw_options = torch::optim::AdamWOptions(lr).betas({0.9, 0.95});
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      decay,
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(adamw_options)
              .weight_decay(args.weight_decay)));
  groups.emplace_back(
      no_decay,
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(adamw_options).weight_decay(0.0)));
  torch::optim::AdamW adamw(std::move(groups), adamw_options);

  Windows train_set(corpus.train, seq_len, args.limit_train);
  const int64_t n_windows = static_cast<int64_t>(*train_set.size());
  const int64_t global_batch = batch_size * accelerator.num_processes();
  const int64_t accumulation = accelerator.gradient_accumulation_steps();
  const int64_t steps_per_epoch =
      ((n_windows + global_batch - 1) / global_batch + accumulation - 1) /
      accumulation;
  int64_t total_steps = steps_per_epoch * args.epochs;
  if (args.max_steps > 0) {
    total_steps = std::min(total_steps, args.max_steps);
  }
  const int64_t schedule_steps = total_steps * accelerator.num_processes();
  ampkit::optim::CosineWithWarmup cosine(
      adamw, std::max<int64_t>(1, schedule_steps / 20), schedule_steps);
  // Before prepare: under FSDP the prepared model's parameters are shards.
  const double flops_per_token = gpt::flops_per_token(net, seq_len);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, adamw, cosine);
  auto loader = accelerator.prepare_data_loader(
      std::move(train_set),
      torch::data::DataLoaderOptions(batch_size),
      ampkit::data::ShardedSamplerOptions().shuffle(true).seed(args.seed));
  accelerator.print(
      "gpt:",
      args.config,
      "configuration,",
      n_params,
      "parameters,",
      p.model.n_layer,
      "layers,",
      p.model.n_head,
      "heads,",
      p.model.n_embd,
      "wide, context",
      std::to_string(seq_len) + ",",
      corpus.alphabet.size(),
      "characters,",
      n_windows,
      "training windows");

  if (!args.log_with.empty()) {
    accelerator.init_trackers(
        output_dir.filename().string(),
        {{"model", "gpt2-architecture"},
         {"config", args.config},
         {"parameters", std::to_string(n_params)},
         {"seq_len", std::to_string(seq_len)},
         {"batch_size", std::to_string(batch_size)},
         {"lr", std::to_string(lr)}});
  }
  const std::string checkpoints = (output_dir / "checkpoints").string();
  examples::resume_from_checkpoint(
      accelerator, args.resume_from_checkpoint, checkpoints);

  ampkit::track::ProgressOptions progress_options;
  progress_options.enabled = accelerator.is_main_process();
  ampkit::track::Progress progress(total_steps, progress_options);
  int64_t steps = accelerator.optimizer_steps();
  // Skipped steps are counted on the device (no host read per step).
  const int64_t skipped_before = accelerator.skipped_optimizer_steps();
  int64_t tokens = 0;  // this process's, in the timed loop
  double train_loss = 0;
  double val_loss = 0;
  double train_seconds = 0;
  // The running loss stays on the device: it is read (a host sync) only
  // every --log-interval steps, not every micro-step.
  auto running = torch::zeros(
      {}, torch::dtype(torch::kFloat).device(accelerator.device()));
  int64_t since_log = 0;
  // The most tensor memory allocated at once during a training step, and
  // the most that a forward left allocated for its backward (the saved
  // activations, and the loss).
  int64_t peak_step_bytes = 0;
  int64_t activation_bytes = 0;
  const auto memory = [&] {
    return ampkit::memory_stats(accelerator.device());
  };
  ampkit::reset_peak_memory(accelerator.device());
  for (int64_t epoch = loader.sampler()->epoch() + 1;
       epoch <= args.epochs && steps < total_steps;
       ++epoch) {
    auto start = std::chrono::steady_clock::now();
    int64_t epoch_tokens = 0;
    for (auto& batch : loader) {
      // A token-level loss: summed over this micro-batch's targets, and the
      // window's gradients divided by its targets on every process (a short
      // last batch of an epoch weighs its tokens as the others do).
      const int64_t num_items = batch.target.numel();
      auto scope = accelerator.accumulate(model, num_items);
      const int64_t before_forward = memory().allocated;
      auto loss = model(batch.data, batch.target, /*summed=*/true);
      activation_bytes =
          std::max(activation_bytes, memory().allocated - before_forward);
      accelerator.backward(loss);
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      peak_step_bytes = std::max(peak_step_bytes, memory().peak);
      running += loss.detach() / static_cast<double>(num_items);
      ++since_log;
      epoch_tokens += batch.data.numel();
      if (!accelerator.sync_gradients()) {
        continue;
      }
      ++steps;
      if (steps % args.log_interval == 0 || steps == total_steps) {
        train_loss = running.item<double>() / double(since_log);
        running.zero_();
        since_log = 0;
        accelerator.log({{"train_loss", train_loss}});
      }
      if (steps == args.untimed_steps) {
        // Start-up (allocator growth, kernel selection) is not timed.
        if (accelerator.device().is_cuda()) {
          torch::cuda::synchronize();
        }
        start = std::chrono::steady_clock::now();
        epoch_tokens = 0;
      }
      const double secs = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count();
      // The display counts windows (samples) per second.
      progress.update(
          {steps, epoch, train_loss, double(epoch_tokens / seq_len) / secs});
      if (args.eval_interval > 0 && steps % args.eval_interval == 0 &&
          steps != total_steps) {
        train_seconds += std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
        tokens += epoch_tokens;
        epoch_tokens = 0;
        val_loss = validation_loss(
            model, corpus, seq_len, args.eval_windows, accelerator);
        accelerator.log({{"val_loss", val_loss}});
        ampkit::reset_peak_memory(accelerator.device());
        start = std::chrono::steady_clock::now();
      }
      if (args.checkpointing_steps > 0 &&
          steps % args.checkpointing_steps == 0) {
        accelerator.save_state((std::filesystem::path(checkpoints) /
                                ("checkpoint_" + std::to_string(steps)))
                                   .string());
        ampkit::reset_peak_memory(accelerator.device());
      }
      if (steps == total_steps) {
        break;
      }
    }
    if (accelerator.device().is_cuda()) {
      torch::cuda::synchronize();
    }
    train_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    tokens += epoch_tokens;
  }
  progress.finish();
  val_loss =
      validation_loss(model, corpus, seq_len, args.eval_windows, accelerator);
  accelerator.log({{"val_loss", val_loss}});
  const double unigram = corpus.unigram_entropy();
  accelerator.print(
      "validation loss",
      val_loss,
      "nats per character (the corpus's "
      "unigram entropy:",
      std::to_string(unigram) + ")");
  // Under FSDP the weights are sharded: gathered on every process while
  // the main one samples.
  if (args.sample_chars > 0) {
    const auto full_weights = accelerator.summon_full_params();
    if (accelerator.is_main_process()) {
      accelerator.print(
          "sample:\n" +
          sample(net, corpus, args.sample_chars, accelerator.device()));
    }
  }
  accelerator.end_training();
  accelerator.save_model(model, (output_dir / "model").string());

  const double tokens_per_second =
      train_seconds > 0
          ? double(tokens * accelerator.num_processes()) / train_seconds
          : 0;
  // What this process holds between steps for training: the parameters the
  // optimizer steps (FSDP: its shards), their gradients (DDP's buckets
  // stay) and the optimizer state.
  int64_t held_bytes = optimizer.state_bytes() + optimizer.gradient_bytes();
  for (const auto& group : adamw.param_groups()) {
    for (const auto& param : group.params()) {
      held_bytes += param.numel() * param.element_size();
    }
  }
  const nlohmann::json summary = {
      {"config", args.config},
      {"held_bytes", held_bytes},
      {"peak_step_bytes", peak_step_bytes},
      {"activation_bytes", activation_bytes},
      {"parameters", n_params},
      {"seq_len", seq_len},
      {"batch_size", batch_size},
      {"val_loss", val_loss},
      {"unigram_entropy", unigram},
      {"train_loss", train_loss},
      {"steps", steps},
      {"skipped_steps", accelerator.skipped_optimizer_steps() - skipped_before},
      {"tokens_per_second", tokens_per_second},
      {"flops_per_token", flops_per_token},
      {"model_flops_per_second", tokens_per_second * flops_per_token},
      {"precision", ampkit::to_string(accelerator.mixed_precision())},
      {"num_processes", accelerator.num_processes()},
      {"gradient_accumulation_steps", accumulation},
      {"train_seconds", train_seconds},
      {"device", accelerator.device().str()},
  };
  if (accelerator.is_main_process()) {
    std::filesystem::create_directories(args.output_dir);
    std::ofstream(output_dir / "summary.json") << summary.dump(2) << '\n';
    accelerator.print(summary.dump());
  }
  if (args.max_val_loss > 0 && !(val_loss <= args.max_val_loss)) {
    std::fprintf(
        stderr,
        "gpt: validation loss %.4f is above --max-val-loss %.4f\n",
        val_loss,
        args.max_val_loss);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{
      "Train a GPT-2-architecture character-level language model on the King "
      "James Bible with ampkit's Accelerator. Unset options come from the "
      "launcher's environment (AMPKIT_MIXED_PRECISION, "
      "AMPKIT_GRADIENT_ACCUMULATION_STEPS), else their defaults."};
  app.add_option(
      examples::flags("config"),
      args.config,
      "model size: tiny (CI), small, or gpt2 (GPT-2 small, 124M)");
  app.add_option(
      examples::flags("fsdp"),
      args.fsdp,
      "shard the model with FSDP, each transformer block a unit: "
      "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (default: DDP, "
      "or the launcher's ACCELERATE_USE_FSDP)");
  app.add_option(
      examples::flags("backward-prefetch"),
      args.backward_prefetch,
      "with --fsdp: BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH (default)");
  app.add_option(
      examples::flags("fsdp-state-dict-type"),
      args.fsdp_state_dict_type,
      "with --fsdp, how checkpoints hold the model: FULL_STATE_DICT "
      "(default: one file) or SHARDED_STATE_DICT (each process's shards)");
  app.add_flag(
      examples::flags("forward-prefetch"),
      args.forward_prefetch,
      "with --fsdp: gather the next block while this one computes");
  app.add_flag(
      examples::flags("activation-checkpointing"),
      args.activation_checkpointing,
      "keep only each block's input in forward and recompute it in backward "
      "(with --fsdp, or alone)");
  app.add_option(
         examples::flags("seq-len"),
         args.seq_len,
         "tokens per training window (default: the configuration's context)")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("batch-size"),
         args.batch_size,
         "windows per micro-batch (default: the configuration's)")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("epochs"),
         args.epochs,
         "passes over the training text")
      ->check(cli_checks::positive());
  app.add_option(
         examples::flags("max-steps"),
         args.max_steps,
         "stop after this many optimizer steps (0: no limit)")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("lr"),
         args.lr,
         "AdamW peak learning rate (default: the configuration's)")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("weight-decay"),
         args.weight_decay,
         "AdamW weight decay of the matrices")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("dropout"), args.dropout, "dropout probability")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option(
         examples::flags("eval-interval"),
         args.eval_interval,
         "validation loss every N optimizer steps (0: at the end only)")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("eval-windows"),
         args.eval_windows,
         "validation windows scored (from the last 10% of the text)")
      ->check(cli_checks::positive());
  app.add_option(
         examples::flags("log-interval"),
         args.log_interval,
         "read the training loss (a host sync) every N optimizer steps")
      ->check(cli_checks::positive());
  app.add_option(
         examples::flags("untimed-steps"),
         args.untimed_steps,
         "leave the first N optimizer steps out of tokens_per_second")
      ->check(cli_checks::non_negative());
  app.add_option(
         examples::flags("limit-train"),
         args.limit_train,
         "use only the first N training windows")
      ->check(cli_checks::non_negative());
  app.add_option(
      examples::flags("max-val-loss"),
      args.max_val_loss,
      "exit 1 when the final validation loss is above this");
  app.add_option(
         examples::flags("sample-chars"),
         args.sample_chars,
         "characters to sample from the trained model at the end (0: none)")
      ->check(cli_checks::non_negative());
  app.add_option(
      examples::flags("data-file"), args.data_file, "the training text");
  app.add_option(
         examples::flags("tf32"),
         args.tf32,
         "fp32 matmuls on TF32 tensor cores: on, off (strict fp32), or "
         "default (LibTorch's: off for matmuls, on for convolutions)")
      ->check(CLI::IsMember({"on", "off", "default"}));
  examples::add_run_flags(app, args);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "gpt: " << e.what() << '\n';
    return 2;
  }
}
