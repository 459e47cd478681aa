// `ampkit doctor`: checks this machine.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "ampkit/config/config_check.h"
#include "ampkit/diag/doctor.h"
#include "command.h"

namespace commands {
namespace {

struct DoctorArgs {
  ampkit::diag::DoctorOptions options;
  std::string config_file;
};

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

}  // namespace

Command add_doctor(CLI::App& app) {
  auto args = std::make_shared<DoctorArgs>();
  CLI::App* doctor = app.add_subcommand(
      "doctor",
      "Check LibTorch, its BLAS and threads, the CPU and GPUs, the config file "
      "and free disk space; time fp32/bf16/fp16 matmuls and recommend a "
      "mixed_precision per device. Exits 1 when a check fails.");
  doctor->add_option(
      flags("project-dir"),
      args->options.project_dir,
      "where checkpoints and logs go; its free space is checked (default: .)");
  doctor->add_option(
      flags("config-file"),
      args->config_file,
      "the config file to validate (default: $AMPKIT_CONFIG_FILE, else "
      "${XDG_CACHE_HOME:-~/.cache}/ampkit/default_config.yaml)");
  doctor
      ->add_option(
          flags("matmul-size"),
          args->options.matmul_size,
          "n of the timed [n, n] @ [n, n] matmuls (default: 1024)")
      ->check(CLI::Range(1, 1 << 16));
  return {doctor, [args] {
            const std::optional<std::string> file =
                args->config_file.empty()
                    ? std::nullopt
                    : std::optional<std::string>(args->config_file);
            args->options.more_checks.push_back(
                [file] { return ampkit::config::check_config_file(file); });
            return run_doctor_command(args->options);
          }};
}

}  // namespace commands
