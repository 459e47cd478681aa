// The `ampkit` command line. For now one subcommand: `ampkit report RUN_DIR`
// renders a run directory's metrics as a self-contained HTML file.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>

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

  CLI11_PARSE(app, argc, argv);
  try {
    if (report->parsed()) {
      return run_report(report_args);
    }
  } catch (const ampkit::Error& e) {
    // The subcommand already names the component; do not say it twice.
    std::string message = e.what();
    const std::string prefix = e.component() + ": ";
    if (e.component() == "Report" && message.rfind(prefix, 0) == 0) {
      message.erase(0, prefix.size());
    }
    std::cerr << "ampkit report: " << message << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ampkit report: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
