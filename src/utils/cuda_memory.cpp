// Memory with CUDA: find_executable_batch_size's release (blocks the
// caching allocator holds go back to the driver before the smaller retry)
// and the caching allocator's counts for memory_stats.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "ampkit/utils/memory.h"

namespace ampkit::detail {

namespace {
c10::DeviceIndex index_of(c10::Device device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
}  // namespace

void release_cached_memory() {
  c10::cuda::CUDACachingAllocator::emptyCache();
}

MemoryStats cuda_memory_stats(c10::Device device) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device));
  const auto& bytes = stats.allocated_bytes[static_cast<size_t>(
      c10::CachingAllocator::StatType::AGGREGATE)];
  return {bytes.current, bytes.peak};
}

void cuda_reset_peak_memory(c10::Device device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
}

}  // namespace ampkit::detail
