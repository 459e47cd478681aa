// Draws the charts of `ampkit report` as inline SVG: nice-number axes and
// ticks, series as polylines (thinned above kMaxPointsPerLine points) in
// four colour classes, a legend, and skipped-step markers.
#include "track/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace ampkit::track::detail {
namespace {

// Above this many points a line is thinned to per-bucket min/max pairs: the
// chart is 700 px wide, and a million-point polyline makes the file huge.
constexpr size_t kMaxPointsPerLine = 2000;

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), fmt, value);
  return buffer;
}

// SVG coordinates: one decimal is a tenth of a pixel.
std::string coord(double value) {
  return format("%.1f", value);
}

struct Ticks {
  double lo = 0;
  double hi = 1;
  double step = 1;
  std::vector<double> values;
};

// Heckbert's "nice numbers": 1, 2 or 5 times a power of ten.
double nice_number(double x, bool round) {
  const double exponent = std::floor(std::log10(x));
  const double fraction = x / std::pow(10.0, exponent);
  double nice = 10;
  if (round) {
    nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  } else {
    nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
  }
  return nice * std::pow(10.0, exponent);
}

// Round ticks covering [lo, hi]; the axis spans the outer ticks. A flat range
// (one point, or a constant) is widened so that it still has ticks.
Ticks nice_ticks(double lo, double hi, bool integer) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const int target = 6;
  double step = nice_number(nice_number(hi - lo, false) / (target - 1), true);
  if (integer) {
    step = std::max(step, 1.0);
  }
  Ticks ticks;
  ticks.step = step;
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last; ++k) {
    double v = k * step;
    if (std::abs(v) < step * 1e-9) {
      v = 0;  // no "-0"
    }
    ticks.values.push_back(v);
  }
  ticks.lo = ticks.values.front();
  ticks.hi = ticks.values.back();
  if (!(ticks.hi > ticks.lo)) {
    ticks.hi = ticks.lo + step;
    ticks.values.push_back(ticks.hi);
  }
  return ticks;
}

// Tick labels with as many digits as the tick step needs: 0.0003, 65536,
// 2.5e-05.
std::string format_tick(double v, const Ticks& ticks) {
  if (v == 0) {
    return "0";
  }
  const double max_abs = std::max(std::abs(ticks.lo), std::abs(ticks.hi));
  if (ticks.step >= 1 && max_abs < 1e9) {
    return format("%.0f", v);
  }
  if (ticks.step >= 1e-4 && max_abs < 1e9) {
    const int decimals =
        static_cast<int>(std::ceil(-std::log10(ticks.step) - 1e-9));
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, v);
    return buffer;
  }
  const int digits = std::max(
      0,
      static_cast<int>(
          std::floor(std::log10(max_abs) + 1e-9) -
          std::floor(std::log10(ticks.step) + 1e-9)));
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*e", digits, v);
  return buffer;
}

// Keeps each bucket's minimum and maximum, in step order, so spikes survive.
std::vector<Point> thin(const std::vector<Point>& points) {
  if (points.size() <= kMaxPointsPerLine) {
    return points;
  }
  const size_t buckets = kMaxPointsPerLine / 2;
  const size_t per_bucket = (points.size() + buckets - 1) / buckets;
  std::vector<Point> out;
  for (size_t begin = 0; begin < points.size(); begin += per_bucket) {
    const size_t end = std::min(points.size(), begin + per_bucket);
    size_t lo = begin;
    size_t hi = begin;
    for (size_t i = begin; i < end; ++i) {
      lo = points[i].y < points[lo].y ? i : lo;
      hi = points[i].y > points[hi].y ? i : hi;
    }
    out.push_back(points[std::min(lo, hi)]);
    if (lo != hi) {
      out.push_back(points[std::max(lo, hi)]);
    }
  }
  return out;
}

// The value a line has at `x`: that of its last point at or before x.
double value_at(const std::vector<Point>& points, double x) {
  double y = points.front().y;
  for (const Point& p : points) {
    if (p.x > x) {
      break;
    }
    y = p.y;
  }
  return y;
}

// A chart that has nothing to draw keeps its id, as a one-line note.
std::string note_svg(const std::string& id, const std::string& text) {
  std::ostringstream out;
  out << "<svg id=\"" << escape(id)
      << "\" class=\"chart not-logged\" viewBox=\"0 0 800 44\" role=\"img\">"
      << "<text x=\"16\" y=\"27\">" << escape(text) << "</text></svg>\n";
  return out.str();
}

}  // namespace

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_value(double value) {
  return format("%.6g", value);
}

std::string plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

namespace {

// The plot area in SVG pixels, and the ticks that its edges span.
struct SvgChartFrame {
  Ticks x_ticks;
  Ticks y_ticks;
  double width = 800;
  double height = 320;
  double left = 84;
  double right = 24;
  double top = 44;
  double bottom = 52;
  double plot_w = width - left - right;
  double plot_h = height - top - bottom;

