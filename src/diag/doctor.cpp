// `ampkit doctor`'s checks: LibTorch, the BLAS it loaded, threads, CPU and GPU
// capabilities, the precision recommendation from the timed matmuls, CUDA and
// NCCL versions and free disk space; run_doctor and its report table.
#include "ampkit/diag/doctor.h"

#include <ATen/Context.h>  // at::hasCUDA
#include <ATen/Parallel.h>
#include <c10/core/Device.h>
#include <sys/statvfs.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ampkit/error.h"
#include "diag/cuda_doctor.h"
#include "diag/doctor_internal.h"

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

// ---- checks ----------------------------------------------------------------

CheckResult check_libtorch(const Capabilities& caps) {
  const bool cuda = at::hasCUDA();
  std::string value = std::string(TORCH_VERSION) + " (CUDA: ";
  value += cuda ? "yes, " + std::to_string(caps.cuda_devices.size()) +
                      " GPU(s) visible)"
                : "no)";
  return {"libtorch", CheckStatus::ok, value, ""};
}

CheckResult check_blas(const MatmulTiming* fp32) {
  const detail::BlasFound blas = detail::find_blas();
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
  if (device == c10::DeviceType::CPU && caps.cpu_bf16_training_speedup) {
    // The training probe decided, as it does for `auto`: a matmul alone can
    // be fast in bf16 while a training step is not. Its ratio is shown.
    const MatmulTiming* bf16 = find_timing(timings, device, "bf16");
    std::string reason = choice.reason;
    if (fp32_measured && bf16 != nullptr && bf16->gflops) {
      reason = ratio_text(*bf16, *fp32) + "; " + reason;
    }
    // On such a CPU the verdict depends on the model (a transformer can be
    // slower in bf16 where a CNN is faster): said, and auto measures it.
    if (caps.cpu.native_bf16()) {
      reason +=
          "; a generic verdict from a small CNN step: mixed_precision "
          "auto times fp32 and bf16 on your own model and batch";
    }
    return {device, choice.precision, reason};
  }
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
  // With the bf16 training probe, so that the verdict is the one `auto`
  // reaches (the probe's result is cached per machine).
  const Capabilities caps = with_cpu_bf16_measurement(Capabilities::current());
  const int threads = at::get_num_threads();

  std::vector<c10::Device> devices = {c10::Device(c10::DeviceType::CPU)};
  if (caps.cuda_available) {
    devices.emplace_back(
        c10::DeviceType::CUDA,
        static_cast<c10::DeviceIndex>(caps.current_cuda_device));
  }
  for (const auto& device : devices) {
    auto t =
        detail::time_matmuls(device, options.matmul_size, options.min_seconds);
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
