// The `ampkit` command line: `ampkit report RUN_DIR` renders a run directory's
// metrics as a self-contained HTML file; `ampkit doctor` checks this machine.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>

#include "ampkit/diag/doctor.h"
#include "ampkit/diag/hints.h"
#include "ampkit/error.h"
#include "ampkit/track/report.h"
#include "ampkit/version.h"

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
    if ((error->component() == "Report" || error->component() == "Doctor") &&
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

  CLI11_PARSE(app, argc, argv);
  if (doctor->parsed()) {
    if (!doctor_config_file.empty()) {
      doctor_options.config_file = doctor_config_file;
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