  double px(double x) const {
    return left + (x - x_ticks.lo) / (x_ticks.hi - x_ticks.lo) * plot_w;
  }
  double py(double y) const {
    return top + plot_h - (y - y_ticks.lo) / (y_ticks.hi - y_ticks.lo) * plot_h;
  }
};

// Ticks over every point of `lines` and every marker's step.
SvgChartFrame svg_chart_frame(
    const std::vector<Line>& lines, const std::vector<Marker>& markers) {
  double x_lo = std::numeric_limits<double>::infinity();
  double x_hi = -x_lo;
  double y_lo = x_lo;
  double y_hi = -x_lo;
  for (const Line& line : lines) {
    for (const Point& p : line.points) {
      x_lo = std::min(x_lo, p.x);
      x_hi = std::max(x_hi, p.x);
      y_lo = std::min(y_lo, p.y);
      y_hi = std::max(y_hi, p.y);
    }
  }
  for (const Marker& m : markers) {
    x_lo = std::min(x_lo, static_cast<double>(m.step));
    x_hi = std::max(x_hi, static_cast<double>(m.step));
  }
  SvgChartFrame frame;
  frame.x_ticks = nice_ticks(x_lo, x_hi, /*integer=*/true);
  frame.y_ticks = nice_ticks(y_lo, y_hi, /*integer=*/false);
  return frame;
}

// Opens the <svg> and draws the title, grid, ticks, axes and axis labels.
void svg_chart_write_axes(
    std::ostream& out,
    const SvgChartFrame& f,
    const std::string& id,
    const std::string& heading,
    const std::string& y_label) {
  const std::string eid = escape(id);
  out << "<svg id=\"" << eid << "\" class=\"chart\" viewBox=\"0 0 " << f.width
      << " " << f.height << "\" role=\"img\" aria-labelledby=\"" << eid
      << "-title\">\n"
      << "<title id=\"" << eid << "-title\">" << escape(heading) << "</title>\n"
      << "<text class=\"chart-title\" x=\"" << f.left << "\" y=\"26\">"
      << escape(heading) << "</text>\n";
  for (double v : f.y_ticks.values) {
    const std::string y = coord(f.py(v));
    out << "<line class=\"grid\" x1=\"" << f.left << "\" x2=\""
        << f.left + f.plot_w << "\" y1=\"" << y << "\" y2=\"" << y << "\"/>"
        << "<text class=\"tick\" x=\"" << f.left - 8 << "\" y=\"" << y
        << "\" text-anchor=\"end\" dominant-baseline=\"middle\">"
        << escape(format_tick(v, f.y_ticks)) << "</text>\n";
  }
  for (double v : f.x_ticks.values) {
    const std::string x = coord(f.px(v));
    out << "<line class=\"tick-mark\" x1=\"" << x << "\" x2=\"" << x
        << "\" y1=\"" << f.top + f.plot_h << "\" y2=\"" << f.top + f.plot_h + 5
        << "\"/><text class=\"tick\" x=\"" << x << "\" y=\""
        << f.top + f.plot_h + 20 << "\" text-anchor=\"middle\">"
        << escape(format_tick(v, f.x_ticks)) << "</text>\n";
  }
  out << "<line class=\"axis\" x1=\"" << f.left << "\" x2=\""
      << f.left + f.plot_w << "\" y1=\"" << f.top + f.plot_h << "\" y2=\""
      << f.top + f.plot_h << "\"/>"
      << "<line class=\"axis\" x1=\"" << f.left << "\" x2=\"" << f.left
      << "\" y1=\"" << f.top << "\" y2=\"" << f.top + f.plot_h << "\"/>\n"
      << "<text class=\"axis-label\" x=\"" << f.left + f.plot_w / 2 << "\" y=\""
      << f.height - 10 << "\" text-anchor=\"middle\">step</text>\n";
  out << "<text class=\"axis-label\" transform=\"translate(18 "
      << f.top + f.plot_h / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << escape(y_label) << "</text>\n";
}

// One polyline per line (a circle for a single point), then the skipped-step
// markers on the first line.
void svg_chart_write_series(
    std::ostream& out,
    const SvgChartFrame& f,
    const std::vector<Line>& lines,
    const std::vector<Marker>& markers) {
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string cls = "s" + std::to_string(i % 4);
    const std::vector<Point> points = thin(lines[i].points);
    if (points.size() == 1) {
      out << "<circle class=\"point " << cls << "\" cx=\""
          << coord(f.px(points[0].x)) << "\" cy=\"" << coord(f.py(points[0].y))
          << "\" r=\"4\"/>\n";
      continue;
    }
    out << "<polyline class=\"series " << cls << "\" points=\"";
    for (size_t k = 0; k < points.size(); ++k) {
      out << (k ? " " : "") << coord(f.px(points[k].x)) << ","
          << coord(f.py(points[k].y));
    }
    out << "\"/>\n";
  }
  if (!markers.empty()) {
    const std::vector<Point>& base = lines.front().points;
    for (const Marker& m : markers) {
      const double x = static_cast<double>(m.step);
      out << "<circle class=\"skip-marker\" cx=\"" << coord(f.px(x))
          << "\" cy=\"" << coord(f.py(value_at(base, x))) << "\" r=\"5\">"
          << "<title>step " << m.step << ": " << escape(format_value(m.skipped))
          << " skipped</title></circle>\n";
    }
  }
}

