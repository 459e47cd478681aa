// find_executable_batch_size and is_out_of_memory, against the real error of
// LibTorch's CPU allocator and against c10::OutOfMemoryError.
#include "ampkit/utils/memory.h"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <malloc.h>
#include <stdlib.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit {
namespace {

// 2^46 floats (256 TiB): the CPU allocator fails at once with ENOMEM, even
// with overcommit.
void allocate_too_much() {
  torch::empty({1LL << 46});
}

c10::Error real_cpu_oom() {
  try {
    allocate_too_much();
  } catch (const c10::Error& e) {
    return e;
  }
  throw std::logic_error("allocating 256 TiB did not fail");
}

// The SourceLocation constructor is the one c10::Error keeps in every LibTorch.
c10::Error plain_error(const std::string& message) {
  return c10::Error(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
}

c10::OutOfMemoryError cuda_style_oom() {
  return c10::OutOfMemoryError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      "CUDA out of memory. Tried to allocate 2.00 GiB");
}

TEST(MemoryTest, NextBatchSizeIsNineTenthsRoundedDown) {
  EXPECT_EQ(next_batch_size(128), 115);
  EXPECT_EQ(next_batch_size(10), 9);
  EXPECT_EQ(next_batch_size(2), 1);
  EXPECT_EQ(next_batch_size(1), 0);
  EXPECT_EQ(next_batch_size(0), 0);
  // Exact near the top of the range, where batch_size * 9 would overflow.
  EXPECT_EQ(
      next_batch_size(std::numeric_limits<int64_t>::max()),
      int64_t{8301034833169298226});
  AMPKIT_EXPECT_THROWS_WITH(
      next_batch_size(-1),
      InvalidArgument,
      "next_batch_size: batch size must not be negative, got -1.");
}

TEST(MemoryTest, RecognisesOutOfMemoryErrorsAndNothingElse) {
  EXPECT_TRUE(is_out_of_memory(cuda_style_oom()));
  const c10::Error cpu = real_cpu_oom();
  EXPECT_THAT(
      std::string(cpu.what()),
      ::testing::HasSubstr("DefaultCPUAllocator: can't allocate memory"));
  EXPECT_TRUE(is_out_of_memory(cpu));
  EXPECT_TRUE(
      is_out_of_memory(plain_error("DefaultCPUAllocator: not enough memory: "
                                   "you tried to allocate 8 bytes.")));
  EXPECT_FALSE(is_out_of_memory(plain_error("shape mismatch")));
  EXPECT_FALSE(is_out_of_memory(std::bad_alloc()));
  EXPECT_FALSE(is_out_of_memory(std::runtime_error(
      "DefaultCPUAllocator: can't allocate memory (not a c10::Error)")));
}

TEST(MemoryTest, ShrinksByTenPercentUntilTheBatchFits) {
  std::vector<int64_t> tried;
  const int64_t result = find_executable_batch_size(
      [&](int64_t batch_size) {
        tried.push_back(batch_size);
        if (batch_size > 70) {
          allocate_too_much();
        }
        return batch_size * 2;
      },
      128);
  EXPECT_EQ(tried, (std::vector<int64_t>{128, 115, 103, 92, 82, 73, 65}));
  EXPECT_EQ(result, 130);
}

TEST(MemoryTest, RetriesOnCudaStyleOutOfMemoryToo) {
  std::vector<int64_t> tried;
  const std::string result = find_executable_batch_size(
      [&](int64_t batch_size) {
        tried.push_back(batch_size);
        if (batch_size == 16) {
          throw cuda_style_oom();
        }
        return std::to_string(batch_size);
      },
      16);
  EXPECT_EQ(tried, (std::vector<int64_t>{16, 14}));
  EXPECT_EQ(result, "14");
}

TEST(MemoryTest, WorksWithAVoidFunction) {
  int calls = 0;
  find_executable_batch_size(
      [&](int64_t batch_size) {
        ++calls;
        if (batch_size > 8) {
          allocate_too_much();
        }
      },
      10);
  EXPECT_EQ(calls, 3);  // 10 and 9 run out of memory, 8 fits
}

TEST(MemoryTest, GivesUpWhenEvenBatchSizeOneRunsOutOfMemory) {
  std::vector<int64_t> tried;
  AMPKIT_EXPECT_THROWS_WITH(
      find_executable_batch_size(
          [&](int64_t batch_size) {
            tried.push_back(batch_size);
            allocate_too_much();
          },
          128),
      Unsupported,
      "find_executable_batch_size: no batch size fits in memory, got "
      "out-of-memory down to batch size 1 (started at 128). Free memory, use "
      "mixed_precision bf16, or lower the model size.");
  ASSERT_FALSE(tried.empty());
  EXPECT_EQ(tried.front(), 128);
  EXPECT_EQ(tried.back(), 1);
  for (size_t i = 1; i < tried.size(); ++i) {
    EXPECT_EQ(tried[i], next_batch_size(tried[i - 1]));
  }
}

TEST(MemoryTest, RethrowsOtherExceptionsOnTheFirstTryUnchanged) {
  int calls = 0;
  try {
    find_executable_batch_size(
        [&](int64_t) -> int {
          ++calls;
          throw std::invalid_argument("bad config");
        },
        64);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "bad config");
  }
  EXPECT_EQ(calls, 1);

