// Out-of-memory detection and the non-template steps of
// find_executable_batch_size's retry loop.
#include "ampkit/utils/memory.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <string>

#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"
#include "utils/components.h"

namespace ampkit {

namespace {

// What c10/core/impl/alloc_cpu.cpp's CAFFE_ENFORCE says when the allocation
// fails (POSIX, then MSVC/Android); LibTorch 1.13 through 2.x.
constexpr const char* kCpuAllocatorMessages[] = {
    "DefaultCPUAllocator: can't allocate memory",
    "DefaultCPUAllocator: not enough memory"};

}  // namespace

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) {
    return true;
  }
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  if (error == nullptr) {
    return false;
  }
  const char* message = error->what();
  for (const char* needle : kCpuAllocatorMessages) {
    if (std::strstr(message, needle) != nullptr) {
      return true;
    }
  }
  return false;
}

int64_t next_batch_size(int64_t batch_size) {
  if (batch_size < 0) {
    throw InvalidArgument(
        "next_batch_size",
        "batch size must not be negative, got " + std::to_string(batch_size) +
            ". Pass the batch size that ran out of memory.");
  }
  // batch_size * 9 / 10 without overflowing for batch sizes near INT64_MAX.
  return batch_size / 10 * 9 + batch_size % 10 * 9 / 10;
}

namespace detail {

int64_t first_batch_size(int64_t starting_batch_size) {
  if (starting_batch_size <= 0) {
    throw InvalidArgument(
        component::kFindExecutableBatchSize,
        "starting_batch_size must be positive, got " +
            std::to_string(starting_batch_size) +
            ". Pass the largest batch size you want tried, e.g. 128.");
  }
  return starting_batch_size;
}

int64_t batch_size_after_failure(
    const std::exception& e, int64_t batch_size, int64_t starting_batch_size) {
  if (!is_out_of_memory(e)) {
    // Rethrows the caller's exception object itself, so its type survives.
    throw;
  }
  release_cached_memory();
  const int64_t next = next_batch_size(batch_size);
  if (next == 0) {
    throw Unsupported(
        component::kFindExecutableBatchSize,
        "no batch size fits in memory, got out-of-memory down to batch size " +
            std::to_string(batch_size) + " (started at " +
            std::to_string(starting_batch_size) +
            "). Free memory, use mixed_precision bf16, or lower the model "
            "size.");
  }
  // Each process finds its own batch size, so each one says so.
  warn(
      component::kFindExecutableBatchSize,
      "out of memory at batch size " + std::to_string(batch_size) +
          "; retrying with " + std::to_string(next),
      /*main_process_only=*/false);
  return next;
}

}  // namespace detail

}  // namespace ampkit
