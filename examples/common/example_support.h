// What the examples share: their flag spelling and the resume step of a
// checkpointed run.
#pragma once

#include <ampkit/ampkit.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

namespace examples {

// "--kebab-case,--snake_case": every flag accepts both, as accelerate's do.
inline std::string flags(const std::string& kebab) {
  std::string snake = kebab;
  std::replace(snake.begin(), snake.end(), '-', '_');
  return snake == kebab ? "--" + kebab : "--" + kebab + ",--" + snake;
}

// The run directory is --output-dir itself: project_dir is its parent.
inline std::string project_dir_of(const std::filesystem::path& output_dir) {
  return output_dir.has_parent_path() ? output_dir.parent_path().string()
                                      : std::string(".");
}

// --resume-from-checkpoint: a folder, or `latest`, the newest complete
// checkpoint under `checkpoints` (none yet: start fresh and say so, so
// that one command line can be re-run after a crash). "" does nothing.
inline void resume_from_checkpoint(
    ampkit::Accelerator& accelerator,
    const std::string& from_arg,
    const std::string& checkpoints) {
  if (from_arg.empty()) {
    return;
  }
  std::optional<std::string> from = from_arg;
  if (*from == "latest") {
    from = ampkit::checkpoint::latest_checkpoint(checkpoints);
    if (!from) {
      accelerator.print(
          "no checkpoint under", checkpoints, "yet: starting fresh");
      return;
    }
  }
  accelerator.load_state(*from);
  accelerator.print(
      "resumed from", *from, "at step", accelerator.optimizer_steps());
}

}  // namespace examples
