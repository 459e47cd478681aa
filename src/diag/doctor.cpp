// `ampkit doctor`'s checks: LibTorch, the BLAS it loaded, threads, CPU and GPU
// capabilities, timed matmuls, the precision recommendation, the config file
// and free disk space.
#include "ampkit/diag/doctor.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <sys/statvfs.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "ampkit/error.h"
#include "diag/cuda_doctor.h"

#include "utils/strings.h"

namespace ampkit::diag {

namespace {

namespace fs = std::filesystem;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// Below this much free space a checkpoint is likely not to fit.
constexpr double kDiskFailBytes = 1 * kGiB;
constexpr double kDiskWarnBytes = 10 * kGiB;
/// A reduced precision more than this much slower than fp32 is refused.
constexpr double kSlowerThanFp32 = 0.9;

std::string format_gflops(double gflops) {
  char buf[32];
  std::snprintf(
      buf,
      sizeof buf,
      gflops >= 10  ? "%.0f"
      : gflops >= 1 ? "%.1f"
                    : "%.2f",
      gflops);
  return buf;
}

std::string format_gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / kGiB);
  return buf;
}

std::string device_name(c10::DeviceType device) {
  return c10::DeviceTypeName(device, /*lower_case=*/true);
}

// "bf16 matmul 8.8x faster than fp32 (2060 vs 233 GFLOP/s)"
std::string ratio_text(const MatmulTiming& reduced, const MatmulTiming& fp32) {
  const double r = *reduced.gflops;
  const double f = *fp32.gflops;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.1fx", r >= f ? r / f : f / r);
  return reduced.dtype + " matmul " + ratio + (r >= f ? " faster" : " slower") +
         " than fp32 (" + format_gflops(r) + " vs " + format_gflops(f) +
         " GFLOP/s)";
}

const MatmulTiming* find_timing(
    const std::vector<MatmulTiming>& timings,
    c10::DeviceType device,
    const std::string& dtype) {
  for (const auto& t : timings) {
    if (t.device == device && t.dtype == dtype) {
      return &t;
    }
  }
  return nullptr;
}

// ---- matmul timing ---------------------------------------------------------

// Runs [n, n] @ [n, n] in `dtype` once to warm up, then in doubling batches
// until at least min_seconds have passed; CUDA is synchronised per batch so
// that launches are not what is timed.
MatmulTiming time_matmul(
    c10::Device device,
    c10::ScalarType dtype,
    const std::string& dtype_name,
    int n,
    double min_seconds) {
  MatmulTiming timing;
  timing.device = device.type();
  timing.dtype = dtype_name;
  timing.size = n;
  auto sync = [&] {
    if (device.is_cuda()) {
      torch::cuda::synchronize(device.index());
    }
  };
  try {
    torch::NoGradGuard no_grad;
    // Drawn in fp32: not every LibTorch can draw randn in fp16 on the CPU.
    const auto fp32 = torch::TensorOptions().device(device);
    const torch::Tensor a = torch::randn({n, n}, fp32).to(dtype);  // [n, n]
    const torch::Tensor b = torch::randn({n, n}, fp32).to(dtype);  // [n, n]
    torch::Tensor c = torch::mm(a, b);
    sync();
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    int64_t iterations = 0;
    double elapsed = 0;
    int64_t batch = 1;
    do {
      for (int64_t i = 0; i < batch; ++i) {
        torch::mm_out(c, a, b);
      }
      sync();
      iterations += batch;
      batch *= 2;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < min_seconds);
    timing.gflops = 2.0 * n * n * double(n) * iterations / elapsed / 1e9;
  } catch (const c10::Error& e) {
    std::string message = e.what_without_backtrace();
    message = message.substr(0, message.find('\n'));
    timing.note = "unsupported: " + message;
  }
  return timing;
}

std::vector<MatmulTiming> time_matmuls(
    c10::Device device, int n, double min_seconds) {
  std::vector<MatmulTiming> out;
  for (const auto& [dtype, name] :
       {std::pair{c10::ScalarType::Float, "fp32"},
        std::pair{c10::ScalarType::BFloat16, "bf16"},
        std::pair{c10::ScalarType::Half, "fp16"}}) {
    out.push_back(time_matmul(device, dtype, name, n, min_seconds));
  }
  return out;
}

// ---- checks ----------------------------------------------------------------

