// Out-of-memory handling: recognising torch's out-of-memory errors and
// retrying a training step with smaller batches until one fits.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>

namespace ampkit {

/// True when `e` is an allocation failure: a c10::OutOfMemoryError (what the
/// CUDA caching allocator throws) or a c10::Error from LibTorch's CPU
/// allocator ("DefaultCPUAllocator: can't allocate memory" or, on MSVC and
/// Android, "DefaultCPUAllocator: not enough memory"), which is a plain
/// c10::Error.
bool is_out_of_memory(const std::exception& e);

/// The batch size to try after an out-of-memory error: floor(0.9 *
/// batch_size), computed exactly in integers (128 -> 115, 10 -> 9, 1 -> 0).
/// Throws ampkit::InvalidArgument for a negative `batch_size`.
int64_t next_batch_size(int64_t batch_size);

/// What tune_malloc did, for the start-up table.
struct MallocTuning {
  bool applied = false;
  /// "mmap threshold 256 MiB, trim threshold 512 MiB" or why nothing was
  /// changed ("kept: MALLOC_MMAP_THRESHOLD_ is set", "not glibc").
  std::string description;
};

/// glibc's malloc hands allocations above its mmap threshold (128 KiB at
/// start, raised only as large blocks are freed) to fresh mmap()s, so each
/// of LibTorch's activation and gradient tensors costs page faults on every
/// step until the threshold has crept up (the demo CNN trains 2.4-4x
/// slower in its first epoch). This sets the mmap threshold to
/// `mmap_threshold_bytes` and the trim threshold to twice that, so freed
/// tensor memory is reused instead of returned and faulted in again. It
/// changes nothing when the environment sets glibc's own variables
/// (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, or
/// glibc.malloc tunables in GLIBC_TUNABLES), or off glibc.
MallocTuning tune_malloc(int64_t mmap_threshold_bytes = int64_t(256) << 20);

/// Tensor memory on a device, as torch.cuda.memory_allocated and
/// max_memory_allocated report it: the bytes allocated now and the most
/// allocated at once since the last reset_peak_memory.
struct MemoryStats {
  int64_t allocated = 0;
  int64_t peak = 0;
};

/// Starts counting `device`'s tensor memory. On the CPU, LibTorch's CPU
/// allocator is wrapped (from this call on, for the whole process) by one
/// that counts what it hands out and gets back: only tensors allocated
/// after the first call count. On CUDA the caching allocator counts
/// already; nothing changes. Throws ampkit::Unsupported for another device
/// type, or CUDA in a build without it.
void track_memory(c10::Device device);
/// `device`'s counts; ampkit::UsageError on the CPU before track_memory.
MemoryStats memory_stats(c10::Device device);
/// Starts a new peak from what is allocated now.
void reset_peak_memory(c10::Device device);

namespace detail {

/// The CUDA caching allocator's counts for `device` (a CUDA build; the
/// other throws ampkit::Unsupported).
MemoryStats cuda_memory_stats(c10::Device device);
void cuda_reset_peak_memory(c10::Device device);

/// Checks the starting batch size of find_executable_batch_size and returns
/// it; throws ampkit::InvalidArgument when it is not positive.
int64_t first_batch_size(int64_t starting_batch_size);

/// Handles the exception being handled by the caller's catch block after a
/// try at `batch_size`: rethrows it unchanged (`throw;`) unless it is out of
/// memory; otherwise releases cached memory, logs one line to stderr and
/// returns the next batch size, or throws ampkit::Unsupported when there is
/// none left. Must be called from inside a catch block.
int64_t batch_size_after_failure(
    const std::exception& e, int64_t batch_size, int64_t starting_batch_size);

/// Frees memory an allocator keeps cached for reuse, so the next try sees it
/// as free. Nothing is cached on the CPU, so this build's version does
/// nothing; a CUDA build empties the CUDA caching allocator.
void release_cached_memory();

}  // namespace detail

/// Calls `fn(batch_size)` from `starting_batch_size` down, each time an
/// out-of-memory error (see is_out_of_memory) escapes it retrying with
/// next_batch_size, and returns the result of the first call that succeeds
/// (like accelerate's find_executable_batch_size). `fn` takes an int64_t and
/// may return anything, void included; it must build its tensors inside, so
/// that a failed try frees them as it unwinds. Exceptions that are not out
/// of memory propagate unchanged on the try that raised them. Throws
/// ampkit::InvalidArgument when `starting_batch_size` <= 0 and
/// ampkit::Unsupported when even batch size 1 runs out of memory.
///
///   auto loss = ampkit::find_executable_batch_size(
///       [&](int64_t batch_size) { return train_epoch(batch_size); }, 128);
template <class Fn>
auto find_executable_batch_size(Fn&& fn, int64_t starting_batch_size)
    -> std::invoke_result_t<Fn&, int64_t> {
  int64_t batch_size = detail::first_batch_size(starting_batch_size);
  while (true) {
    try {
      return fn(batch_size);
    } catch (const std::exception& e) {
      batch_size =
          detail::batch_size_after_failure(e, batch_size, starting_batch_size);
    }
  }
}

}  // namespace ampkit
