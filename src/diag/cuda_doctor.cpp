// The doctor's CUDA queries (driver, runtime and NCCL versions, memory per
// GPU), compiled only when LibTorch was built with CUDA.
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "diag/cuda_doctor.h"

// c10d defines USE_C10D_NCCL when it was built with NCCL; nccl.h comes with
// NCCL itself, which not every LibTorch install puts on the include path.
#if defined(USE_C10D_NCCL) && defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#define AMPKIT_DOCTOR_NCCL 1
#endif
#endif

namespace ampkit::diag::detail {

namespace {

void note_error(CudaInfo& info, const char* call, cudaError_t err) {
  if (info.error.empty()) {
    info.error = std::string(call) + ": " + cudaGetErrorString(err);
  }
  cudaGetLastError();  // clear it, so later calls do not report it again
}

}  // namespace

CudaInfo cuda_info() {
  CudaInfo info;
  info.compiled = true;
  int version = 0;
  cudaError_t err = cudaDriverGetVersion(&version);
  if (err == cudaSuccess) {
    info.driver_version = version;
  } else {
    note_error(info, "cudaDriverGetVersion", err);
  }
  err = cudaRuntimeGetVersion(&version);
  if (err == cudaSuccess) {
    info.runtime_version = version;
  } else {
    note_error(info, "cudaRuntimeGetVersion", err);
  }
#ifdef AMPKIT_DOCTOR_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    info.nccl_version = nccl;
  }
#endif
  const int count = static_cast<int>(c10::cuda::device_count());
  for (int i = 0; i < count; ++i) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(i));
    GpuMemory gpu;
    gpu.index = i;
    err = cudaMemGetInfo(&gpu.free_bytes, &gpu.total_bytes);
    if (err != cudaSuccess) {
      note_error(info, "cudaMemGetInfo", err);
      continue;
    }
    info.gpus.push_back(gpu);
  }
  return info;
}

}  // namespace ampkit::diag::detail
