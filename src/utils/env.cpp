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

}  // namespace ampkit
