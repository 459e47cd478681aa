// The `ampkit` command line: `ampkit report RUN_DIR` renders a run directory's
// metrics as a self-contained HTML file; `ampkit doctor` checks this machine;
// `ampkit config` writes the config file; `ampkit env` prints a bug report;
// `ampkit launch` runs a distributed program; `ampkit test` checks that
// distributed training works here; `ampkit estimate-memory` sizes a model.
#include <ATen/Parallel.h>
#include <sys/utsname.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "ampkit/accelerator/self_test.h"
#include "ampkit/amp/capability.h"
#include "ampkit/config/config.h"
#include "ampkit/config/config_check.h"
#include "ampkit/diag/doctor.h"
#include "ampkit/diag/hints.h"
#include "ampkit/diag/memory_estimate.h"
#include "ampkit/distributed/launcher.h"
#include "ampkit/error.h"
#include "ampkit/track/report.h"
#include "ampkit/version.h"
#include "cli_checks.h"

namespace {

// Accepts both --snake_case and --kebab-case, as accelerate's flags do.
std::string flags(const std::string& kebab) {
  std::string snake = kebab;
  std::replace(snake.begin(), snake.end(), '-', '_');
  return snake == kebab ? "--" + kebab : "--" + kebab + ",--" + snake;
}

// The one place exceptions become messages: "ampkit <command>: <what>", the
// component prefix dropped where the command already names it, and the
// diag layer's hint where LibTorch's message has one.
void print_error(const std::string& command, const std::exception& e) {
  std::string message = e.what();
  if (const auto* error = dynamic_cast<const ampkit::Error*>(&e)) {
    const std::string prefix = error->component() + ": ";
    if ((error->component() == "Report" || error->component() == "Doctor" ||
         error->component() == "Config" ||
         error->component() == "ampkit " + command) &&
        message.rfind(prefix, 0) == 0) {
      message.erase(0, prefix.size());
    }
  }
  std::cerr << "ampkit " << command << ": " << message << '\n';
  if (message.find(ampkit::diag::kHintPrefix) == std::string::npos) {
    if (auto hint = ampkit::diag::hint_for(message)) {
      std::cerr << *hint << '\n';
    }
  }
}

struct ReportArgs {
  std::string run_dir;
  std::string output;  // "" = RUN_DIR/report.html
};

int run_report(const ReportArgs& args) {
  const std::string output =
      args.output.empty() ? ampkit::track::default_report_path(args.run_dir)
                          : args.output;
  ampkit::track::write_report(args.run_dir, output);
  std::cout << output << '\n';
  return 0;
}

// Exit codes: 0 ready to train, 1 a check failed, 2 the doctor itself failed.
int run_doctor_command(const ampkit::diag::DoctorOptions& options) {
  try {
    const ampkit::diag::DoctorReport report = ampkit::diag::run_doctor(options);
    std::cout << report.table();
    return report.blocks_training() ? 1 : 0;
  } catch (const std::exception& e) {
    print_error("doctor", e);
    return 2;
  }
}

struct ConfigArgs {
  std::string config_file;  // "" = config::default_config_path()
  std::string mixed_precision = "no";

  // Where `ampkit config` writes.
  std::string path() const {
    return config_file.empty() ? ampkit::config::default_config_path()
                               : config_file;
  }
  // What `ampkit env` reads: also accelerate's file when ampkit has none.
  std::string read_path() const {
    return config_file.empty() ? ampkit::config::config_path_to_read()
                               : config_file;
  }
};

// `ampkit config`: the questionnaire, saved where asked.
int run_config(const ConfigArgs& args) {
  const ampkit::config::LaunchConfig config =
      ampkit::config::run_questionnaire(std::cin, std::cout);
  const std::string path = args.path();
  ampkit::config::save_config(config, path);
  std::cout << "ampkit configuration saved at " << path << '\n';
  return 0;
}

// `ampkit config default`: one process on this machine, never over a file.
int run_config_default(const ConfigArgs& args) {
  const std::string path = args.path();
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::cerr << "ampkit config default: " << path
              << " already exists and was left unchanged. Edit it, run "
                 "`ampkit config` to answer the questions again, or pass "
                 "--config_file with a new path.\n";
    return 1;
  }
  ampkit::config::LaunchConfig config;
  config.mixed_precision = ampkit::parse_precision(args.mixed_precision);
  config.distributed_type = "NO";
  config.num_processes = 1;
  config.use_cpu = !ampkit::Capabilities::current().cuda_available;
  ampkit::config::save_config(config, path);
  std::cout << "ampkit configuration saved at " << path << '\n';
  return 0;
}

