// The CUDA capability query of a LibTorch built without CUDA: no devices.
#include "amp/cuda_capability.h"
#include "ampkit/amp/capability.h"

namespace ampkit {

std::vector<CudaDeviceCapability> cuda_capabilities() {
  return {};
}

namespace detail {
int current_cuda_device() {
  return 0;
}
void set_current_cuda_device(int /*index*/) {}
}  // namespace detail

}  // namespace ampkit
