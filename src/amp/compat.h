// The one place where amp/ meets the LibTorch version: autocast's C++ names
// (per-device in 1.13-2.3, generic from 2.4) and the GradScaler kernels
// (CUDA everywhere, CPU from 2.3).
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#define AMPKIT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ampkit::detail {

bool autocast_is_enabled(c10::DeviceType device_type);
void autocast_set_enabled(c10::DeviceType device_type, bool enabled);
c10::ScalarType autocast_get_dtype(c10::DeviceType device_type);
void autocast_set_dtype(c10::DeviceType device_type, c10::ScalarType dtype);

/// Whether ATen has _amp_foreach_non_finite_check_and_unscale_ and
/// _amp_update_scale_ kernels for tensors of this device type.
bool has_amp_kernels(c10::DeviceType device_type);

/// found_inf := 1 where any of `grads` holds inf or NaN; every grad is
/// multiplied by inv_scale. All tensors share one device and dtype; found_inf
/// and inv_scale are 0-dim float32 on that device. Uses ATen's kernel where
/// the running LibTorch has one, the same math otherwise.
void non_finite_check_and_unscale_(
    at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale);

/// found_inf := 1 where any of `grads` holds inf or NaN; the gradients are
/// not changed on the CPU (a read-only pass), and multiplied by 1 on other
/// devices (ATen's kernel with inv_scale 1, as Python's
/// GradScaler._check_inf_per_device does).
void non_finite_check_(at::TensorList grads, at::Tensor& found_inf);

}  // namespace ampkit::detail