// Legend, top right: one entry per line when there are several, and the
// skipped-step marker when there is one.
void svg_chart_write_legend(
    std::ostream& out,
    const SvgChartFrame& f,
    const ChartSpec& spec,
    const std::vector<Line>& lines,
    const std::vector<Marker>& markers) {
  std::vector<std::pair<std::string, std::string>> legend;  // class, label
  if (lines.size() > 1 || spec.metrics.size() > 1) {
    for (size_t i = 0; i < lines.size(); ++i) {
      legend.emplace_back("s" + std::to_string(i % 4), lines[i].label);
    }
  }
  if (!markers.empty()) {
    legend.emplace_back("legend-skip", "skipped step");
  }
  double lx = f.left + f.plot_w - 200;
  double ly = 22;
  for (const auto& [cls, label] : legend) {
    if (cls == "legend-skip") {
      out << "<circle class=\"legend-skip\" cx=\"" << lx + 10 << "\" cy=\""
          << ly - 4 << "\" r=\"5\"/>";
    } else {
      out << "<line class=\"legend-line " << cls << "\" x1=\"" << lx
          << "\" x2=\"" << lx + 20 << "\" y1=\"" << ly - 4 << "\" y2=\""
          << ly - 4 << "\"/>";
    }
    out << "<text class=\"legend\" x=\"" << lx + 26 << "\" y=\"" << ly << "\">"
        << escape(label) << "</text>\n";
    ly += 16;
  }
}

// The caption's notes: single points, non-finite values skipped, thinned
// lines and skipped steps.
std::vector<std::string> svg_chart_notes(
    const std::vector<Line>& lines, const std::vector<Marker>& markers) {
  std::vector<std::string> notes;
  for (const Line& line : lines) {
    if (line.points.size() == 1) {
      notes.push_back(
          line.metric + ": a single point, at step " +
          format("%.0f", line.points[0].x));
    }
    if (line.non_finite > 0) {
      notes.push_back(
          line.metric + ": " + std::to_string(line.non_finite) +
          " non-finite value" + (line.non_finite == 1 ? "" : "s") +
          " (NaN/inf) skipped");
    }
    if (line.points.size() > kMaxPointsPerLine) {
      notes.push_back(
          line.metric + ": " + std::to_string(line.points.size()) +
          " points drawn as per-interval min/max");
    }
  }
  if (!markers.empty()) {
    notes.push_back(
        plural(markers.size(), "step") +
        " where the optimizer step was "
        "skipped (inf/NaN gradients), marked in red");
  }
  return notes;
}

}  // namespace

std::string render_chart(
    const ChartSpec& spec,
    const std::string& id,
    const std::vector<Line>& lines,
    const std::vector<Marker>& markers) {
  const std::string heading =
      spec.title + (spec.unit.empty() ? "" : " (" + spec.unit + ")");
  std::vector<std::string> names;
  for (const auto& metric : spec.metrics) {
    names.push_back(metric.first);
  }
  std::string name_list;
  for (const std::string& name : names) {
    name_list += (name_list.empty() ? "" : ", ") + name;
  }
  std::ostringstream out;
  out << "<figure class=\"chart-box\">\n";
  if (lines.empty()) {
    std::string text =
        spec.title + " (" + name_list + "): not logged in this run";
    if (!markers.empty()) {
      text += "; " + plural(markers.size(), "skipped step") + " logged";
    }
    out << note_svg(id, text) << "</figure>\n";
    return out.str();
  }
  size_t finite = 0;
  size_t non_finite = 0;
  for (const Line& line : lines) {
    finite += line.points.size();
    non_finite += line.non_finite;
  }
  if (finite == 0) {
    out << note_svg(
               id,
               spec.title + " (" + name_list + "): no finite values, " +
                   std::to_string(non_finite) + " non-finite (NaN/inf) skipped")
        << "</figure>\n";
    return out.str();
  }

  const SvgChartFrame frame = svg_chart_frame(lines, markers);
  const std::string y_label = spec.unit.empty() ? names.front() : spec.unit;
  svg_chart_write_axes(out, frame, id, heading, y_label);
  svg_chart_write_series(out, frame, lines, markers);
  svg_chart_write_legend(out, frame, spec, lines, markers);
  out << "</svg>\n";

  const std::vector<std::string> notes = svg_chart_notes(lines, markers);
  if (!notes.empty()) {
    out << "<figcaption>";
    for (size_t i = 0; i < notes.size(); ++i) {
      out << (i ? "; " : "") << escape(notes[i]);
    }
    out << "</figcaption>\n";
  }
  out << "</figure>\n";
  return out.str();
}

}  // namespace ampkit::track::detail
