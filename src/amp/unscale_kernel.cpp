// One pass per value: read once, flag non-finite, write scaled. Built with
// -O3 (GCC's -O2 leaves the loop scalar) and OpenMP (see src/CMakeLists.txt).
// For the scaling loop SSE2 vectors saturated memory bandwidth on a 2-core
// EPYC (AVX2/AVX-512 clones measured no faster); the read-only check before
// a fused step has per-ISA clones (below).
#include "amp/unscale_kernel.h"

#include <algorithm>

namespace ampkit::detail {

namespace {

// `v * 0` is 0 for finite v and NaN for inf/NaN: summing it per lane flags
// non-finite values without a branch, and fixed-width lanes vectorise.
template <bool kScale, typename T>
inline bool span(T* data, int64_t n, T inv) {
  constexpr int kLanes = 32;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    T* block = data + i;
    for (int l = 0; l < kLanes; ++l) {
      const T v = block[l];
      acc[l] += v * T(0);
      if constexpr (kScale) {
        block[l] = v * inv;
      }
    }
  }
  T tail = 0;
  for (; i < n; ++i) {
    tail += data[i] * T(0);
    if constexpr (kScale) {
      data[i] *= inv;
    }
  }
  for (int l = 0; l < kLanes; ++l) {
    tail += acc[l];
  }
  return tail != T(0);
}

}  // namespace

namespace {

// The read-only check, cloned per ISA: on a 2-core Xeon with AVX-512 the
// AVX-512 clone checks 9.45M gradients in 0.97 ms against SSE2's 1.3 ms
// (grad_scaler_bench's fused+scaling arm without its step).
__attribute__((target_clones("avx512f", "avx2", "default"))) bool check_only(
    const float* data, int64_t n) {
  return span<false>(const_cast<float*>(data), n, 1.0f);
}
__attribute__((target_clones("avx512f", "avx2", "default"))) bool check_only(
    const double* data, int64_t n) {
  return span<false>(const_cast<double*>(data), n, 1.0);
}

template <typename T>
bool check_and_scale_parallel(T* data, int64_t n, T inv, int threads) {
  // 64k elements per chunk: large enough to stream memory, small enough that
  // a 10M-element gradient is spread over every thread.
  constexpr int64_t kChunk = int64_t(1) << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  bool found = false;
#pragma omp parallel for num_threads(threads) schedule(static) \
    reduction(||                                               \
              : found) if (chunks > 1 && threads > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    T* begin = data + c * kChunk;
    const int64_t len = std::min(kChunk, n - c * kChunk);
    found = found || (inv == T(1) ? check_only(begin, len)
                                  : span<true>(begin, len, inv));
  }
  return found;
}

}  // namespace

bool check_and_scale(float* data, int64_t n, float inv, int threads) {
  return check_and_scale_parallel(data, n, inv, threads);
}

bool check_and_scale(double* data, int64_t n, double inv, int threads) {
  return check_and_scale_parallel(data, n, inv, threads);
}

}  // namespace ampkit::detail
