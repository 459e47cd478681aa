// `ampkit launch`: runs a distributed program, its values from the flags,
// else the config file, else the defaults.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/amp/capability.h"
#include "ampkit/amp/precision.h"
#include "ampkit/config/config.h"
#include "ampkit/distributed/launcher.h"
#include "ampkit/error.h"
#include "cli_checks.h"
#include "command.h"

namespace commands {
namespace {

struct LaunchArgs {
  ampkit::dist::LaunchOptions options;
  std::string config_file;
  std::string precision;
  double monitor_interval = 0.1;
  double preemption_grace = 60;
  double join_timeout = 900;
  double heartbeat_timeout = 60;
  // The options looked at after parsing, by the config file's key: a flag
  // given wins over the file.
  std::map<std::string, CLI::Option*> given;
};

// The run's values, which the config file can also give, and the file.
void add_launch_config_options(CLI::App& launch, LaunchArgs& a) {
  auto& given = a.given;
  given["config_file"] =
      launch.add_option(flags("config-file"), a.config_file, kConfigFileHelp);
  given["num_processes"] = launch.add_option(
      flags("num-processes"),
      a.options.num_processes,
      "processes over all machines");
  given["num_machines"] = launch.add_option(
      flags("num-machines"), a.options.num_machines, "machines");
  given["machine_rank"] = launch.add_option(
      flags("machine-rank"), a.options.machine_rank, "this machine's index");
  given["main_process_ip"] = launch.add_option(
      flags("main-process-ip"),
      a.options.main_process_ip,
      "the address of machine 0");
  given["main_process_port"] = launch.add_option(
      flags("main-process-port"),
      a.options.main_process_port,
      "its port; 0 picks a free one (one machine)");
  given["mixed_precision"] =
      launch
          .add_option(
              flags("mixed-precision"), a.precision, "no, fp16, bf16 or auto")
          ->check(CLI::IsMember({"no", "fp16", "bf16", "auto"}));
  given["use_cpu"] =
      launch.add_flag(flags("cpu"), a.options.cpu, "train on the CPU");
  given["multi_gpu"] = launch.add_flag(
      flags("multi-gpu"),
      "one process per GPU (accelerate's flag; the processes come from "
      "--num_processes)");
  given["gpu_ids"] = launch.add_option(
      flags("gpu-ids"), "GPUs to use (sets CUDA_VISIBLE_DEVICES)");
  given["gradient_accumulation_steps"] =
      launch
          .add_option(
              flags("gradient-accumulation-steps"),
              a.options.gradient_accumulation_steps,
              "micro-batches per step")
          ->check(cli_checks::positive());
  given["debug"] = launch.add_flag(
      flags("debug"), a.options.debug, "shape checks before collectives");
  given["use_deepspeed"] = launch.add_flag(
      flags("use-deepspeed"),
      "ZeRO (accelerate's DeepSpeed flag): ampkit's own ZeRO, stage "
      "--zero_stage (default 2)");
  given["zero_stage"] =
      launch
          .add_option(
              flags("zero-stage"),
              a.options.zero_stage,
              "ZeRO stage: 0 (DDP), 1 (optimizer state sharded), 2 (and "
              "gradients); 3 is not implemented")
          ->check(CLI::Range(0, 2));
  given["gradient_clipping"] =
      launch
          .add_option(
              flags("gradient-clipping"),
              a.options.gradient_clipping,
              "clip gradients to this global norm before each step")
          ->check(cli_checks::non_negative());
}

// The workers' processes, their output and their supervision.
void add_launch_process_options(CLI::App& launch, LaunchArgs& a) {
  launch
      .add_option(
          flags("num-cpu-threads-per-process"),
          a.options.num_cpu_threads_per_process,
          "OMP_NUM_THREADS of each process (default: an OMP_NUM_THREADS "
          "already set, else the cores shared among the processes)")
      ->check(cli_checks::non_negative());
  launch.add_flag(
      flags("tee"), a.options.tee, "with --log_dir, print the lines too");
  launch.add_option(
      flags("log-dir"), a.options.log_dir, "one rank_<r>.log per worker");
  launch.add_option(
      flags("max-restarts"),
      a.options.max_restarts,
      "restarts of the group after a failure");
  launch.add_option(
      flags("monitor-interval"),
      a.monitor_interval,
      "seconds between checks of the workers");
  launch
      .add_option(
          flags("preemption-grace"),
          a.preemption_grace,
          "seconds the workers get to finish their step and save after "
          "SIGTERM, SIGINT or SIGUSR1, before they are killed")
      ->check(cli_checks::non_negative());
  launch
      .add_option(
          flags("join-timeout"),
          a.join_timeout,
          "several machines: seconds each launcher waits for every machine "
          "to join before it names the missing ones")
      ->check(CLI::PositiveNumber);
  launch
      .add_option(
          flags("heartbeat-timeout"),
          a.heartbeat_timeout,
          "several machines: seconds a machine may go without a heartbeat "
          "before the others stop, naming it")
      ->check(CLI::PositiveNumber);
  a.given["enable_cpu_affinity"] = launch.add_flag(
      flags("enable-cpu-affinity"),
      a.options.enable_cpu_affinity,
      "pin each process to its own share of the cores (with GPUs, the "
      "cores near its GPU), as accelerate's enable_cpu_affinity");
  launch.add_flag("-q," + flags("quiet"), a.options.quiet, "no start-up lines");
  launch.add_flag(
      flags("oversubscribe"),
      a.options.oversubscribe,
      "start more processes than the machine has cores");
}

// The config file's values, for the flags not given; gpu_ids too.
void apply_launch_config(
    LaunchArgs& a,
    const ampkit::config::LaunchConfig& c,
    std::string& gpu_ids) {
  auto from = [&](const char* key, auto& field, auto value) {
    if (a.given.at(key)->count() == 0) {
      field = value;
    }
  };
  from("num_processes", a.options.num_processes, c.num_processes);
  from("num_machines", a.options.num_machines, c.num_machines);
  from("machine_rank", a.options.machine_rank, c.machine_rank);
  if (!c.main_process_ip.empty()) {
    from("main_process_ip", a.options.main_process_ip, c.main_process_ip);
  }
  from(
      "main_process_port",
      a.options.main_process_port,
      static_cast<int>(c.main_process_port));
  from("mixed_precision", a.precision, ampkit::to_string(c.mixed_precision));
  from("use_cpu", a.options.cpu, c.use_cpu);
  from(
      "gradient_accumulation_steps",
      a.options.gradient_accumulation_steps,
      c.gradient_accumulation_steps);
  from("debug", a.options.debug, c.debug);
  // Read and acted on the same way as their defaults: said, so that
  // no setting of accelerate's passes without a word.
  if (!a.options.quiet && c.rdzv_backend != "static") {
    std::cerr << "ampkit launch: rdzv_backend " << c.rdzv_backend
              << ": the machines meet at machine 0's launcher (its "
                 "TCPStore) with fixed machine ranks, as with static; "
                 "torchrun's elastic membership is not implemented.\n";
  }
  if (!a.options.quiet && c.same_network && a.options.num_machines > 1) {
    std::cerr << "ampkit launch: same_network: every machine dials "
                 "main_process_ip and finds its own interface by "
                 "routing, on one network or several.\n";
  }
  for (const auto& [key, value] : c.passthrough) {
    if (key == "enable_cpu_affinity") {
      std::string v = value;
      std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) {
        return static_cast<char>(std::tolower(c));
      });
      from(
          "enable_cpu_affinity",
          a.options.enable_cpu_affinity,
          v == "true" || v == "yes" || v == "on");
    }
  }
  from("gpu_ids", gpu_ids, c.gpu_ids);
  if (c.distributed_type == "FSDP") {
    a.options.fsdp_env = c.fsdp_env;
  }
  if (c.distributed_type == "DEEPSPEED") {
    from("zero_stage", a.options.zero_stage, c.zero_stage);
    from("gradient_clipping", a.options.gradient_clipping, c.gradient_clipping);
  }
}

