// Where optim/ meets the LibTorch version: the key type of
// torch::optim::Optimizer::state() (state_key, utils/optimizer_state.h) and
// whether ATen has fused optimizer kernels that run on the CPU and take
// grad_scale/found_inf (2.4, pytorch/pytorch#123074; CUDA-only before).
#pragma once

#include "amp/compat.h"
#include "utils/optimizer_state.h"  // state_key

#define AMPKIT_HAS_ATEN_FUSED_OPTIM AMPKIT_TORCH_AT_LEAST(2, 4)
