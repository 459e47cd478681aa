// Counting tensor memory: on the CPU a wrapper around LibTorch's CPU
// allocator (which counts nothing itself), on CUDA the caching allocator's
// own statistics (cuda_memory.cpp).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "ampkit/error.h"
#include "ampkit/utils/memory.h"
#include "utils/compat.h"
#include "utils/components.h"

namespace ampkit {

namespace {

// Each allocation's data pointer is also its context, as LibTorch's own
// CPU allocator makes it (raw_allocate and raw_deallocate rely on that):
// the inner allocation and its size are kept in a table by data pointer.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) AMPKIT_ALLOCATE_CONST override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) {
      return inner;  // nothing allocated (0 bytes)
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.emplace(data, Live{std::move(inner), static_cast<int64_t>(n)});
    }
    add(static_cast<int64_t>(n));
    return {data, data, &CountingCpuAllocator::release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &CountingCpuAllocator::release;
  }

#if AMPKIT_ALLOCATOR_HAS_COPY_DATA
  void copy_data(
      void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  MemoryStats stats() const {
    return {allocated_.load(), peak_.load()};
  }
  void reset_peak() {
    peak_.store(allocated_.load());
  }

  static std::atomic<CountingCpuAllocator*>& instance_slot() {
    static std::atomic<CountingCpuAllocator*> slot{nullptr};
    return slot;
  }

 private:
  struct Live {
    c10::DataPtr inner;  // frees through LibTorch's deleter when dropped
    int64_t bytes = 0;
  };

  static void release(void* data) {
    CountingCpuAllocator* self = instance_slot().load();
    if (data == nullptr || self == nullptr) {
      return;
    }
    Live gone;
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      auto it = self->live_.find(data);
      if (it == self->live_.end()) {
        return;
      }
      gone = std::move(it->second);
      self->live_.erase(it);
    }
    self->allocated_.fetch_sub(gone.bytes);
  }
  void add(int64_t bytes) const {
    const int64_t now = allocated_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }

  c10::Allocator* inner_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, Live> live_;
  mutable std::atomic<int64_t> allocated_{0};
  mutable std::atomic<int64_t> peak_{0};
};

void check_device(c10::Device device) {
  if (!device.is_cpu() && !device.is_cuda()) {
    throw Unsupported(
        component::kMemory,
        "memory statistics exist for the CPU and CUDA devices, not " +
            device.str() + ".");
  }
}

CountingCpuAllocator& cpu_counter() {
  CountingCpuAllocator* counter = CountingCpuAllocator::instance_slot().load();
  if (counter == nullptr) {
    throw UsageError(
        component::kMemory,
        "the CPU's tensor memory is not counted: call "
        "ampkit::track_memory(torch::kCPU) first (before the tensors to "
        "count are allocated).");
  }
  return *counter;
}

}  // namespace

void track_memory(c10::Device device) {
  check_device(device);
  if (device.is_cuda()) {
    detail::cuda_memory_stats(device);  // throws in a build without CUDA
    return;
  }
  static std::once_flag once;
  std::call_once(once, [] {
    // Lives as long as the process: tensors it allocated may outlive any
    // scope.
    static CountingCpuAllocator counter(c10::GetCPUAllocator());
    CountingCpuAllocator::instance_slot().store(&counter);
    // Above the default allocator's priority, so LibTorch keeps it.
    c10::SetCPUAllocator(&counter, /*priority=*/100);
  });
}

MemoryStats memory_stats(c10::Device device) {
  check_device(device);
  if (device.is_cuda()) {
    return detail::cuda_memory_stats(device);
  }
  return cpu_counter().stats();
}

void reset_peak_memory(c10::Device device) {
  check_device(device);
  if (device.is_cuda()) {
    detail::cuda_reset_peak_memory(device);
    return;
  }
  cpu_counter().reset_peak();
}

}  // namespace ampkit
