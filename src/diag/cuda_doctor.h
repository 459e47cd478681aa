// The CUDA half of the doctor's checks, implemented in cuda_doctor.cpp when
// LibTorch has CUDA and in no_cuda_doctor.cpp otherwise.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ampkit::diag::detail {

/// Free and total memory of one visible GPU, from cudaMemGetInfo.
struct GpuMemory {
  int index = 0;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// Versions as the CUDA APIs encode them (1000 * major + 10 * minor for CUDA;
/// NCCL's own code, see nccl_version_string).
struct CudaInfo {
  bool compiled = false;            ///< this LibTorch was built with CUDA
  int driver_version = 0;           ///< cudaDriverGetVersion; 0 = no driver
  int runtime_version = 0;          ///< cudaRuntimeGetVersion
  std::optional<int> nccl_version;  ///< ncclGetVersion; empty when unknown
  std::vector<GpuMemory> gpus;
  std::string error;  ///< the first CUDA error met, "" when none
};

CudaInfo cuda_info();

}  // namespace ampkit::diag::detail
