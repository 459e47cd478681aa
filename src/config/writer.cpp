// Writing a config file: a LaunchConfig as accelerate's YAML (its key names,
// in its alphabetical order, strings quoted as PyYAML quotes them), replacing
// the file atomically.
#include "ampkit/config/config.h"

#include <yaml-cpp/yaml.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>

#include "ampkit/error.h"
#include "config/parse.h"
#include "utils/write_failure.h"

namespace ampkit::config {

namespace {

namespace fs = std::filesystem;

using detail::kComponent;
using detail::yaml_string;

std::string indent(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    out += "  " + line + "\n";
  }
  return out;
}

// One "key: value" entry; collections go on the lines below, indented.
std::string yaml_entry(const std::string& key, const std::string& value) {
  YAML::Node node;
  try {
    node = YAML::Load(value);
  } catch (const YAML::Exception&) {
    return key + ": " + yaml_string(value) + "\n";
  }
  if ((node.IsMap() || node.IsSequence()) && node.size() > 0 &&
      value.find('\n') != std::string::npos) {
    return key + ":\n" + indent(value);
  }
  if ((node.IsMap() || node.IsSequence()) && node.size() > 0) {
    // A one-line block collection ("a: 1" or "- x") still needs its own line.
    return value.front() == '{' || value.front() == '['
               ? key + ": " + value + "\n"
               : key + ":\n" + indent(value);
  }
  return key + ": " + value + "\n";
}

// Writes `text` to `path` atomically (a temporary file renamed over it),
// creating missing parent directories.
void write_atomically(const std::string& path, const std::string& text) {
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
  }
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      const int err = errno != 0 ? errno : EIO;
      fs::remove(tmp, ec);
      throw IoError(
          kComponent,
          path + ": cannot be written: " + ampkit::detail::write_failure(err) +
              ".");
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(tmp, ec);
    throw IoError(
        kComponent,
        path + ": cannot be written (" + reason +
            "). Check that its directory is writable.");
  }
}

}  // namespace

std::string ampkit_settings_path(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / (p.stem().string() + ".ampkit.yaml")).string();
}

void save_config(const LaunchConfig& config, const std::string& path) {
  // accelerate refuses keys and values it does not know (ClusterConfig has
  // no gradient_accumulation_steps or log_with, and no mixed_precision
  // auto): the file it may read holds only its own, and ampkit's settings
  // go into ampkit's own file beside it.
  const bool automatic = config.mixed_precision == Precision::automatic;
  std::string ampkit_only;
  if (automatic) {
    // Applies while the config still says 'no'.
    ampkit_only += "mixed_precision: auto\n";
  }
  if (config.gradient_accumulation_steps != 1) {
    ampkit_only += yaml_entry(
        "gradient_accumulation_steps",
        std::to_string(config.gradient_accumulation_steps));
  }
  if (!config.log_with.empty()) {
    ampkit_only += yaml_entry("log_with", yaml_string(config.log_with));
  }
  std::map<std::string, std::string> values(
      config.passthrough.begin(), config.passthrough.end());
  values["compute_environment"] = yaml_string(config.compute_environment);
  values["debug"] = config.debug ? "true" : "false";
  values["distributed_type"] = yaml_string(config.distributed_type);
  values["gpu_ids"] = yaml_string(config.gpu_ids);
  values["machine_rank"] = std::to_string(config.machine_rank);
  values["main_training_function"] = yaml_string(config.main_training_function);
  values["mixed_precision"] = yaml_string(
      automatic ? std::string("no") : to_string(config.mixed_precision));
  values["num_machines"] = std::to_string(config.num_machines);
  values["num_processes"] = std::to_string(config.num_processes);
  values["rdzv_backend"] = yaml_string(config.rdzv_backend);
  values["same_network"] = config.same_network ? "true" : "false";
  values["use_cpu"] = config.use_cpu ? "true" : "false";
  if (!config.main_process_ip.empty()) {
    values["main_process_ip"] = yaml_string(config.main_process_ip);
  }
  if (config.main_process_port != 0) {
    values["main_process_port"] = std::to_string(config.main_process_port);
  }
  std::string text;
  for (const auto& [key, value] : values) {
    text += yaml_entry(key, value);
  }
  write_atomically(path, text);
  const std::string ours = ampkit_settings_path(path);
  std::error_code ec;
  if (!ampkit_only.empty()) {
    write_atomically(
        ours,
        "# ampkit's settings that accelerate's config format cannot hold\n"
        "# (ampkit reads them with " +
            fs::path(path).filename().string() +
            "; mixed_precision: auto applies while that\n"
            "# file still says mixed_precision: 'no').\n" +
            ampkit_only);
  } else if (fs::exists(ours, ec)) {
    fs::remove(ours, ec);
  }
}

}  // namespace ampkit::config
