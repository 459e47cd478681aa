// Parsing and printing of ampkit::Precision in accelerate's spellings.
#include "ampkit/amp/precision.h"

#include <algorithm>
#include <cctype>

#include "ampkit/error.h"

namespace ampkit {

namespace {
constexpr const char* kValidPrecisions =
    "valid values: no, fp16, bf16, auto (fp32 is accepted as no)";

std::string normalise(std::string_view text) {
  const auto is_space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && is_space(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && is_space(text.back())) {
    text.remove_suffix(1);
  }
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return out;
}
}  // namespace

Precision parse_precision(std::string_view text) {
  const std::string value = normalise(text);
  if (value == "no" || value == "fp32") {
    return Precision::no;
  }
  if (value == "fp16") {
    return Precision::fp16;
  }
  if (value == "bf16") {
    return Precision::bf16;
  }
  if (value == "auto") {
    return Precision::automatic;
  }
  std::string hint;
  if (value == "fp8") {
    hint = " fp8 training is not supported by ampkit yet; use bf16 or fp16.";
  } else if (value == "float16" || value == "half") {
    hint = " Did you mean fp16?";
  } else if (value == "bfloat16") {
    hint = " Did you mean bf16?";
  } else if (value == "float32" || value == "none" || value.empty()) {
    hint = " Did you mean no?";
  }
  throw InvalidArgument(
      "Precision",
      "unknown mixed precision, got \"" + std::string(text) + "\"; " +
          kValidPrecisions + "." + hint);
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::no:
      return "no";
    case Precision::fp16:
      return "fp16";
    case Precision::bf16:
      return "bf16";
    case Precision::automatic:
      return "auto";
  }
  throw InvalidArgument(
      "Precision",
      "not a Precision value, got " +
          std::to_string(static_cast<int>(precision)) + ".");
}

c10::ScalarType to_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp16:
      return c10::ScalarType::Half;
    case Precision::bf16:
      return c10::ScalarType::BFloat16;
    default:
      throw InvalidArgument(
          "Precision",
          "only fp16 and bf16 have an autocast dtype, got " +
              to_string(precision) +
              ". Resolve auto first, and disable autocast for no.");
  }
}

}  // namespace ampkit
