// GradScaler cost per step: scale + unscale_ + step + update against a plain
// optimizer.step(), on a ~10M-parameter MLP with fp32 gradients on the CPU.
// The two arms alternate step by step in one process; the figure is the
// ratio of their medians.
//
//   build/bench/grad_scaler_bench [--threads N] [--steps N]
#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double plain_ms;
  double scaled_ms;
};

// [B, 1024] -> 4096 -> 1024 -> 1024: 9.45M parameters.
torch::nn::Sequential make_mlp() {
  return torch::nn::Sequential(
      torch::nn::Linear(1024, 4096),
      torch::nn::ReLU(),
      torch::nn::Linear(4096, 1024),
      torch::nn::ReLU(),
      torch::nn::Linear(1024, 1024));
}

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
  ampkit::GradScaler scaler;
  const auto loss = torch::tensor(1.0f);

  auto restore = [&] {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad().copy_(saved[i]);
    }
  };
  std::vector<double> plain;
  std::vector<double> scaled;
  const int warmup = 5;
  for (int i = 0; i < steps + warmup; ++i) {
    // Untimed in both arms: the same gradients before every step, so the
    // unscaled values never drift towards subnormals.
    restore();
    auto t0 = Clock::now();
    plain_opt->step();
    auto t1 = Clock::now();
    restore();
    auto t2 = Clock::now();
    scaler.scale(loss);
    scaler.unscale_(*scaled_opt);
    scaler.step(*scaled_opt);
    scaler.update();
    auto t3 = Clock::now();
    if (i >= warmup) {
      plain.push_back(
          std::chrono::duration<double, std::milli>(t1 - t0).count());
      scaled.push_back(
          std::chrono::duration<double, std::milli>(t3 - t2).count());
    }
  }
  return {median(plain), median(scaled)};
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
      "%-14s %12s %22s %8s\n",
      "optimizer",
      "step() ms",
      "scale+unscale_+step+update ms",
      "ratio");
  auto report = [](const char* name, const Result& r) {
    std::printf(
        "%-14s %12.3f %29.3f %8.3f\n",
        name,
        r.plain_ms,
        r.scaled_ms,
        r.scaled_ms / r.plain_ms);
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