  calls = 0;
  try {
    find_executable_batch_size(
        [&](int64_t) {
          ++calls;
          // A shape error: a c10::Error that is not out of memory.
          torch::matmul(torch::ones({2, 3}), torch::ones({2, 3}));
        },
        64);
    ADD_FAILURE() << "expected c10::Error";
  } catch (const c10::Error& e) {
    EXPECT_FALSE(is_out_of_memory(e));
    EXPECT_THAT(
        std::string(e.what()), ::testing::HasSubstr("cannot be multiplied"));
  }
  EXPECT_EQ(calls, 1);

  // A c10::Error subclass keeps its own type.
  EXPECT_THROW(
      find_executable_batch_size([](int64_t) { torch::ones({2})[5]; }, 64),
      c10::IndexError);
}

TEST(MemoryTest, RejectsANonPositiveStartingBatchSize) {
  int calls = 0;
  AMPKIT_EXPECT_THROWS_WITH(
      find_executable_batch_size([&](int64_t) { ++calls; }, 0),
      InvalidArgument,
      "find_executable_batch_size: starting_batch_size must be positive, got "
      "0.");
  AMPKIT_EXPECT_THROWS_WITH(
      find_executable_batch_size([&](int64_t) { ++calls; }, -4),
      InvalidArgument,
      "got -4.");
  EXPECT_EQ(calls, 0);
}

#if defined(__GLIBC__)
// After tune_malloc, a tensor-sized block comes from the heap and goes back
// to it: no mmap (which would page-fault it in again on every step).
TEST(MemoryTest, CountsTheCpuTensorsAllocatedAndTheirPeak) {
  track_memory(torch::kCPU);
  track_memory(torch::kCPU);  // twice: one counter
  const int64_t start = memory_stats(torch::kCPU).allocated;
  reset_peak_memory(torch::kCPU);
  EXPECT_EQ(memory_stats(torch::kCPU).peak, start);
  constexpr int64_t kBytes = int64_t(4) << 20;
  {
    auto t = torch::ones({kBytes / 4});
    EXPECT_EQ(memory_stats(torch::kCPU).allocated, start + kBytes);
    auto u = t * 2;  // a second tensor, then both are freed
    EXPECT_EQ(memory_stats(torch::kCPU).allocated, start + 2 * kBytes);
  }
  const auto after = memory_stats(torch::kCPU);
  EXPECT_EQ(after.allocated, start);
  // t * 2 may allocate a scalar tensor for the 2 too.
  EXPECT_GE(after.peak, start + 2 * kBytes);
  EXPECT_LT(after.peak, start + 2 * kBytes + 1024);
  reset_peak_memory(torch::kCPU);
  EXPECT_EQ(memory_stats(torch::kCPU).peak, start);
  // LibTorch's raw allocations (some CPU kernels' scratch) pass through.
  c10::Allocator* cpu = c10::GetCPUAllocator();
  void* raw = cpu->raw_allocate(4096);
  EXPECT_EQ(memory_stats(torch::kCPU).allocated, start + 4096);
  cpu->raw_deallocate(raw);
  EXPECT_EQ(memory_stats(torch::kCPU).allocated, start);
}

TEST(MemoryTest, MemoryStatsOfAnotherDeviceTypeSayWhich) {
  const auto meta = c10::Device(c10::DeviceType::Meta);
  AMPKIT_EXPECT_THROWS_WITH(memory_stats(meta), Unsupported, "meta");
}

TEST(TuneMallocTest, TensorSizedBlocksStayOnTheHeap) {
  const MallocTuning t = tune_malloc();
  if (!t.applied) {
    GTEST_SKIP() << "tune_malloc left malloc alone here: " << t.description;
  }
  EXPECT_EQ(t.description, "mmap threshold 256 MiB, trim threshold 512 MiB");
  const size_t before = mallinfo2().hblks;
  void* block = std::malloc(size_t(16) << 20);  // 16 MiB, glibc's default
  ASSERT_NE(block, nullptr);                    // would mmap it
  EXPECT_EQ(mallinfo2().hblks, before);
  std::free(block);
}

TEST(TuneMallocTest, TheEnvironmentsOwnSettingsAreKept) {
  ::setenv("MALLOC_TOP_PAD_", "1048576", 1);
  const MallocTuning t = tune_malloc();
  ::unsetenv("MALLOC_TOP_PAD_");
  EXPECT_FALSE(t.applied);
  EXPECT_EQ(t.description, "kept: MALLOC_TOP_PAD_ is set");
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536", 1);
  const MallocTuning u = tune_malloc();
  ::unsetenv("GLIBC_TUNABLES");
  EXPECT_FALSE(u.applied);
  EXPECT_EQ(u.description, "kept: GLIBC_TUNABLES sets glibc.malloc");
}
#endif

TEST(TuneMallocTest, AThresholdOutOfRangeIsRefused) {
  AMPKIT_EXPECT_THROWS_WITH(
      tune_malloc(4096),
      InvalidArgument,
      "mmap_threshold_bytes must be in [1 MiB, 1 GiB], got 4096");
}

}  // namespace
}  // namespace ampkit
