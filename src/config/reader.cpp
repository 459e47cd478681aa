// Reading a config file into a LaunchConfig: every accelerate key accepted,
// ampkit's checked with file:line errors, the rest kept as YAML text so that a
// rewrite preserves them; where the file lives, and load_config.
#include "ampkit/config/config.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "ampkit/utils/env.h"
#include "config/parse.h"

#include "utils/strings.h"

using ampkit::detail::join;
using ampkit::detail::lower;

namespace ampkit::config {

namespace {

namespace fs = std::filesystem;

using detail::contains;
using detail::Entry;
using detail::kComponent;
using detail::looks_like_json;
using detail::parse_json;
using detail::parse_yaml;
using detail::yaml_string;

/// The config file to use instead of the default location (DESIGN.md).
constexpr const char* kEnvConfigFile = "AMPKIT_CONFIG_FILE";

/// The LaunchConfig fields, by their accelerate key.
const std::vector<std::string> kAmpkitKeys = {
    "compute_environment",
    "debug",
    "distributed_type",
    "gpu_ids",
    "gradient_accumulation_steps",
    "log_with",
    "machine_rank",
    "main_process_ip",
    "main_process_port",
    "main_training_function",
    "mixed_precision",
    "num_machines",
    "num_processes",
    "rdzv_backend",
    "same_network",
    "use_cpu"};

/// accelerate's other keys (ClusterConfig in accelerate/commands/config/
/// config_args.py): kept for writing back. The plugin sections among them
/// are checked (config/plugins.cpp): only their off values are accepted.
const std::vector<std::string> kPassthroughKeys = {
    "command_file",
    "commands",
    "deepspeed_config",
    "downcast_bf16",
    "dynamo_config",
    "enable_cpu_affinity",
    "fp8_config",
    "fsdp_config",
    "ipex_config",
    "megatron_lm_config",
    "mpirun_config",
    "parallelism_config",
    "tp_config",
    "tpu_env",
    "tpu_name",
    "tpu_use_cluster",
    "tpu_use_sudo",
    "tpu_vm",
    "tpu_zone"};

/// Names older accelerate versions wrote; read into their current keys.
const std::vector<std::string> kLegacyKeys = {"dynamo_backend", "fp16"};

const std::vector<std::string> kDistributedTypes = {
    "NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP"};
/// accelerate's other DistributedType values: real, but not ampkit's.
const std::vector<std::string> kOtherDistributedTypes = {
    "MEGATRON_LM",
    "MULTI_HPU",
    "MULTI_MLU",
    "MULTI_MUSA",
    "MULTI_NPU",
    "MULTI_SDAA",
    "MULTI_XPU",
    "TP",
    "XLA"};

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw IoError(
        kComponent,
        path +
            ": no such config file. Write one with `ampkit config` or "
            "`ampkit config default`, or pass an existing --config_file.");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in || fs::is_directory(path, ec)) {
    throw IoError(
        kComponent,
        path + ": cannot be read. Check that it is a readable file.");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Reads one file's values, throwing ConfigError with its place.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void bad(
      const Entry& entry,
      const std::string& what,
      const std::string& valid) const {
    const std::string shown = entry.kind == Entry::Kind::null ? "null"
                              : entry.kind == Entry::Kind::collection
                                  ? entry.yaml
                                  : entry.text;
    throw ConfigError(
        path_,
        entry.line,
        entry.key,
        false,
        where(entry) + ": key '" + entry.key + "' " + what + ", got '" + shown +
            "'. " + valid);
  }

  std::string where(const Entry& entry) const {
    return entry.line > 0 ? path_ + ":" + std::to_string(entry.line) : path_;
  }

  std::string scalar(const Entry& entry, const std::string& valid) const {
    if (entry.kind == Entry::Kind::collection ||
        entry.kind == Entry::Kind::null) {
      bad(entry, "must be a single value", valid);
    }
    return entry.text;
  }

