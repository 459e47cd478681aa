// The CUDA half of the capability query, implemented in cuda_capability.cpp
// when LibTorch has CUDA and in no_cuda_capability.cpp otherwise.
#pragma once

namespace ampkit::detail {
/// Index of the current CUDA device, 0 without CUDA.
int current_cuda_device();
/// Makes CUDA device `index` this thread's current device (nothing
/// without CUDA).
void set_current_cuda_device(int index);
}  // namespace ampkit::detail
