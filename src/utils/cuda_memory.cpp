// find_executable_batch_size's memory release with CUDA: blocks the caching
// allocator holds go back to the driver before the smaller retry.
#include <c10/cuda/CUDACachingAllocator.h>

#include "ampkit/utils/memory.h"

namespace ampkit::detail {

void release_cached_memory() {
  c10::cuda::CUDACachingAllocator::emptyCache();
}

}  // namespace ampkit::detail
