// accelerate's fsdp_config (distributed_type: FSDP) read for ampkit's FSDP
// (ampkit/distributed/fsdp.h): each key becomes the variable accelerate launch
// sets for it (FSDP_*), which the Accelerator reads as accelerate's
// FullyShardedDataParallelPlugin does. Values ampkit does not implement are
// refused by name, never ignored.
#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

#include "ampkit/config/config.h"
#include "config/parse.h"
#include "utils/strings.h"

namespace ampkit::config::detail {

const std::vector<std::string>& fsdp_keys() {
  static const std::vector<std::string> keys = {
      "fsdp_activation_checkpointing",
      "fsdp_auto_wrap_policy",
      "fsdp_backward_prefetch",
      "fsdp_backward_prefetch_policy",
      "fsdp_cpu_ram_efficient_loading",
      "fsdp_forward_prefetch",
      "fsdp_min_num_params",
      "fsdp_offload_params",
      "fsdp_reshard_after_forward",
      "fsdp_sharding_strategy",
      "fsdp_state_dict_type",
      "fsdp_sync_module_states",
      "fsdp_transformer_layer_cls_to_wrap",
      "fsdp_use_orig_params",
      "fsdp_version"};
  return keys;
}

namespace {

std::optional<bool> as_bool(const std::string& value) {
  const std::string v = ampkit::detail::lower(value);
  if (v == "true" || v == "yes" || v == "on" || v == "1") {
    return true;
  }
  if (v == "false" || v == "no" || v == "off" || v == "0" || v.empty()) {
    return false;
  }
  return std::nullopt;
}

// One fsdp_config item being read: where it came from, for messages, and its
// key and value.
struct FsdpConfigItem {
  const Entry& entry;
  const std::string& path;
  std::string key;
  std::string value;
  std::string shown;  // fsdp_config.<key> '<value>'
  std::string word;   // the value in upper case
};

[[noreturn]] void fsdp_config_fail(
    const FsdpConfigItem& item, const std::string& message) {
  fail_at(item.entry, item.path, message);
}

// The item's value as a boolean, refused when it is none.
bool fsdp_config_bool(const FsdpConfigItem& item) {
  const auto b = as_bool(item.value);
  if (!b) {
    fsdp_config_fail(item, item.shown + " must be true or false.");
  }
  return *b;
}

// A YAML value as text: a list joined by commas, "" for null.
std::string fsdp_config_text(const YAML::Node& v) {
  std::string value;
  if (v.IsSequence()) {
    // fsdp_transformer_layer_cls_to_wrap as a list.
    for (const auto& x : v) {
      value += (value.empty() ? "" : ",") + x.as<std::string>();
    }
  } else if (!v.IsNull()) {
    value = v.IsScalar() ? v.Scalar() : std::string("(a mapping)");
  }
  return value;
}

// The keys whose value is one of a list of names: sharding strategy, wrap
// policy, backward prefetch and state dict type. Returns false for any
// other key.
bool fsdp_config_read_named(
    const FsdpConfigItem& item, LaunchConfig& config, bool& has_strategy) {
  const std::string& key = item.key;
  const std::string& value = item.value;
  const std::string& shown = item.shown;
  const std::string& word = item.word;
  auto set = [&](const std::string& name, const std::string& text) {
    config.fsdp_env.emplace_back(name, text);
  };
  if (key == "fsdp_sharding_strategy") {
    const std::vector<std::string> ok = {
        "FULL_SHARD",
        "SHARD_GRAD_OP",
        "NO_SHARD",
        "HYBRID_SHARD",
        "HYBRID_SHARD_ZERO2",
        "_HYBRID_SHARD_ZERO2",
        "1",
        "2",
        "3",
        "4",
        "5"};
    if (!contains(ok, word)) {
      fsdp_config_fail(
          item,
          shown +
              " is not a sharding strategy. Valid values: FULL_SHARD, "
              "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2.");
    }
    has_strategy = true;
    set("FSDP_SHARDING_STRATEGY", word);
  } else if (key == "fsdp_auto_wrap_policy") {
    const std::vector<std::string> ok = {
        "TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
    if (!contains(ok, word)) {
      fsdp_config_fail(
          item,
          shown + " is not a wrap policy. Valid values: " +
              ampkit::detail::join(ok, ", ") + ".");
    }
    set("FSDP_AUTO_WRAP_POLICY", word);
  } else if (
      key == "fsdp_backward_prefetch" ||
      key == "fsdp_backward_prefetch_policy") {
    const std::vector<std::string> ok = {
        "BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
    if (!value.empty() && !contains(ok, word)) {
      fsdp_config_fail(
          item,
          shown + " is not a backward prefetch policy. Valid values: " +
              ampkit::detail::join(ok, ", ") + ".");
    }
    if (!value.empty() && word != "NO_PREFETCH") {
      set("FSDP_BACKWARD_PREFETCH", word);
    }
  } else if (key == "fsdp_state_dict_type") {
    if (word == "LOCAL_STATE_DICT") {
      fsdp_config_fail(
          item,
          shown +
              ": LOCAL_STATE_DICT (deprecated in PyTorch) is not built in "
              "ampkit. Valid values: SHARDED_STATE_DICT, FULL_STATE_DICT.");
    }
    if (word != "FULL_STATE_DICT" && word != "SHARDED_STATE_DICT") {
      fsdp_config_fail(
          item,
          shown +
              " is not a state dict type. Valid values: SHARDED_STATE_DICT, "
              "FULL_STATE_DICT.");
    }
    set("FSDP_STATE_DICT_TYPE", word);
  } else {
    return false;
  }
  return true;
}

// The other keys: booleans, the wrapped class names, the minimum number of
// parameters and fsdp_version.
void fsdp_config_read_other(
    const FsdpConfigItem& item,
    LaunchConfig& config,
    std::optional<bool>& reshard_after_forward) {
  const std::string& key = item.key;
  const std::string& value = item.value;
  const std::string& shown = item.shown;
  auto set = [&](const std::string& name, const std::string& text) {
    config.fsdp_env.emplace_back(name, text);
  };
  auto boolean = [&]() { return fsdp_config_bool(item); };
  if (key == "fsdp_reshard_after_forward") {
    reshard_after_forward = boolean();
  } else if (key == "fsdp_transformer_layer_cls_to_wrap") {
    set("FSDP_TRANSFORMER_CLS_TO_WRAP", value);
  } else if (key == "fsdp_min_num_params") {
    const auto n = ampkit::detail::parse_int(value, 0, INT64_MAX);
    if (!n) {
      fsdp_config_fail(item, shown + " must be an integer >= 0.");
    }
    set("FSDP_MIN_NUM_PARAMS", std::to_string(*n));
  } else if (key == "fsdp_forward_prefetch") {
    if (boolean()) {
      set("FSDP_FORWARD_PREFETCH", "true");
    }
  } else if (key == "fsdp_offload_params") {
    if (boolean()) {
      fsdp_config_fail(
          item,
          shown +
              ": offloading parameters to the CPU is not built in ampkit. Set "
              "false.");
    }
  } else if (key == "fsdp_activation_checkpointing") {
    set("FSDP_ACTIVATION_CHECKPOINTING", boolean() ? "true" : "false");
  } else if (key == "fsdp_version") {
    if (value != "1" && !value.empty()) {
      fsdp_config_fail(
          item,
          shown +
              ": ampkit's FSDP follows FSDP1 (units with flat parameters). "
              "Valid value: 1.");
    }
  } else {
    // fsdp_use_orig_params, fsdp_sync_module_states,
    // fsdp_cpu_ram_efficient_loading: ampkit's parameters keep their
    // names and shapes for saving, and every process starts from process
    // 0's values (a C++ program builds its model on every process), so
    // either value trains the same.
    boolean();
  }
}

}  // namespace

void read_fsdp_config(
    const Entry* entry, const std::string& path, LaunchConfig& config) {
  config.fsdp_env = {{"ACCELERATE_USE_FSDP", "true"}};
  if (entry == nullptr || entry->kind == Entry::Kind::null) {
    return;
  }
  auto fail = [&](const std::string& message) {
    fail_at(*entry, path, message);
  };
  const YAML::Node node = load_mapping(*entry, path, "FSDP settings");
  if (node.IsNull()) {
    return;
  }
  std::optional<bool> reshard_after_forward;
  bool has_strategy = false;
  for (const auto& yaml_item : node) {
    const std::string key = yaml_item.first.as<std::string>();
    const std::string value = fsdp_config_text(yaml_item.second);
    const FsdpConfigItem item{
        *entry,
        path,
        key,
        value,
        "fsdp_config." + key + " '" + value + "'",
        ampkit::detail::upper(value)};
    if (!contains(fsdp_keys(), key)) {
      fail(
          "unknown key fsdp_config." + key +
          ". Known keys: " + ampkit::detail::join(fsdp_keys(), ", ") + ".");
    }
    if (!fsdp_config_read_named(item, config, has_strategy)) {
      fsdp_config_read_other(item, config, reshard_after_forward);
    }
  }
  if (reshard_after_forward) {
    // FSDP2's name: true is FULL_SHARD, false SHARD_GRAD_OP.
    const std::string strategy =
        *reshard_after_forward ? "FULL_SHARD" : "SHARD_GRAD_OP";
    if (has_strategy) {
      for (const auto& [name, value] : config.fsdp_env) {
        if (name == "FSDP_SHARDING_STRATEGY" && value != strategy &&
            value != (*reshard_after_forward ? "1" : "2")) {
          fail(
              "fsdp_config.fsdp_reshard_after_forward and "
              "fsdp_sharding_strategy '" +
              value + "' disagree; keep one.");
        }
      }
    } else {
      config.fsdp_env.emplace_back("FSDP_SHARDING_STRATEGY", strategy);
    }
  }
}

}  // namespace ampkit::config::detail
