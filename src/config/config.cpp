// Reading and writing accelerate's default_config.yaml (or its JSON form):
// every accelerate key accepted, ampkit's checked with file:line errors, the
// rest kept as YAML text so that a rewrite preserves them.
#include "ampkit/config/config.h"

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "ampkit/error.h"

#include "utils/strings.h"

using ampkit::detail::join;
using ampkit::detail::lower;

namespace ampkit::config {

namespace {

namespace fs = std::filesystem;

constexpr const char* kComponent = "Config";
/// The config file to use instead of the default location (DESIGN.md).
constexpr const char* kEnvConfigFile = "AMPKIT_CONFIG_FILE";
/// Base of the default location, ~/.cache when unset (XDG base directories).
constexpr const char* kEnvXdgCacheHome = "XDG_CACHE_HOME";

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
/// config_args.py): accepted and kept, not acted on.
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
    "NO", "MULTI_CPU", "MULTI_GPU"};
/// accelerate's other DistributedType values: real, but not ampkit's.
const std::vector<std::string> kOtherDistributedTypes = {
    "DEEPSPEED",
    "FSDP",
    "MEGATRON_LM",
    "MULTI_HPU",
    "MULTI_MLU",
    "MULTI_MUSA",
    "MULTI_NPU",
    "MULTI_SDAA",
    "MULTI_XPU",
    "TP",
    "XLA"};

bool contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// One top-level entry of the file, whatever its format.
struct Entry {
  enum class Kind { null, plain, quoted, collection };
  std::string key;
  int line = 0;
  Kind kind = Kind::null;
  std::string text;  // the scalar, "" for null and collections
  std::string yaml;  // the value as YAML text, for passthrough
};

// YAML 1.1 words PyYAML reads as something other than a string.
bool needs_quotes(const std::string& s) {
  if (s.empty()) {
    return true;
  }
  static const std::vector<std::string> kWords = {
      "y",
      "n",
      "yes",
      "no",
      "true",
      "false",
      "on",
      "off",
      "null",
      "~",
      ".nan",
      ".inf",
      "-.inf",
      "+.inf"};
  if (contains(kWords, lower(s))) {
    return true;
  }
  double number = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec == std::errc() && end == s.data() + s.size()) {
    return true;
  }
  if (std::string("-?:,[]{}#&*!|>'\"%@`").find(s.front()) !=
          std::string::npos ||
      std::isspace(static_cast<unsigned char>(s.front())) ||
      std::isspace(static_cast<unsigned char>(s.back()))) {
    return true;
  }
  return s.find(": ") != std::string::npos ||
         s.find(" #") != std::string::npos || s.find('\n') != std::string::npos;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c == '\'' ? std::string("''") : std::string(1, c);
  }
  return out + "'";
}

// A string as PyYAML's safe_dump writes it: plain unless that would change
// its type.
std::string yaml_string(const std::string& s) {
  return needs_quotes(s) ? quote(s) : s;
}

// Block style below the top level, as PyYAML writes it; empty collections
// stay {} and [].
void use_block_style(YAML::Node node) {
  if ((node.IsMap() || node.IsSequence()) && node.size() > 0) {
    node.SetStyle(YAML::EmitterStyle::Block);
    for (auto item : node) {
      use_block_style(node.IsMap() ? item.second : item);
    }
  }
}

std::string yaml_text(const YAML::Node& node) {
  if (node.IsNull()) {
    return "null";
  }
  if (node.IsScalar()) {
    return node.Tag() == "!" ? yaml_string(node.Scalar()) : node.Scalar();
  }
  YAML::Node copy = YAML::Clone(node);
  use_block_style(copy);
  YAML::Emitter emitter;
  emitter << copy;
  return emitter.c_str();
}

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

int line_at_offset(const std::string& text, std::size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(
                 text.begin(),
                 text.begin() + static_cast<std::ptrdiff_t>(offset),
                 '\n'));
}