  int64_t integer(const Entry& entry, int64_t min, int64_t max) const {
    const std::string valid =
        "Valid values: an integer from " + std::to_string(min) +
        (max == INT64_MAX ? " up" : " to " + std::to_string(max)) + ".";
    const std::string text = scalar(entry, valid);
    if (!ampkit::detail::parse_int(text)) {
      bad(entry, "must be an integer", valid);
    }
    const auto value = ampkit::detail::parse_int(text, min, max);
    if (!value) {
      bad(entry, "is out of range", valid);
    }
    return *value;
  }

  bool boolean(const Entry& entry) const {
    const std::string valid = "Valid values: true, false.";
    const std::string text = lower(scalar(entry, valid));
    if (text == "true" || text == "yes" || text == "on") {
      return true;
    }
    if (text == "false" || text == "no" || text == "off") {
      return false;
    }
    bad(entry, "must be a boolean", valid);
  }

  std::string one_of(
      const Entry& entry, const std::vector<std::string>& values) const {
    const std::string valid = "Valid values: " + join(values, ", ") + ".";
    const std::string text = scalar(entry, valid);
    if (!contains(values, text)) {
      bad(entry, "is not a valid value", valid);
    }
    return text;
  }

  void apply(const Entry& entry, LaunchConfig& config) const {
    const std::string& key = entry.key;
    if (key == "compute_environment") {
      if (entry.text == "AMAZON_SAGEMAKER") {
        bad(entry,
            "is not supported by ampkit",
            "Valid values: LOCAL_MACHINE.");
      }
      config.compute_environment = one_of(entry, {"LOCAL_MACHINE"});
    } else if (key == "distributed_type") {
      if (contains(kOtherDistributedTypes, entry.text)) {
        bad(entry,
            "is not supported by ampkit: use NO, MULTI_CPU, MULTI_GPU, "
            "DEEPSPEED (ZeRO stages 1-3) or FSDP",
            "Valid values: " + join(kDistributedTypes, ", ") + ".");
      }
      config.distributed_type = one_of(entry, kDistributedTypes);
    } else if (key == "mixed_precision") {
      if (entry.kind == Entry::Kind::null) {
        config.mixed_precision = Precision::no;
        return;
      }
      const std::string valid = "Valid values: no, fp16, bf16, auto.";
      try {
        config.mixed_precision = parse_precision(scalar(entry, valid));
      } catch (const InvalidArgument&) {
        bad(entry, "is not a precision", valid);
      }
    } else if (key == "num_processes") {
      config.num_processes = integer(entry, 1, INT64_MAX);
    } else if (key == "num_machines") {
      config.num_machines = integer(entry, 1, INT64_MAX);
    } else if (key == "machine_rank") {
      config.machine_rank = integer(entry, 0, INT64_MAX);
    } else if (key == "main_process_port") {
      config.main_process_port =
          entry.kind == Entry::Kind::null ? 0 : integer(entry, 0, 65535);
    } else if (key == "gradient_accumulation_steps") {
      config.gradient_accumulation_steps = integer(entry, 1, INT64_MAX);
    } else if (key == "main_process_ip") {
      config.main_process_ip =
          entry.kind == Entry::Kind::null
              ? ""
              : scalar(entry, "Valid values: an IP address or host name.");
    } else if (key == "use_cpu") {
      config.use_cpu = boolean(entry);
    } else if (key == "debug") {
      config.debug = boolean(entry);
    } else if (key == "same_network") {
      config.same_network = boolean(entry);
    } else if (key == "gpu_ids") {
      config.gpu_ids = gpu_ids(entry);
    } else if (key == "rdzv_backend") {
      // Both spellings get ampkit's round-based rendezvous on machine 0's
      // launcher (fixed machine ranks); etcd needs a server ampkit cannot
      // talk to.
      const std::string valid =
          "Valid values: static, c10d (both: the launchers meet at "
          "main_process_ip:main_process_port).";
      const std::string value = entry.kind == Entry::Kind::null
                                    ? "static"
                                    : lower(scalar(entry, valid));
      if (value == "etcd" || value == "etcd-v2") {
        bad(entry,
            "asks for an etcd server, which ampkit has no client for",
            valid +
                " Set rdzv_backend: c10d; machine 0's launcher hosts the "
                "rendezvous.");
      }
      if (value != "static" && value != "c10d") {
        bad(entry, "is not a valid value", valid);
      }
      config.rdzv_backend = value;
    } else if (key == "main_training_function") {
      config.main_training_function =
          scalar(entry, "Valid values: a function name, e.g. main.");
      // accelerate calls another function only through its TPU and
      // notebook launchers; a C++ program starts at main().
      if (config.main_training_function != "main") {
        bad(entry,
            "names a Python function for accelerate's TPU launcher; ampkit "
            "launches a program, which starts at main()",
            "Valid values: main (or remove the key).");
      }
    } else if (key == "log_with") {
      // accelerate also accepts a list of trackers.
      config.log_with = entry.kind == Entry::Kind::null ? "" : entry.text;
    }
  }

