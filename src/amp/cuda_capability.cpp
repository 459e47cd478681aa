// CUDA device properties, compiled only when LibTorch was built with CUDA.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>

#include "amp/cuda_capability.h"
#include "ampkit/amp/capability.h"

namespace ampkit {

std::vector<CudaDeviceCapability> cuda_capabilities() {
  std::vector<CudaDeviceCapability> out;
  const int count = static_cast<int>(c10::cuda::device_count());
  for (int i = 0; i < count; ++i) {
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(i);
    CudaDeviceCapability cap;
    cap.index = i;
    cap.name = prop->name;
    cap.major = prop->major;
    cap.minor = prop->minor;
    out.push_back(cap);
  }
  return out;
}

namespace detail {
int current_cuda_device() {
  return c10::cuda::device_count() > 0 ? c10::cuda::current_device() : 0;
}
}  // namespace detail

}  // namespace ampkit
