// `ampkit report`: reads a run directory back (config.json, metrics.jsonl or
// metrics.csv) and renders it as one self-contained HTML page of SVG charts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/track/tracker.h"

namespace ampkit::track {

/// A run read back from its directory.
struct RunData {
  /// config.json; empty when the run has none.
  RunConfig config;
  /// Metric name -> (step, value) in the order they were logged. Non-finite
  /// values (logged as null, NaN or Infinity) are kept here as NaN/inf;
  /// render_report skips them and says how many.
  std::map<std::string, std::vector<std::pair<int64_t, double>>> series;
};

/// Reads run_dir/config.json (optional) and run_dir/metrics.jsonl, or
/// run_dir/metrics.csv when there is no metrics.jsonl. Throws
/// ampkit::IoError naming the file (and "file:line" for a malformed line)
/// when run_dir is missing, holds neither metrics file, or a file is
/// malformed.
RunData read_run(const std::string& run_dir);

/// The report as one HTML document: a header, one SVG chart per plot (loss,
/// learning rate, loss scale with skipped steps marked, throughput, memory,
/// then one per further metric), then the configuration as a table. Every
/// chart is an <svg id="plot-<name>"> (plot-loss, plot-lr, plot-loss_scale,
/// plot-samples_per_second, plot-memory, plot-<metric> for the rest), also
/// when its metric was never logged: then it holds a "not logged in this
/// run" note. Nothing is loaded from outside the file; all text is escaped.
std::string render_report(const RunData& run, const std::string& title);

/// run_dir/report.html, where write_report writes by default.
std::string default_report_path(const std::string& run_dir);

/// Reads run_dir and writes its report to output_path (default_report_path
/// when empty), replacing the file atomically. Throws ampkit::IoError.
void write_report(
    const std::string& run_dir, const std::string& output_path = "");

}  // namespace ampkit::track
