// enable_cpu_affinity: which cores each local worker is pinned to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampkit::dist::detail {

/// Linux's cpulist format ("0-3,8,10-11"), as in /sys and
/// /proc/self/status; an empty or malformed list gives no cores.
std::vector<int> parse_cpu_list(const std::string& text);
/// The inverse, compressed into ranges.
std::string format_cpu_list(const std::vector<int>& cpus);
/// The cores this process may run on (sched_getaffinity).
std::vector<int> allowed_cpus();
/// The cores local to a PCI device (its NUMA node's), from
/// /sys/bus/pci/devices/<bus id>/local_cpulist; empty when unknown.
std::vector<int> pci_device_cpus(const std::string& pci_bus_id);

/// The cores of each of `local` workers: `allowed` split into contiguous,
/// disjoint shares as even as they come (the first ones get one more). With
/// GPUs (`gpu_cpus[l]`: the cores near local rank l's GPU, empty when
/// unknown), a worker's share comes from the allowed cores near its GPU,
/// split among the workers whose GPUs share them; the other workers share
/// the cores no GPU's workers took. Only with more workers than cores do
/// shares overlap (one core each, round robin).
std::vector<std::vector<int>> plan_affinity(
    const std::vector<int>& allowed,
    int64_t local,
    const std::vector<std::vector<int>>& gpu_cpus = {});

}  // namespace ampkit::dist::detail
