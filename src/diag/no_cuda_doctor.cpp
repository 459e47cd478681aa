// The doctor's CUDA queries for a LibTorch built without CUDA: nothing.
#include "diag/cuda_doctor.h"

namespace ampkit::diag::detail {

CudaInfo cuda_info() {
  return {};
}

}  // namespace ampkit::diag::detail
