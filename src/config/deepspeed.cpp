// accelerate's deepspeed_config (distributed_type: DEEPSPEED) read for
// ampkit's own ZeRO: the stages and settings it implements are taken, every
// other one is refused by name, never ignored.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ampkit/config/config.h"
#include "config/parse.h"
#include "utils/strings.h"

namespace ampkit::config::detail {

namespace {

// What accelerate's questionnaire and DeepSpeedPlugin write.
const std::vector<std::string> kDeepSpeedKeys = {
    "deepspeed_config_file",
    "deepspeed_exclusion_filter",
    "deepspeed_hostfile",
    "deepspeed_inclusion_filter",
    "deepspeed_moe_layer_cls_names",
    "deepspeed_multinode_launcher",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "offload_optimizer_device",
    "offload_optimizer_nvme_path",
    "offload_param_device",
    "offload_param_nvme_path",
    "zero3_init_flag",
    "zero3_save_16bit_model",
    "zero_stage"};

}  // namespace

void read_deepspeed_config(
    const Entry* entry, const std::string& path, LaunchConfig& config) {
  // accelerate's DeepSpeedPlugin defaults to ZeRO stage 2.
  config.zero_stage = 2;
  if (entry == nullptr || entry->kind == Entry::Kind::null) {
    return;
  }
  auto fail = [&](const std::string& message) {
    fail_at(*entry, path, message);
  };
  const YAML::Node node = load_mapping(*entry, path, "DeepSpeed settings");
  if (node.IsNull()) {
    return;
  }
  auto text = [](const YAML::Node& v) {
    return v.IsScalar() ? v.Scalar() : std::string("(a collection)");
  };
  for (const auto& item : node) {
    const std::string key = item.first.as<std::string>();
    const YAML::Node& v = item.second;
    const std::string value = v.IsNull() ? "" : text(v);
    const std::string shown = "deepspeed_config." + key + " '" + value + "'";
    if (!contains(kDeepSpeedKeys, key)) {
      fail(
          "unknown key deepspeed_config." + key +
          ". Known keys: " + ampkit::detail::join(kDeepSpeedKeys, ", ") + ".");
    }
    if (key == "zero_stage") {
      const auto stage = ampkit::detail::parse_int(value, 0, 3);
      if (!stage) {
        fail(shown + " is not a ZeRO stage. Valid values: 0, 1, 2, 3.");
      }
      // Stage 3 is ampkit's FSDP FULL_SHARD (the whole model one unit
      // unless FSDP_* variables name units).
      config.zero_stage = *stage;
    } else if (key == "gradient_accumulation_steps") {
      const auto steps = ampkit::detail::parse_int(value, 1, INT64_MAX);
      if (!steps) {
        fail(shown + " must be an integer >= 1.");
      }
      config.gradient_accumulation_steps = *steps;
    } else if (key == "gradient_clipping") {
      const double clip = ampkit::detail::parse_double(value).value_or(-1.0);
      if (!(clip >= 0) || !std::isfinite(clip)) {
        fail(shown + " must be a number >= 0 (0: no clipping).");
      }
      config.gradient_clipping = clip;
    } else if (
        key == "offload_optimizer_device" || key == "offload_param_device") {
      if (!value.empty() && ampkit::detail::lower(value) != "none") {
        fail(
            shown +
            ": offloading to the CPU or NVMe is not implemented by ampkit. "
            "Valid value: none.");
      }
    } else if (key == "zero3_init_flag" || key == "zero3_save_16bit_model") {
      const std::string b = ampkit::detail::lower(value);
      if (b == "true" || b == "yes" || b == "on") {
        fail(
            shown +
            ": DeepSpeed's stage-3 initialisation and 16-bit saving are "
            "not ampkit's (its stage 3 builds the model on every process and "
            "saves fp32 weights). Set it to false.");
      }
    } else if (!value.empty() && ampkit::detail::lower(value) != "none") {
      // A DeepSpeed JSON file, NVMe paths, MoE layers, DeepSpeed's own
      // multi-node launchers: all DeepSpeed's, none ampkit's.
      fail(
          shown +
          " is a DeepSpeed setting ampkit does not implement. Remove it; "
          "ampkit reads zero_stage, gradient_accumulation_steps and "
          "gradient_clipping" +
          (key == "deepspeed_config_file"
               ? std::string(" from deepspeed_config itself")
               : std::string()) +
          (key == "deepspeed_multinode_launcher" || key == "deepspeed_hostfile"
               ? std::string(", and ampkit launch starts the machines "
                             "(--num_machines, --machine_rank)")
               : std::string()) +
          ".");
    }
  }
}

}  // namespace ampkit::config::detail