  std::string gpu_ids(const Entry& entry) const {
    const std::string valid =
        "Valid values: all, or GPU indices separated by commas, e.g. 0,1.";
    if (entry.kind == Entry::Kind::null) {
      return "all";
    }
    std::string text = entry.text;
    text.erase(
        std::remove_if(
            text.begin(),
            text.end(),
            [](unsigned char c) { return std::isspace(c) != 0; }),
        text.end());
    if (text == "all") {
      return text;
    }
    std::istringstream parts(text);
    std::string part;
    bool any = false;
    while (std::getline(parts, part, ',')) {
      any = true;
      if (part.empty() || !std::all_of(part.begin(), part.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c)) != 0;
          })) {
        bad(entry, "must be all or a list of GPU indices", valid);
      }
    }
    if (!any || text.back() == ',') {
      bad(entry, "must be all or a list of GPU indices", valid);
    }
    return text;
  }

  LaunchConfig read(const std::vector<Entry>& entries) const {
    LaunchConfig config;
    std::map<std::string, std::string> passthrough;
    const Entry* fp16 = nullptr;
    bool has_mixed_precision = false;
    for (const Entry& entry : entries) {
      if (contains(kAmpkitKeys, entry.key)) {
        apply(entry, config);
        has_mixed_precision |= entry.key == "mixed_precision";
      } else if (contains(kPassthroughKeys, entry.key)) {
        // fsdp_config is read below when distributed_type is FSDP.
        if (entry.key != "fsdp_config") {
          detail::check_plugin_config(entry, path_);
        }
        passthrough[entry.key] = entry.yaml;
      } else if (entry.key == "fp16") {
        fp16 = &entry;
      } else if (entry.key == "dynamo_backend") {
        // accelerate's process_config: NO -> {}, else {dynamo_backend: X}.
        if (!passthrough.count("dynamo_config")) {
          Entry dynamo = entry;
          dynamo.key = "dynamo_config";
          dynamo.yaml = lower(entry.text) == "no"
                            ? "{}"
                            : "dynamo_backend: " + yaml_string(entry.text);
          detail::check_plugin_config(dynamo, path_);
          passthrough["dynamo_config"] = dynamo.yaml;
        }
      }
    }
    if (fp16 != nullptr && !has_mixed_precision && boolean(*fp16)) {
      config.mixed_precision = Precision::fp16;
    }
    if (config.distributed_type == "DEEPSPEED") {
      const Entry* deepspeed = nullptr;
      for (const Entry& entry : entries) {
        if (entry.key == "deepspeed_config") {
          deepspeed = &entry;
        }
      }
      detail::read_deepspeed_config(deepspeed, path_, config);
    }
    const Entry* fsdp = nullptr;
    for (const Entry& entry : entries) {
      if (entry.key == "fsdp_config") {
        fsdp = &entry;
      }
    }
    if (config.distributed_type == "FSDP") {
      detail::read_fsdp_config(fsdp, path_, config);
    } else if (fsdp != nullptr) {
      detail::check_plugin_config(*fsdp, path_);
    }
    for (const Entry& entry : entries) {
      if (!contains(kAmpkitKeys, entry.key) &&
          !contains(kPassthroughKeys, entry.key) &&
          !contains(kLegacyKeys, entry.key)) {
        throw ConfigError(
            path_,
            entry.line,
            entry.key,
            true,
            where(entry) + ": unknown key '" + entry.key + "'. Known keys: " +
                join(known_keys(), ", ") + ". Fix or remove it.");
      }
    }
    config.passthrough.assign(passthrough.begin(), passthrough.end());
    return config;
  }

 private:
  std::string path_;
};

}  // namespace

