// Private declarations shared by the doctor's files: the timed matmuls
// (matmul_probe.cpp) and the BLAS finder (blas.cpp) that doctor.cpp's checks
// and recommendations use.
#pragma once

#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "ampkit/diag/doctor.h"

namespace ampkit::diag::detail {

/// Times [n, n] @ [n, n] in fp32, bf16 and fp16 on `device`, each for at
/// least `min_seconds` after a warm-up; a dtype that cannot run there gets no
/// gflops and a note saying why.
std::vector<MatmulTiming> time_matmuls(
    c10::Device device, int n, double min_seconds);

struct BlasFound {
  std::string kind;  // classify_blas's name, "" when none was identified
  std::string path;  // the library file, or where the finding came from
};

/// The BLAS LibTorch's CPU matmuls go to; an empty kind when none was
/// identified.
BlasFound find_blas();

}  // namespace ampkit::diag::detail
