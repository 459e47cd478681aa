// The report of a run directory: read_run (its files parsed by
// track/run_reader.h) and the HTML page that holds its charts (drawn by
// track/svg_chart.h) inline: no scripts, fonts, images or network, so it
// opens anywhere offline.
#include "ampkit/track/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include "ampkit/error.h"
#include "utils/write_failure.h"

#include "track/run_reader.h"
#include "track/svg_chart.h"
#include "utils/components.h"

namespace ampkit::track {

using detail::ChartSpec;
using detail::escape;
using detail::format_value;
using detail::Line;
using detail::Marker;
using detail::plural;
using detail::Point;
using detail::render_chart;
using detail::Series;

namespace {

namespace fs = std::filesystem;

constexpr const char* kReportFile = "report.html";

Line make_line(
    const std::string& metric, const std::string& label, const Series& series) {
  Line line{metric, label, {}, 0};
  for (const auto& [step, value] : series) {
    if (std::isfinite(value)) {
      line.points.push_back({static_cast<double>(step), value});
    } else {
      ++line.non_finite;
    }
  }
  return line;
}

// Steps where the cumulative skipped-step count went up.
std::vector<Marker> skipped_step_markers(const RunData& run) {
  std::vector<Marker> markers;
  const auto it = run.series.find(kSkippedSteps);
  if (it == run.series.end()) {
    return markers;
  }
  double previous = 0;
  for (const auto& [step, value] : it->second) {
    if (!std::isfinite(value)) {
      continue;
    }
    if (value > previous) {
      markers.push_back({step, value - previous});
    }
    previous = value;
  }
  return markers;
}

// Ids keep to characters that need no escaping in CSS selectors or URLs.
std::string plot_id(const std::string& name, std::set<std::string>& used) {
  std::string id = "plot-";
  for (char c : name) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                      c == '-' || c == '.';
    id += keep ? c : '_';
  }
  std::string unique = id;
  for (int n = 2; used.count(unique); ++n) {
    unique = id + "-" + std::to_string(n);
  }
  used.insert(unique);
  return unique;
}

ChartSpec spec_for_extra(const std::string& name) {
  if (name == kGradNorm) {
    return {name, "Gradient norm", "", {{name, name}}};
  }
  if (name == kGpuUtilization) {
    return {name, "GPU utilization", "%", {{name, name}}};
  }
  if (name == kSkippedSteps) {
    return {name, "Skipped steps, cumulative", "steps", {{name, name}}};
  }
  const bool mb =
      name.size() > 3 && name.compare(name.size() - 3, 3, "_mb") == 0;
  return {name, name, mb ? "MB" : "", {{name, name}}};
}

const char* kStyle = R"(
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 880px;
  color: #1f2328; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 4px; }
h2 { font-size: 1.15em; margin-top: 28px; }
.summary { color: #57606a; margin-top: 0; }
figure.chart-box { margin: 16px 0; }
svg.chart { width: 100%; height: auto; display: block;
  border: 1px solid #d0d7de; border-radius: 6px; background: #fff; }
svg.not-logged { background: #f6f8fa; }
svg.not-logged text { fill: #57606a; font-size: 15px; font-style: italic; }
figcaption { color: #57606a; font-size: 0.9em; margin-top: 4px; }
.chart-title { font-size: 16px; font-weight: 600; fill: #1f2328; }
.tick, .legend { font-size: 12px; fill: #57606a; }
.axis-label { font-size: 13px; fill: #1f2328; }
.axis { stroke: #57606a; stroke-width: 1; }
.grid { stroke: #eaeef2; stroke-width: 1; }
.tick-mark { stroke: #57606a; }
.series { fill: none; stroke-width: 1.8; stroke-linejoin: round; }
.series.s0, .legend-line.s0 { stroke: #0969da; } .point.s0 { fill: #0969da; }
.series.s1, .legend-line.s1 { stroke: #bf8700; } .point.s1 { fill: #bf8700; }
.series.s2, .legend-line.s2 { stroke: #1a7f37; } .point.s2 { fill: #1a7f37; }
.series.s3, .legend-line.s3 { stroke: #8250df; } .point.s3 { fill: #8250df; }
.legend-line { stroke-width: 2.5; }
.skip-marker, .legend-skip { fill: #cf222e; stroke: #fff; stroke-width: 1.5; }
table { border-collapse: collapse; font-size: 0.92em; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; text-align: left;
  vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td code { white-space: pre-wrap; word-break: break-all; }
)";

}  // namespace

RunData read_run(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) {
    throw IoError(
        component::kReport,
        "run directory not found, got '" + run_dir +
            "'. Pass the directory a tracker wrote (project_dir/project_name), "
            "which holds metrics.jsonl or metrics.csv.");
  }
  const fs::path dir(run_dir);
  RunData run;
  const fs::path config = dir / kConfigFile;
  if (fs::exists(config, ec)) {
    run.config = detail::read_config(config.string());
  }
  const fs::path jsonl = dir / kJsonlFile;
  const fs::path csv = dir / kCsvFile;
  if (fs::exists(jsonl, ec)) {
    detail::read_jsonl(jsonl.string(), run.series);
  } else if (fs::exists(csv, ec)) {
    detail::read_csv(csv.string(), run.series);
  } else {
    throw IoError(
        component::kReport,
        "no metrics file in the run directory, got '" + run_dir +
            "'. Expected " + kJsonlFile + " or " + kCsvFile +
            " there: log with the jsonl or csv tracker (log_with=\"jsonl\"), "
            "or pass the run directory itself rather than its parent.");
  }
  return run;
}

std::string render_report(const RunData& run, const std::string& title) {
  const std::vector<ChartSpec> fixed = {
      {"loss", "Loss", "", {{kLoss, kLoss}}},
      {"lr", "Learning rate", "", {{kLearningRate, kLearningRate}}},
      {"loss_scale", "Loss scale", "", {{kLossScale, kLossScale}}},
      {"samples_per_second",
       "Throughput",
       "samples/s",
       {{kSamplesPerSecond, kSamplesPerSecond}}},
      {"memory",
       "Memory",
       "MB",
       {{kMemoryRssMb, "process RSS (memory_rss_mb)"},
        {kGpuMemoryMb, "GPU (gpu_memory_mb)"}}},
  };
  std::set<std::string> drawn;
  std::vector<ChartSpec> specs = fixed;
  for (const ChartSpec& spec : fixed) {
    for (const auto& metric : spec.metrics) {
      drawn.insert(metric.first);
    }
  }
  for (const auto& [name, series] : run.series) {
    if (!drawn.count(name)) {
      specs.push_back(spec_for_extra(name));
    }
  }
  const std::vector<Marker> markers = skipped_step_markers(run);

  int64_t first_step = 0;
  int64_t last_step = 0;
  bool any_step = false;
  for (const auto& [name, series] : run.series) {
    for (const auto& point : series) {
      first_step = any_step ? std::min(first_step, point.first) : point.first;
      last_step = any_step ? std::max(last_step, point.first) : point.first;
      any_step = true;
    }
  }

  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
         "charset=\"utf-8\">\n"
      // Enforces self-containment in the browser: anything that would load
      // from outside the file is blocked (and shows as a console error).
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
         "'none'; style-src 'unsafe-inline'\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, "
         "initial-scale=1\">\n"
      << "<title>" << escape(title) << " - ampkit report</title>\n"
      << "<style>" << kStyle << "</style>\n</head>\n<body>\n"
      << "<header>\n<h1>" << escape(title) << "</h1>\n<p class=\"summary\">";
  if (any_step) {
    out << "steps " << first_step << " to " << last_step << " &middot; "
        << escape(plural(run.series.size(), "metric"));
  } else {
    out << "no metrics logged";
  }
  const auto skipped = run.series.find(kSkippedSteps);
  if (skipped != run.series.end() && !skipped->second.empty()) {
    out << " &middot; skipped steps: "
        << escape(format_value(skipped->second.back().second));
  }
  out << "</p>\n</header>\n<main>\n<h2>Metrics</h2>\n";

  std::set<std::string> used_ids;
  for (const ChartSpec& spec : specs) {
    std::vector<Line> lines;
    for (const auto& [metric, label] : spec.metrics) {
      const auto it = run.series.find(metric);
      if (it != run.series.end()) {
        lines.push_back(make_line(metric, label, it->second));
      }
    }
    const bool with_markers = spec.id == "loss_scale";
    out << render_chart(
        spec,
        plot_id(spec.id, used_ids),
        lines,
        with_markers ? markers : std::vector<Marker>{});
  }

  if (!run.series.empty()) {
    out << "<h2>Summary</h2>\n<table class=\"metrics\">\n<tr><th>metric</th>"
        << "<th>points</th><th>last</th><th>min</th><th>max</th>"
        << "<th>non-finite</th></tr>\n";
    for (const auto& [name, series] : run.series) {
      const Line line = make_line(name, name, series);
      out << "<tr><td>" << escape(name) << "</td><td class=\"num\">"
          << series.size() << "</td>";
      if (line.points.empty()) {
        out << "<td></td><td></td><td></td>";
      } else {
        double lo = line.points.front().y;
        double hi = lo;
        for (const Point& p : line.points) {
          lo = std::min(lo, p.y);
          hi = std::max(hi, p.y);
        }
        out << "<td class=\"num\">"
            << escape(format_value(line.points.back().y))
            << "</td><td class=\"num\">" << escape(format_value(lo))
            << "</td><td class=\"num\">" << escape(format_value(hi)) << "</td>";
      }
      out << "<td class=\"num\">" << line.non_finite << "</td></tr>\n";
    }
    out << "</table>\n";
  }

  out << "<h2>Configuration</h2>\n";
  if (run.config.empty()) {
    out << "<p class=\"summary\">No configuration (config.json) in this "
           "run.</p>\n";
  } else {
    out << "<table "
           "class=\"config\">\n<tr><th>setting</th><th>value</th></tr>\n";
    for (const auto& [key, value] : run.config) {
      out << "<tr><td>" << escape(key) << "</td><td><code>" << escape(value)
          << "</code></td></tr>\n";
    }
    out << "</table>\n";
  }
  out << "</main>\n</body>\n</html>\n";
  return out.str();
}

std::string default_report_path(const std::string& run_dir) {
  return (fs::path(run_dir) / kReportFile).string();
}

void write_report(const std::string& run_dir, const std::string& output_path) {
  const RunData run = read_run(run_dir);
  fs::path dir = fs::path(run_dir).lexically_normal();
  std::error_code ec;
  const fs::path absolute = fs::weakly_canonical(fs::absolute(dir), ec);
  if (!ec) {
    dir = absolute;
  }
  std::string title = dir.filename().string();
  if (title.empty() || title == ".") {
    title = dir.parent_path().filename().string();
  }
  const std::string html = render_report(run, title.empty() ? run_dir : title);

  const std::string path =
      output_path.empty() ? default_report_path(run_dir) : output_path;
  // Write beside the target, then rename: a reader never sees half a report.
  const std::string tmp = path + ".tmp";
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << html;
    out.close();
    if (!out) {
      const int err = errno != 0 ? errno : EIO;
      fs::remove(tmp, ec);
      throw IoError(
          component::kReport,
          "cannot write the report to " + path + ": " +
              ampkit::detail::write_failure(err) + ".");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(tmp, ec);
    throw IoError(
        component::kReport,
        "cannot move the report into place, got '" + path + "' (" + reason +
            "). Check that the path is not a directory.");
  }
}

}  // namespace ampkit::track
