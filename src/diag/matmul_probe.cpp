// Timing square matmuls in fp32, bf16 and fp16 on one device: the
// MatmulTimings that `ampkit doctor` shows and checks its precision
// recommendation against.
#include "diag/doctor_internal.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/diag/doctor.h"

namespace ampkit::diag::detail {

namespace {

// Runs [n, n] @ [n, n] in `dtype` once to warm up, then in doubling batches
// until at least min_seconds have passed; CUDA is synchronised per batch so
// that launches are not what is timed.
MatmulTiming time_matmul(
    c10::Device device,
    c10::ScalarType dtype,
    const std::string& dtype_name,
    int n,
    double min_seconds) {
  MatmulTiming timing;
  timing.device = device.type();
  timing.dtype = dtype_name;
  timing.size = n;
  auto sync = [&] {
    if (device.is_cuda()) {
      torch::cuda::synchronize(device.index());
    }
  };
  try {
    torch::NoGradGuard no_grad;
    // Drawn in fp32: not every LibTorch can draw randn in fp16 on the CPU.
    const auto fp32 = torch::TensorOptions().device(device);
    const torch::Tensor a = torch::randn({n, n}, fp32).to(dtype);  // [n, n]
    const torch::Tensor b = torch::randn({n, n}, fp32).to(dtype);  // [n, n]
    torch::Tensor c = torch::mm(a, b);
    sync();
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    int64_t iterations = 0;
    double elapsed = 0;
    int64_t batch = 1;
    do {
      for (int64_t i = 0; i < batch; ++i) {
        torch::mm_out(c, a, b);
      }
      sync();
      iterations += batch;
      batch *= 2;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < min_seconds);
    timing.gflops = 2.0 * n * n * double(n) * iterations / elapsed / 1e9;
  } catch (const c10::Error& e) {
    std::string message = e.what_without_backtrace();
    message = message.substr(0, message.find('\n'));
    timing.note = "unsupported: " + message;
  }
  return timing;
}

}  // namespace

std::vector<MatmulTiming> time_matmuls(
    c10::Device device, int n, double min_seconds) {
  std::vector<MatmulTiming> out;
  for (const auto& [dtype, name] :
       {std::pair{c10::ScalarType::Float, "fp32"},
        std::pair{c10::ScalarType::BFloat16, "bf16"},
        std::pair{c10::ScalarType::Half, "fp16"}}) {
    out.push_back(time_matmul(device, dtype, name, n, min_seconds));
  }
  return out;
}

}  // namespace ampkit::diag::detail
