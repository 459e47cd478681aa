// What the config files share (private): one top-level entry of a parsed
// file, the parsers that produce entries from YAML or JSON text, and the
// quoting of strings as PyYAML writes them.
#pragma once

#include <string>
#include <vector>

#include "ampkit/config/config.h"

namespace YAML {
class Node;
}

namespace ampkit::config::detail {

/// The component named in this layer's errors.
inline constexpr const char* kComponent = "Config";

// One top-level entry of the file, whatever its format.
struct Entry {
  enum class Kind { null, plain, quoted, collection };
  std::string key;
  int line = 0;
  Kind kind = Kind::null;
  std::string text;  // the scalar, "" for null and collections
  std::string yaml;  // the value as YAML text, for passthrough
};

/// Whether `list` holds `s`.
bool contains(const std::vector<std::string>& list, const std::string& s);

/// `s` as a YAML scalar that reads back as the same string (quoted where
/// PyYAML would quote it).
std::string yaml_string(const std::string& s);

/// Whether `text` (read from `path`) is JSON: by extension .json, or content
/// starting with '{'.
bool looks_like_json(const std::string& path, const std::string& text);

/// The top-level entries of a YAML or JSON file's `text`, in file order;
/// a syntax error is an IoError, a top level that is not a mapping a
/// ConfigError, both naming `path`.
std::vector<Entry> parse_yaml(const std::string& path, const std::string& text);
std::vector<Entry> parse_json(const std::string& path, const std::string& text);

/// Reads accelerate's deepspeed_config (`entry`, nullptr when absent) of a
/// DEEPSPEED config into `config`: zero_stage (default 2, as accelerate's
/// DeepSpeedPlugin), gradient_accumulation_steps and gradient_clipping. A
/// setting ampkit does not implement (stage 3, offload, a DeepSpeed JSON
/// file, ...) is a ConfigError naming it.
void read_deepspeed_config(
    const Entry* entry, const std::string& path, LaunchConfig& config);
/// The fsdp_config entry (or nullptr) of a distributed_type FSDP config into
/// config.fsdp_env, as accelerate launch's variables; a setting ampkit does
/// not implement (HYBRID_SHARD, offload, prefetch, ...) is a ConfigError
/// naming it.
void read_fsdp_config(
    const Entry* entry, const std::string& path, LaunchConfig& config);
/// fsdp_config's keys, as accelerate's questionnaire and
/// FullyShardedDataParallelPlugin write them.
const std::vector<std::string>& fsdp_keys();

/// Throws the ConfigError of `entry` in `path`: "path:line: message".
[[noreturn]] void fail_at(
    const Entry& entry, const std::string& path, const std::string& message);

/// `entry`'s value as a YAML mapping (a null node for `{}`-less nulls); not
/// YAML, or not a mapping of `what`, is a ConfigError naming the key.
YAML::Node load_mapping(
    const Entry& entry, const std::string& path, const std::string& what);

/// Checks accelerate's fsdp_config, dynamo_config, ipex_config,
/// megatron_lm_config or tp_config `entry` (other keys pass): every key is
/// accelerate's, and none asks for what ampkit does not implement.
void check_plugin_config(const Entry& entry, const std::string& path);

}  // namespace ampkit::config::detail
