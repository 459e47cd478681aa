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
  auto set = [&](const std::string& name, const std::string& value) {
    config.fsdp_env.emplace_back(name, value);
  };
  std::optional<bool> reshard_after_forward;
  bool has_strategy = false;
  for (const auto& item : node) {
    const std::string key = item.first.as<std::string>();
    const YAML::Node& v = item.second;
    std::string value;
    if (v.IsSequence()) {
      // fsdp_transformer_layer_cls_to_wrap as a list.
      for (const auto& x : v) {
        value += (value.empty() ? "" : ",") + x.as<std::string>();
      }
    } else if (!v.IsNull()) {
      value = v.IsScalar() ? v.Scalar() : std::string("(a mapping)");
    }
    const std::string shown = "fsdp_config." + key + " '" + value + "'";
    const std::string word = ampkit::detail::upper(value);
    if (!contains(fsdp_keys(), key)) {
      fail(
          "unknown key fsdp_config." + key +
          ". Known keys: " + ampkit::detail::join(fsdp_keys(), ", ") + ".");
    }
    auto boolean = [&]() {
      const auto b = as_bool(value);
      if (!b) {
        fail(shown + " must be true or false.");
      }
      return *b;
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
        fail(
            shown +
            " is not a sharding strategy. Valid values: FULL_SHARD, "
            "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2.");
      }
      has_strategy = true;
      set("FSDP_SHARDING_STRATEGY", word);
    } else if (key == "fsdp_reshard_after_forward") {
      reshard_after_forward = boolean();
    } else if (key == "fsdp_auto_wrap_policy") {
      const std::vector<std::string> ok = {
          "TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
      if (!contains(ok, word)) {
        fail(
            shown + " is not a wrap policy. Valid values: " +
            ampkit::detail::join(ok, ", ") + ".");
      }
      set("FSDP_AUTO_WRAP_POLICY", word);
    } else if (key == "fsdp_transformer_layer_cls_to_wrap") {
      set("FSDP_TRANSFORMER_CLS_TO_WRAP", value);
    } else if (key == "fsdp_min_num_params") {
      const auto n = ampkit::detail::parse_int(value, 0, INT64_MAX);
      if (!n) {
        fail(shown + " must be an integer >= 0.");
      }
      set("FSDP_MIN_NUM_PARAMS", std::to_string(*n));
    } else if (
        key == "fsdp_backward_prefetch" ||
        key == "fsdp_backward_prefetch_policy") {
      const std::vector<std::string> ok = {
          "BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
      if (!value.empty() && !contains(ok, word)) {
        fail(
            shown + " is not a backward prefetch policy. Valid values: " +
            ampkit::detail::join(ok, ", ") + ".");
      }
      if (!value.empty() && word != "NO_PREFETCH") {
        set("FSDP_BACKWARD_PREFETCH", word);
      }
    } else if (key == "fsdp_forward_prefetch") {
      if (boolean()) {
        set("FSDP_FORWARD_PREFETCH", "true");
      }
    } else if (key == "fsdp_offload_params") {
      if (boolean()) {
        fail(
            shown +
            ": offloading parameters to the CPU is not built in ampkit. Set "
            "false.");
      }
    } else if (key == "fsdp_state_dict_type") {
      if (word == "LOCAL_STATE_DICT") {
        fail(
            shown +
            ": LOCAL_STATE_DICT (deprecated in PyTorch) is not built in "
            "ampkit. Valid values: SHARDED_STATE_DICT, FULL_STATE_DICT.");
      }
      if (word != "FULL_STATE_DICT" && word != "SHARDED_STATE_DICT") {
        fail(
            shown +
            " is not a state dict type. Valid values: SHARDED_STATE_DICT, "
            "FULL_STATE_DICT.");
      }
      set("FSDP_STATE_DICT_TYPE", word);
    } else if (key == "fsdp_activation_checkpointing") {
      set("FSDP_ACTIVATION_CHECKPOINTING", boolean() ? "true" : "false");
    } else if (key == "fsdp_version") {
      if (value != "1" && !value.empty()) {
        fail(
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
      set("FSDP_SHARDING_STRATEGY", strategy);
    }
  }
}

}  // namespace ampkit::config::detail