// `ampkit config update`: an older file rewritten with the current keys.
int run_config_update(const ConfigArgs& args) {
  const std::string path = args.path();
  const ampkit::config::LaunchConfig config = ampkit::config::load_config(path);
  ampkit::config::save_config(config, path);
  std::cout << "ampkit configuration updated at " << path << '\n';
  return 0;
}

// The value of `key` in a "key : value" or "KEY=value" file; "" when absent.
std::string file_value(
    const std::string& path, const std::string& key, char separator) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find(separator);
    if (at == std::string::npos) {
      continue;
    }
    std::string name = line.substr(0, at);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name != key) {
      continue;
    }
    std::string value = line.substr(at + 1);
    value.erase(0, value.find_first_not_of(" \t\""));
    value.erase(value.find_last_not_of(" \t\"") + 1);
    return value;
  }
  return "";
}

// `ampkit env`: what a bug report needs, one "name: value" line each.
int run_env(const ConfigArgs& args) {
  const ampkit::Capabilities caps = ampkit::Capabilities::current();
  const ampkit::diag::CudaVersions cuda = ampkit::diag::cuda_versions();
  std::ostringstream out;
  out << "ampkit version: " << AMPKIT_VERSION << '\n';
  out << "LibTorch version: " << ampkit::diag::running_torch_version()
      << " (built against " << ampkit::diag::built_torch_version() << ", "
      << (cuda.compiled ? "with" : "without") << " CUDA)\n";
#if defined(__GNUC__) && !defined(__clang__)
  out << "compiler: GCC " << __VERSION__ << '\n';
#else
  out << "compiler: " << __VERSION__ << '\n';
#endif
  struct utsname host {};
  const std::string kernel = ::uname(&host) == 0 ? host.release : "unknown";
  const std::string os = file_value("/etc/os-release", "PRETTY_NAME", '=');
  out << "OS: " << (os.empty() ? "unknown" : os) << ", kernel " << kernel
      << '\n';
  const std::string cpu = file_value("/proc/cpuinfo", "model name", ':');
  const unsigned cores = std::thread::hardware_concurrency();
  out << "CPU: " << (cpu.empty() ? "unknown" : cpu) << ", " << cores
      << " core(s)\n";
  std::istringstream described(ampkit::describe(caps));
  for (std::string line; std::getline(described, line);) {
    out << "  " << line << '\n';
  }
  const std::string memory = file_value("/proc/meminfo", "MemTotal", ':');
  out << "memory: " << (memory.empty() ? "unknown" : memory) << '\n';
  if (caps.cuda_devices.empty()) {
    out << "GPUs: none\n";
  }
  for (const auto& gpu : caps.cuda_devices) {
    out << "GPU cuda:" << gpu.index << ": " << gpu.name
        << ", compute capability " << gpu.major << "." << gpu.minor << '\n';
  }
  if (cuda.compiled) {
    out << "CUDA runtime: " << (cuda.runtime.empty() ? "unknown" : cuda.runtime)
        << ", driver: " << (cuda.driver.empty() ? "none" : cuda.driver)
        << ", NCCL: " << (cuda.nccl.empty() ? "unknown" : cuda.nccl) << '\n';
    if (!cuda.error.empty()) {
      out << "CUDA error: " << cuda.error << '\n';
    }
  }
  const ampkit::diag::BlasInUse blas = ampkit::diag::blas_in_use();
  out << "BLAS: "
      << (blas.kind.empty() ? "not identified"
                            : blas.kind + " (" + blas.path + ")")
      << '\n';
  if (blas.kind == "reference BLAS") {
    out << "  warning: the unoptimised reference BLAS (12x slower fp32 "
           "matmul): install libopenblas0-openmp.\n";
  }
  const int threads = at::get_num_threads();
  out << "intra-op threads: " << threads << " of " << cores << " core(s)\n";
  if (cores > 0 && static_cast<unsigned>(threads) < cores) {
    out << "  warning: fewer threads than cores: call torch::set_num_threads("
        << cores << ") or set OMP_NUM_THREADS=" << cores << ".\n";
  }
  const std::string path = args.read_path();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    out << "config: none (looked for " << path << ")\n";
  } else {
    out << "config: " << path << '\n';
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      out << "  " << line << '\n';
    }
    try {
      ampkit::config::load_config(path);
    } catch (const std::exception& e) {
      out << "  warning: " << e.what() << '\n';
    }
  }
  std::cout << out.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ampkit: mixed-precision and data-parallel training for LibTorch.",
      "ampkit"};
  app.set_version_flag("--version", AMPKIT_VERSION);
  app.require_subcommand(1);

  ReportArgs report_args;
  CLI::App* report = app.add_subcommand(
      "report",
      "Render a run directory (config.json and metrics.jsonl or metrics.csv, "
      "as the jsonl/csv trackers write them) as one self-contained HTML file "
      "of charts: loss, learning rate, loss scale with skipped steps, "
      "throughput, memory, every other metric, and the configuration.");
  report
      ->add_option(
          "RUN_DIR", report_args.run_dir, "the run directory to report on")
      ->required();
  report->add_option(
      "-o," + flags("output"),
      report_args.output,
      "where to write the HTML (default: RUN_DIR/report.html)");

  ampkit::diag::DoctorOptions doctor_options;
  std::string doctor_config_file;
  CLI::App* doctor = app.add_subcommand(
      "doctor",
      "Check LibTorch, its BLAS and threads, the CPU and GPUs, the config file "
      "and free disk space; time fp32/bf16/fp16 matmuls and recommend a "
      "mixed_precision per device. Exits 1 when a check fails.");
  doctor->add_option(
      flags("project-dir"),
      doctor_options.project_dir,
      "where checkpoints and logs go; its free space is checked (default: .)");
  doctor->add_option(
      flags("config-file"),
      doctor_config_file,
      "the config file to validate (default: $AMPKIT_CONFIG_FILE, else "
      "${XDG_CACHE_HOME:-~/.cache}/ampkit/default_config.yaml)");
  doctor
      ->add_option(
          flags("matmul-size"),
          doctor_options.matmul_size,
          "n of the timed [n, n] @ [n, n] matmuls (default: 1024)")
      ->check(CLI::Range(1, 1 << 16));

  ConfigArgs config_args;
  ConfigArgs config_sub_args;
  CLI::App* config = app.add_subcommand(
      "config",
      "Write the config file (accelerate's default_config.yaml keys) by "
      "answering accelerate config's questions, one answer per line (answers "
      "can be piped); or `default` / `update` it.");
  config->require_subcommand(0, 1);
  const std::string config_file_help =
      "the config file (default: $AMPKIT_CONFIG_FILE, else "
      "${XDG_CACHE_HOME:-~/.cache}/ampkit/default_config.yaml)";
  config->add_option(
      flags("config-file"), config_args.config_file, config_file_help);
  CLI::App* config_default = config->add_subcommand(
      "default",
      "Write a config for one process on this machine (use_cpu when there is "
      "no CUDA GPU). Never overwrites: exits 1 when the file exists.");
  config_default->add_option(
      flags("config-file"), config_sub_args.config_file, config_file_help);
  config_default
      ->add_option(
          flags("mixed-precision"),
          config_sub_args.mixed_precision,
          "no, fp16, bf16 or auto (default: no)")
      ->check(CLI::IsMember({"no", "fp16", "bf16", "auto"}));
  CLI::App* config_update = config->add_subcommand(
      "update",
      "Rewrite an existing config file with the current keys (older "
      "accelerate names such as fp16: true converted), keeping the keys "
      "ampkit does not act on.");
  config_update->add_option(
      flags("config-file"), config_sub_args.config_file, config_file_help);

  ConfigArgs env_args;
  CLI::App* env = app.add_subcommand(
      "env",
      "Print what a bug report needs: ampkit, LibTorch, compiler, OS, CPU and "
      "its reduced-precision support, memory, GPUs, CUDA/NCCL, BLAS, threads "
      "and the config file in effect.");
  env->add_option(flags("config-file"), env_args.config_file, config_file_help);

  std::string estimate_params;
  std::string estimate_optimizer = "adamw";
  std::string estimate_precision;
  CLI::App* estimate = app.add_subcommand(
      "estimate-memory",
      "Estimate the training memory of a model's weights, gradients, "
      "optimizer state and fp32 master weights, per precision (activations "
      "excluded). no: 4+4 bytes per parameter; fp16/bf16 under autocast: 2 "
      "(half copies) + 4+2 (gradients) + 4 (fp32 master); optimizer state in "
      "fp32: adamw 8, sgd 4.");
  estimate
      ->add_option(
          flags("params"),
          estimate_params,
          "the parameter count, with an optional K, M or B suffix (7B)")
      ->required();
  estimate
      ->add_option(
          flags("optimizer"),
          estimate_optimizer,
          "adamw or sgd (with momentum); default adamw")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  estimate
      ->add_option(
          flags("mixed-precision"),
          estimate_precision,
          "no, fp16 or bf16 (default: all three)")
      ->check(CLI::IsMember({"no", "fp16", "bf16"}));
  int64_t estimate_zero_stage = 0;
  int64_t estimate_processes = 1;
  estimate->add_option(
      flags("zero-stage"),
      estimate_zero_stage,
      "0 (DDP: everything on every process), 1 (optimizer state sharded), "
      "2 (and the fp32 gradients) or 3 (FSDP FULL_SHARD: and the weights); "
      "figures per process");
  estimate->add_option(
      flags("num-processes"),
      estimate_processes,
      "processes sharing the state under --zero-stage (default 1)");

  ampkit::dist::LaunchOptions launch_options;
  std::string launch_config_file;
  std::string launch_precision;
  double monitor_interval = 0.1;
  double preemption_grace = 60;
  double join_timeout = 900;
  double heartbeat_timeout = 60;
  CLI::App* launch = app.add_subcommand(
      "launch",
      "Run PROGRAM [ARGS...] as the processes of a distributed run (each "
      "with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, "
      "MASTER_PORT), output prefixed with the rank. Values come from the "
      "flags, else the config file, else the defaults (listed in a warning).");
  launch->prefix_command();
  std::map<std::string, CLI::Option*> given;
  given["config_file"] = launch->add_option(
      flags("config-file"), launch_config_file, config_file_help);
  given["num_processes"] = launch->add_option(
      flags("num-processes"),
      launch_options.num_processes,
      "processes over all machines");
  given["num_machines"] = launch->add_option(
      flags("num-machines"), launch_options.num_machines, "machines");
  given["machine_rank"] = launch->add_option(
      flags("machine-rank"),
      launch_options.machine_rank,
      "this machine's index");
  given["main_process_ip"] = launch->add_option(
      flags("main-process-ip"),
      launch_options.main_process_ip,
      "the address of machine 0");
  given["main_process_port"] = launch->add_option(
      flags("main-process-port"),
      launch_options.main_process_port,
      "its port; 0 picks a free one (one machine)");
  given["mixed_precision"] =
      launch
          ->add_option(
              flags("mixed-precision"),
              launch_precision,
              "no, fp16, bf16 or auto")
          ->check(CLI::IsMember({"no", "fp16", "bf16", "auto"}));
  given["use_cpu"] =
      launch->add_flag(flags("cpu"), launch_options.cpu, "train on the CPU");
  given["multi_gpu"] = launch->add_flag(
      flags("multi-gpu"),
      "one process per GPU (accelerate's flag; the processes come from "
      "--num_processes)");
  given["gpu_ids"] = launch->add_option(
      flags("gpu-ids"), "GPUs to use (sets CUDA_VISIBLE_DEVICES)");
  given["gradient_accumulation_steps"] =
      launch
          ->add_option(
              flags("gradient-accumulation-steps"),
              launch_options.gradient_accumulation_steps,
              "micro-batches per step")
          ->check(cli_checks::positive());
  given["debug"] = launch->add_flag(
      flags("debug"), launch_options.debug, "shape checks before collectives");
  given["use_deepspeed"] = launch->add_flag(
      flags("use-deepspeed"),
      "ZeRO (accelerate's DeepSpeed flag): ampkit's own ZeRO, stage "
      "--zero_stage (default 2)");
  given["zero_stage"] =
      launch
          ->add_option(
              flags("zero-stage"),
              launch_options.zero_stage,
              "ZeRO stage: 0 (DDP), 1 (optimizer state sharded), 2 (and "
              "gradients); 3 is not implemented")
          ->check(CLI::Range(0, 2));
  given["gradient_clipping"] =
      launch
          ->add_option(
              flags("gradient-clipping"),
              launch_options.gradient_clipping,
              "clip gradients to this global norm before each step")
          ->check(cli_checks::non_negative());
  launch
      ->add_option(
          flags("num-cpu-threads-per-process"),
          launch_options.num_cpu_threads_per_process,
          "OMP_NUM_THREADS of each process (default: an OMP_NUM_THREADS "
          "already set, else the cores shared among the processes)")
      ->check(cli_checks::non_negative());
  launch->add_flag(
      flags("tee"), launch_options.tee, "with --log_dir, print the lines too");
  launch->add_option(
      flags("log-dir"), launch_options.log_dir, "one rank_<r>.log per worker");
  launch->add_option(
      flags("max-restarts"),
      launch_options.max_restarts,
      "restarts of the group after a failure");
  launch->add_option(
      flags("monitor-interval"),
      monitor_interval,
      "seconds between checks of the workers");
  launch
      ->add_option(
          flags("preemption-grace"),
          preemption_grace,
          "seconds the workers get to finish their step and save after "
          "SIGTERM, SIGINT or SIGUSR1, before they are killed")
      ->check(cli_checks::non_negative());
  launch
      ->add_option(
          flags("join-timeout"),
          join_timeout,
          "several machines: seconds each launcher waits for every machine "
          "to join before it names the missing ones")
      ->check(CLI::PositiveNumber);
  launch
      ->add_option(
          flags("heartbeat-timeout"),
          heartbeat_timeout,
          "several machines: seconds a machine may go without a heartbeat "
          "before the others stop, naming it")
      ->check(CLI::PositiveNumber);
  given["enable_cpu_affinity"] = launch->add_flag(
      flags("enable-cpu-affinity"),
      launch_options.enable_cpu_affinity,
      "pin each process to its own share of the cores (with GPUs, the "
      "cores near its GPU), as accelerate's enable_cpu_affinity");
  launch->add_flag(
      "-q," + flags("quiet"), launch_options.quiet, "no start-up lines");
  launch->add_flag(
      flags("oversubscribe"),
      launch_options.oversubscribe,
      "start more processes than the machine has cores");

  ampkit::SelfTestOptions test_options;
  std::string test_config_file;
  CLI::App* test = app.add_subcommand(
      "test",
      "Check that distributed training works here: a tiny regression model "
      "trained by N processes must reach the weights one process reaches, "
      "in every precision this CPU supports: over NCCL, one GPU each, where "
      "there are N GPUs, else over Gloo on the CPU. Ends with an ok line, "
      "or FAILED and the workers' output.");
  CLI::Option* test_processes = test->add_option(
      flags("num-processes"),
      test_options.num_processes,
      "processes of the distributed run (default: the config's "
      "num_processes when above 1, else 2)");
  test->add_option(flags("config-file"), test_config_file, config_file_help);
  test->add_flag(
      "--cpu", test_options.cpu, "check Gloo on the CPU even with GPUs here");
  // What `ampkit test` launches: hidden from the help.
  std::string worker_precision, worker_dir;
  int64_t worker_batch = 0;
  CLI::App* test_worker = app.add_subcommand("self-test-worker", "");
  test_worker->group("");
  test_worker->add_option("precision", worker_precision)->required();
  test_worker->add_option("dir", worker_dir)->required();
  test_worker->add_option("global_batch", worker_batch)->required();

  CLI11_PARSE(app, argc, argv);
  if (test_worker->parsed()) {
    try {
      return ampkit::run_self_test_worker(
          ampkit::parse_precision(worker_precision),
          worker_dir,
          worker_batch,
          std::cerr);
    } catch (const std::exception& e) {
      print_error("test", e);
      return 1;
    }
  }
  if (test->parsed()) {
    try {
      const std::string path = test_config_file.empty()
                                   ? ampkit::config::config_path_to_read()
                                   : test_config_file;
      if (test_processes->count() == 0 &&
          (!test_config_file.empty() || std::filesystem::exists(path))) {
        const auto c = ampkit::config::load_config(path);
        if (c.num_processes > 1) {
          test_options.num_processes = c.num_processes;
        }
      }
      test_options.worker_command = {
          std::filesystem::read_symlink("/proc/self/exe").string(),
          "self-test-worker"};
      return ampkit::run_self_test(test_options, std::cout, std::cerr);
    } catch (const std::exception& e) {
      print_error("test", e);
      return 1;
    }
  }
  if (launch->parsed()) {
    try {
      launch_options.command = launch->remaining();
      launch_options.monitor_interval = std::chrono::milliseconds(
          static_cast<int64_t>(std::max(0.01, monitor_interval) * 1000));
      launch_options.preemption_grace = std::chrono::milliseconds(
          static_cast<int64_t>(preemption_grace * 1000));
      launch_options.join_timeout =
          std::chrono::milliseconds(static_cast<int64_t>(join_timeout * 1000));
      launch_options.heartbeat_timeout = std::chrono::milliseconds(
          static_cast<int64_t>(heartbeat_timeout * 1000));
      // Precedence: flag > config file > default.
      std::string gpu_ids = given["gpu_ids"]->count() > 0
                                ? given["gpu_ids"]->as<std::string>()
                                : std::string("all");
      const std::string path = launch_config_file.empty()
                                   ? ampkit::config::config_path_to_read()
                                   : launch_config_file;
      if (!launch_config_file.empty() &&
          !std::filesystem::exists(launch_config_file)) {
        throw ampkit::UsageError(
            "Launch",
            "--config_file " + launch_config_file +
                " does not exist. Write it with `ampkit config --config_file " +
                launch_config_file + "`, or leave the flag out.");
      }
      const bool has_config = std::filesystem::exists(path);
      std::vector<std::string> defaults;
      if (has_config) {
        const auto c = ampkit::config::load_config(path);
        auto from = [&](const char* key, auto& field, auto value) {
          if (given[key]->count() == 0) {
            field = value;
          }
        };
        from("num_processes", launch_options.num_processes, c.num_processes);
        from("num_machines", launch_options.num_machines, c.num_machines);
        from("machine_rank", launch_options.machine_rank, c.machine_rank);
        if (!c.main_process_ip.empty()) {
          from(
              "main_process_ip",
              launch_options.main_process_ip,
              c.main_process_ip);
        }
        from(
            "main_process_port",
            launch_options.main_process_port,
            static_cast<int>(c.main_process_port));
        from(
            "mixed_precision",
            launch_precision,
            ampkit::to_string(c.mixed_precision));
        from("use_cpu", launch_options.cpu, c.use_cpu);
        from(
            "gradient_accumulation_steps",
            launch_options.gradient_accumulation_steps,
            c.gradient_accumulation_steps);
        from("debug", launch_options.debug, c.debug);
        // Read and acted on the same way as their defaults: said, so that
        // no setting of accelerate's passes without a word.
        if (!launch_options.quiet && c.rdzv_backend != "static") {
          std::cerr << "ampkit launch: rdzv_backend " << c.rdzv_backend
                    << ": the machines meet at machine 0's launcher (its "
                       "TCPStore) with fixed machine ranks, as with static; "
                       "torchrun's elastic membership is not implemented.\n";
        }
        if (!launch_options.quiet && c.same_network &&
            launch_options.num_machines > 1) {
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
                launch_options.enable_cpu_affinity,
                v == "true" || v == "yes" || v == "on");
          }
        }
        from("gpu_ids", gpu_ids, c.gpu_ids);
        if (c.distributed_type == "FSDP") {
          launch_options.fsdp_env = c.fsdp_env;
        }
        if (c.distributed_type == "DEEPSPEED") {
          from("zero_stage", launch_options.zero_stage, c.zero_stage);
          from(
              "gradient_clipping",
              launch_options.gradient_clipping,
              c.gradient_clipping);
        }
      } else {
        const std::pair<const char*, const char*> keys[] = {
            {"num_processes", "1"},
            {"num_machines", "1"},
            {"mixed_precision", "no"}};
        for (const auto& [key, value] : keys) {
          if (given[key]->count() == 0) {
            defaults.push_back(std::string(key) + "=" + value);
          }
        }
      }
      launch_options.mixed_precision = launch_precision;
      // accelerate launch: the workers see only gpu_ids' GPUs, and
      // --multi_gpu without a process count starts one per GPU.
      int64_t visible_gpus = -1;
      if (gpu_ids != "all") {
        ::setenv("CUDA_VISIBLE_DEVICES", gpu_ids.c_str(), 1);
        visible_gpus = 1 + static_cast<int64_t>(
                               std::count(gpu_ids.begin(), gpu_ids.end(), ','));
      }
      if (given["multi_gpu"]->count() > 0) {
        if (launch_options.cpu) {
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
      if (given["multi_gpu"]->count() > 0 &&
          given["num_processes"]->count() == 0 && !has_config) {
        launch_options.num_processes = visible_gpus;
        defaults.erase(
            std::remove(
                defaults.begin(),
                defaults.end(),
                std::string("num_processes=1")),
            defaults.end());
      }
      // On GPUs one process per GPU: more would share a GPU (the core
      // bound is the launcher's, for CPU runs).
      if (!launch_options.cpu && !launch_options.oversubscribe) {
        if (visible_gpus < 0) {
          visible_gpus = static_cast<int64_t>(
              ampkit::Capabilities::current().cuda_devices.size());
        }
        const int64_t here = launch_options.num_processes /
                             std::max<int64_t>(1, launch_options.num_machines);
        if (visible_gpus > 0 && here > visible_gpus) {
          throw ampkit::UsageError(
              "Launch",
              std::to_string(here) + " processes on this machine, which has " +
                  std::to_string(visible_gpus) +
                  " GPUs: they would share them. Pass --num_processes " +
                  std::to_string(visible_gpus * launch_options.num_machines) +
                  " or less, --cpu to train on the CPU, or --oversubscribe.");
        }
      }
      if (given["use_deepspeed"]->count() > 0 &&
          launch_options.zero_stage < 0) {
        launch_options.zero_stage = 2;  // accelerate's DeepSpeed default
      }
      if (launch_options.enable_cpu_affinity && !launch_options.cpu) {
        for (const auto& gpu : ampkit::Capabilities::current().cuda_devices) {
          launch_options.gpu_pci_bus_ids.push_back(gpu.pci_bus_id);
        }
      }
      if (!defaults.empty() && !launch_options.quiet) {
        std::string list;
        for (const auto& d : defaults) {
          list += (list.empty() ? "" : ", ") + d;
        }
        std::cerr << "ampkit launch: warning: no config file at " << path
                  << "; using the defaults " << list
                  << ". Run `ampkit config` to write one, or pass the flags.\n";
      }
      return ampkit::dist::launch(launch_options, std::cout, std::cerr);
    } catch (const std::exception& e) {
      print_error("launch", e);
      return 1;
    }
  }
  if (estimate->parsed()) {
    try {
      const int64_t n = ampkit::parse_parameter_count(estimate_params);
      std::vector<ampkit::MemoryEstimate> rows;
      for (const char* p : {"no", "bf16", "fp16"}) {
        if (estimate_precision.empty() || estimate_precision == p) {
          rows.push_back(ampkit::estimate_memory(
              n,
              estimate_optimizer,
              ampkit::parse_precision(p),
              estimate_zero_stage,
              estimate_processes));
        }
      }
      std::cout << ampkit::memory_table(n, rows);
      return 0;
    } catch (const std::exception& e) {
      print_error("estimate-memory", e);
      return 1;
    }
  }
  if (config->parsed()) {
    if (config_sub_args.config_file.empty()) {
      config_sub_args.config_file = config_args.config_file;
    }
    try {
      if (config_default->parsed()) {
        return run_config_default(config_sub_args);
      }
      if (config_update->parsed()) {
        return run_config_update(config_sub_args);
      }
      return run_config(config_args);
    } catch (const std::exception& e) {
      print_error("config", e);
      return 1;
    }
  }
  if (env->parsed()) {
    try {
      return run_env(env_args);
    } catch (const std::exception& e) {
      print_error("env", e);
      return 1;
    }
  }
  if (doctor->parsed()) {
    {
      const std::optional<std::string> file =
          doctor_config_file.empty()
              ? std::nullopt
              : std::optional<std::string>(doctor_config_file);
      doctor_options.more_checks.push_back(
          [file] { return ampkit::config::check_config_file(file); });
    }
    return run_doctor_command(doctor_options);
  }
  try {
    if (report->parsed()) {
      return run_report(report_args);
    }
  } catch (const std::exception& e) {
    print_error("report", e);
    return 1;
  }
  return 0;
}
