// `ampkit config`'s interactive questionnaire: accelerate config's questions,
// in its order, for the settings ampkit acts on; one answer per line so that
// answers can be piped.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ampkit/config/config.h"
#include "ampkit/error.h"

#include "utils/components.h"
#include "utils/strings.h"

using ampkit::detail::exact_number;
using ampkit::detail::lower;
using ampkit::detail::parse_double;
using ampkit::detail::parse_int;
using ampkit::detail::split;
using ampkit::detail::trim;

namespace ampkit::config {

namespace {

constexpr int64_t kDefaultPort = 29500;

std::optional<bool> parse_bool(const std::string& text) {
  const std::string value = lower(text);
  if (value == "yes" || value == "y" || value == "true") {
    return true;
  }
  if (value == "no" || value == "n" || value == "false") {
    return false;
  }
  return std::nullopt;
}

/// One menu entry: what is shown and the other spellings accepted for it
/// (accelerate's enum names, so that a YAML value can be typed back).
struct Option {
  std::string label;
  std::vector<std::string> aliases;
};

class Questionnaire {
 public:
  Questionnaire(std::istream& in, std::ostream& out) : in_(in), out_(out) {}

  /// Asks `question` until `parse` accepts the answer. The prompt shows
  /// `default_text` in brackets, and an empty answer is parsed as it; with
  /// no default an empty answer is parsed as "" (and so usually refused).
  /// `body` is printed between the question and the prompt (a menu).
  template <typename Parse>
  auto ask(
      const std::string& question,
      const std::string& default_text,
      const std::string& invalid,
      Parse parse,
      const std::string& body = "") {
    for (;;) {
      out_ << question;
      if (!body.empty()) {
        out_ << '\n' << body;
      }
      if (!default_text.empty()) {
        out_ << " [" << default_text << "]";
      }
      out_ << ": " << std::flush;
      std::string line;
      if (!std::getline(in_, line)) {
        out_ << '\n';
        throw UsageError(
            component::kConfigCommand,
            "input ended before the question \"" + question +
                "\" was answered, got end of input. Answers can be piped "
                "one per line (an empty line takes the default in brackets), "
                "e.g. printf '0\\n0\\n\\n\\n' | ampkit config");
      }
      std::string answer = trim(line);
      if (answer.empty()) {
        answer = default_text;
      }
      if (auto value = parse(answer)) {
        return *value;
      }
      out_ << invalid << '\n';
    }
  }

  /// A numbered menu answered by number (from 0, as accelerate numbers
  /// them) or by name in any case; the first option is the default.
  /// Returns the option's index.
  size_t ask_menu(
      const std::string& question,
      const std::vector<Option>& options,
      const std::string& note = "") {
    std::string body;
    std::string names;
    for (size_t i = 0; i < options.size(); ++i) {
      body += "  " + std::to_string(i) + ") " + options[i].label + "\n";
      names += (i == 0 ? "" : ", ") + options[i].label;
    }
    if (!note.empty()) {
      body += note + "\n";
    }
    body += "Enter a number or a name";
    std::string invalid =
        "Valid values: " + names + ", or " +
        (options.size() == 1
             ? std::string("its number 0")
             : "their numbers 0 to " + std::to_string(options.size() - 1)) +
        ".";
    if (!note.empty()) {
      invalid += " " + note;
    }
    return ask(
        question,
        options.front().label,
        invalid,
        [&](const std::string& answer) -> std::optional<size_t> {
          if (const auto index = parse_int(answer)) {
            if (*index >= 0 && *index < static_cast<int64_t>(options.size())) {
              return static_cast<size_t>(*index);
            }
            return std::nullopt;
          }
          const std::string wanted = lower(answer);
          for (size_t i = 0; i < options.size(); ++i) {
            if (lower(options[i].label) == wanted) {
              return i;
            }
            for (const auto& alias : options[i].aliases) {
              if (lower(alias) == wanted) {
                return i;
              }
            }
          }
          return std::nullopt;
        },
        body);
  }

  int64_t ask_int(
      const std::string& question,
      int64_t default_value,
      int64_t min,
      int64_t max = INT64_MAX,
      const std::string& why = "") {
    std::string invalid =
        max == INT64_MAX
            ? "Please enter an integer >= " + std::to_string(min)
            : "Please enter an integer from " + std::to_string(min) + " to " +
                  std::to_string(max);
    invalid += why.empty() ? "." : " (" + why + ").";
    return ask(
        question,
        std::to_string(default_value),
        invalid,
        [&](const std::string& answer) -> std::optional<int64_t> {
          const auto value = parse_int(answer);
          if (value && *value >= min && *value <= max) {
            return value;
          }
          return std::nullopt;
        });
  }

