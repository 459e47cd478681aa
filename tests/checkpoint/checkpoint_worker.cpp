// One process of the checkpoint tests (started by checkpoint_test.cpp and
// the numpy interchange test):
//   train PREC STEPS OUT [--save-at N DIR] [--resume DIR] [--save-every DIR]
//         [--zero STAGE] [--two-groups] [--sample-log FILE] [--one-epoch]
//         [--dump-optimizer PREFIX]
//     trains a small MLP with dropout on a shuffled prepared loader
//     (13 batches per epoch, so saves fall mid-epoch), gradient accumulation
//     2, a cosine schedule; PREC is no, bf16 or scaler (fp32 with the
//     GradScaler); writes the final parameters to OUT (torch::save).
//     --save-every saves after every step with automatic naming under DIR.
//     --zero shards the optimizer (zero_stage); --sample-log appends the
//     index of every sample this process trains on to FILE.RANK;
//     --one-epoch stops at the end of the (resumed) epoch; --dump-optimizer
//     writes this process's Adam state to PREFIX.RANK after resuming, or
//     when saving.
//   compare-shards A NA B NB: exit 0 when the Adam states dumped by NA
//     processes (A.0 ...) and by NB processes, joined in rank order, are
//     bit-identical.
//   write-safetensors PATH / check-safetensors PATH: the numpy interchange.
//   compare A B: exit 0 when two saved parameter lists are bit-identical.
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>

#include "ampkit/ampkit.h"
#include "hooks/test_hooks.h"

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 32))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        fc2(register_module("fc2", torch::nn::Linear(32, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(drop(torch::relu(fc1(x))));
  }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

struct Points : torch::data::datasets::Dataset<Points> {
  Points() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(99);
    x = torch::randn({100, 6}, gen);
    y = x.sum(1, true).cos();
  }
  // The target's second column is the sample's index, for the sample log.
  torch::data::Example<> get(size_t i) override {
    return {x[i], torch::cat({y[i], torch::tensor({static_cast<float>(i)})})};
  }
  torch::optional<size_t> size() const override {
    return 100;
  }
  torch::Tensor x, y;
};

// Counts the steps: a registered object.
struct StepCounter {
  int64_t steps = 0;
  ampkit::StateDict state_dict() const {
    return {{"steps", steps}};
  }
  void load_state_dict(const ampkit::StateDict& s) {
    steps = s.at("steps").toInt();
  }
};

// The key of parameter p in Optimizer::state(): the TensorImpl* (LibTorch
// 2.2 on) or its printed form (before).
template <typename Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_pointer_v<Key>) {
    return p.unsafeGetTensorImpl();
  } else {
    std::ostringstream out;
    out << static_cast<const void*>(p.unsafeGetTensorImpl());
    return out.str();
  }
}

// This process's Adam state in parameter order (under ZeRO its shard), as
// {exp_avg, exp_avg_sq, step}.
void dump_optimizer(
    const torch::optim::Optimizer& adam, const std::string& file) {
  using Key = std::decay_t<decltype(adam.state())>::key_type;
  std::vector<torch::Tensor> avg, sq;
  int64_t step = 0;
  for (const auto& group : adam.param_groups()) {
    for (const auto& p : group.params()) {
      const auto it = adam.state().find(state_key<Key>(p));
      if (it == adam.state().end()) {
        continue;
      }
      const auto& s =
          static_cast<const torch::optim::AdamParamState&>(*it->second);
      avg.push_back(s.exp_avg().reshape({-1}).cpu());
      sq.push_back(s.exp_avg_sq().reshape({-1}).cpu());
      step = s.step();
    }
  }
  torch::save(
      std::vector<torch::Tensor>{
          torch::cat(avg), torch::cat(sq), torch::tensor(step)},
      file);
}

