// The one place where optim/ meets the LibTorch version: the key type of
// torch::optim::Optimizer::state() (the stringified TensorImpl* up to 2.1,
// the TensorImpl* itself from 2.2, pytorch/pytorch#108480) and whether ATen
// has fused optimizer kernels that run on the CPU and take
// grad_scale/found_inf (2.4, pytorch/pytorch#123074; CUDA-only before).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Type.h>

#include <string>

#include "amp/compat.h"

#define AMPKIT_HAS_ATEN_FUSED_OPTIM AMPKIT_TORCH_AT_LEAST(2, 4)

namespace ampkit::detail {

#if AMPKIT_TORCH_AT_LEAST(2, 2)
inline void* state_key(const at::Tensor& p) {
  return p.unsafeGetTensorImpl();
}
#else
inline std::string state_key(const at::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif

}  // namespace ampkit::detail