CheckResult check_libtorch(const Capabilities& caps) {
  const bool cuda = at::hasCUDA();
  std::string value = std::string(TORCH_VERSION) + " (CUDA: ";
  value += cuda ? "yes, " + std::to_string(caps.cuda_devices.size()) +
                      " GPU(s) visible)"
                : "no)";
  return {"libtorch", CheckStatus::ok, value, ""};
}

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

struct BlasFound {
  std::string kind;  // classify_blas's name, "" when none was identified
  std::string path;  // the library file, or where the finding came from
};

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

CheckResult check_blas(const MatmulTiming* fp32) {
  const BlasFound blas = find_blas();
  CheckResult check{"blas", CheckStatus::ok, "", ""};
  check.value =
      blas.kind.empty() ? "not identified" : blas.kind + " (" + blas.path + ")";
  if (fp32 != nullptr && fp32->gflops) {
    check.value += ", fp32 matmul " + format_gflops(*fp32->gflops) + " GFLOP/s";
  } else if (fp32 != nullptr) {
    check.status = CheckStatus::fail;
    check.detail = "an fp32 matmul fails on the CPU: " + fp32->note;
  }
  if (blas.kind == "reference BLAS") {
    check.status = CheckStatus::warn;
    check.detail =
        "LibTorch uses the unoptimised reference BLAS: install "
        "libopenblas0-openmp (12x faster fp32 matmul), e.g. "
        "`apt-get install libopenblas0-openmp`.";
  }
  return check;
}

CheckResult check_threads(int threads) {
  const unsigned cores = std::thread::hardware_concurrency();
  CheckResult check{
      "threads",
      CheckStatus::ok,
      std::to_string(threads) + " intra-op thread(s), " +
          std::to_string(cores) + " core(s)",
      ""};
  if (cores > 0 && static_cast<unsigned>(threads) < cores) {
    check.status = CheckStatus::warn;
    check.detail =
        "LibTorch uses fewer threads than there are cores: call "
        "torch::set_num_threads(" +
        std::to_string(cores) +
        ") or set OMP_NUM_THREADS=" + std::to_string(cores) +
        " (divided by the processes per machine in a distributed run).";
  }
  return check;
}

CheckResult check_cpu(const Capabilities& caps) {
  const std::string text = describe(caps);
  return {"cpu", CheckStatus::ok, text.substr(0, text.find('\n')), ""};
}

CheckResult check_precision(
    c10::DeviceType device,
    const Capabilities& caps,
    const PrecisionRecommendation& rec) {
  CheckResult check{
      "precision (" + device_name(device) + ")",
      CheckStatus::ok,
      to_string(rec.precision),
      rec.reason};
  // The hardware promised a fast reduced precision the measurement denies.
  const Precision promised = auto_precision(device, caps).precision;
  if (promised != Precision::no && rec.precision == Precision::no) {
    check.status = CheckStatus::warn;
  }
  return check;
}

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." +
         std::to_string((version % 1000) / 10);
}

// NCCL 2.9 and newer encode 10000 * major + 100 * minor + patch; older ones
// 1000 * major + 100 * minor + patch.
std::string nccl_version_string(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(code % 100);
}

