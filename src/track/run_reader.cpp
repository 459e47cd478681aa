// Reads a run directory's files back: config.json, and metrics.jsonl or
// metrics.csv as the jsonl and csv trackers write them (NaN/inf included).
#include "track/run_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"

#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::track::detail {
namespace {

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
  const auto parsed = ampkit::detail::parse_double(text);
  value = parsed.value_or(0.0);
  return parsed.has_value();
}

std::ifstream open_for_reading(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError(
        component::kReport,
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

}  // namespace

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
        component::kReport,
        where(path, line) + ": config is not valid JSON, got '" +
            clip(e.what()) +
            "'. config.json must be one JSON object of settings; rewrite it "
            "or delete it to report without a configuration.");
  }
  if (!j.is_object()) {
    throw IoError(
        component::kReport,
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

// A last line without its newline that does not parse was cut short: the
// trackers end every line with one, so the run stopped while writing it (a
// kill, a full disk). It is skipped with a note; anything else that does
// not parse is an error.
bool skip_cut_short_last_line(
    const std::ifstream& in,
    const std::string& path,
    size_t line_number,
    const std::string& line) {
  if (!in.eof()) {
    return false;
  }
  warn(
      component::kReport,
      where(path, line_number) + ": the last line is cut short ('" +
          clip(line) +
          "', no newline: the run stopped while writing it); skipped.");
  return true;
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
      if (skip_cut_short_last_line(in, path, line_number, line)) {
        break;
      }
      throw IoError(
          component::kReport,
          where(path, line_number) + ": line is not valid JSON, got '" +
              clip(line) + "'" + hint);
    }
    if (!j.is_object()) {
      throw IoError(
          component::kReport,
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
          component::kReport,
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
            component::kReport,
            where(path, line_number) + ": value of \"" + name +
                "\" is not a number, got " + clip(value.dump()) + hint);
      }
      series[name].emplace_back(step, v);
    }
  }
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
            component::kReport,
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
    if ((fields.size() != 4 || !parse_double(fields[3], value)) &&
        skip_cut_short_last_line(in, path, line_number, line)) {
      break;
    }
    if (fields.size() != 4) {
      throw IoError(
          component::kReport,
          where(path, line_number) + ": row has " +
              std::to_string(fields.size()) + " fields instead of 4, got '" +
              clip(line) + "'" + hint);
    }
    if (const auto parsed = ampkit::detail::parse_int(fields[0])) {
      step = *parsed;
    } else {
      throw IoError(
          component::kReport,
          where(path, line_number) + ": step is not an integer, got '" +
              clip(fields[0]) + "'" + hint);
    }
    if (!parse_double(fields[3], value)) {
      throw IoError(
          component::kReport,
          where(path, line_number) + ": value is not a number, got '" +
              clip(fields[3]) + "'" + hint);
    }
    series[fields[2]].emplace_back(step, value);
  }
  if (!seen_header) {
    throw IoError(
        component::kReport,
        path + ": file is empty, got no header. metrics.csv must start with '" +
            header + "'.");
  }
}

}  // namespace ampkit::track::detail
