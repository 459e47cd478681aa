// Prepared loaders on a CUDA device copy each batch one batch ahead: into
// pinned host memory, then non_blocking on a side stream, so the copy of
// batch n+1 overlaps the step on batch n (what torch's pin_memory and
// accelerate's non_blocking give Python). Without CUDA there is nothing to
// overlap and make_prefetch returns nullptr.
#include <torch/torch.h>

#include "accelerator/state.h"
#include "ampkit/accelerator/prepared.h"
#include "ampkit/version.h"

#if AMPKIT_BUILT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ampkit::detail {

#if AMPKIT_BUILT_WITH_CUDA
namespace {

class CudaPrefetch final : public DevicePrefetch {
 public:
  explicit CudaPrefetch(const c10::Device& device)
      : device_(device),
        side_(c10::cuda::getStreamFromPool(false, device.index())) {}

  torch::Tensor copy(const torch::Tensor& t) override {
    if (t.device() == device_) {
      return t;
    }
    // pin_memory() copies into page-locked memory from the caching host
    // allocator, which keeps the block until the copy below has run.
    const torch::Tensor pinned =
        t.is_cpu() && !t.is_pinned() ? t.pin_memory() : t;
    c10::cuda::CUDAStreamGuard guard(side_);
    return pinned.to(device_, /*non_blocking=*/true);
  }

  void batch_queued() override {
    ready_.record(side_);
  }

  void wait() override {
    ready_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

  void hand_over(const torch::Tensor& t) override {
    if (t.is_cuda()) {
      // Allocated on the side stream, used on the compute stream: the
      // allocator must not reuse it before the compute stream is done.
      t.record_stream(c10::cuda::getCurrentCUDAStream(device_.index()));
    }
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream side_;
  at::cuda::CUDAEvent ready_;
};

}  // namespace
#endif

std::unique_ptr<DevicePrefetch> make_prefetch(const AcceleratorState& state) {
  const auto& r = state.options;
  if (!r.device.is_cuda() || !r.non_blocking || !r.pin_memory) {
    return nullptr;
  }
#if AMPKIT_BUILT_WITH_CUDA
  return std::make_unique<CudaPrefetch>(r.device);
#else
  return nullptr;
#endif
}

}  // namespace ampkit::detail