void add_cuda_checks(
    std::vector<CheckResult>& checks,
    const Capabilities& caps,
    const detail::CudaInfo& info) {
  const std::string none = "no CUDA in this LibTorch";
  if (!info.compiled) {
    checks.push_back({"gpu", CheckStatus::ok, none, ""});
    checks.push_back({"cuda", CheckStatus::ok, none, ""});
    checks.push_back({"nccl", CheckStatus::ok, none, ""});
    return;
  }
  CheckResult gpu{
      "gpu",
      CheckStatus::ok,
      std::to_string(caps.cuda_devices.size()) + " visible",
      ""};
  if (caps.cuda_devices.empty()) {
    gpu.status = CheckStatus::warn;
    gpu.detail =
        "this LibTorch has CUDA but sees no GPU: check nvidia-smi "
        "and CUDA_VISIBLE_DEVICES, or train on the CPU.";
    if (!info.error.empty()) {
      gpu.detail += " CUDA said: " + info.error;
    }
  }
  checks.push_back(gpu);

  CheckResult cuda{"cuda", CheckStatus::ok, "", ""};
  if (info.driver_version == 0) {
    cuda.value =
        "no driver, runtime " + cuda_version_string(info.runtime_version);
    cuda.status =
        caps.cuda_devices.empty() ? CheckStatus::warn : CheckStatus::fail;
    cuda.detail = "no CUDA driver was found: install the NVIDIA driver.";
  } else {
    cuda.value = "driver " + cuda_version_string(info.driver_version) +
                 ", runtime " + cuda_version_string(info.runtime_version);
    const int driver_major = info.driver_version / 1000;
    const int runtime_major = info.runtime_version / 1000;
    if (driver_major < runtime_major) {
      cuda.status = CheckStatus::fail;
      cuda.detail =
          "the driver is older than LibTorch's CUDA runtime: "
          "update the NVIDIA driver, or use a LibTorch built for "
          "CUDA " +
          std::to_string(driver_major) + ".";
    } else if (info.driver_version < info.runtime_version) {
      cuda.status = CheckStatus::warn;
      cuda.detail =
          "the driver is older than the runtime (minor-version "
          "compatibility: most features work); update the NVIDIA "
          "driver to be sure.";
    }
  }
  checks.push_back(cuda);

  checks.push_back(
      {"nccl",
       CheckStatus::ok,
       info.nccl_version ? nccl_version_string(*info.nccl_version)
                         : "version not known (built without NCCL headers)",
       ""});

  for (const auto& dev : caps.cuda_devices) {
    CheckResult check{
        "gpu (cuda:" + std::to_string(dev.index) + ")",
        CheckStatus::ok,
        dev.name + ", compute capability " + std::to_string(dev.major) + "." +
            std::to_string(dev.minor),
        ""};
    for (const auto& mem : info.gpus) {
      if (mem.index == dev.index) {
        check.value += ", " + format_gib(double(mem.free_bytes)) + " free of " +
                       format_gib(double(mem.total_bytes));
      }
    }
    checks.push_back(check);
  }
}

CheckResult check_disk(const std::string& project_dir) {
  // The project directory may not exist yet: its nearest existing parent is
  // on the file system it will be created on.
  std::error_code ec;
  fs::path dir = fs::absolute(project_dir, ec).lexically_normal();
  if (dir.filename().empty() && dir.has_parent_path()) {
    dir = dir.parent_path();  // "/a/b/" -> "/a/b"
  }
  while (!fs::exists(dir, ec) && dir.has_parent_path() &&
         dir.parent_path() != dir) {
    dir = dir.parent_path();
  }
  CheckResult check{"disk", CheckStatus::ok, "", ""};
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) {
    check.status = CheckStatus::warn;
    check.value = "free space of " + dir.string() + " unknown";
    check.detail = "statvfs failed; check that project_dir is readable.";
    return check;
  }
  const double free_bytes = double(st.f_bavail) * double(st.f_frsize);
  check.value = format_gib(free_bytes) + " free in " + dir.string();
  if (free_bytes < kDiskFailBytes) {
    check.status = CheckStatus::fail;
    check.detail =
        "less than 1 GiB free: checkpoints will not fit; free "
        "space or choose another project_dir.";
  } else if (free_bytes < kDiskWarnBytes) {
    check.status = CheckStatus::warn;
    check.detail = "less than 10 GiB free: large checkpoints may not fit.";
  }
  return check;
}

}  // namespace

std::string to_string(CheckStatus status) {
  switch (status) {
    case CheckStatus::ok:
      return "OK";
    case CheckStatus::warn:
      return "WARN";
    case CheckStatus::fail:
      return "FAIL";
  }
  return "?";
}

PrecisionRecommendation recommend_precision(
    c10::DeviceType device,
    const Capabilities& caps,
    const std::vector<MatmulTiming>& timings) {
  const PrecisionChoice choice = auto_precision(device, caps);
  const MatmulTiming* fp32 = find_timing(timings, device, "fp32");
  const bool fp32_measured = fp32 != nullptr && fp32->gflops.has_value();
  if (choice.precision == Precision::no) {
    std::string reason = choice.reason;
    for (const char* dtype : {"bf16", "fp16"}) {
      const MatmulTiming* t = find_timing(timings, device, dtype);
      if (fp32_measured && t != nullptr && t->gflops) {
        reason = ratio_text(*t, *fp32) + "; " + reason;
        break;
      }
    }
    return {device, Precision::no, reason};
  }
  const std::string dtype = to_string(choice.precision);
  const MatmulTiming* reduced = find_timing(timings, device, dtype);
  if (reduced == nullptr) {
    return {device, choice.precision, choice.reason + " (not measured)"};
  }
  if (!reduced->gflops) {
    return {
        device,
        Precision::no,
        "a " + dtype + " matmul fails here (" + reduced->note + "), although " +
            choice.reason};
  }
  if (!fp32_measured) {
    return {device, choice.precision, choice.reason + " (fp32 not measured)"};
  }
  const std::string measured = ratio_text(*reduced, *fp32);
  if (*reduced->gflops < kSlowerThanFp32 * *fp32->gflops) {
    return {
        device,
        Precision::no,
        measured + ", although " + choice.reason + ": fp32 is faster here"};
  }
  return {device, choice.precision, measured + "; " + choice.reason};
}

