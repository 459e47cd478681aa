// accelerate-compatible launch configuration: the default_config.yaml keys,
// where the file lives, reading it (YAML or JSON) with file:line errors, and
// writing it back.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/amp/precision.h"
#include "ampkit/error.h"

namespace ampkit {

/// Values from a config file (accelerate's default_config.yaml keys). The
/// command-line layer fills it from the file; each value it holds ranks
/// below an explicit option and the environment, above the default.
struct ConfigValues {
  /// Shown as the source of its values, e.g. the file's path.
  std::string origin = "config";
  std::optional<Precision> mixed_precision;
  std::optional<int64_t> gradient_accumulation_steps;
  std::optional<bool> use_cpu;
  /// accelerate's log_with: trackers, e.g. "jsonl,tensorboard" or "all".
  std::optional<std::string> log_with;
  /// deepspeed_config's zero_stage and gradient_clipping (a DEEPSPEED
  /// config).
  std::optional<int64_t> zero_stage;
  std::optional<double> gradient_clipping;
  /// A distributed_type FSDP config's fsdp_config, as the variables
  /// accelerate launch sets for it (ACCELERATE_USE_FSDP, FSDP_*); empty
  /// otherwise.
  std::vector<std::pair<std::string, std::string>> fsdp_env;
};

}  // namespace ampkit

namespace ampkit::config {

/// Where ampkit writes its config file: $AMPKIT_CONFIG_FILE, else
/// ${XDG_CACHE_HOME:-~/.cache}/ampkit/default_config.yaml.
std::string default_config_path();

/// accelerate's default config file: $HF_HOME/accelerate/default_config.yaml,
/// HF_HOME defaulting to ${XDG_CACHE_HOME:-~/.cache}/huggingface.
std::string accelerate_config_path();

/// The config file launch, env, doctor and test read: $AMPKIT_CONFIG_FILE;
/// else ampkit's default file when it exists; else accelerate's when it
/// exists (an accelerate user's `accelerate config` answers count); else
/// ampkit's default path (which does not exist: defaults apply).
std::string config_path_to_read();

/// The settings of accelerate's default_config.yaml that ampkit uses, with
/// accelerate's defaults. Keys ampkit does not act on but accelerate writes
/// (downcast_bf16, tpu_*, dynamo_config, ...) are accepted and kept as text
/// in `passthrough` so that `ampkit config update` preserves them.
struct LaunchConfig {
  std::string compute_environment = "LOCAL_MACHINE";
  /// NO, MULTI_CPU, MULTI_GPU, DEEPSPEED (several processes, CPU or GPU
  /// by use_cpu, with ZeRO per deepspeed_config) or FSDP (per fsdp_config).
  std::string distributed_type = "NO";
  Precision mixed_precision = Precision::no;
  int64_t num_processes = 1;
  int64_t num_machines = 1;
  int64_t machine_rank = 0;
  std::string main_process_ip;    ///< "" = not set (single machine)
  int64_t main_process_port = 0;  ///< 0 = not set (pick a free port)
  bool use_cpu = false;
  std::string gpu_ids = "all";
  bool debug = false;
  bool same_network = true;
  std::string rdzv_backend = "static";
  int64_t gradient_accumulation_steps = 1;
  std::string log_with;  ///< "" = none
  std::string main_training_function = "main";
  /// distributed_type DEEPSPEED: deepspeed_config's zero_stage (0-2; ampkit's
  /// own ZeRO) and gradient_clipping (0: none).
  int64_t zero_stage = 0;
  double gradient_clipping = 0;
  /// distributed_type FSDP: fsdp_config as accelerate launch's variables
  /// (ACCELERATE_USE_FSDP=true, FSDP_SHARDING_STRATEGY, ...), which ampkit
  /// launch passes to its workers.
  std::vector<std::pair<std::string, std::string>> fsdp_env;
  /// Known accelerate keys ampkit does not act on, as key -> YAML text.
  std::vector<std::pair<std::string, std::string>> passthrough;
};

}  // namespace ampkit::config

namespace ampkit::config {

/// Reads a config file: YAML (accelerate's format) or JSON (by extension
/// .json, or content starting with '{'). An unknown key is an
/// ampkit::InvalidArgument with file:line and the known keys; a wrong type
/// or value gives file:line, the key, the value and the valid values; a
/// missing or unreadable file is an ampkit::IoError naming it.
/// Every value is checked before unknown keys are reported, so a bad value
/// is found even in a file that also has a typo'd key. Keys accelerate
/// renamed (fp16: true, dynamo_backend) are read into their current names.
LaunchConfig load_config(const std::string& path);

/// The InvalidArgument load_config throws for an unknown key or a bad value,
/// with where it is, for callers that report a problem rather than stop
/// (ampkit doctor). what() is "Config: <file>:<line>: ...".
class ConfigError : public InvalidArgument {
 public:
  ConfigError(
      std::string path,
      int line,
      std::string key,
      bool unknown_key,
      const std::string& message)
      : InvalidArgument("Config", message),
        path_(std::move(path)),
        line_(line),
        key_(std::move(key)),
        unknown_key_(unknown_key) {}
  const std::string& path() const noexcept {
    return path_;
  }
  /// 1-based; 0 when unknown.
  int line() const noexcept {
    return line_;
  }
  const std::string& key() const noexcept {
    return key_;
  }
  /// True for a key accelerate does not know; false for a bad value.
  bool unknown_key() const noexcept {
    return unknown_key_;
  }

 private:
  std::string path_;
  int line_ = 0;
  std::string key_;
  bool unknown_key_ = false;
};

/// Every key load_config accepts, in accelerate's (alphabetical) order.
const std::vector<std::string>& known_keys();

/// Writes `config` as YAML with accelerate's key names and order, atomically
/// (a temporary file renamed over the target), creating missing parent
/// directories. Unset values (main_process_ip "", main_process_port 0,
/// log_with "") are left out, as accelerate leaves out None. Throws
/// ampkit::IoError naming the file when it cannot be written.
void save_config(const LaunchConfig& config, const std::string& path);

/// Where ampkit keeps the settings accelerate's format cannot hold, beside a
/// config file: default_config.yaml -> default_config.ampkit.yaml.
/// accelerate refuses keys and values it does not know, so save_config
/// writes there what its format cannot hold: gradient_accumulation_steps
/// (other than 1), log_with, and mixed_precision auto (the config says
/// 'no'); load_config reads them back, auto only while the config still
/// says 'no'.
std::string ampkit_settings_path(const std::string& path);

/// The values the Accelerator takes from a config (mixed_precision,
/// gradient_accumulation_steps, use_cpu, log_with when set), with `origin`
/// (usually the file's path) as their source.
ConfigValues to_config_values(
    const LaunchConfig& config, const std::string& origin);

/// `ampkit config`'s questionnaire, in the order of `accelerate config`:
/// asks on `out`, reads answers line by line from `in` (so answers can be
/// piped), shows defaults in brackets (an empty answer takes the default),
/// re-asks an invalid answer with the valid values, and returns the
/// answers. End of input before the last question is an
/// ampkit::UsageError naming the unanswered question.
LaunchConfig run_questionnaire(std::istream& in, std::ostream& out);

}  // namespace ampkit::config
