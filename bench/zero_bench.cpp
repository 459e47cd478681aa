// ZeRO's memory and step time, for bench/zero_bench.sh. Run as N processes
// with the launcher's variables; `zero_bench STAGE WIDTH STEPS` trains a
// 6-layer MLP (WIDTH x WIDTH) with AdamW under zero_stage STAGE and rank 0
// prints one JSON line: the largest optimizer-state and gradient bytes any
// process holds at the step (counted from its tensors, after the gradient
// reduce), and the median milliseconds per step after 3 warm-up steps.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ampkit/ampkit.h"
#include "bench_mlp.h"

namespace {

using ampkit::bench::Mlp;

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  const int64_t stage = argc > 1 ? std::stoll(argv[1]) : 0;
  const int64_t width = argc > 2 ? std::stoll(argv[2]) : 1024;
  const int64_t steps = argc > 3 ? std::stoll(argv[3]) : 20;
  // DDP's all-reduce and ZeRO-2's reduce-scatter buckets alike.
  const double bucket_mb = argc > 4 ? std::stod(argv[4]) : 25.0;
  ampkit::Accelerator accelerator(ampkit::AcceleratorOptions()
                                      .cpu(true)
                                      .quiet(true)
                                      .zero_stage(stage)
                                      .bucket_cap_mb(bucket_mb));
  torch::manual_seed(0);
  Mlp net(width);
  torch::optim::AdamW adamw(net->parameters(), 1e-4);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  auto x = torch::randn({64, width});
  std::vector<double> ms;
  int64_t state = 0;
  int64_t grads = 0;
  for (int64_t s = 0; s < steps + 3; ++s) {
    const auto start = std::chrono::steady_clock::now();
    accelerator.backward(model(x).square().mean());
    grads = std::max(grads, optimizer.gradient_bytes());
    optimizer.step();
    optimizer.zero_grad();
    state = std::max(state, optimizer.state_bytes());
    if (s >= 3) {
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count());
    }
  }
  std::sort(ms.begin(), ms.end());
  const auto held = accelerator.gather(
      torch::tensor({state, grads}, torch::kLong).unsqueeze(0));
  const auto most = std::get<0>(held.max(0));
  // Stage 2's reduce: the backend's reduce_scatter (NCCL), or ampkit's
  // point-to-point one (Gloo, whose own is slower than its all-reduce).
  const bool native = accelerator.process_group() != nullptr &&
                      accelerator.process_group()->has_reduce_scatter();
  if (accelerator.is_main_process()) {
    std::printf(
        "{\"processes\": %lld, \"stage\": %lld, \"parameters\": %lld, "
        "\"state_bytes\": %lld, \"gradient_bytes\": %lld, \"ms_per_step\": "
        "%.2f, \"reduce_scatter\": \"%s\"}\n",
        static_cast<long long>(accelerator.num_processes()),
        static_cast<long long>(stage),
        static_cast<long long>(6 * (width * width + width)),
        static_cast<long long>(most[0].item<int64_t>()),
        static_cast<long long>(most[1].item<int64_t>()),
        ms.empty() ? 0.0 : ms[ms.size() / 2],
        native ? "the backend's" : "point to point (Gloo)");
  }
  return 0;
}
