// Capability queries (CPUID/XCR0 on x86, HWCAP2 on aarch64) and the rules that
// say which autocast precisions this machine and LibTorch can run.
#include "ampkit/amp/capability.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <cstring>
#include <sstream>

#include "amp/compat.h"
#include "amp/cuda_capability.h"
#include "ampkit/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define AMPKIT_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define AMPKIT_AARCH64 1
#endif

namespace ampkit {

namespace {

#if defined(AMPKIT_X86)
uint64_t read_xcr0() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

bool bit(uint32_t reg, int n) {
  return (reg >> n) & 1u;
}
#endif

}  // namespace

CpuCapability cpu_capability() {
  CpuCapability cap;
#if defined(AMPKIT_X86)
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    return cap;
  }
  const uint32_t max_leaf = eax;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  cap.vendor = vendor;

  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  const bool osxsave = bit(ecx, 27);
  cap.fma = bit(ecx, 12);
  cap.f16c = bit(ecx, 29);
  const bool cpu_avx = bit(ecx, 28);
  const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  // The OS must save the register state: YMM (bits 1-2), ZMM and opmask
  // (bits 5-7), AMX tile config and data (bits 17-18).
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  cap.fma = cap.fma && os_avx;
  cap.f16c = cap.f16c && os_avx;
  if (max_leaf < 7) {
    return cap;
  }
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const uint32_t max_subleaf = eax;
  cap.avx2 = cpu_avx && os_avx && bit(ebx, 5);
  cap.avx512f = os_avx512 && bit(ebx, 16);
  cap.avx512_fp16 = cap.avx512f && bit(edx, 23);
  const bool amx_tile = os_amx && bit(edx, 24);
  cap.amx_bf16 = amx_tile && bit(edx, 22);
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    cap.avx512_bf16 = cap.avx512f && bit(eax, 5);
    cap.amx_fp16 = amx_tile && bit(eax, 21);
  }
#elif defined(AMPKIT_AARCH64)
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1 << 14)
#endif
  cap.neon_bf16 = (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#endif
  return cap;
}

Capabilities Capabilities::current() {
  Capabilities caps;
  caps.torch_major = TORCH_VERSION_MAJOR;
  caps.torch_minor = TORCH_VERSION_MINOR;
  caps.cpu = cpu_capability();
  caps.cuda_devices = cuda_capabilities();
  caps.cuda_available = !caps.cuda_devices.empty();
  caps.current_cuda_device = detail::current_cuda_device();
  return caps;
}

std::optional<std::string> autocast_unsupported_reason(
    c10::DeviceType device_type,
    c10::ScalarType dtype,
    const Capabilities& caps) {
  const std::string torch_version =
      std::to_string(caps.torch_major) + "." + std::to_string(caps.torch_minor);
  const std::string dtype_name = c10::toString(dtype);
  if (dtype != c10::ScalarType::Half && dtype != c10::ScalarType::BFloat16) {
    return "autocast casts to a reduced precision, got dtype " + dtype_name +
           "; valid dtypes: torch::kBFloat16, torch::kHalf. For full fp32, "
           "construct the guard with enabled=false.";
  }
  if (device_type == c10::DeviceType::CPU) {
    // fp16 joined bf16 as a CPU autocast dtype in PyTorch 2.2: up to 2.1,
    // at::autocast::set_autocast_cpu_dtype refuses anything but BFloat16
    // ("Currently, AutocastCPU only support Bfloat16 as the
    // autocast_cpu_dtype", still in 2.1.2's libtorch_cpu.so, gone from
    // 2.2.2's, whose torch/amp/autocast_mode.py lists float16 for the CPU).
    const bool cpu_fp16 = caps.torch_major > 2 ||
                          (caps.torch_major == 2 && caps.torch_minor >= 2);
    if (dtype == c10::ScalarType::Half && !cpu_fp16) {
      return "fp16 autocast on CPU needs LibTorch 2.2 or newer, got LibTorch " +
             torch_version +
             ", whose CPU autocast supports only bf16. Use torch::kBFloat16 "
             "(mixed_precision bf16) on CPU, or fp16 on a CUDA GPU.";
    }
    return std::nullopt;
  }
  if (device_type == c10::DeviceType::CUDA) {
    if (!caps.cuda_available) {
      return "CUDA autocast was requested, but this LibTorch " + torch_version +
             " has no CUDA or sees no GPU. Use torch::kCPU with "
             "torch::kBFloat16, or run with a CUDA build of LibTorch on a "
             "machine with a GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi).";
    }
    const CudaDeviceCapability* dev = nullptr;
    for (const auto& d : caps.cuda_devices) {
      if (d.index == caps.current_cuda_device) {
        dev = &d;
      }
    }
    if (dev == nullptr) {
      return "the current CUDA device " +
             std::to_string(caps.current_cuda_device) +
             " is not among the visible devices. Select one with "
             "CUDA_VISIBLE_DEVICES or c10::cuda::set_device.";
    }
    if (dtype == c10::ScalarType::BFloat16 && !dev->bf16()) {
      return "bf16 autocast needs a GPU of compute capability 8.0 or newer, "
             "got " +
             dev->name + " (cuda:" + std::to_string(dev->index) +
             ", compute capability " + std::to_string(dev->major) + "." +
             std::to_string(dev->minor) +
             "). Use fp16 (torch::kHalf) with a GradScaler on this GPU.";
    }
    return std::nullopt;
  }
  return "autocast supports the device types CPU and CUDA, got " +
         c10::DeviceTypeName(device_type) +
         ". Use torch::kCPU or torch::kCUDA.";
}