std::vector<Entry> parse_yaml(
    const std::string& path, const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw IoError(
        kComponent,
        path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " +
            e.msg + ". Fix the file, or write a new one with `ampkit config`.");
  }
  std::vector<Entry> entries;
  if (!root.IsDefined() || root.IsNull()) {
    return entries;
  }
  if (!root.IsMap()) {
    throw ConfigError(
        path,
        root.Mark().line + 1,
        "",
        false,
        path + ":" + std::to_string(root.Mark().line + 1) +
            ": must be a mapping of accelerate's keys, got a " +
            (root.IsSequence() ? "sequence" : "scalar") +
            ". Write `key: value` lines, e.g. `mixed_precision: bf16`.");
  }
  for (const auto& item : root) {
    Entry entry;
    entry.key = item.first.IsScalar() ? item.first.Scalar() : "<not a scalar>";
    entry.line = item.first.Mark().line + 1;
    const YAML::Node& value = item.second;
    if (value.IsNull()) {
      entry.kind = Entry::Kind::null;
    } else if (value.IsScalar()) {
      entry.kind =
          value.Tag() == "!" ? Entry::Kind::quoted : Entry::Kind::plain;
      entry.text = value.Scalar();
    } else {
      entry.kind = Entry::Kind::collection;
      if (value.IsSequence()) {
        std::vector<std::string> items;
        for (const auto& element : value) {
          items.push_back(element.IsScalar() ? element.Scalar() : "");
        }
        entry.text = join(items, ",");
      }
    }
    entry.yaml = yaml_text(value);
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<Entry> parse_json(
    const std::string& path, const std::string& text) {
  nlohmann::ordered_json root;
  try {
    root = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte where parsing failed.
    throw IoError(
        kComponent,
        path + ":" + std::to_string(line_at_offset(text, e.byte - 1)) +
            ": JSON syntax error: " + e.what() +
            ". Fix the file, or write a new one with `ampkit config`.");
  }
  if (!root.is_object()) {
    throw ConfigError(
        path,
        1,
        "",
        false,
        path + ":1: must be an object of accelerate's keys, got " +
            root.type_name() + ". Write {\"mixed_precision\": \"bf16\"}.");
  }
  std::vector<Entry> entries;
  for (const auto& [key, value] : root.items()) {
    Entry entry;
    entry.key = key;
    const auto at = text.find("\"" + key + "\"");
    entry.line = at == std::string::npos ? 0 : line_at_offset(text, at);
    if (value.is_null()) {
      entry.kind = Entry::Kind::null;
    } else if (value.is_string()) {
      entry.kind = Entry::Kind::quoted;
      entry.text = value.get<std::string>();
    } else if (value.is_primitive()) {
      entry.kind = Entry::Kind::plain;
      entry.text = value.dump();
    } else {
      entry.kind = Entry::Kind::collection;
      if (value.is_array()) {
        std::vector<std::string> items;
        for (const auto& element : value) {
          items.push_back(
              element.is_string() ? element.get<std::string>()
                                  : element.dump());
        }
        entry.text = join(items, ",");
      }
    }
    // JSON is YAML's flow style; re-emitted as block style like accelerate.
    entry.yaml = entry.kind == Entry::Kind::quoted
                     ? yaml_string(entry.text)
                     : yaml_text(YAML::Load(value.dump()));
    entries.push_back(std::move(entry));
  }
  return entries;
}

bool looks_like_json(const std::string& path, const std::string& text) {
  if (fs::path(path).extension() == ".json") {
    return true;
  }
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{';
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
    if (!detail::parse_int(text)) {
      bad(entry, "must be an integer", valid);
    }
    const auto value = detail::parse_int(text, min, max);
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
            "is not supported by ampkit: use NO, MULTI_CPU or MULTI_GPU",
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
      config.rdzv_backend = entry.kind == Entry::Kind::null
                                ? "static"
                                : scalar(entry, "Valid values: static, c10d.");
    } else if (key == "main_training_function") {
      config.main_training_function =
          scalar(entry, "Valid values: a function name, e.g. main.");
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
        passthrough[entry.key] = entry.yaml;
      } else if (entry.key == "fp16") {
        fp16 = &entry;
      } else if (entry.key == "dynamo_backend") {
        // accelerate's process_config: NO -> {}, else {dynamo_backend: X}.
        if (!passthrough.count("dynamo_config")) {
          passthrough["dynamo_config"] =
              lower(entry.text) == "no"
                  ? "{}"
                  : "dynamo_backend: " + yaml_string(entry.text);
        }
      }
    }
    if (fp16 != nullptr && !has_mixed_precision && boolean(*fp16)) {
      config.mixed_precision = Precision::fp16;
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

}  // namespace

std::string default_config_path() {
  if (const char* env = std::getenv(kEnvConfigFile); env && *env) {
    return env;
  }
  fs::path cache;
  if (const char* xdg = std::getenv(kEnvXdgCacheHome); xdg && *xdg) {
    cache = xdg;
  } else {
    const char* home = std::getenv("HOME");
    cache = fs::path(home ? home : ".") / ".cache";
  }
  return (cache / "ampkit" / "default_config.yaml").string();
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
  return Reader(path).read(entries);
}

void save_config(const LaunchConfig& config, const std::string& path) {
  std::map<std::string, std::string> values(
      config.passthrough.begin(), config.passthrough.end());
  values["compute_environment"] = yaml_string(config.compute_environment);
  values["debug"] = config.debug ? "true" : "false";
  values["distributed_type"] = yaml_string(config.distributed_type);
  values["gpu_ids"] = yaml_string(config.gpu_ids);
  values["gradient_accumulation_steps"] =
      std::to_string(config.gradient_accumulation_steps);
  values["machine_rank"] = std::to_string(config.machine_rank);
  values["main_training_function"] = yaml_string(config.main_training_function);
  values["mixed_precision"] = yaml_string(
      config.mixed_precision == Precision::automatic
          ? std::string("auto")
          : to_string(config.mixed_precision));
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
  if (!config.log_with.empty()) {
    values["log_with"] = yaml_string(config.log_with);
  }
  std::string text;
  for (const auto& [key, value] : values) {
    text += yaml_entry(key, value);
  }

  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
  }
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      fs::remove(tmp, ec);
      throw IoError(
          kComponent,
          path +
              ": cannot be written. Check that its directory exists "
              "and is writable.");
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

ConfigValues to_config_values(
    const LaunchConfig& config, const std::string& origin) {
  ConfigValues values;
  values.origin = origin;
  values.mixed_precision = config.mixed_precision;
  values.gradient_accumulation_steps = config.gradient_accumulation_steps;
  values.use_cpu = config.use_cpu;
  if (!config.log_with.empty()) {
    values.log_with = config.log_with;
  }
  return values;
}

}  // namespace ampkit::config
