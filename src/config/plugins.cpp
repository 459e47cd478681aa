// accelerate's other plugin sections (fsdp_config, dynamo_config,
// ipex_config, megatron_lm_config, fp8_config, mpirun_config, tp_config)
// checked as deepspeed_config is, and its TPU keys: a mapping of the keys
// accelerate writes, where a setting that would ask for something ampkit does
// not do is refused by name, never kept and ignored. What accelerate writes for
// "not used" ({} or the off values) loads as before.
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "config/parse.h"
#include "utils/strings.h"

namespace ampkit::config::detail {

namespace {

struct Plugin {
  std::string name;
  std::vector<std::string> keys;  // accelerate's (current and older) keys
  // Whether `value` of `key` asks for nothing (accelerate's off value).
  bool (*off)(const std::string& key, const std::string& value);
  std::string why;  // why ampkit refuses a value that is not off
};

bool is_off_word(const std::string& value) {
  const std::string v = ampkit::detail::lower(value);
  return v.empty() || v == "no" || v == "none" || v == "false" || v == "off";
}

const std::vector<Plugin>& plugins() {
  static const std::vector<Plugin> list = {
      {"fsdp_config",
       fsdp_keys(),
       [](const std::string&, const std::string& value) {
         return is_off_word(value);
       },
       "fsdp_config applies to distributed_type FSDP only, and this config "
       "has another. Set distributed_type: FSDP to shard the model, or "
       "leave fsdp_config empty ({})."},
      {"dynamo_config",
       {"dynamo_backend",
        "dynamo_mode",
        "dynamo_use_dynamic",
        "dynamo_use_fullgraph",
        "dynamo_use_regional_compilation"},
       // Without a backend accelerate compiles nothing, whatever the rest
       // says; so does ampkit.
       [](const std::string& key, const std::string& value) {
         return key != "dynamo_backend" || is_off_word(value);
       },
       "TorchDynamo compiles Python bytecode and a C++ program has none, so "
       "ampkit runs the model as LibTorch executes it (eager, with fused "
       "optimizers and autocast). Set dynamo_backend to 'NO' or remove it."},
      {"ipex_config",
       {"ipex", "use_xpu"},
       [](const std::string&, const std::string& value) {
         return is_off_word(value);
       },
       "Intel Extension for PyTorch and XPUs are Python-only; ampkit uses "
       "LibTorch's own CPU kernels (oneDNN). Set it to false or remove "
       "it."},
      {"megatron_lm_config",
       {"megatron_lm_gradient_clipping",
        "megatron_lm_num_micro_batches",
        "megatron_lm_pp_degree",
        "megatron_lm_recompute_activations",
        "megatron_lm_sequence_parallelism",
        "megatron_lm_tp_degree",
        "megatron_lm_use_distributed_optimizer"},
       [](const std::string& key, const std::string& value) {
         if (key == "megatron_lm_tp_degree" || key == "megatron_lm_pp_degree" ||
             key == "megatron_lm_num_micro_batches") {
           return value.empty() || value == "1";
         }
         return is_off_word(value);
       },
       "Megatron-LM's tensor and pipeline parallelism are not implemented "
       "by ampkit; it trains data-parallel (DDP or ZeRO 1/2). Leave "
       "megatron_lm_config empty ({})."},
      {"fp8_config",
       {"amax_compute_algo",
        "amax_history_len",
        "backend",
        "fp8_format",
        "interval",
        "margin",
        "opt_level",
        "override_linear_precision",
        "use_autocast_during_eval"},
       [](const std::string&, const std::string& value) {
         return is_off_word(value);
       },
       "fp8 training (Transformer Engine, MS-AMP, torchao) is Python-only "
       "and no LibTorch autocast takes fp8; use mixed_precision bf16 or "
       "fp16, and leave fp8_config empty ({})."},
      {"mpirun_config",
       {"mpirun_ccl", "mpirun_hostfile"},
       [](const std::string& key, const std::string& value) {
         return key == "mpirun_ccl" || is_off_word(value);
       },
       "ampkit launch starts the processes itself (--num_machines, "
       "--machine_rank on each machine); a program started by your own "
       "mpirun reads OpenMPI's OMPI_COMM_WORLD_* variables. Leave "
       "mpirun_config empty ({})."},
      {"tp_config",
       {"tp_size"},
       [](const std::string&, const std::string& value) {
         return value.empty() || value == "1";
       },
       "tensor parallelism is not implemented by ampkit; it trains "
       "data-parallel (DDP or ZeRO 1/2). Set tp_size to 1 or remove it."},
  };
  return list;
}

}  // namespace

YAML::Node load_mapping(
    const Entry& entry, const std::string& path, const std::string& what) {
  YAML::Node node;
  try {
    node = YAML::Load(entry.yaml);
  } catch (const YAML::Exception& e) {
    fail_at(entry, path, entry.key + " is not valid YAML: " + e.what());
  }
  if (!node.IsNull() && !node.IsMap()) {
    fail_at(entry, path, entry.key + " must be a mapping of " + what + ".");
  }
  return node;
}

void fail_at(
    const Entry& entry, const std::string& path, const std::string& message) {
  const std::string where =
      entry.line > 0 ? path + ":" + std::to_string(entry.line) : path;
  throw ConfigError(path, entry.line, entry.key, false, where + ": " + message);
}

namespace {

// accelerate's TPU-pod settings (accelerate tpu-config, downcast_bf16):
// accepted at their off values (null, false, an empty list), refused
// otherwise.
const std::vector<std::string> kTpuKeys = {
    "command_file",
    "commands",
    "downcast_bf16",
    "tpu_env",
    "tpu_name",
    "tpu_use_cluster",
    "tpu_use_sudo",
    "tpu_vm",
    "tpu_zone"};

void check_tpu_key(const Entry& entry, const std::string& path) {
  std::string yaml = entry.yaml;
  yaml.erase(0, yaml.find_first_not_of(" \n"));
  yaml.erase(yaml.find_last_not_of(" \n") + 1);
  const bool off =
      entry.kind == Entry::Kind::null ||
      (entry.kind == Entry::Kind::collection ? yaml == "[]" || yaml == "{}"
                                             : is_off_word(entry.text));
  if (!off) {
    fail_at(
        entry,
        path,
        entry.key + " '" +
            (entry.kind == Entry::Kind::collection ? yaml : entry.text) +
            "': a setting of accelerate's TPU pods and XLA, and ampkit "
            "runs on CPUs and CUDA GPUs only. Remove it (or set it to " +
            (entry.key == "downcast_bf16" || entry.key == "tpu_use_cluster" ||
                     entry.key == "tpu_use_sudo"
                 ? std::string("false")
                 : std::string("null")) +
            ").");
  }
}

}  // namespace

void check_plugin_config(const Entry& entry, const std::string& path) {
  if (contains(kTpuKeys, entry.key)) {
    check_tpu_key(entry, path);
    return;
  }
  for (const Plugin& plugin : plugins()) {
    if (plugin.name != entry.key) {
      continue;
    }
    const YAML::Node node = load_mapping(entry, path, "accelerate settings");
    if (node.IsNull()) {
      return;
    }
    for (const auto& item : node) {
      const std::string key = item.first.as<std::string>();
      const YAML::Node& v = item.second;
      const std::string value =
          v.IsNull() ? "" : (v.IsScalar() ? v.Scalar() : "(a collection)");
      if (!contains(plugin.keys, key)) {
        fail_at(
            entry,
            path,
            "unknown key " + plugin.name + "." + key + ". Known keys: " +
                ampkit::detail::join(plugin.keys, ", ") + ".");
      }
      if (!plugin.off(key, value)) {
        fail_at(
            entry,
            path,
            plugin.name + "." + key + " '" + value + "': " + plugin.why);
      }
    }
  }
}

}  // namespace ampkit::config::detail
