// Memory without CUDA: LibTorch's CPU allocator returns freed memory at
// once, so find_executable_batch_size has nothing cached to release, and
// there is no CUDA device to count.
#include "ampkit/error.h"
#include "ampkit/utils/memory.h"
#include "utils/components.h"

namespace ampkit::detail {

void release_cached_memory() {}

namespace {
[[noreturn]] void no_cuda(c10::Device device) {
  throw Unsupported(
      component::kMemory,
      "memory statistics for " + device.str() +
          ": this ampkit was built without CUDA (AMPKIT_WITH_CUDA off).");
}
}  // namespace

MemoryStats cuda_memory_stats(c10::Device device) {
  no_cuda(device);
}

void cuda_reset_peak_memory(c10::Device device) {
  no_cuda(device);
}

}  // namespace ampkit::detail
