// Process and GPU resource readings for the metrics the Accelerator logs by
// itself: resident memory from /proc, GPU memory and utilisation from NVML,
// which is loaded at run time when the driver provides it.
#pragma once

#include <optional>

namespace ampkit::track {

/// Resident set size of this process in MiB; empty where /proc is missing.
std::optional<double> process_rss_mb();

struct GpuStats {
  double memory_used_mb = 0;
  double utilization_percent = 0;
};

/// Memory used and utilisation of GPU `index` through NVML
/// (libnvidia-ml.so.1, opened once with dlopen); empty without a driver or
/// such a GPU.
std::optional<GpuStats> gpu_stats(int index);

}  // namespace ampkit::track
