// Parsing a config file's text, YAML or JSON, into its top-level entries, and
// the quoting rules that keep a string a string when it is written back as
// YAML (PyYAML's safe_dump).
#include "config/parse.h"

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ampkit/config/config.h"
#include "ampkit/error.h"

#include "utils/strings.h"

using ampkit::detail::join;
using ampkit::detail::lower;

namespace ampkit::config::detail {

bool contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

namespace {

namespace fs = std::filesystem;

// YAML 1.1 words PyYAML reads as something other than a string.
bool needs_quotes(const std::string& s) {
  if (s.empty()) {
    return true;
  }
  static const std::vector<std::string> kWords = {
      "y",
      "n",
      "yes",
      "no",
      "true",
      "false",
      "on",
      "off",
      "null",
      "~",
      ".nan",
      ".inf",
      "-.inf",
      "+.inf"};
  if (contains(kWords, lower(s))) {
    return true;
  }
  double number = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec == std::errc() && end == s.data() + s.size()) {
    return true;
  }
  if (std::string("-?:,[]{}#&*!|>'\"%@`").find(s.front()) !=
          std::string::npos ||
      std::isspace(static_cast<unsigned char>(s.front())) ||
      std::isspace(static_cast<unsigned char>(s.back()))) {
    return true;
  }
  return s.find(": ") != std::string::npos ||
         s.find(" #") != std::string::npos || s.find('\n') != std::string::npos;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c == '\'' ? std::string("''") : std::string(1, c);
  }
  return out + "'";
}

}  // namespace

// A string as PyYAML's safe_dump writes it: plain unless that would change
// its type.
std::string yaml_string(const std::string& s) {
  return needs_quotes(s) ? quote(s) : s;
}

namespace {

// Block style below the top level, as PyYAML writes it; empty collections
// stay {} and [].
void use_block_style(YAML::Node node) {
  if ((node.IsMap() || node.IsSequence()) && node.size() > 0) {
    node.SetStyle(YAML::EmitterStyle::Block);
    for (auto item : node) {
      use_block_style(node.IsMap() ? item.second : item);
    }
  }
}

std::string yaml_text(const YAML::Node& node) {
  if (node.IsNull()) {
    return "null";
  }
  if (node.IsScalar()) {
    return node.Tag() == "!" ? yaml_string(node.Scalar()) : node.Scalar();
  }
  YAML::Node copy = YAML::Clone(node);
  use_block_style(copy);
  YAML::Emitter emitter;
  emitter << copy;
  return emitter.c_str();
}

int line_at_offset(const std::string& text, std::size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(
                 text.begin(),
                 text.begin() + static_cast<std::ptrdiff_t>(offset),
                 '\n'));
}

}  // namespace

std::vector<Entry> parse_yaml(
    const std::string& path, const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw IoError(
        kComponent,
        path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " +
            e.msg + ". Fix the file, or write a new one with `ampkit config`.");
  }
  std::vector<Entry> entries;
  if (!root.IsDefined() || root.IsNull()) {
    return entries;
  }
  if (!root.IsMap()) {
    throw ConfigError(
        path,
        root.Mark().line + 1,
        "",
        false,
        path + ":" + std::to_string(root.Mark().line + 1) +
            ": must be a mapping of accelerate's keys, got a " +
            (root.IsSequence() ? "sequence" : "scalar") +
            ". Write `key: value` lines, e.g. `mixed_precision: bf16`.");
  }
  for (const auto& item : root) {
    Entry entry;
    entry.key = item.first.IsScalar() ? item.first.Scalar() : "<not a scalar>";
    entry.line = item.first.Mark().line + 1;
    const YAML::Node& value = item.second;
    if (value.IsNull()) {
      entry.kind = Entry::Kind::null;
    } else if (value.IsScalar()) {
      entry.kind =
          value.Tag() == "!" ? Entry::Kind::quoted : Entry::Kind::plain;
      entry.text = value.Scalar();
    } else {
      entry.kind = Entry::Kind::collection;
      if (value.IsSequence()) {
        std::vector<std::string> items;
        for (const auto& element : value) {
          items.push_back(element.IsScalar() ? element.Scalar() : "");
        }
        entry.text = join(items, ",");
      }
    }
    entry.yaml = yaml_text(value);
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<Entry> parse_json(
    const std::string& path, const std::string& text) {
  nlohmann::ordered_json root;
  try {
    root = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte where parsing failed.
    throw IoError(
        kComponent,
        path + ":" + std::to_string(line_at_offset(text, e.byte - 1)) +
            ": JSON syntax error: " + e.what() +
            ". Fix the file, or write a new one with `ampkit config`.");
  }
  if (!root.is_object()) {
    throw ConfigError(
        path,
        1,
        "",
        false,
        path + ":1: must be an object of accelerate's keys, got " +
            root.type_name() + ". Write {\"mixed_precision\": \"bf16\"}.");
  }
  std::vector<Entry> entries;
  for (const auto& [key, value] : root.items()) {
    Entry entry;
    entry.key = key;
    const auto at = text.find("\"" + key + "\"");
    entry.line = at == std::string::npos ? 0 : line_at_offset(text, at);
    if (value.is_null()) {
      entry.kind = Entry::Kind::null;
    } else if (value.is_string()) {
      entry.kind = Entry::Kind::quoted;
      entry.text = value.get<std::string>();
    } else if (value.is_primitive()) {
      entry.kind = Entry::Kind::plain;
      entry.text = value.dump();
    } else {
      entry.kind = Entry::Kind::collection;
      if (value.is_array()) {
        std::vector<std::string> items;
        for (const auto& element : value) {
          items.push_back(
              element.is_string() ? element.get<std::string>()
                                  : element.dump());
        }
        entry.text = join(items, ",");
      }
    }
    // JSON is YAML's flow style; re-emitted as block style like accelerate.
    entry.yaml = entry.kind == Entry::Kind::quoted
                     ? yaml_string(entry.text)
                     : yaml_text(YAML::Load(value.dump()));
    entries.push_back(std::move(entry));
  }
  return entries;
}

bool looks_like_json(const std::string& path, const std::string& text) {
  if (fs::path(path).extension() == ".json") {
    return true;
  }
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{';
}

}  // namespace ampkit::config::detail
