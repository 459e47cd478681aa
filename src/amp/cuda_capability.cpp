// CUDA device properties, compiled only when LibTorch was built with CUDA.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdio>

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
    char bus_id[32];
    std::snprintf(
        bus_id,
        sizeof(bus_id),
        "%08X:%02X:%02X.0",
        static_cast<unsigned>(prop->pciDomainID),
        static_cast<unsigned>(prop->pciBusID),
        static_cast<unsigned>(prop->pciDeviceID));
    cap.pci_bus_id = bus_id;
    out.push_back(cap);
  }
  return out;
}

namespace detail {
int current_cuda_device() {
  return c10::cuda::device_count() > 0 ? c10::cuda::current_device() : 0;
}
void set_current_cuda_device(int index) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}
}  // namespace detail

}  // namespace ampkit