  bool ask_bool(const std::string& question, bool default_value) {
    return ask(
        question,
        default_value ? "yes" : "no",
        "Please enter yes or no (y, n, true and false also work).",
        parse_bool);
  }

 private:
  std::istream& in_;
  std::ostream& out_;
};

/// "all", or GPU ids separated by commas ("0,1"), spaces dropped.
std::optional<std::string> parse_gpu_ids(const std::string& answer) {
  if (lower(answer) == "all") {
    return std::string("all");
  }
  std::string ids;
  for (const std::string& piece : split(answer, ',')) {
    const auto value = parse_int(trim(piece));
    if (!value || *value < 0) {
      return std::nullopt;
    }
    ids += (ids.empty() ? "" : ",") + std::to_string(*value);
  }
  return ids;
}

/// Accelerate's first two questions, compute environment and machine type:
/// fills compute_environment, distributed_type and use_cpu.
void questionnaire_ask_machine_type(Questionnaire& q, LaunchConfig& config) {
  q.ask_menu(
      "In which compute environment are you running?",
      {{"This machine", {"LOCAL_MACHINE"}}},
      "(Other compute environments, such as Amazon SageMaker, are not "
      "supported by ampkit.)");
  config.compute_environment = "LOCAL_MACHINE";

  static const char* const kTypes[] = {"NO", "MULTI_CPU", "MULTI_GPU"};
  const size_t type = q.ask_menu(
      "Which type of machine are you using?",
      {{"No distributed training", {"NO"}},
       {"multi-CPU", {"MULTI_CPU"}},
       {"multi-GPU", {"MULTI_GPU"}}});
  config.distributed_type = kTypes[type];
  config.use_cpu = config.distributed_type == "MULTI_CPU";
}

/// The questions for more than one machine: this machine's rank, the main
/// process's address and port, the network and the rendezvous backend.
void questionnaire_ask_multi_node(Questionnaire& q, LaunchConfig& config) {
  config.machine_rank = q.ask_int(
      "What is the rank of this machine?", 0, 0, config.num_machines - 1);
  config.main_process_ip = q.ask(
      "What is the IP address of the machine that will host the main "
      "process?",
      "",
      "Please enter the IP address or host name of the main machine, "
      "such as 10.0.0.1.",
      [](const std::string& answer) -> std::optional<std::string> {
        if (answer.empty() ||
            answer.find_first_of(" \t") != std::string::npos) {
          return std::nullopt;
        }
        return answer;
      });
  config.main_process_port = q.ask_int(
      "What is the port you will use to communicate with the main "
      "process?",
      kDefaultPort,
      1,
      65535);
  config.same_network = q.ask_bool(
      "Are all the machines on the same local network? Answer `no` if "
      "nodes are on the cloud and/or on different network hosts",
      true);
  if (!config.same_network) {
    config.rdzv_backend = q.ask(
        "What rendezvous backend will you use?",
        "static",
        "Valid values: static, c10d (ampkit has no etcd client; both "
        "meet at the main process's IP and port).",
        [](const std::string& answer) -> std::optional<std::string> {
          const std::string value = lower(answer);
          if (value == "static" || value == "c10d") {
            return value;
          }
          return std::nullopt;
        });
  }
}

/// The questions of a distributed run: machines (and the multi-node ones),
/// debug checks and the number of processes.
void questionnaire_ask_distributed(
    Questionnaire& q, LaunchConfig& config, bool multi_gpu) {
  config.num_machines = q.ask_int(
      "How many different machines will you use (use more than 1 for "
      "multi-node training)?",
      1,
      1);
  if (config.num_machines > 1) {
    questionnaire_ask_multi_node(q, config);
  }
  config.debug = q.ask_bool(
      "Should distributed operations be checked while running for errors? "
      "This can avoid timeout issues but will be slower.",
      false);

  // num_processes counts all processes on all machines, as in accelerate;
  // multi-GPU with a single process is No distributed training.
  const bool single_gpu_possible = !(multi_gpu && config.num_machines == 1);
  const int64_t min_processes =
      std::max<int64_t>(config.num_machines, single_gpu_possible ? 1 : 2);
  config.num_processes = q.ask_int(
      multi_gpu ? "How many GPU(s) should be used for distributed training "
                  "(in total, over all machines)?"
                : "How many processes should be used for distributed "
                  "training (in total, over all machines)?",
      std::max<int64_t>(2, config.num_machines),
      min_processes,
      INT64_MAX,
      single_gpu_possible ? "at least one per machine"
                          : "for a single GPU choose No distributed training");
}

/// accelerate's DeepSpeed questions, for ampkit's own ZeRO: fills zero_stage
/// and gradient_clipping; returns whether ZeRO was chosen.
bool questionnaire_ask_deepspeed(Questionnaire& q, LaunchConfig& config) {
  const bool use_zero = q.ask_bool(
      "Do you want to use DeepSpeed (ZeRO: ampkit shards the optimizer "
      "state, and with stage 2 the gradients, over c10d)?",
      false);
  if (use_zero) {
    config.zero_stage = q.ask_int(
        "What should be your DeepSpeed's ZeRO optimization stage?",
        2,
        0,
        3,
        "stage 3 shards the parameters too (ampkit's FSDP FULL_SHARD)");
    if (q.ask_bool("Do you want to use gradient clipping?", false)) {
      config.gradient_clipping = q.ask(
          "What is the gradient clipping value?",
          "1.0",
          "Please enter a number > 0, such as 1.0.",
          [](const std::string& answer) -> std::optional<double> {
            const auto value = parse_double(answer);
            if (value && *value > 0 && std::isfinite(*value)) {
              return value;
            }
            return std::nullopt;
          });
    }
  }
  return use_zero;
}

/// The FSDP auto wrap policy and its follow-up question; returns their
/// fsdp_config lines.
std::string questionnaire_ask_fsdp_wrap(Questionnaire& q) {
  static const char* kPolicies[] = {
      "TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
  const size_t policy = q.ask_menu(
      "What should be your auto wrap policy?",
      {{"TRANSFORMER_BASED_WRAP", {}},
       {"SIZE_BASED_WRAP", {}},
       {"NO_WRAP", {}}});
  std::string wrap =
      std::string("fsdp_auto_wrap_policy: ") + kPolicies[policy] + "\n";
  if (policy == 0) {
    wrap += "fsdp_transformer_layer_cls_to_wrap: " +
            q.ask(
                "Specify the comma-separated list of module type names to "
                "wrap (as TORCH_MODULE names them, e.g. Block)",
                "Block",
                "Please enter one or more type names separated by commas.",
                [](const std::string& answer) -> std::optional<std::string> {
                  if (answer.empty() ||
                      answer.find_first_of(" :#'\"") != std::string::npos) {
                    return std::nullopt;
                  }
                  return answer;
                }) +
            "\n";
  } else if (policy == 1) {
    wrap += "fsdp_min_num_params: " +
            std::to_string(q.ask_int(
                "What should be your FSDP's minimum number of parameters for "
                "Default Auto Wrapping Policy?",
                100000000,
                1)) +
            "\n";
  }
  return wrap;
}

/// accelerate's FSDP questions after "use FullyShardedDataParallel?";
/// returns the fsdp_config block.
std::string questionnaire_ask_fsdp(Questionnaire& q) {
  static const char* kStrategies[] = {
      "FULL_SHARD",
      "SHARD_GRAD_OP",
      "NO_SHARD",
      "HYBRID_SHARD",
      "HYBRID_SHARD_ZERO2"};
  const size_t strategy = q.ask_menu(
      "What should be your sharding strategy?",
      {{"FULL_SHARD", {}},
       {"SHARD_GRAD_OP", {}},
       {"NO_SHARD", {}},
       {"HYBRID_SHARD", {}},
       {"HYBRID_SHARD_ZERO2", {}}});
  std::string fsdp = "fsdp_activation_checkpointing: ";
  const std::string wrap = questionnaire_ask_fsdp_wrap(q);
  // accelerate's order: backward prefetch, state dict type (SHARDED,
  // accelerate's default, first; LOCAL_STATE_DICT is not built), forward
  // prefetch.
  static const char* kPrefetch[] = {
      "BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
  const size_t backward_prefetch = q.ask_menu(
      "What should be your FSDP's backward prefetch policy?",
      {{"BACKWARD_PRE", {}}, {"BACKWARD_POST", {}}, {"NO_PREFETCH", {}}});
  static const char* kStateDicts[] = {"SHARDED_STATE_DICT", "FULL_STATE_DICT"};
  const size_t state_dict = q.ask_menu(
      "What should be your FSDP's state dict type?",
      {{"SHARDED_STATE_DICT", {}}, {"FULL_STATE_DICT", {}}},
      "(SHARDED: each process saves its own shards; FULL: one file of the "
      "whole model)");
  const bool forward_prefetch = q.ask_bool(
      "Do you want to enable FSDP's forward prefetch policy?", false);
  const bool checkpointing =
      q.ask_bool("Do you want to enable FSDP activation checkpointing?", false);
  fsdp += std::string(checkpointing ? "true" : "false") + "\n" + wrap +
          "fsdp_backward_prefetch: " + kPrefetch[backward_prefetch] +
          "\n"
          "fsdp_cpu_ram_efficient_loading: true\n"
          "fsdp_forward_prefetch: " +
          (forward_prefetch ? "true" : "false") +
          "\n"
          "fsdp_offload_params: false\n"
          "fsdp_sharding_strategy: " +
          kStrategies[strategy] +
          "\n"
          "fsdp_state_dict_type: " +
          kStateDicts[state_dict] +
          "\n"
          "fsdp_sync_module_states: true\n"
          "fsdp_use_orig_params: true\n";
  return fsdp;
}

/// The deepspeed_config block for ZeRO, written as accelerate writes a
/// DeepSpeed config, so that accelerate reads the same file; offload and
/// stage 3 stay off (not implemented).
std::string questionnaire_deepspeed_config(const LaunchConfig& config) {
  std::string deepspeed = "gradient_accumulation_steps: " +
                          std::to_string(config.gradient_accumulation_steps) +
                          "\n";
  if (config.gradient_clipping > 0) {
    // A float, as Python writes one (1.0, not 1).
    std::string clip = exact_number(config.gradient_clipping);
    if (clip.find_first_of(".e") == std::string::npos) {
      clip += ".0";
    }
    deepspeed += "gradient_clipping: " + clip + "\n";
  }
  deepspeed +=
      "offload_optimizer_device: none\noffload_param_device: none\n"
      "zero3_init_flag: false\nzero_stage: " +
      std::to_string(config.zero_stage) + "\n";
  return deepspeed;
}

}  // namespace

LaunchConfig run_questionnaire(std::istream& in, std::ostream& out) {
  Questionnaire q(in, out);
  LaunchConfig config;
  out << "Answer each question and press Enter; an empty answer takes the "
         "default in brackets.\n";

  questionnaire_ask_machine_type(q, config);
  const bool distributed = config.distributed_type != "NO";
  const bool multi_gpu = config.distributed_type == "MULTI_GPU";

  bool use_zero = false;
  if (distributed) {
    questionnaire_ask_distributed(q, config, multi_gpu);
    use_zero = questionnaire_ask_deepspeed(q, config);
  }

  // accelerate's FSDP questions (its cluster.py: asked for multi-GPU runs
  // without DeepSpeed, as there), where ampkit builds the choice; what it
  // does not build is written at accelerate's off value. (On the CPU, FSDP
  // comes from a config file's distributed_type FSDP or the options.)
  std::string fsdp;
  if (multi_gpu && !use_zero &&
      q.ask_bool("Do you want to use FullyShardedDataParallel?", false)) {
    fsdp = questionnaire_ask_fsdp(q);
  }

  if (multi_gpu) {
    config.gpu_ids = q.ask(
        "What GPU(s) (by id) should be used for training on this machine as a "
        "comma-separated list?",
        "all",
        "Valid values: all, or GPU ids separated by commas such as 0,1.",
        parse_gpu_ids);
  }

  static const Precision kPrecisions[] = {
      Precision::no, Precision::fp16, Precision::bf16, Precision::automatic};
  const size_t precision = q.ask_menu(
      "Do you wish to use mixed precision?",
      {{"no", {"fp32"}}, {"fp16", {}}, {"bf16", {}}, {"auto", {}}});
  config.mixed_precision = kPrecisions[precision];

  config.gradient_accumulation_steps = q.ask_int(
      "How many gradient accumulation steps are you passing in your script?",
      1,
      1);
  if (use_zero) {
    config.distributed_type = "DEEPSPEED";
    config.passthrough.emplace_back(
        "deepspeed_config", questionnaire_deepspeed_config(config));
  }
  if (!fsdp.empty()) {
    config.distributed_type = "FSDP";
    config.passthrough.emplace_back("fsdp_config", fsdp);
  }
  return config;
}

}  // namespace ampkit::config
