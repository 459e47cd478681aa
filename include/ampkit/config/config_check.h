// The config file as one of `ampkit doctor`'s checks. It lives in config/,
// above diag/ in the layer order, and reaches the doctor through
// DoctorOptions::more_checks.
#pragma once

#include <optional>
#include <string>

#include "ampkit/diag/doctor.h"

namespace ampkit::config {

/// The "config" check: `path` (a given file must exist), else
/// default_config_path() (absent: ok, defaults are used). A file that does
/// not load fails with the loader's file:line message; an unknown key only
/// warns (values are checked first, so it is the only problem).
diag::CheckResult check_config_file(const std::optional<std::string>& path);

}  // namespace ampkit::config
