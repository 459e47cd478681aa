// One pass per value: read once, flag non-finite, write scaled. Built with
// -O3 (see src/CMakeLists.txt) and, on x86, cloned for AVX-512 and AVX2 with
// the best chosen at load time, since Debian's default target is SSE2.
#include "amp/unscale_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AMPKIT_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AMPKIT_CLONES
#endif

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

AMPKIT_CLONES bool check_and_scale(float* data, int64_t n, float inv) {
  return inv == 1.0f ? span<false>(data, n, inv) : span<true>(data, n, inv);
}

AMPKIT_CLONES bool check_and_scale(double* data, int64_t n, double inv) {
  return inv == 1.0 ? span<false>(data, n, inv) : span<true>(data, n, inv);
}

}  // namespace ampkit::detail
