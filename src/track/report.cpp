// Reads a run directory back and renders it as one HTML page of inline SVG
// charts: no scripts, fonts, images or network, so it opens anywhere offline.
#include "ampkit/track/report.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "ampkit/error.h"

#include "utils/strings.h"

namespace ampkit::track {
namespace {

namespace fs = std::filesystem;
using Series = std::vector<std::pair<int64_t, double>>;

constexpr const char* kComponent = "Report";
constexpr const char* kReportFile = "report.html";
// Above this many points a line is thinned to per-bucket min/max pairs: the
// chart is 700 px wide, and a million-point polyline makes the file huge.
constexpr size_t kMaxPointsPerLine = 2000;

// ---------------------------------------------------------------- reading

std::string clip(const std::string& text, size_t max_chars = 80) {
  return text.size() <= max_chars ? text : text.substr(0, max_chars) + "...";
}

std::string where(const std::string& file, size_t line) {
  return file + ":" + std::to_string(line);
}

// Python's json module writes NaN, Infinity and -Infinity bare, which is not
// JSON; quote them (outside strings) so the parser accepts the line and the
// value reads back as non-finite.
std::string quote_non_finite_literals(const std::string& line) {
  std::string out;
  out.reserve(line.size() + 8);
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) {
        out += line[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const char* literal : {"-Infinity", "Infinity", "NaN"}) {
      const std::string lit(literal);
      if (line.compare(i, lit.size(), lit) == 0) {
        out += '"' + lit + '"';
        i += lit.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      out += c;
    }
  }
  return out;
}

// The value of a non-finite literal ("NaN", "inf", ...), or nullopt-like
// false when `text` is not one.
bool parse_non_finite(const std::string& text, double& value) {
  std::string t;
  for (char c : text) {
    t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (t == "nan" || t == "-nan") {
    value = std::numeric_limits<double>::quiet_NaN();
  } else if (t == "inf" || t == "infinity" || t == "+inf") {
    value = std::numeric_limits<double>::infinity();
  } else if (t == "-inf" || t == "-infinity") {
    value = -std::numeric_limits<double>::infinity();
  } else {
    return false;
  }
  return true;
}

bool parse_double(const std::string& text, double& value) {
  if (parse_non_finite(text, value)) {
    return true;
  }
  const auto parsed = detail::parse_double(text);
  value = parsed.value_or(0.0);
  return parsed.has_value();
}

std::ifstream open_for_reading(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError(
        kComponent,
        "cannot open " + path + " for reading, got '" + path +
            "'. Check that the file is readable.");
  }
  return in;
}

void strip_line_end(std::string& line) {
  if (!line.empty() && line.back() == '\r') {
    line.pop_back();
  }
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t") == std::string::npos;
}

RunConfig read_config(const std::string& path) {
  std::ifstream in = open_for_reading(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const size_t byte = std::min<size_t>(e.byte, text.size());
    const size_t line = 1 + std::count(text.begin(), text.begin() + byte, '\n');
    throw IoError(
        kComponent,
        where(path, line) + ": config is not valid JSON, got '" +
            clip(e.what()) +
            "'. config.json must be one JSON object of settings; rewrite it "
            "or delete it to report without a configuration.");
  }
  if (!j.is_object()) {
    throw IoError(
        kComponent,
        path + ": config is not a JSON object, got '" + clip(j.dump()) +
            "'. config.json must be one JSON object of settings, such as "
            "{\"mixed_precision\": \"bf16\"}.");
  }
  RunConfig config;
  for (const auto& [key, value] : j.items()) {
    config[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  return config;
}

void read_jsonl(
    const std::string& path, std::map<std::string, Series>& series) {
  std::ifstream in = open_for_reading(path);
  const std::string hint =
      ". Each line must be one JSON object such as {\"step\": 10, "
      "\"wall_time\": 1700000000.5, \"loss\": 0.31}; fix or delete that line.";
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    strip_line_end(line);
    if (is_blank(line)) {
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(quote_non_finite_literals(line));
    } catch (const nlohmann::json::parse_error&) {
      throw IoError(
          kComponent,
          where(path, line_number) + ": line is not valid JSON, got '" +
              clip(line) + "'" + hint);
    }
    if (!j.is_object()) {
      throw IoError(
          kComponent,
          where(path, line_number) + ": line is not a JSON object, got '" +
              clip(line) + "'" + hint);
    }
    const auto step_it = j.find("step");
    int64_t step = 0;
    if (step_it != j.end() && step_it->is_number_integer()) {
      step = step_it->get<int64_t>();
    } else if (
        step_it != j.end() && step_it->is_number_float() &&
        std::floor(step_it->get<double>()) == step_it->get<double>()) {
      step = static_cast<int64_t>(step_it->get<double>());
    } else {
      throw IoError(
          kComponent,
          where(path, line_number) + ": line has no integer \"step\", got '" +
              clip(line) + "'" + hint);
    }
    for (const auto& [name, value] : j.items()) {
      if (name == "step" || name == "wall_time") {
        continue;
      }
      double v = 0;
      if (value.is_number()) {
        v = value.get<double>();
      } else if (value.is_null()) {
        // nlohmann::json (and so the jsonl tracker) writes NaN/inf as null.
        v = std::numeric_limits<double>::quiet_NaN();
      } else if (!(value.is_string() &&
                   parse_non_finite(value.get<std::string>(), v))) {
        throw IoError(
            kComponent,
            where(path, line_number) + ": value of \"" + name +
                "\" is not a number, got " + clip(value.dump()) + hint);
      }
      series[name].emplace_back(step, v);
    }
  }
}

// One CSV record split into fields; double quotes may wrap a field, and ""
// inside them is a quote (RFC 4180), so metric names may hold commas.
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

void read_csv(const std::string& path, std::map<std::string, Series>& series) {
  std::ifstream in = open_for_reading(path);
  const std::string header = "step,wall_time,name,value";
  const std::string hint =
      ". Each row must be step,wall_time,name,value such as "
      "10,1700000000.5,loss,0.31; fix or delete that row.";
  std::string line;
  size_t line_number = 0;
  bool seen_header = false;
  while (std::getline(in, line)) {
    ++line_number;
    strip_line_end(line);
    if (line_number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) {
      line.erase(0, 3);  // a UTF-8 byte-order mark from a spreadsheet
    }
    if (is_blank(line)) {
      continue;
    }
    if (!seen_header) {
      if (line != header) {
        throw IoError(
            kComponent,
            where(path, line_number) + ": header is not '" + header +
                "', got '" + clip(line) +
                "'. metrics.csv must start with that header, as the csv "
                "tracker writes it.");
      }
      seen_header = true;
      continue;
    }
    const std::vector<std::string> fields = split_csv(line);
    int64_t step = 0;
    double value = 0;
    if (fields.size() != 4) {
      throw IoError(
          kComponent,
          where(path, line_number) + ": row has " +
              std::to_string(fields.size()) + " fields instead of 4, got '" +
              clip(line) + "'" + hint);
    }
    if (const auto parsed = detail::parse_int(fields[0])) {
      step = *parsed;
    } else {
      throw IoError(
          kComponent,
          where(path, line_number) + ": step is not an integer, got '" +
              clip(fields[0]) + "'" + hint);
    }
    if (!parse_double(fields[3], value)) {
      throw IoError(
          kComponent,
          where(path, line_number) + ": value is not a number, got '" +
              clip(fields[3]) + "'" + hint);
    }
    series[fields[2]].emplace_back(step, value);
  }
  if (!seen_header) {
    throw IoError(
        kComponent,
        path + ": file is empty, got no header. metrics.csv must start with '" +
            header + "'.");
  }
}

// ---------------------------------------------------------------- writing

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

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), fmt, value);
  return buffer;
}

