// What the subcommands share: their flags' spelling, their error messages.
#include <algorithm>
#include <exception>
#include <iostream>
#include <string>

#include "ampkit/diag/hints.h"
#include "ampkit/error.h"
#include "command.h"

namespace commands {

std::string flags(const std::string& kebab) {
  std::string snake = kebab;
  std::replace(snake.begin(), snake.end(), '-', '_');
  return snake == kebab ? "--" + kebab : "--" + kebab + ",--" + snake;
}

void print_error(const std::string& command, const std::exception& e) {
  std::string message = e.what();
  if (const auto* error = dynamic_cast<const ampkit::Error*>(&e)) {
    const std::string prefix = error->component() + ": ";
    if ((error->component() == "Report" || error->component() == "Doctor" ||
         error->component() == "Config" ||
         error->component() == "ampkit " + command) &&
        message.rfind(prefix, 0) == 0) {
      message.erase(0, prefix.size());
    }
  }
  std::cerr << "ampkit " << command << ": " << message << '\n';
  if (message.find(ampkit::diag::kHintPrefix) == std::string::npos) {
    if (auto hint = ampkit::diag::hint_for(message)) {
      std::cerr << *hint << '\n';
    }
  }
}

const char* const kConfigFileHelp =
    "the config file (default: $AMPKIT_CONFIG_FILE, else "
    "${XDG_CACHE_HOME:-~/.cache}/ampkit/default_config.yaml)";

}  // namespace commands