std::string default_config_path() {
  if (const char* env = std::getenv(kEnvConfigFile); env && *env) {
    return env;
  }
  return (fs::path(cache_home()) / "ampkit" / "default_config.yaml").string();
}

std::string accelerate_config_path() {
  // accelerate/commands/config/config_args.py: $HF_HOME, else
  // ${XDG_CACHE_HOME:-~/.cache}/huggingface.
  fs::path hf_home;
  if (const char* hf = std::getenv("HF_HOME"); hf && *hf) {
    hf_home = hf;
  } else {
    hf_home = fs::path(cache_home()) / "huggingface";
  }
  return (hf_home / "accelerate" / "default_config.yaml").string();
}

std::string config_path_to_read() {
  const std::string ours = default_config_path();
  std::error_code ec;
  if (std::getenv(kEnvConfigFile) != nullptr &&
      *std::getenv(kEnvConfigFile) != '\0') {
    return ours;
  }
  if (fs::exists(ours, ec)) {
    return ours;
  }
  const std::string theirs = accelerate_config_path();
  return fs::exists(theirs, ec) ? theirs : ours;
}

const std::vector<std::string>& known_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> all = kAmpkitKeys;
    all.insert(all.end(), kPassthroughKeys.begin(), kPassthroughKeys.end());
    std::sort(all.begin(), all.end());
    return all;
  }();
  return keys;
}

LaunchConfig load_config(const std::string& path) {
  const std::string text = read_file(path);
  const std::vector<Entry> entries = looks_like_json(path, text)
                                         ? parse_json(path, text)
                                         : parse_yaml(path, text);
  if (entries.empty()) {
    // accelerate fails on it too (its loader reads None); here it is said.
    throw ConfigError(
        path,
        1,
        "",
        false,
        path +
            " holds no settings (empty). Write it with `ampkit config "
            "--config_file " +
            path + "`, or remove it to run with the defaults.");
  }
  LaunchConfig config = Reader(path).read(entries);
  const std::string ours = ampkit_settings_path(path);
  std::error_code ec;
  if (!fs::exists(ours, ec)) {
    return config;
  }
  // Written by save_config: what accelerate's format cannot hold.
  for (const Entry& entry : parse_yaml(ours, read_file(ours))) {
    if (entry.key == "mixed_precision" && lower(entry.text) == "auto") {
      // A config changed since (by accelerate config) to another
      // precision wins.
      if (config.mixed_precision == Precision::no) {
        config.mixed_precision = Precision::automatic;
      }
    } else if (
        entry.key == "gradient_accumulation_steps" || entry.key == "log_with") {
      Reader(ours).apply(entry, config);
    } else {
      throw ConfigError(
          ours,
          entry.line,
          entry.key,
          entry.key != "mixed_precision",
          ours + ":" + std::to_string(entry.line) +
              ": ampkit's settings file holds mixed_precision: auto, "
              "gradient_accumulation_steps and log_with, got key '" +
              entry.key + "' '" + entry.text +
              "'. Remove the file, or rewrite it with `ampkit config`.");
    }
  }
  return config;
}

ConfigValues to_config_values(
    const LaunchConfig& config, const std::string& origin) {
  ConfigValues values;
  values.origin = origin;
  values.mixed_precision = config.mixed_precision;
  values.gradient_accumulation_steps = config.gradient_accumulation_steps;
  values.use_cpu = config.use_cpu;
  if (config.distributed_type == "DEEPSPEED") {
    values.zero_stage = config.zero_stage;
    values.gradient_clipping = config.gradient_clipping;
  }
  if (config.distributed_type == "FSDP") {
    values.fsdp_env = config.fsdp_env;
  }
  if (!config.log_with.empty()) {
    values.log_with = config.log_with;
  }
  return values;
}

}  // namespace ampkit::config
