// The CPU unscale loop of the GradScaler fallback, in a translation unit of
// its own so that it is built with -O3, OpenMP and per-ISA clones (no torch
// headers, so no precompiled header to match).
#pragma once

#include <cstdint>

namespace ampkit::detail {

/// Multiplies data[0, n) by inv in place (skipped when inv == 1) and returns
/// true when any input value was inf or NaN. Splits the work over `threads`
/// OpenMP threads (pass LibTorch's intra-op thread count).
bool check_and_scale(float* data, int64_t n, float inv, int threads);
bool check_and_scale(double* data, int64_t n, double inv, int threads);

}  // namespace ampkit::detail
