// Resource readings: /proc/self/statm for memory, NVML through dlopen for
// GPUs (no build-time dependency on the CUDA toolkit or the driver).
#include "ampkit/track/system_stats.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace ampkit::track {

std::optional<double> process_rss_mb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) {
    return std::nullopt;
  }
  long pages_total = 0;
  long pages_resident = 0;
  const int read = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  if (read != 2) {
    return std::nullopt;
  }
  return double(pages_resident) * double(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

namespace {

// The few NVML declarations used, as nvml.h defines them.
using NvmlReturn = int;  // NVML_SUCCESS is 0
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};

struct Nvml {
  NvmlReturn (*device_by_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*memory_info)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  bool ready = false;
};

const Nvml& nvml() {
  static Nvml lib;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      return;
    }
    auto init =
        reinterpret_cast<NvmlReturn (*)()>(dlsym(handle, "nvmlInit_v2"));
    lib.device_by_bus_id =
        reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
            dlsym(handle, "nvmlDeviceGetHandleByPciBusId_v2"));
    lib.memory_info = reinterpret_cast<NvmlReturn (*)(NvmlDevice, NvmlMemory*)>(
        dlsym(handle, "nvmlDeviceGetMemoryInfo"));
    lib.utilization =
        reinterpret_cast<NvmlReturn (*)(NvmlDevice, NvmlUtilization*)>(
            dlsym(handle, "nvmlDeviceGetUtilizationRates"));
    lib.ready = init != nullptr && lib.device_by_bus_id != nullptr &&
                lib.memory_info != nullptr && lib.utilization != nullptr &&
                init() == 0;
  });
  return lib;
}

}  // namespace

std::optional<GpuStats> gpu_stats(const std::string& pci_bus_id) {
  const Nvml& lib = nvml();
  if (!lib.ready || pci_bus_id.empty()) {
    return std::nullopt;
  }
  NvmlDevice device = nullptr;
  NvmlMemory memory{};
  NvmlUtilization utilization{};
  if (lib.device_by_bus_id(pci_bus_id.c_str(), &device) != 0 ||
      lib.memory_info(device, &memory) != 0 ||
      lib.utilization(device, &utilization) != 0) {
    return std::nullopt;
  }
  return GpuStats{double(memory.used) / (1 << 20), double(utilization.gpu)};
}

}  // namespace ampkit::track
