// The per-element loop of the fused Adam/AdamW step, in a translation unit of
// its own so that it is built with -O3, OpenMP and an FMA clone (no torch
// headers, so no precompiled header to match).
#pragma once

#include <cstdint>

namespace ampkit::detail {

/// How weight decay enters one Adam-family step.
enum class WeightDecayMode {
  kNone,       ///< weight_decay == 0
  kL2,         ///< Adam: grad + weight_decay * param (grad left untouched)
  kDecoupled,  ///< AdamW: param * (1 - lr * weight_decay) before the update
};

/// The scalars of one step of one tensor, already rounded to float as ATen
/// rounds its double Scalar arguments.
struct AdamKernelScalars {
  float beta1 = 0.9f;               ///< exp_avg.mul_(beta1)
  float one_minus_beta1 = 0.1f;     ///< .add_(grad, 1 - beta1)
  float beta2 = 0.999f;             ///< exp_avg_sq.mul_(beta2)
  float one_minus_beta2 = 0.001f;   ///< .addcmul_(grad, grad, 1 - beta2)
  float sqrt_bias_correction2 = 1;  ///< sqrt(1 - beta2^step)
  float eps = 1e-8f;                ///< added to the denominator
  float neg_step_size = 0;          ///< -lr / (1 - beta1^step)
  /// kL2: weight_decay; kDecoupled: 1 - lr * weight_decay; kNone: unused.
  float decay = 0;
  WeightDecayMode mode = WeightDecayMode::kNone;
  /// The gradients are still multiplied by a loss scale: each is multiplied
  /// by inv_scale as it is read (GradScaler::unscale_'s arithmetic) and
  /// stored back unscaled, as unscale_ would have left it.
  bool unscale = false;
  float inv_scale = 1;  ///< float(1 / double(scale)), as unscale_ rounds it
};

/// One Adam/AdamW step over n contiguous elements, in place on param,
/// exp_avg and exp_avg_sq (and grad when s.unscale), in LibTorch 1.13's op
/// order. Splits the work over
/// `threads` OpenMP threads (pass LibTorch's intra-op thread count).
void adam_step(
    float* param,
    float* grad,
    float* exp_avg,
    float* exp_avg_sq,
    int64_t n,
    const AdamKernelScalars& s,
    int threads);

}  // namespace ampkit::detail
