#include "ampkit/utils/env.h"

#include <cstdlib>

namespace ampkit {

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) {
      return std::nullopt;
    }
    return std::string(value);
  };
}

std::string cache_home() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return xdg;
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache";
}

}  // namespace ampkit