bool DoctorReport::blocks_training() const {
  return std::any_of(checks.begin(), checks.end(), [](const CheckResult& c) {
    return c.status == CheckStatus::fail;
  });
}

std::string DoctorReport::table() const {
  size_t name_width = std::string("CHECK").size();
  for (const auto& c : checks) {
    name_width = std::max(name_width, c.name.size());
  }
  const size_t status_width = std::string("STATUS").size();
  auto pad = [](const std::string& s, size_t width) {
    return s + std::string(width > s.size() ? width - s.size() : 0, ' ');
  };
  const std::string indent(name_width + status_width + 4, ' ');
  std::ostringstream out;
  out << pad("CHECK", name_width) << "  " << pad("STATUS", status_width)
      << "  VALUE\n";
  for (const auto& c : checks) {
    out << pad(c.name, name_width) << "  "
        << pad(to_string(c.status), status_width) << "  " << c.value << '\n';
    if (!c.detail.empty()) {
      out << indent << "-> " << c.detail << '\n';
    }
  }
  if (!timings.empty()) {
    out << "\nmatmul [n, n] @ [n, n]\n"
        << pad("DEVICE", 8) << pad("DTYPE", 7) << pad("N", 7)
        << pad("GFLOP/s", 10) << "NOTE\n";
    for (const auto& t : timings) {
      const std::string gflops = t.gflops ? format_gflops(*t.gflops) : "-";
      out << pad(device_name(t.device), 8) << pad(t.dtype, 7)
          << pad(std::to_string(t.size), 7)
          << (t.note.empty() ? gflops : pad(gflops, 10) + t.note) << '\n';
    }
  }
  return out.str();
}

DoctorReport run_doctor(const DoctorOptions& options) {
  if (options.matmul_size < 1) {
    throw InvalidArgument(
        "Doctor",
        "matmul_size must be >= 1, got " + std::to_string(options.matmul_size) +
            ". Pass e.g. --matmul_size 1024.");
  }
  if (!(options.min_seconds >= 0)) {
    throw InvalidArgument(
        "Doctor",
        "min_seconds must be >= 0, got " + std::to_string(options.min_seconds) +
            ". Use e.g. 0.2.");
  }
  DoctorReport report;
  const Capabilities caps = Capabilities::current();
  const int threads = at::get_num_threads();

  std::vector<c10::Device> devices = {c10::Device(c10::DeviceType::CPU)};
  if (caps.cuda_available) {
    devices.emplace_back(
        c10::DeviceType::CUDA,
        static_cast<c10::DeviceIndex>(caps.current_cuda_device));
  }
  for (const auto& device : devices) {
    auto t = time_matmuls(device, options.matmul_size, options.min_seconds);
    report.timings.insert(report.timings.end(), t.begin(), t.end());
    report.recommendations.push_back(
        recommend_precision(device.type(), caps, report.timings));
  }

  auto& checks = report.checks;
  checks.push_back(check_libtorch(caps));
  checks.push_back(
      check_blas(find_timing(report.timings, c10::DeviceType::CPU, "fp32")));
  checks.push_back(check_threads(threads));
  checks.push_back(check_cpu(caps));
  for (const auto& rec : report.recommendations) {
    checks.push_back(check_precision(rec.device, caps, rec));
  }
  add_cuda_checks(checks, caps, detail::cuda_info());
  checks.push_back(check_disk(options.project_dir));
  for (const auto& check : options.more_checks) {
    checks.push_back(check());
  }
  return report;
}

BlasInUse blas_in_use() {
  const BlasFound blas = find_blas();
  return {blas.kind, blas.path};
}

CudaVersions cuda_versions() {
  const detail::CudaInfo info = detail::cuda_info();
  CudaVersions versions;
  versions.compiled = info.compiled;
  if (info.runtime_version > 0) {
    versions.runtime = cuda_version_string(info.runtime_version);
  }
  if (info.driver_version > 0) {
    versions.driver = cuda_version_string(info.driver_version);
  }
  if (info.nccl_version) {
    versions.nccl = nccl_version_string(*info.nccl_version);
  }
  versions.error = info.error;
  return versions;
}

}  // namespace ampkit::diag
