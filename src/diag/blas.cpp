// Which BLAS LibTorch's CPU matmuls go to: of the BLAS libraries mapped into
// this process, the one the dynamic linker binds sgemm_ to, else the name
// at::show_config() gives for one linked into LibTorch.
#include "ampkit/diag/doctor.h"

#include <ATen/Version.h>  // at::show_config
#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "diag/doctor_internal.h"

#include "utils/strings.h"

namespace ampkit::diag::detail {

namespace {

namespace fs = std::filesystem;

// "MKL", "OpenBLAS", ... from a library's real path; "" for anything else.
std::string classify_blas(const std::string& path) {
  const std::string lower = ampkit::detail::lower(path);
  const std::string file = fs::path(lower).filename().string();
  if (lower.find("mkl") != std::string::npos) {
    return "MKL";
  }
  if (lower.find("openblas") != std::string::npos) {
    return "OpenBLAS";
  }
  if (lower.find("blis") != std::string::npos) {
    return "BLIS";
  }
  if (lower.find("flexiblas") != std::string::npos) {
    return "FlexiBLAS";
  }
  if (lower.find("atlas") != std::string::npos) {
    return "ATLAS";
  }
  // Debian's reference BLAS (/usr/lib/<triplet>/blas/libblas.so.3), behind
  // the libblas.so.3 alternatives link when no optimised BLAS is installed.
  if (file.rfind("libblas.so", 0) == 0) {
    return "reference BLAS";
  }
  return "";
}

std::string real_path(const std::string& path) {
  std::error_code ec;
  const fs::path resolved = fs::canonical(path, ec);
  return ec ? path : resolved.string();
}

}  // namespace

// The BLAS libraries mapped into this process (/proc/self/maps), and of them
// the one whose sgemm_ LibTorch's calls bind to: the dynamic linker's global
// lookup, as dladdr of RTLD_DEFAULT's sgemm_ tells. A liblapack.so.3 may map
// OpenBLAS beside a reference libblas.so.3 that still serves the matmuls.
BlasFound find_blas() {
  std::vector<BlasFound> mapped;
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> seen;
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) {
      continue;
    }
    const std::string path = line.substr(slash);
    if (!seen.insert(path).second) {
      continue;
    }
    const std::string kind = classify_blas(path);
    if (!kind.empty()) {
      mapped.push_back({kind, path});
    }
  }
  if (void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_")) {
    Dl_info info{};
    if (dladdr(sgemm, &info) != 0 && info.dli_fname != nullptr) {
      const std::string path = real_path(info.dli_fname);
      const std::string kind = classify_blas(path);
      if (!kind.empty()) {
        return {kind, path};
      }
    }
  }
  for (const char* kind :
       {"MKL", "OpenBLAS", "BLIS", "FlexiBLAS", "ATLAS", "reference BLAS"}) {
    for (const auto& m : mapped) {
      if (m.kind == kind) {
        return m;
      }
    }
  }
  // Linked statically into LibTorch (PyTorch's own builds link MKL so).
  const std::string config = at::show_config();
  const auto key = config.find("BLAS_INFO=");
  if (key != std::string::npos) {
    const auto begin = key + std::string("BLAS_INFO=").size();
    const auto end = config.find_first_of(", \n", begin);
    const std::string name = config.substr(begin, end - begin);
    const std::string kind = classify_blas(name);
    return {
        kind.empty() ? name : kind, "built into LibTorch (at::show_config)"};
  }
  return {};
}

}  // namespace ampkit::diag::detail

namespace ampkit::diag {

BlasInUse blas_in_use() {
  const detail::BlasFound blas = detail::find_blas();
  return {blas.kind, blas.path};
}

}  // namespace ampkit::diag
