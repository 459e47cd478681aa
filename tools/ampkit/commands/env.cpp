// `ampkit env`: prints what a bug report needs.
#include <ATen/Parallel.h>
#include <sys/utsname.h>
#include <CLI/CLI.hpp>

#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>

#include "ampkit/amp/capability.h"
#include "ampkit/config/config.h"
#include "ampkit/diag/doctor.h"
#include "ampkit/diag/hints.h"
#include "ampkit/version.h"
#include "command.h"

namespace commands {
namespace {

struct EnvArgs {
  std::string config_file;  // "" = config::config_path_to_read()

  // What `ampkit env` reads: also accelerate's file when ampkit has none.
  std::string read_path() const {
    return config_file.empty() ? ampkit::config::config_path_to_read()
                               : config_file;
  }
};

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
int run_env(const EnvArgs& args) {
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

Command add_env(CLI::App& app) {
  auto args = std::make_shared<EnvArgs>();
  CLI::App* env = app.add_subcommand(
      "env",
      "Print what a bug report needs: ampkit, LibTorch, compiler, OS, CPU and "
      "its reduced-precision support, memory, GPUs, CUDA/NCCL, BLAS, threads "
      "and the config file in effect.");
  env->add_option(flags("config-file"), args->config_file, kConfigFileHelp);
  return {env, [args] {
            try {
              return run_env(*args);
            } catch (const std::exception& e) {
              print_error("env", e);
              return 1;
            }
          }};
}

}  // namespace commands
