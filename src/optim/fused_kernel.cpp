// One read and one write per value of param, exp_avg and exp_avg_sq (and of
// the gradient when it is unscaled on the way), in the rounding order of the
// ~10 ATen ops LibTorch 1.13 runs per parameter. Built with -O3 (vectorises the
// loop), OpenMP, -fno-math-errno (lets sqrt vectorise) and -ffp-contract=off
// (the multiply-adds fused below are the ones ATen fuses, and no others), see
// src/CMakeLists.txt.
#include "optim/fused_kernel.h"

#include <algorithm>
#include <cmath>

namespace ampkit::detail {

namespace {

// ATen's AVX2/AVX-512 kernels round a*b+c once in two places: add_ with
// alpha (vec::fmadd) and addcmul_ (self + value * t1 * t2, contracted by the
// compiler); its DEFAULT kernels round twice. Measured bit for bit on 1.13.
template <bool kFma>
inline float mul_add(float a, float b, float c) {
  if constexpr (kFma) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;
  }
}

template <bool kFma, WeightDecayMode kMode, bool kUnscale>
__attribute__((always_inline)) inline void span(
    float* __restrict param,
    float* __restrict grad,
    float* __restrict exp_avg,
    float* __restrict exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s) {
  const float beta1 = s.beta1;
  const float one_minus_beta1 = s.one_minus_beta1;
  const float beta2 = s.beta2;
  const float one_minus_beta2 = s.one_minus_beta2;
  const float sqrt_bc2 = s.sqrt_bias_correction2;
  const float eps = s.eps;
  const float neg_step_size = s.neg_step_size;
  const float decay = s.decay;
  const float inv_scale = s.inv_scale;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = grad[i];
    if constexpr (kUnscale) {
      g = g * inv_scale;  // GradScaler::unscale_: grad.mul_(inv_scale)
      grad[i] = g;
    }
    if constexpr (kMode == WeightDecayMode::kDecoupled) {
      p = p * decay;  // p.mul_(1 - lr * wd)
    } else if constexpr (kMode == WeightDecayMode::kL2) {
      g = mul_add<kFma>(p, decay, g);  // grad.add(p, wd)
    }
    // exp_avg.mul_(beta1).add_(grad, 1 - beta1)
    const float m = mul_add<kFma>(g, one_minus_beta1, exp_avg[i] * beta1);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    const float v =
        mul_add<kFma>(one_minus_beta2 * g, g, exp_avg_sq[i] * beta2);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    // (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps)
    const float denom = std::sqrt(v) / sqrt_bc2 + eps;
    // p.addcdiv_(exp_avg, denom, -step_size)
    param[i] = p + neg_step_size * m / denom;
  }
}

template <bool kFma, bool kUnscale>
__attribute__((always_inline)) inline void span_mode(
    float* param,
    float* grad,
    float* exp_avg,
    float* exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s) {
  switch (s.mode) {
    case WeightDecayMode::kNone:
      span<kFma, WeightDecayMode::kNone, kUnscale>(
          param, grad, exp_avg, exp_avg_sq, n, s);
      break;
    case WeightDecayMode::kL2:
      span<kFma, WeightDecayMode::kL2, kUnscale>(
          param, grad, exp_avg, exp_avg_sq, n, s);
      break;
    case WeightDecayMode::kDecoupled:
      span<kFma, WeightDecayMode::kDecoupled, kUnscale>(
          param, grad, exp_avg, exp_avg_sq, n, s);
      break;
  }
}

template <bool kFma>
__attribute__((always_inline)) inline void span_any(
    float* param,
    float* grad,
    float* exp_avg,
    float* exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s) {
  if (s.unscale) {
    span_mode<kFma, true>(param, grad, exp_avg, exp_avg_sq, n, s);
  } else {
    span_mode<kFma, false>(param, grad, exp_avg, exp_avg_sq, n, s);
  }
}

using SpanFn =
    void (*)(float*, float*, float*, float*, int64_t, const AdamKernelScalars&);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// x86-64's baseline has no FMA: ATen picks its AVX2/AVX-512 kernels (fused
// fmadd) at run time, so this file does the same.
__attribute__((target("fma"))) void span_fma(
    float* param,
    float* grad,
    float* exp_avg,
    float* exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s) {
  span_any<true>(param, grad, exp_avg, exp_avg_sq, n, s);
}

void span_no_fma(
    float* param,
    float* grad,
    float* exp_avg,
    float* exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s) {
  span_any<false>(param, grad, exp_avg, exp_avg_sq, n, s);
}

SpanFn pick_span() {
  return __builtin_cpu_supports("fma") ? span_fma : span_no_fma;
}
#else
// Other 64-bit targets (aarch64) have FMA in their baseline, as ATen's
// vectors use it.
void span_fma(
    float* param,
    float* grad,
    float* exp_avg,
    float* exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s) {
  span_any<true>(param, grad, exp_avg, exp_avg_sq, n, s);
}

SpanFn pick_span() {
  return span_fma;
}
#endif

}  // namespace

void adam_step(
    float* param,
    float* grad,
    float* exp_avg,
    float* exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s,
    int threads) {
  static const SpanFn run = pick_span();
  // 32k elements per chunk (ATen's GRAIN_SIZE): smaller tensors run serially,
  // where waking threads costs more than the loop.
  constexpr int64_t kChunk = int64_t(1) << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (chunks > 1 && threads > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    const int64_t len = std::min(kChunk, n - begin);
    run(param + begin,
        grad + begin,
        exp_avg + begin,
        exp_avg_sq + begin,
        len,
        s);
  }
}

}  // namespace ampkit::detail