std::string format_value(double value) {
  return format("%.6g", value);
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

struct Point {
  double x;
  double y;
};

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

std::string plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// A chart that has nothing to draw keeps its id, as a one-line note.
std::string note_svg(const std::string& id, const std::string& text) {
  std::ostringstream out;
  out << "<svg id=\"" << escape(id)
      << "\" class=\"chart not-logged\" viewBox=\"0 0 800 44\" role=\"img\">"
      << "<text x=\"16\" y=\"27\">" << escape(text) << "</text></svg>\n";
  return out.str();
}

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
  const Ticks x_ticks = nice_ticks(x_lo, x_hi, /*integer=*/true);
  const Ticks y_ticks = nice_ticks(y_lo, y_hi, /*integer=*/false);

  const double width = 800;
  const double height = 320;
  const double left = 84;
  const double right = 24;
  const double top = 44;
  const double bottom = 52;
  const double plot_w = width - left - right;
  const double plot_h = height - top - bottom;
  auto px = [&](double x) {
    return left + (x - x_ticks.lo) / (x_ticks.hi - x_ticks.lo) * plot_w;
  };
  auto py = [&](double y) {
    return top + plot_h - (y - y_ticks.lo) / (y_ticks.hi - y_ticks.lo) * plot_h;
  };

  const std::string eid = escape(id);
  out << "<svg id=\"" << eid << "\" class=\"chart\" viewBox=\"0 0 " << width
      << " " << height << "\" role=\"img\" aria-labelledby=\"" << eid
      << "-title\">\n"
      << "<title id=\"" << eid << "-title\">" << escape(heading) << "</title>\n"
      << "<text class=\"chart-title\" x=\"" << left << "\" y=\"26\">"
      << escape(heading) << "</text>\n";
  for (double v : y_ticks.values) {
    const std::string y = coord(py(v));
    out << "<line class=\"grid\" x1=\"" << left << "\" x2=\"" << left + plot_w
        << "\" y1=\"" << y << "\" y2=\"" << y << "\"/>"
        << "<text class=\"tick\" x=\"" << left - 8 << "\" y=\"" << y
        << "\" text-anchor=\"end\" dominant-baseline=\"middle\">"
        << escape(format_tick(v, y_ticks)) << "</text>\n";
  }
  for (double v : x_ticks.values) {
    const std::string x = coord(px(v));
    out << "<line class=\"tick-mark\" x1=\"" << x << "\" x2=\"" << x
        << "\" y1=\"" << top + plot_h << "\" y2=\"" << top + plot_h + 5
        << "\"/><text class=\"tick\" x=\"" << x << "\" y=\""
        << top + plot_h + 20 << "\" text-anchor=\"middle\">"
        << escape(format_tick(v, x_ticks)) << "</text>\n";
  }
  out << "<line class=\"axis\" x1=\"" << left << "\" x2=\"" << left + plot_w
      << "\" y1=\"" << top + plot_h << "\" y2=\"" << top + plot_h << "\"/>"
      << "<line class=\"axis\" x1=\"" << left << "\" x2=\"" << left
      << "\" y1=\"" << top << "\" y2=\"" << top + plot_h << "\"/>\n"
      << "<text class=\"axis-label\" x=\"" << left + plot_w / 2 << "\" y=\""
      << height - 10 << "\" text-anchor=\"middle\">step</text>\n";
  const std::string y_label = spec.unit.empty() ? names.front() : spec.unit;
  out << "<text class=\"axis-label\" transform=\"translate(18 "
      << top + plot_h / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << escape(y_label) << "</text>\n";

  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string cls = "s" + std::to_string(i % 4);
    const std::vector<Point> points = thin(lines[i].points);
    if (points.size() == 1) {
      out << "<circle class=\"point " << cls << "\" cx=\""
          << coord(px(points[0].x)) << "\" cy=\"" << coord(py(points[0].y))
          << "\" r=\"4\"/>\n";
      continue;
    }
    out << "<polyline class=\"series " << cls << "\" points=\"";
    for (size_t k = 0; k < points.size(); ++k) {
      out << (k ? " " : "") << coord(px(points[k].x)) << ","
          << coord(py(points[k].y));
    }
    out << "\"/>\n";
  }
  if (!markers.empty()) {
    const std::vector<Point>& base = lines.front().points;
    for (const Marker& m : markers) {
      const double x = static_cast<double>(m.step);
      out << "<circle class=\"skip-marker\" cx=\"" << coord(px(x)) << "\" cy=\""
          << coord(py(value_at(base, x))) << "\" r=\"5\">"
          << "<title>step " << m.step << ": " << escape(format_value(m.skipped))
          << " skipped</title></circle>\n";
    }
  }

  // Legend, top right: one entry per line when there are several, and the
  // skipped-step marker when there is one.
  std::vector<std::pair<std::string, std::string>> legend;  // class, label
  if (lines.size() > 1 || spec.metrics.size() > 1) {
    for (size_t i = 0; i < lines.size(); ++i) {
      legend.emplace_back("s" + std::to_string(i % 4), lines[i].label);
    }
  }
  if (!markers.empty()) {
    legend.emplace_back("legend-skip", "skipped step");
  }
  double lx = left + plot_w - 200;
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
  out << "</svg>\n";

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
        kComponent,
        "run directory not found, got '" + run_dir +
            "'. Pass the directory a tracker wrote (project_dir/project_name), "
            "which holds metrics.jsonl or metrics.csv.");
  }
  const fs::path dir(run_dir);
  RunData run;
  const fs::path config = dir / kConfigFile;
  if (fs::exists(config, ec)) {
    run.config = read_config(config.string());
  }
  const fs::path jsonl = dir / kJsonlFile;
  const fs::path csv = dir / kCsvFile;
  if (fs::exists(jsonl, ec)) {
    read_jsonl(jsonl.string(), run.series);
  } else if (fs::exists(csv, ec)) {
    read_csv(csv.string(), run.series);
  } else {
    throw IoError(
        kComponent,
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
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << html;
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      throw IoError(
          kComponent,
          "cannot write the report, got '" + path +
              "'. Check that its folder exists and is writable, or choose "
              "another output path.");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(tmp, ec);
    throw IoError(
        kComponent,
        "cannot move the report into place, got '" + path + "' (" + reason +
            "). Check that the path is not a directory.");
  }
}

}  // namespace ampkit::track
