// `ampkit report RUN_DIR`: a run directory's metrics as a self-contained HTML
// file.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "ampkit/track/report.h"
#include "command.h"

namespace commands {
namespace {

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

Command add_report(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* report = app.add_subcommand(
      "report",
      "Render a run directory (config.json and metrics.jsonl or metrics.csv, "
      "as the jsonl/csv trackers write them) as one self-contained HTML file "
      "of charts: loss, learning rate, loss scale with skipped steps, "
      "throughput, memory, every other metric, and the configuration.");
  report->add_option("RUN_DIR", args->run_dir, "the run directory to report on")
      ->required();
  report->add_option(
      "-o," + flags("output"),
      args->output,
      "where to write the HTML (default: RUN_DIR/report.html)");
  return {report, [args] {
            try {
              return run_report(*args);
            } catch (const std::exception& e) {
              print_error("report", e);
              return 1;
            }
          }};
}

}  // namespace commands
