// What the hardware and the running LibTorch can do in reduced precision:
// the facts autocast checks and the Accelerator's `auto` precision uses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "ampkit/amp/precision.h"

namespace ampkit {

/// Reduced-precision instructions of the host CPU, each true only when the
/// CPU reports it (CPUID) and the OS has enabled its register state (XCR0).
struct CpuCapability {
  std::string vendor;  ///< CPUID vendor string, "" off x86
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;  ///< fp16 <-> fp32 conversion only, no fp16 math
  bool avx512f = false;
  bool avx512_bf16 = false;  ///< VDPBF16PS: bf16 dot products
  bool avx512_fp16 = false;  ///< native fp16 arithmetic
  bool amx_bf16 = false;     ///< AMX tiles with bf16 matmul
  bool amx_fp16 = false;     ///< AMX tiles with fp16 matmul
  bool neon_bf16 = false;    ///< Arm BF16 extension (aarch64)

  /// bf16 matmuls run natively (AVX512-BF16, AMX-BF16 or Arm BF16), so bf16
  /// autocast is faster than fp32 rather than 15-20x slower.
  bool native_bf16() const {
    return avx512_bf16 || amx_bf16 || neon_bf16;
  }
  /// fp16 arithmetic runs natively (AVX512-FP16 or AMX-FP16).
  bool native_fp16() const {
    return avx512_fp16 || amx_fp16;
  }
};

/// One CUDA device and what its compute capability implies.
struct CudaDeviceCapability {
  int index = 0;
  std::string name;
  int major = 0;  ///< compute capability major (8 for A100, 9 for H100)
  int minor = 0;
  /// "DDDDDDDD:BB:DD.0" as NVML takes it (nvmlDeviceGetHandleByPciBusId).
  std::string pci_bus_id;

  /// fp16 tensor cores: compute capability >= 7.0 (Volta).
  bool fp16_tensor_cores() const {
    return major >= 7;
  }
  /// bf16 autocast: compute capability >= 8.0 (Ampere).
  bool bf16() const {
    return major >= 8;
  }
  /// fp8 tensor cores: compute capability >= 8.9 (Ada, Hopper and newer).
  bool fp8() const {
    return major > 8 || (major == 8 && minor >= 9);
  }
};

/// The facts precision checks are made against. `current()` reads them from
/// this machine and LibTorch; tests build their own to cover other hardware.
struct Capabilities {
  int torch_major = 0;
  int torch_minor = 0;
  bool cuda_available = false;  ///< LibTorch has CUDA and sees a GPU
  int current_cuda_device = 0;
  CpuCapability cpu;
  std::vector<CudaDeviceCapability> cuda_devices;
  /// How much faster a short bf16-autocast training workload runs than fp32
  /// on this CPU (fp32 time / bf16 time; see measure_cpu_bf16_training).
  /// Unset until measured: current() does not measure.
  std::optional<double> cpu_bf16_training_speedup;

  static Capabilities current();
};

/// Reads CPUID/XCR0 (x86) or the auxiliary vector (aarch64).
CpuCapability cpu_capability();

/// One entry per visible CUDA device; empty without CUDA.
std::vector<CudaDeviceCapability> cuda_capabilities();

/// Why autocast with `dtype` on `device_type` cannot run here, as a complete
/// message that says what to do instead; empty when it can.
std::optional<std::string> autocast_unsupported_reason(
    c10::DeviceType device_type,
    c10::ScalarType dtype,
    const Capabilities& caps);

/// Throws ampkit::Unsupported (or InvalidArgument for a dtype autocast never
/// takes) with autocast_unsupported_reason's message when there is one.
void check_autocast_supported(
    c10::DeviceType device_type,
    c10::ScalarType dtype,
    const Capabilities& caps = Capabilities::current());

/// What mixed_precision "auto" becomes on a device, and why (one sentence
/// for the start-up log).
struct PrecisionChoice {
  Precision precision = Precision::no;
  std::string reason;
};

/// accelerate's "auto", checked against the hardware: bf16 on a CUDA GPU of
/// compute capability >= 8.0, fp16 on older GPUs, bf16 on a CPU with native
/// bf16 (AVX512-BF16, AMX-BF16 or Arm BF16) where training in it measured at
/// least kMinCpuBf16Speedup times faster (cpu_bf16_training_speedup; by the
/// instructions alone when unset), otherwise no (fp32): without native bf16
/// a CPU runs bf16 autocast 15-20x slower than fp32.
PrecisionChoice auto_precision(
    c10::DeviceType device_type, const Capabilities& caps);

/// The bf16 training probe: a convolution and a linear layer of the demo
/// CNN's sizes, forward and backward, in fp32 and under bf16 autocast,
/// alternating, medians of 5 (about 0.3 s on a CPU with native bf16).
struct CpuBf16Measurement {
  double fp32_ms = 0;
  double bf16_ms = 0;
  double speedup = 0;   ///< fp32_ms / bf16_ms
  bool cached = false;  ///< read from `cache_file`, not measured now
  std::string cache_file;
};

/// Measures once per machine, LibTorch version and thread count, and keeps
/// the result in ${XDG_CACHE_HOME:-~/.cache}/ampkit/cpu_bf16_probe.json (an
/// unwritable cache is only a missed saving).
CpuBf16Measurement measure_cpu_bf16_training();

/// bf16 must train at least this much faster than fp32 for auto to pick it.
constexpr double kMinCpuBf16Speedup = 1.1;

/// `caps` with cpu_bf16_training_speedup filled in by the probe when the CPU
/// has native bf16 and it is unset (a CPU without native bf16 needs no
/// measurement: bf16 runs 15-20x slower there).
Capabilities with_cpu_bf16_measurement(Capabilities caps);

/// One line per device: "cpu: avx512_bf16 amx_bf16 ... native bf16: yes".
std::string describe(const Capabilities& caps);

}  // namespace ampkit
