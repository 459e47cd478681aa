// Bounds for numeric command-line flags that say what is wrong in words
// ("must be > 0, got 0"), where CLI11's PositiveNumber prints its range
// with DBL_MAX's 309 digits. Shared by the examples and the ampkit CLI.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace cli_checks {

// A number v with v > low (strict) or v >= low.
inline CLI::Validator bounded_below(double low, bool strict) {
  const std::string bound =
      std::string(strict ? "> " : ">= ") + CLI::detail::to_string(low);
  return CLI::Validator(
      [low, strict, bound](std::string& text) -> std::string {
        try {
          size_t end = 0;
          const double v = std::stod(text, &end);
          if (end == text.size() && std::isfinite(v) &&
              (strict ? v > low : v >= low)) {
            return "";
          }
        } catch (const std::exception&) {
        }
        return "must be a number " + bound + ", got " + text;
      },
      "NUMBER " + bound);
}

/// > 0 (for an integer flag: at least 1).
inline CLI::Validator positive() {
  return bounded_below(0, true);
}

/// >= 0.
inline CLI::Validator non_negative() {
  return bounded_below(0, false);
}

}  // namespace cli_checks
