// Version switches for autocast and the GradScaler kernels (see compat.h), and
// the unscale fallback for LibTorch builds without a CPU kernel.
#include "amp/compat.h"

#include <ATen/Parallel.h>  // at::get_num_threads
#include <ATen/autocast_mode.h>

#include <cmath>

#include "amp/unscale_kernel.h"
#include "ampkit/error.h"

namespace ampkit::detail {

#if AMPKIT_TORCH_AT_LEAST(2, 4)

bool autocast_is_enabled(c10::DeviceType device_type) {
  return at::autocast::is_autocast_enabled(device_type);
}
void autocast_set_enabled(c10::DeviceType device_type, bool enabled) {
  at::autocast::set_autocast_enabled(device_type, enabled);
}
c10::ScalarType autocast_get_dtype(c10::DeviceType device_type) {
  return at::autocast::get_autocast_dtype(device_type);
}
void autocast_set_dtype(c10::DeviceType device_type, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device_type, dtype);
}

#else

namespace {
[[noreturn]] void unsupported_device(c10::DeviceType device_type) {
  throw InvalidArgument(
      "Autocast",
      "autocast is not available for device type " +
          c10::DeviceTypeName(device_type) +
          " in this LibTorch. Use torch::kCPU or torch::kCUDA.");
}
}  // namespace

bool autocast_is_enabled(c10::DeviceType device_type) {
  switch (device_type) {
    case c10::DeviceType::CPU:
      return at::autocast::is_cpu_enabled();
    case c10::DeviceType::CUDA:
      return at::autocast::is_enabled();
    default:
      unsupported_device(device_type);
  }
}
void autocast_set_enabled(c10::DeviceType device_type, bool enabled) {
  switch (device_type) {
    case c10::DeviceType::CPU:
      return at::autocast::set_cpu_enabled(enabled);
    case c10::DeviceType::CUDA:
      return at::autocast::set_enabled(enabled);
    default:
      unsupported_device(device_type);
  }
}
c10::ScalarType autocast_get_dtype(c10::DeviceType device_type) {
  switch (device_type) {
    case c10::DeviceType::CPU:
      return at::autocast::get_autocast_cpu_dtype();
    case c10::DeviceType::CUDA:
      return at::autocast::get_autocast_gpu_dtype();
    default:
      unsupported_device(device_type);
  }
}
void autocast_set_dtype(c10::DeviceType device_type, c10::ScalarType dtype) {
  switch (device_type) {
    case c10::DeviceType::CPU:
      return at::autocast::set_autocast_cpu_dtype(dtype);
    case c10::DeviceType::CUDA:
      return at::autocast::set_autocast_gpu_dtype(dtype);
    default:
      unsupported_device(device_type);
  }
}

#endif

bool has_amp_kernels(c10::DeviceType device_type) {
  if (device_type == c10::DeviceType::CUDA) {
    return true;
  }
  return device_type == c10::DeviceType::CPU && AMPKIT_TORCH_AT_LEAST(2, 3);
}

namespace {

void fallback_non_finite_check_and_unscale_(
    at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  if (found_inf.is_cpu()) {
    // CPU tensors: reading the scalars costs no device synchronisation.
    const float inv = inv_scale.item<float>();
    const int threads = at::get_num_threads();
    bool found = false;
    at::NoGradGuard no_grad;
    for (const at::Tensor& g : grads) {
      at::Tensor grad = g;
      if (grad.is_contiguous() && grad.scalar_type() == at::kFloat) {
        found |=
            check_and_scale(grad.data_ptr<float>(), grad.numel(), inv, threads);
      } else if (grad.is_contiguous() && grad.scalar_type() == at::kDouble) {
        found |= check_and_scale(
            grad.data_ptr<double>(), grad.numel(), double(inv), threads);
      } else {
        found |= !at::isfinite(grad).all().item<bool>();
        if (inv != 1.0f) {
          grad.mul_(inv);
        }
      }
    }
    if (found) {
      found_inf.fill_(1.0);
    }
    return;
  }
  // Other devices without a kernel: stay on the device, no host sync.
  for (const at::Tensor& g : grads) {
    at::Tensor grad = g;
    at::Tensor bad = at::isfinite(grad).all().logical_not().to(at::kFloat);
    found_inf.copy_(at::maximum(found_inf, bad));
    grad.mul_(inv_scale.to(grad.scalar_type()));
  }
}

}  // namespace

void non_finite_check_and_unscale_(
    at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  if (grads.empty()) {
    return;
  }
  if (has_amp_kernels(found_inf.device().type())) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  } else {
    fallback_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  }
}

void non_finite_check_(at::TensorList grads, at::Tensor& found_inf) {
  if (grads.empty()) {
    return;
  }
  const at::Tensor one = at::ones({}, found_inf.options());
  if (found_inf.is_cpu()) {
    // With inv_scale 1 the CPU loop only reads.
    fallback_non_finite_check_and_unscale_(grads, found_inf, one);
  } else {
    non_finite_check_and_unscale_(grads, found_inf, one);
  }
}

}  // namespace ampkit::detail