int compare_shards(char** argv) {
  auto joined = [](const std::string& prefix, int64_t n) {
    std::vector<torch::Tensor> avg, sq;
    std::vector<int64_t> steps;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<torch::Tensor> part;
      torch::load(part, prefix + "." + std::to_string(r));
      if (part.size() == 3) {
        avg.push_back(part[0]);
        sq.push_back(part[1]);
        steps.push_back(part[2].item<int64_t>());
      }
    }
    for (const int64_t s : steps) {
      if (s != steps.front()) {
        std::cerr << prefix << ": processes at different steps\n";
      }
    }
    return std::vector<torch::Tensor>{
        torch::cat(avg), torch::cat(sq), torch::tensor(steps.front())};
  };
  const auto a = joined(argv[2], std::stoll(argv[3]));
  const auto b = joined(argv[4], std::stoll(argv[5]));
  bool same = true;
  for (size_t i = 0; i < a.size(); ++i) {
    same = same && a[i].sizes() == b[i].sizes() && a[i].equal(b[i]);
  }
  std::cout << (same ? "identical" : "different") << " (" << a[0].numel()
            << " elements, step " << a[2].item<int64_t>() << " and "
            << b[2].item<int64_t>() << ")" << std::endl;
  return same ? 0 : 1;
}

int train(int argc, char** argv) {
  const std::string prec = argv[2];
  const int64_t steps = std::stoll(argv[3]);
  const std::string out = argv[4];
  int64_t save_at = -1;
  std::string save_dir, resume, every, sample_log, dump;
  int64_t zero = 0;
  bool one_epoch = false;
  bool two_groups = false;
  for (int i = 5; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--one-epoch") {
      one_epoch = true;
      --i;
    } else if (i + 1 >= argc) {
      break;
    } else if (flag == "--two-groups") {
      two_groups = true;
      --i;
    } else if (flag == "--zero") {
      zero = std::stoll(argv[i + 1]);
    } else if (flag == "--sample-log") {
      sample_log = argv[i + 1];
    } else if (flag == "--dump-optimizer") {
      dump = argv[i + 1];
    } else if (flag == "--save-at") {
      save_at = std::stoll(argv[i + 1]);
      save_dir = argv[i + 2];
      ++i;
    } else if (flag == "--resume") {
      resume = argv[i + 1];
    } else if (flag == "--save-every") {
      every = argv[i + 1];
    }
  }
  auto options = ampkit::AcceleratorOptions()
                     .cpu(true)
                     .quiet(true)
                     .gradient_accumulation_steps(2)
                     .mixed_precision(prec == "bf16" ? "bf16" : "no")
                     .zero_stage(zero)
                     .seed(5);
  if (prec == "scaler") {
    options.loss_scaling(true).grad_scaler(
        ampkit::GradScalerOptions().init_scale(1024).growth_interval(3));
  }
  if (!every.empty()) {
    options.project_dir(every).automatic_checkpoint_naming(true).total_limit(2);
  }
  ampkit::Accelerator accelerator(options);
  const std::string rank = std::to_string(accelerator.process_index());
  // Each rank draws its own dropout masks, so each rank's RNG file matters.
  torch::manual_seed(5 + static_cast<uint64_t>(accelerator.process_index()));
  Mlp net;
  // --two-groups: fc1 and fc2 in param groups of their own (ZeRO's
  // shards then cut across groups).
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (two_groups) {
    groups.emplace_back(net->fc1->parameters());
    groups.emplace_back(net->fc2->parameters());
  } else {
    groups.emplace_back(net->parameters());
  }
  torch::optim::Adam adam(groups, torch::optim::AdamOptions(1e-2));
  ampkit::optim::CosineWithWarmup cosine(adam, 3, 200);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, adam, cosine);
  auto loader = accelerator.prepare_data_loader(
      Points().map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(8),
      ampkit::data::ShardedSamplerOptions().shuffle(true));
  StepCounter counter;
  accelerator.register_for_checkpointing(counter);
  if (!resume.empty()) {
    accelerator.load_state(
        resume == "latest" ? std::nullopt : std::optional<std::string>(resume));
    if (!dump.empty()) {
      dump_optimizer(adam, dump + "." + rank);
    }
  }
  std::ofstream log;
  if (!sample_log.empty()) {
    log.open(sample_log + "." + rank, std::ios::app);
  }
  bool done = false;
  while (counter.steps < steps && !done) {
    done = one_epoch;
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate(model);
      const auto target = batch.target.narrow(1, 0, 1);
      if (log.is_open()) {
        const auto index = batch.target.select(1, 1).to(torch::kLong);
        for (int64_t k = 0; k < index.numel(); ++k) {
          log << index[k].item<int64_t>() << "\n";
        }
        log.flush();
      }
      accelerator.backward(torch::mse_loss(model(batch.data), target));
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      if (!accelerator.sync_gradients()) {
        continue;
      }
      ++counter.steps;
      if (counter.steps == save_at) {
        accelerator.save_state(save_dir);
        std::cout << "saved " << save_dir << std::endl;
        if (!dump.empty() && resume.empty()) {
          dump_optimizer(adam, dump + "." + rank);
        }
      }
      if (!every.empty()) {
        std::cout << "saved " << accelerator.save_state() << std::endl;
      }
      if (counter.steps == steps) {
        break;
      }
    }
  }
  std::vector<torch::Tensor> params;
  for (const auto& p : net->parameters()) {
    params.push_back(p.detach().clone());
  }
  if (auto* s = accelerator.scaler()) {
    params.push_back(torch::tensor(s->get_scale()));
  }
  if (accelerator.is_main_process()) {
    torch::save(params, out);
  }
  accelerator.wait_for_everyone();
  return 0;
}

