// Where utils/ meets the LibTorch version, as feature macros:
//  - c10::Allocator::allocate is const up to 2.x's change to non-const, and
//    2.x adds the pure virtual copy_data (memory_meter.cpp);
//  - torch::optim::Optimizer::state() is keyed by the stringified
//    TensorImpl* up to 2.1, by the TensorImpl* itself from 2.2
//    (pytorch/pytorch#108480; optimizer_state.h).
#pragma once

#include <torch/version.h>

#define AMPKIT_UTILS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||               \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#define AMPKIT_ALLOCATOR_HAS_COPY_DATA AMPKIT_UTILS_TORCH_AT_LEAST(2, 0)
#if AMPKIT_ALLOCATOR_HAS_COPY_DATA
#define AMPKIT_ALLOCATE_CONST
#else
#define AMPKIT_ALLOCATE_CONST const
#endif

#define AMPKIT_OPTIM_STATE_KEY_IS_POINTER AMPKIT_UTILS_TORCH_AT_LEAST(2, 2)
