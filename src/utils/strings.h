// String helpers shared by every layer: case folding, trimming, splitting,
// joining, numbers
// printed so that they read back exactly, and whole-string number parsing
// with range checks (std::from_chars: no locale, no exceptions, no partial
// matches such as "12abc" or " 3").
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace ampkit::detail {

/// `text` without the leading and trailing characters in `chars` (by
/// default whitespace, as std::isspace has it).
inline std::string trim(
    std::string_view text, std::string_view chars = " \t\n\v\f\r") {
  const size_t first = text.find_first_not_of(chars);
  if (first == std::string_view::npos) {
    return std::string();
  }
  const size_t last = text.find_last_not_of(chars);
  return std::string(text.substr(first, last - first + 1));
}

/// The pieces of `text` between the `separator`s, empty ones included, as
/// Python's str.split(sep): "a,,b" is {"a", "", "b"}, "" is {""}.
inline std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(separator, start);
    pieces.emplace_back(text.substr(start, at - start));
    if (at == std::string_view::npos) {
      return pieces;
    }
    start = at + 1;
  }
}

/// ASCII lower case.
inline std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return text;
}

/// ASCII upper case.
inline std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(std::toupper(c));
  });
  return text;
}

/// parts[0] + sep + parts[1] + ...
inline std::string join(
    const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      out += sep;
    }
    out += parts[i];
  }
  return out;
}

/// `v` with 17 significant digits: what an error message quotes reads back
/// as the same double.
inline std::string exact_number(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

/// The whole of `text` as a base-10 integer in [min, max]; empty when it is
/// not one (empty, a sign alone, other characters, out of range).
inline std::optional<int64_t> parse_int(
    std::string_view text,
    int64_t min = std::numeric_limits<int64_t>::min(),
    int64_t max = std::numeric_limits<int64_t>::max()) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min ||
      value > max) {
    return std::nullopt;
  }
  return value;
}

/// The whole of `text` as a decimal or scientific number (a leading '+' is
/// allowed, as JSON writers and Python's float() allow it); empty otherwise.
inline std::optional<double> parse_double(std::string_view text) {
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
  }
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
}

/// Every argument streamed into one string, as c10::str does: one-line
/// messages (`str("got ", n, " bytes")`) instead of std::to_string chains.
/// An int8_t or uint8_t prints as a character; cast it to int first.
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace ampkit::detail