// Tensors whose values the numpy side recomputes: arange in each dtype.
ampkit::checkpoint::NamedTensors interchange_tensors() {
  return {
      {"f32", torch::arange(12, torch::kFloat).reshape({3, 4}) / 4},
      {"f64", torch::arange(5, torch::kDouble) * 0.5},
      {"f16", (torch::arange(6, torch::kFloat) / 8).to(torch::kHalf)},
      {"i64", torch::arange(-3, 3, torch::kLong)},
      {"i32", torch::arange(4, torch::kInt).reshape({2, 2})},
      {"u8", torch::arange(10, torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"empty", torch::zeros({0, 3})},
  };
}

int check_safetensors(const std::string& path) {
  auto loaded = ampkit::checkpoint::load_safetensors(path);
  auto expected = interchange_tensors();
  expected.emplace_back("from_numpy", torch::arange(7, torch::kFloat) * 3);
  if (loaded.metadata["writer"] != "numpy") {
    std::cerr << "metadata not read\n";
    return 1;
  }
  for (const auto& [name, t] : expected) {
    bool found = false;
    for (const auto& [n, u] : loaded.tensors) {
      if (n == name) {
        found = true;
        if (u.scalar_type() != t.scalar_type() || !u.equal(t)) {
          std::cerr << name << " differs: " << u << " vs " << t << "\n";
          return 1;
        }
      }
    }
    if (!found) {
      std::cerr << name << " missing\n";
      return 1;
    }
  }
  std::cout << "check-safetensors ok\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // AMPKIT_FAULT_INJECT: the crash tests stop a save midway.
  ampkit::testing_util::install_test_hooks();
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "train" && argc >= 5) {
      return train(argc, argv);
    }
    if (mode == "write-safetensors" && argc == 3) {
      ampkit::checkpoint::save_safetensors(
          argv[2], interchange_tensors(), {{"writer", "ampkit"}});
      return 0;
    }
    if (mode == "compare" && argc == 4) {
      std::vector<torch::Tensor> a, b;
      torch::load(a, argv[2]);
      torch::load(b, argv[3]);
      bool same = a.size() == b.size();
      for (size_t i = 0; same && i < a.size(); ++i) {
        same = a[i].equal(b[i]);
      }
      std::cout << (same ? "identical" : "different") << std::endl;
      return same ? 0 : 1;
    }
    if (mode == "compare-shards" && argc == 6) {
      return compare_shards(argv);
    }
    if (mode == "check-safetensors" && argc == 3) {
      return check_safetensors(argv[2]);
    }
    std::cerr << "usage: checkpoint_worker train PREC STEPS OUT [...] | "
                 "write-safetensors PATH | check-safetensors PATH\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_worker: " << e.what() << std::endl;
    return 1;
  }
}
