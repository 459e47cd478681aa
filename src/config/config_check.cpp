// The doctor's config check: whether the config file ampkit would read
// loads, and what to do when it does not.
#include "ampkit/config/config_check.h"

#include <filesystem>
#include <system_error>

#include "ampkit/config/config.h"
#include "ampkit/error.h"
#include "utils/strings.h"

namespace ampkit::config {

namespace fs = std::filesystem;
using ampkit::detail::join;

diag::CheckResult check_config_file(const std::optional<std::string>& given) {
  const std::string path = given ? *given : config_path_to_read();
  diag::CheckResult check{"config", diag::CheckStatus::ok, "", ""};
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (given) {
      check.status = diag::CheckStatus::fail;
      check.value = "not found: " + path;
      check.detail = "pass an existing file, or none to use " +
                     default_config_path() + ".";
    } else {
      check.value = "none (defaults)";
      check.detail = "looked for " + path +
                     " ($AMPKIT_CONFIG_FILE, else ${XDG_CACHE_HOME:-~/.cache}/"
                     "ampkit/default_config.yaml, else accelerate's " +
                     accelerate_config_path() + ").";
    }
    return check;
  }
  try {
    load_config(path);
    check.value = path;
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    const std::string prefix = e.component() + ": ";
    if (e.unknown_key()) {
      // Values were all checked first: an unknown key is the only problem.
      check.status = diag::CheckStatus::warn;
      check.value = path + ": unknown key " + e.key() + " (line " +
                    std::to_string(e.line()) + ")";
      check.detail =
          "ampkit's config loader refuses the file until it is fixed or "
          "removed; known keys: " +
          join(known_keys(), ", ") + ".";
    } else {
      check.status = diag::CheckStatus::fail;
      check.value = message.rfind(prefix, 0) == 0
                        ? message.substr(prefix.size())
                        : message;
      check.detail = "fix the value, or write a new file with `ampkit config`.";
    }
  } catch (const IoError& e) {
    const std::string message = e.what();
    const std::string prefix = e.component() + ": ";
    check.status = diag::CheckStatus::fail;
    check.value =
        message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
    check.detail = "fix the file, or write a new one with `ampkit config`.";
  }
  return check;
}

}  // namespace ampkit::config