// Without a config file: the defaults the flags not given take, as
// "key=value" for the warning.
std::vector<std::string> launch_defaults(const LaunchArgs& a) {
  std::vector<std::string> defaults;
  const std::pair<const char*, const char*> keys[] = {
      {"num_processes", "1"}, {"num_machines", "1"}, {"mixed_precision", "no"}};
  for (const auto& [key, value] : keys) {
    if (a.given.at(key)->count() == 0) {
      defaults.push_back(std::string(key) + "=" + value);
    }
  }
  return defaults;
}

// accelerate launch: the workers see only gpu_ids' GPUs, and --multi_gpu
// without a process count starts one per GPU; and no two processes share a
// GPU.
void check_launch_gpus(
    LaunchArgs& a,
    const std::string& gpu_ids,
    bool has_config,
    std::vector<std::string>& defaults) {
  int64_t visible_gpus = -1;
  if (gpu_ids != "all") {
    ::setenv("CUDA_VISIBLE_DEVICES", gpu_ids.c_str(), 1);
    visible_gpus = 1 + static_cast<int64_t>(
                           std::count(gpu_ids.begin(), gpu_ids.end(), ','));
  }
  if (a.given.at("multi_gpu")->count() > 0) {
    if (a.options.cpu) {
      throw ampkit::UsageError(
          "Launch",
          "--multi_gpu and --cpu ask for GPUs and for none. Pass one: "
          "--cpu --num_processes N trains on the CPU.");
    }
    if (visible_gpus < 0) {
      visible_gpus = static_cast<int64_t>(
          ampkit::Capabilities::current().cuda_devices.size());
    }
    if (visible_gpus < 1) {
      throw ampkit::UsageError(
          "Launch",
          "--multi_gpu starts one process per GPU, but this machine has "
          "no CUDA device LibTorch can use. Pass --cpu --num_processes N "
          "to train on the CPU.");
    }
  }
  if (a.given.at("multi_gpu")->count() > 0 &&
      a.given.at("num_processes")->count() == 0 && !has_config) {
    a.options.num_processes = visible_gpus;
    defaults.erase(
        std::remove(
            defaults.begin(), defaults.end(), std::string("num_processes=1")),
        defaults.end());
  }
  // On GPUs one process per GPU: more would share a GPU (the core
  // bound is the launcher's, for CPU runs).
  if (!a.options.cpu && !a.options.oversubscribe) {
    if (visible_gpus < 0) {
      visible_gpus = static_cast<int64_t>(
          ampkit::Capabilities::current().cuda_devices.size());
    }
    const int64_t here =
        a.options.num_processes / std::max<int64_t>(1, a.options.num_machines);
    if (visible_gpus > 0 && here > visible_gpus) {
      throw ampkit::UsageError(
          "Launch",
          std::to_string(here) + " processes on this machine, which has " +
              std::to_string(visible_gpus) +
              " GPUs: they would share them. Pass --num_processes " +
              std::to_string(visible_gpus * a.options.num_machines) +
              " or less, --cpu to train on the CPU, or --oversubscribe.");
    }
  }
}

