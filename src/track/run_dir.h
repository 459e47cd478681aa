// Creating a run directory, shared by every tracker that writes into one.
#pragma once

#include <filesystem>
#include <string>

namespace ampkit::detail {

/// Creates run_dir (and its parents) or throws ampkit::IoError from
/// `component`, naming the directory and why it cannot be created.
std::filesystem::path make_run_dir(
    const char* component, const std::string& run_dir);

}  // namespace ampkit::detail
