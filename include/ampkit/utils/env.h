// Reading the process environment through a function, so that code which
// depends on it (option precedence, launcher variables) is testable.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ampkit {

/// Reads one environment variable; empty when it is not set.
using EnvLookup =
    std::function<std::optional<std::string>(const std::string& name)>;

/// getenv for this process.
EnvLookup process_environment();

/// ${XDG_CACHE_HOME:-$HOME/.cache} (XDG base directories), where ampkit
/// keeps its config file and its per-machine measurements.
std::string cache_home();

}  // namespace ampkit
