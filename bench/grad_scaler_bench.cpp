// GradScaler cost per step on a ~10M-parameter MLP with fp32 gradients on
// the CPU: scale + unscale_ + step + update against a plain
// optimizer.step(), and the fused step with loss scaling folded in against
// the fused step alone and against optimizer.step(): ATen's fused kernels
// where LibTorch has them (2.4+), else ampkit's own CPU Adam/AdamW pass (the
// Accelerator's choice, in the same order). The arms alternate step by step
// in one process; the figures are ratios of their medians.
//
//   build/bench/grad_scaler_bench [--threads N] [--steps N]
#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "optim/fused_step.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// [B, 1024] -> 4096 -> 1024 -> 1024: 9.45M parameters.
torch::nn::Sequential make_mlp() {
  return torch::nn::Sequential(
      torch::nn::Linear(1024, 4096),
      torch::nn::ReLU(),
      torch::nn::Linear(4096, 1024),
      torch::nn::ReLU(),
      torch::nn::Linear(1024, 1024));
}

// Median milliseconds of each arm; an arm that cannot run here is NaN.
struct Result {
  double plain_ms;         // optimizer.step()
  double scaled_ms;        // scale + unscale_ + optimizer.step() + update
  double fused_ms;         // the fused step alone
  double fused_scaled_ms;  // scale + step_supporting_amp_scaling + update
  const char* kernel;      // whose fused step: "ATen", "ampkit" or "none"
};

template <typename MakeOptimizer>
Result measure(MakeOptimizer make_optimizer, int steps) {
  torch::manual_seed(0);
  auto model = make_mlp();
  auto params = model->parameters();
  std::vector<torch::Tensor> saved;
  for (auto& p : params) {
    // Gradients as a scaled backward would leave them (x 65536).
    p.mutable_grad() = torch::randn_like(p) * 65536.0;
    saved.push_back(p.grad().clone());
  }
  auto plain_opt = make_optimizer(params);
  auto scaled_opt = make_optimizer(params);
  auto fused_opt = make_optimizer(params);
  auto fused_scaled_opt = make_optimizer(params);
  const bool aten =
      !ampkit::optim::aten_fused_step_unsupported_reason(*fused_opt);
  const bool fused =
      aten || !ampkit::detail::fused_step_unsupported_reason(*fused_opt);
  auto fused_step = [&](torch::optim::Optimizer& optimizer,
                        const torch::Tensor& grad_scale,
                        const torch::Tensor& found_inf) {
    if (aten) {
      ampkit::optim::aten_fused_step(optimizer, grad_scale, found_inf);
    } else {
      ampkit::detail::fused_step(optimizer, grad_scale, found_inf);
    }
  };
  ampkit::GradScaler scaler;
  ampkit::GradScaler fused_scaler;
  const auto loss = torch::tensor(1.0f);

  auto restore = [&] {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad().copy_(saved[i]);
    }
  };
  // Untimed before each arm: the same gradients every step, so the unscaled
  // values never drift towards subnormals.
  auto time = [&](auto&& body) {
    restore();
    const auto t0 = Clock::now();
    body();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  std::vector<double> plain, scaled, fused_alone, fused_scaled;
  const int warmup = 5;
  for (int i = 0; i < steps + warmup; ++i) {
    const double a = time([&] { plain_opt->step(); });
    const double b = time([&] {
      scaler.scale(loss);
      scaler.unscale_(*scaled_opt);
      scaler.step(*scaled_opt);
      scaler.update();
    });
    double c = 0;
    double d = 0;
    if (fused) {
      c = time([&] { fused_step(*fused_opt, {}, {}); });
      d = time([&] {
        fused_scaler.scale(loss);
        fused_scaler.step_supporting_amp_scaling(
            *fused_scaled_opt,
            [&](const torch::Tensor& grad_scale, const torch::Tensor& inf) {
              fused_step(*fused_scaled_opt, grad_scale, inf);
            });
        fused_scaler.update();
      });
    }
    if (i >= warmup) {
      plain.push_back(a);
      scaled.push_back(b);
      fused_alone.push_back(c);
      fused_scaled.push_back(d);
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {
      median(plain),
      median(scaled),
      fused ? median(fused_alone) : nan,
      fused ? median(fused_scaled) : nan,
      aten    ? "ATen"
      : fused ? "ampkit"
              : "none"};
}

}  // namespace

int main(int argc, char** argv) {
  int threads =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int steps = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) {
      threads = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--steps")) {
      steps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || steps < 1) {
    std::fprintf(stderr, "--threads and --steps must be >= 1\n");
    return 2;
  }
  torch::set_num_threads(threads);
  std::printf(
      "GradScaler overhead, 9.45M-parameter MLP, fp32 grads, CPU, %d threads, "
      "median of %d alternating steps (LibTorch %s)\n",
      threads,
      steps,
      TORCH_VERSION);
  std::printf(
      "Arms: step = optimizer.step(); scaled = scale + unscale_ + step() + "
      "update;\n      fused = the fused step (ATen's kernels from LibTorch "
      "2.4, else ampkit's Adam/AdamW pass); fused+scaling = scale +\n      "
      "step_supporting_amp_scaling(fused step) + update\n");
  std::printf(
      "%-14s %-7s %9s %9s %9s %14s   %-13s %-14s %-14s\n",
      "optimizer",
      "kernel",
      "step ms",
      "scaled",
      "fused",
      "fused+scaling",
      "scaled/step",
      "fused+sc/step",
      "fused+sc/fused");
  auto report = [](const char* name, const Result& r) {
    std::printf(
        "%-14s %-7s %9.3f %9.3f %9.3f %14.3f   %-13.3f %-14.3f %-14.3f\n",
        name,
        r.kernel,
        r.plain_ms,
        r.scaled_ms,
        r.fused_ms,
        r.fused_scaled_ms,
        r.scaled_ms / r.plain_ms,
        r.fused_scaled_ms / r.plain_ms,
        r.fused_scaled_ms / r.fused_ms);
  };
  report(
      "Adam",
      measure(
          [](std::vector<torch::Tensor> p) {
            return std::make_unique<torch::optim::Adam>(p, 1e-3);
          },
          steps));
  report(
      "SGD momentum",
      measure(
          [](std::vector<torch::Tensor> p) {
            return std::make_unique<torch::optim::SGD>(
                p, torch::optim::SGDOptions(1e-3).momentum(0.9));
          },
          steps));
  return 0;
}
