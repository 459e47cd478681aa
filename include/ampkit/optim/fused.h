// ATen's fused optimizer kernels (_fused_adam_, _fused_adamw_, _fused_sgd_)
// behind LibTorch's own torch::optim::Adam, AdamW and SGD: one kernel per
// device and dtype instead of ~10 ATen ops per parameter, and loss scaling
// folded in (Python's `fused=True`, which LibTorch's C++ optimizers lack).
#pragma once

#include <torch/optim/optimizer.h>

#include <optional>
#include <string>

namespace ampkit::optim {

/// Why aten_fused_step cannot run `optimizer`, or empty when it can: the
/// optimizer is exactly torch::optim::Adam, AdamW or SGD (not a subclass),
/// this LibTorch has the kernels (CPU and CUDA from 2.4), and every
/// parameter with a gradient is a dense float32/float64/float16/bfloat16
/// tensor on the CPU or a CUDA device with a dense gradient of its dtype.
std::optional<std::string> aten_fused_step_unsupported_reason(
    torch::optim::Optimizer& optimizer);

/// One step of `optimizer` through ATen's fused kernel, with LibTorch's own
/// semantics and state: Adam's/AdamW's step count, exp_avg, exp_avg_sq
/// (and max_exp_avg_sq with amsgrad) and SGD's momentum_buffer stay in the
/// optimizer's param states (created as its step() creates them), so
/// state_dict, checkpoints and a later optimizer.step() continue seamlessly.
/// The update equals optimizer.step()'s within fp32 rounding.
///
/// `grad_scale` (0-dim float32, optional): the gradients are still
/// multiplied by it (a GradScaler's scale before unscale_); the kernel
/// divides them by it as it reads them and stores the unscaled values.
/// `found_inf` (0-dim float32, optional): where it is 1 the kernel changes
/// nothing (parameters, state and step counts stay). Adam's and AdamW's
/// step counts live on the parameters' device as Python's fused path keeps
/// them, so a step on CUDA needs no read by the host (SGD with momentum
/// reads found_inf once, on the step that creates its buffers). Their
/// LibTorch step() is brought up to date when the state is saved or
/// cloned, by sync_fused_step_counts, and on the CPU after every step.
/// Use GradScaler::step_supporting_amp_scaling to get both.
/// Throws ampkit::Unsupported with aten_fused_step_unsupported_reason's
/// text when it cannot run.
void aten_fused_step(
    torch::optim::Optimizer& optimizer,
    const torch::Tensor& grad_scale = {},
    const torch::Tensor& found_inf = {});

/// Brings the int64 step() of `optimizer`'s Adam/AdamW param states up to
/// the counts aten_fused_step keeps on the device (one read per state that
/// stepped on CUDA since); needed before reading step() by hand or calling
/// the optimizer's own step() after fused steps on CUDA. Saving does it.
void sync_fused_step_counts(torch::optim::Optimizer& optimizer);

}  // namespace ampkit::optim