PrecisionChoice auto_precision(
    c10::DeviceType device_type, const Capabilities& caps) {
  if (device_type == c10::DeviceType::CUDA) {
    const CudaDeviceCapability* dev = nullptr;
    for (const auto& d : caps.cuda_devices) {
      if (d.index == caps.current_cuda_device) {
        dev = &d;
      }
    }
    if (!caps.cuda_available || dev == nullptr) {
      return {Precision::no, "no CUDA device is visible"};
    }
    const std::string gpu = dev->name + " (cuda:" + std::to_string(dev->index) +
                            ") has compute capability " +
                            std::to_string(dev->major) + "." +
                            std::to_string(dev->minor);
    if (dev->bf16()) {
      return {Precision::bf16, gpu + " >= 8.0 (bf16 needs no loss scaling)"};
    }
    return {
        Precision::fp16,
        gpu + " < 8.0, without bf16 (fp16 runs with loss scaling)"};
  }
  if (device_type == c10::DeviceType::CPU) {
    const CpuCapability& c = caps.cpu;
    if (c.native_bf16()) {
      std::string units;
      for (const auto& [name, present] :
           {std::pair<const char*, bool>{"AVX512-BF16", c.avx512_bf16},
            {"AMX-BF16", c.amx_bf16},
            {"Arm BF16", c.neon_bf16}}) {
        if (present) {
          units += units.empty() ? name : std::string(", ") + name;
        }
      }
      const std::string native = "the CPU has native bf16 (" + units + ")";
      if (!caps.cpu_bf16_training_speedup) {
        return {Precision::bf16, native};
      }
      std::ostringstream measured;
      measured.precision(2);
      measured << std::fixed << *caps.cpu_bf16_training_speedup;
      if (*caps.cpu_bf16_training_speedup >= kMinCpuBf16Speedup) {
        return {
            Precision::bf16,
            native + " and bf16 training ops measured " + measured.str() +
                "x as fast as fp32 here"};
      }
      return {
          Precision::no,
          native + ", but bf16 training ops measured only " + measured.str() +
              "x as fast as fp32 here"};
    }
    return {
        Precision::no,
        "the CPU has no native bf16 (AVX512-BF16 or AMX), where bf16 "
        "autocast runs 15-20x slower than fp32"};
  }
  return {
      Precision::no,
      "autocast supports only CPU and CUDA, got " +
          c10::DeviceTypeName(device_type)};
}

void check_autocast_supported(
    c10::DeviceType device_type,
    c10::ScalarType dtype,
    const Capabilities& caps) {
  if (auto reason = autocast_unsupported_reason(device_type, dtype, caps)) {
    if (dtype != c10::ScalarType::Half && dtype != c10::ScalarType::BFloat16) {
      throw InvalidArgument("Autocast", *reason);
    }
    throw Unsupported("Autocast", *reason);
  }
}

std::string describe(const Capabilities& caps) {
  std::ostringstream out;
  const CpuCapability& c = caps.cpu;
  out << "cpu (" << (c.vendor.empty() ? "unknown" : c.vendor) << "):";
  const std::pair<const char*, bool> flags[] = {
      {"avx2", c.avx2},
      {"fma", c.fma},
      {"f16c", c.f16c},
      {"avx512f", c.avx512f},
      {"avx512_bf16", c.avx512_bf16},
      {"avx512_fp16", c.avx512_fp16},
      {"amx_bf16", c.amx_bf16},
      {"amx_fp16", c.amx_fp16},
      {"bf16", c.neon_bf16}};
  for (const auto& [name, present] : flags) {
    if (present) {
      out << ' ' << name;
    }
  }
  out << "; native bf16: " << (c.native_bf16() ? "yes" : "no")
      << ", native fp16: " << (c.native_fp16() ? "yes" : "no");
  for (const auto& d : caps.cuda_devices) {
    out << "\ncuda:" << d.index << " (" << d.name << "): compute capability "
        << d.major << '.' << d.minor
        << "; fp16 tensor cores: " << (d.fp16_tensor_cores() ? "yes" : "no")
        << ", bf16: " << (d.bf16() ? "yes" : "no")
        << ", fp8: " << (d.fp8() ? "yes" : "no");
  }
  if (caps.cuda_devices.empty()) {
    out << "\ncuda: none visible";
  }
  return out.str();
}

}  // namespace ampkit
