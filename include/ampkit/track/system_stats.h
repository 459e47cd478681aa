// Process and GPU resource readings for the metrics the Accelerator logs by
// itself: resident memory from /proc, GPU memory and utilisation from NVML,
// which is loaded at run time when the driver provides it.
#pragma once

#include <optional>
#include <string>

namespace ampkit::track {

/// Resident set size of this process in MiB; empty where /proc is missing.
std::optional<double> process_rss_mb();

struct GpuStats {
  double memory_used_mb = 0;
  double utilization_percent = 0;
};

/// Memory used and utilisation of the GPU at PCI bus id `pci_bus_id`
/// ("00000000:3B:00.0", CudaDeviceCapability::pci_bus_id) through NVML
/// (libnvidia-ml.so.1, opened once with dlopen); empty without a driver or
/// such a GPU. By bus id, not index: CUDA renumbers the GPUs that
/// CUDA_VISIBLE_DEVICES leaves visible, NVML does not.
std::optional<GpuStats> gpu_stats(const std::string& pci_bus_id);

}  // namespace ampkit::track
