// Accelerator overhead: the same MLP loop (784-128-128-10, batch 32, AdamW)
// written in raw LibTorch and with the Accelerator, in the same precision,
// the two arms alternating step by step in one process. The figure is the
// ratio of their median step times, for fp32 and for bf16.
//
//   build/bench/accelerator_bench [--threads N] [--steps N] [--precision
//       no|bf16|both] [--arm raw|accelerator|both] [--set-to-none] [--fused]
//       [--json]
//
// Gradients are zeroed in place (1.13's zero_grad) unless --set-to-none
// (PyTorch 2.x's default, and the Accelerator's), in both arms alike. The
// Accelerator arm calls AdamW's own step (like for like) unless --fused, which
// turns on its fused_optimizer_step (the default in real use).
//
// bench/accelerator_peer.py runs it next to the same loop in Python.
#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// [B, 784] -> 128 -> 128 -> [B, 10]
torch::nn::Sequential make_mlp() {
  torch::manual_seed(0);
  return torch::nn::Sequential(
      torch::nn::Linear(784, 128),
      torch::nn::ReLU(),
      torch::nn::Linear(128, 128),
      torch::nn::ReLU(),
      torch::nn::Linear(128, 10));
}

struct Data {
  std::vector<torch::Tensor> x;  // [32, 784] each
  std::vector<torch::Tensor> y;  // [32]
};

Data make_data(int batches) {
  torch::manual_seed(1);
  Data d;
  for (int i = 0; i < batches; ++i) {
    d.x.push_back(torch::randn({32, 784}));
    d.y.push_back(torch::randint(10, {32}));
  }
  return d;
}

// One arm: a callable that runs one training step on batch i.
struct Arm {
  const char* name;
  std::function<void(size_t)> step;
  std::vector<double> ms;
};

struct Figures {
  double raw_ms = 0;
  double accelerator_ms = 0;
};

