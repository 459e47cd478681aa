// The row type of the generated autocast golden tables
// (golden_autocast_<major>_<minor>.h).
#pragma once

namespace golden {
struct AutocastDtype {
  const char* op;
  const char* input;
  const char* output;
};
}  // namespace golden
