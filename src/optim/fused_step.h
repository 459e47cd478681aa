// A single-pass CPU step for torch::optim::Adam and AdamW, in place of the ~10
// ATen ops per parameter that their step() launches; state stays in the
// optimizer, so the two can be mixed freely.
#pragma once

#include <torch/optim/optimizer.h>

#include <optional>
#include <string>

namespace ampkit::detail {

/// Why opt.step() cannot run fused, or empty when it can: the optimizer is
/// torch::optim::Adam or AdamW (exact dynamic type, not a subclass), amsgrad
/// is off, and every parameter with a gradient is a contiguous float32 CPU
/// tensor with a dense contiguous float32 gradient (maximize etc. don't exist
/// in 1.13 C++).
std::optional<std::string> fused_step_unsupported_reason(
    torch::optim::Optimizer& optimizer);

/// One optimizer step with the math of LibTorch's Adam::step / AdamW::step,
/// one pass over each parameter, state kept in the optimizer's own
/// AdamParamState / AdamWParamState (created lazily exactly as LibTorch does:
/// step 0, zeros_like exp_avg/exp_avg_sq with MemoryFormat::Preserve), so
/// save/load, state_dict and a later plain opt.step() continue seamlessly.
///
/// Loss scaling folded in, as in ATen's fused kernels (hand both over with
/// GradScaler::step_supporting_amp_scaling):
/// `grad_scale` (0-dim float32 CPU, optional): the gradients are still
/// multiplied by it; each is multiplied by float(1 / double(grad_scale)) as
/// it is read and stored back unscaled, GradScaler::unscale_'s arithmetic, so
/// the step equals unscale_ + step() with no pass of its own.
/// `found_inf` (0-dim float32 CPU, optional): where it is not 0 nothing
/// changes (parameters, gradients, state and step counts), as GradScaler
/// skips optimizer.step().
/// Precondition: fused_step_unsupported_reason is empty. Throws
/// InvalidArgument when grad_scale or found_inf is not a 0-dim float32 CPU
/// tensor.
void fused_step(
    torch::optim::Optimizer& optimizer,
    const at::Tensor& grad_scale = {},
    const at::Tensor& found_inf = {});

}  // namespace ampkit::detail