Figures measure(
    ampkit::Precision precision,
    int steps,
    bool run_raw,
    bool run_accelerator,
    bool set_to_none,
    bool fused) {
  const Data data = make_data(64);
  const bool bf16 = precision == ampkit::Precision::bf16;

  // Raw LibTorch, as a LibTorch user writes the torch.amp recipe.
  auto raw_model = make_mlp();
  torch::optim::AdamW raw_opt(raw_model->parameters(), 1e-3);
  Arm raw{
      "raw",
      [&](size_t i) {
        if (set_to_none) {
          // PyTorch 2.x's zero_grad() default; 1.13's C++ has no flag.
          for (auto& p : raw_model->parameters()) {
            p.mutable_grad().reset();
          }
        } else {
          raw_opt.zero_grad();
        }
        torch::Tensor loss;
        {
          ampkit::Autocast guard(torch::kCPU, torch::kBFloat16, bf16);
          auto out = raw_model->forward(data.x[i]);
          loss = torch::cross_entropy_loss(out, data.y[i]);
        }
        loss.backward();
        raw_opt.step();
      },
      {}};

  // The same loop with the Accelerator.
  ampkit::Accelerator accelerator(ampkit::AcceleratorOptions()
                                      .mixed_precision(precision)
                                      .fused_optimizer_step(fused)
                                      .quiet(true));
  auto net = make_mlp();
  torch::optim::AdamW adamw(net->parameters(), 1e-3);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  Arm accel{
      "accelerator",
      [&](size_t i) {
        auto scope = accelerator.accumulate(model);
        auto loss = torch::cross_entropy_loss(model(data.x[i]), data.y[i]);
        accelerator.backward(loss);
        optimizer.step();
        // The same clearing as the raw arm, so both do the same work.
        optimizer.zero_grad(set_to_none);
      },
      {}};

  std::vector<Arm*> arms;
  if (run_raw) {
    arms.push_back(&raw);
  }
  if (run_accelerator) {
    arms.push_back(&accel);
  }
  const int warmup = 100;
  for (int s = 0; s < warmup + steps; ++s) {
    // Alternate which arm goes first, so neither always follows the other.
    for (size_t k = 0; k < arms.size(); ++k) {
      Arm* arm = arms[(k + s) % arms.size()];
      const auto t0 = Clock::now();
      arm->step(s % data.x.size());
      const auto t1 = Clock::now();
      if (s >= warmup) {
        arm->ms.push_back(
            std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    }
  }
  Figures f;
  if (run_raw) {
    f.raw_ms = median(raw.ms);
  }
  if (run_accelerator) {
    f.accelerator_ms = median(accel.ms);
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  int steps = 3000;
  std::string precision = "both";
  std::string arm = "both";
  bool json = false;
  bool set_to_none = false;
  bool fused = false;
  for (int i = 1; i < argc; ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "accelerator_bench: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--threads")) {
      threads = std::atoi(value().c_str());
    } else if (!std::strcmp(argv[i], "--steps")) {
      steps = std::atoi(value().c_str());
    } else if (!std::strcmp(argv[i], "--precision")) {
      precision = value();
    } else if (!std::strcmp(argv[i], "--arm")) {
      arm = value();
    } else if (!std::strcmp(argv[i], "--fused")) {
      fused = true;
    } else if (!std::strcmp(argv[i], "--set-to-none")) {
      set_to_none = true;
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(
          stderr,
          "accelerator_bench: unknown argument %s. Usage: accelerator_bench "
          "[--threads N] [--steps N] [--precision no|bf16|both] [--arm "
          "raw|accelerator|both] [--set-to-none] [--fused] [--json]\n",
          argv[i]);
      return 2;
    }
  }
  if (threads < 1 || steps < 1 ||
      (precision != "no" && precision != "bf16" && precision != "both") ||
      (arm != "raw" && arm != "accelerator" && arm != "both")) {
    std::fprintf(
        stderr,
        "accelerator_bench: --threads and --steps must be >= 1, --precision "
        "no|bf16|both, --arm raw|accelerator|both\n");
    return 2;
  }
  torch::set_num_threads(threads);
  const bool run_raw = arm != "accelerator";
  const bool run_accel = arm != "raw";
  std::vector<ampkit::Precision> precisions;
  if (precision != "bf16") {
    precisions.push_back(ampkit::Precision::no);
  }
  if (precision != "no") {
    precisions.push_back(ampkit::Precision::bf16);
  }
  if (!json) {
    std::printf(
        "MLP 784-128-128-10, batch 32, AdamW, %d threads, %d steps per arm, "
        "zero_grad %s, accelerator step %s (median ms per step)\n",
        threads,
        steps,
        set_to_none ? "set_to_none" : "in place",
        fused ? "fused" : "optimizer.step()");
  }
  std::string out = "{";
  for (auto p : precisions) {
    const Figures f = measure(p, steps, run_raw, run_accel, set_to_none, fused);
    const std::string name = ampkit::to_string(p);
    if (json) {
      char buf[256];
      std::snprintf(
          buf,
          sizeof(buf),
          "%s\"%s\": {\"raw_ms\": %.6f, \"accelerator_ms\": %.6f}",
          out.size() > 1 ? ", " : "",
          name.c_str(),
          f.raw_ms,
          f.accelerator_ms);
      out += buf;
    } else if (run_raw && run_accel) {
      std::printf(
          "%-4s raw %.4f ms  accelerator %.4f ms  ratio %.3f\n",
          name.c_str(),
          f.raw_ms,
          f.accelerator_ms,
          f.accelerator_ms / f.raw_ms);
    } else {
      std::printf(
          "%-4s %s %.4f ms\n",
          name.c_str(),
          run_raw ? "raw" : "accelerator",
          run_raw ? f.raw_ms : f.accelerator_ms);
    }
  }
  if (json) {
    std::printf("%s}\n", out.c_str());
  }
  return 0;
}
