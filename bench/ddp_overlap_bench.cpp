// How much of the gradient all-reduce hides behind backward. Run as 2
// processes (bench/dist_bench.sh starts them): every process times, side by
// side in one run, (a) a training micro-step without synchronisation, (b) a
// synchronising step, whose all-reduces the Reducer launches from autograd
// hooks during backward, and (c) the same all-reduce alone (one flat buffer
// of every gradient, after backward). Hidden share = (a + c - b) / c.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ampkit/ampkit.h"
#include "bench_mlp.h"

namespace {

using ampkit::bench::Mlp;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  const int64_t width = argc > 1 ? std::stoll(argv[1]) : 768;
  const int64_t batch = argc > 2 ? std::stoll(argv[2]) : 64;
  const int reps = argc > 3 ? std::stoi(argv[3]) : 15;
  ampkit::Accelerator accelerator(ampkit::AcceleratorOptions()
                                      .cpu(true)
                                      .quiet(true)
                                      .gradient_accumulation_steps(2));
  torch::manual_seed(0);
  Mlp net(width);
  torch::optim::SGD sgd(net->parameters(), 1e-4);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto x = torch::randn({batch, width});
  auto step = [&] {
    auto scope = accelerator.accumulate(model);
    const bool sync = accelerator.sync_gradients();
    accelerator.backward(model(x).square().mean());
    return sync;
  };
  std::vector<double> nosync, synced, alone;
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < reps + 2; ++i) {
    for (int k = 0; k < 2; ++k) {
      accelerator.wait_for_everyone();
      const auto t0 = clock::now();
      const bool sync = step();
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      if (i >= 2) {
        (sync ? synced : nosync).push_back(s);
      }
    }
    optimizer.zero_grad();
    // The same bytes all-reduced alone, after backward, in one buffer.
    std::vector<torch::Tensor> grads;
    for (auto& p : net->parameters()) {
      grads.push_back(torch::randn_like(p).flatten());
    }
    auto flat = torch::cat(grads);
    accelerator.wait_for_everyone();
    const auto t0 = clock::now();
    accelerator.process_group()->all_reduce(flat, ampkit::dist::ReduceOp::sum);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (i >= 2) {
      alone.push_back(s);
    }
  }
  const double a = median(nosync), b = median(synced), c = median(alone);
  if (accelerator.is_main_process()) {
    int64_t params = 0;
    for (auto& p : net->parameters()) {
      params += p.numel();
    }
    std::printf(
        "ddp_overlap: %d processes, %lld parameters (%.1f MB of fp32 "
        "gradients), "
        "batch %lld per process, 1 thread each, median of %d\n",
        static_cast<int>(accelerator.num_processes()),
        static_cast<long long>(params),
        params * 4 / 1e6,
        static_cast<long long>(batch),
        reps);
    std::printf("  step without sync   %.2f ms\n", a * 1e3);
    std::printf("  step with sync      %.2f ms\n", b * 1e3);
    std::printf("  all-reduce alone    %.2f ms\n", c * 1e3);
    std::printf(
        "  hidden behind backward: %.0f%% of the all-reduce ((a + c - b) / "
        "c)\n",
        100.0 * std::clamp((a + c - b) / c, 0.0, 1.0));
  }
  return 0;
}
