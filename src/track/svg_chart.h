// The SVG chart drawing of `ampkit report`: one line chart per ChartSpec,
// with round-numbered axes and ticks, thinned polylines, a legend and
// skipped-step markers, every text escaped for HTML/SVG.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampkit::track::detail {

/// `text` with & < > " ' escaped, safe in HTML/SVG text and attributes.
std::string escape(const std::string& text);

/// A value as printf's %.6g writes it.
std::string format_value(double value);

/// "1 step", "3 steps".
std::string plural(size_t n, const std::string& word);

struct Point {
  double x;
  double y;
};

struct Line {
  std::string metric;
  std::string label;
  std::vector<Point> points;  // finite only
  size_t non_finite = 0;
};

struct Marker {
  int64_t step;
  double skipped;  // how many steps were skipped since the previous record
};

struct ChartSpec {
  std::string id;  // plot-<id>
  std::string title;
  std::string unit;  // "" when the metric has none
  std::vector<std::pair<std::string, std::string>> metrics;  // name, label
};

/// One <figure> holding the chart of `lines` as <svg id="`id`">, and a
/// caption of notes (single points, non-finite values skipped, thinning,
/// skipped steps); a "not logged in this run" note in place of the chart when
/// `lines` is empty or holds no finite value. `markers` are drawn on the
/// first line.
std::string render_chart(
    const ChartSpec& spec,
    const std::string& id,
    const std::vector<Line>& lines,
    const std::vector<Marker>& markers);

}  // namespace ampkit::track::detail