// The options completed from the config file, checked, and launched.
int run_launch(CLI::App& launch, LaunchArgs& a) {
  a.options.command = launch.remaining();
  a.options.monitor_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.01, a.monitor_interval) * 1000));
  a.options.preemption_grace = std::chrono::milliseconds(
      static_cast<int64_t>(a.preemption_grace * 1000));
  a.options.join_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(a.join_timeout * 1000));
  a.options.heartbeat_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(a.heartbeat_timeout * 1000));
  // Precedence: flag > config file > default.
  std::string gpu_ids = a.given.at("gpu_ids")->count() > 0
                            ? a.given.at("gpu_ids")->as<std::string>()
                            : std::string("all");
  const std::string path = a.config_file.empty()
                               ? ampkit::config::config_path_to_read()
                               : a.config_file;
  if (!a.config_file.empty() && !std::filesystem::exists(a.config_file)) {
    throw ampkit::UsageError(
        "Launch",
        "--config_file " + a.config_file +
            " does not exist. Write it with `ampkit config --config_file " +
            a.config_file + "`, or leave the flag out.");
  }
  const bool has_config = std::filesystem::exists(path);
  std::vector<std::string> defaults;
  if (has_config) {
    apply_launch_config(a, ampkit::config::load_config(path), gpu_ids);
  } else {
    defaults = launch_defaults(a);
  }
  a.options.mixed_precision = a.precision;
  check_launch_gpus(a, gpu_ids, has_config, defaults);
  if (a.given.at("use_deepspeed")->count() > 0 && a.options.zero_stage < 0) {
    a.options.zero_stage = 2;  // accelerate's DeepSpeed default
  }
  if (a.options.enable_cpu_affinity && !a.options.cpu) {
    for (const auto& gpu : ampkit::Capabilities::current().cuda_devices) {
      a.options.gpu_pci_bus_ids.push_back(gpu.pci_bus_id);
    }
  }
  if (!defaults.empty() && !a.options.quiet) {
    std::string list;
    for (const auto& d : defaults) {
      list += (list.empty() ? "" : ", ") + d;
    }
    std::cerr << "ampkit launch: warning: no config file at " << path
              << "; using the defaults " << list
              << ". Run `ampkit config` to write one, or pass the flags.\n";
  }
  return ampkit::dist::launch(a.options, std::cout, std::cerr);
}

}  // namespace

Command add_launch(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* launch = app.add_subcommand(
      "launch",
      "Run PROGRAM [ARGS...] as the processes of a distributed run (each "
      "with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, "
      "MASTER_PORT), output prefixed with the rank. Values come from the "
      "flags, else the config file, else the defaults (listed in a warning).");
  launch->prefix_command();
  add_launch_config_options(*launch, *args);
  add_launch_process_options(*launch, *args);
  return {launch, [args, launch] {
            try {
              return run_launch(*launch, *args);
            } catch (const std::exception& e) {
              print_error("launch", e);
              return 1;
            }
          }};
}

}  // namespace commands
