// find_executable_batch_size's memory release without CUDA: LibTorch's CPU
// allocator returns freed memory at once, so nothing is cached to release.
#include "ampkit/utils/memory.h"

namespace ampkit::detail {

void release_cached_memory() {}

}  // namespace ampkit::detail
