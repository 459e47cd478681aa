// What the hardware probes share (private): the CPU's name, a JSON cache
// per probe in ${XDG_CACHE_HOME:-~/.cache}/ampkit/, and the median.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ampkit::detail {

/// /proc/cpuinfo's model name (the vendor where there is none).
std::string cpu_model();
/// ${XDG_CACHE_HOME:-~/.cache}/ampkit/<name>.
std::string probe_cache_file(const std::string& name);
/// That file's JSON object; {} when it is missing or unreadable (then the
/// probe measures again).
nlohmann::json read_probe_cache(const std::string& name);
/// Writes it whole (beside, then renamed); an unwritable cache is only a
/// missed saving.
void write_probe_cache(const std::string& name, const nlohmann::json& cache);
double median(std::vector<double> values);

}  // namespace ampkit::detail
