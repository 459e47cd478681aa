// A training progress display on stderr: a bar redrawn in place on a
// terminal, plain periodic lines otherwise (logs, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace ampkit::track {

struct ProgressOptions {
  /// Most redraws per second of the bar on a terminal.
  double max_redraws_per_second = 10;
  /// Seconds between plain lines when stderr is not a terminal or CI is set.
  double line_interval_seconds = 10;
  /// Characters of the bar itself.
  int bar_width = 30;
  /// Force plain lines (true) or the bar (false); unset: the bar only when
  /// stderr is a terminal and the CI environment variable is not set.
  std::optional<bool> plain;
  /// false draws nothing: pass accelerator.is_main_process(), so that only
  /// the main process of a distributed run shows progress.
  bool enabled = true;
};

/// What one update shows.
struct ProgressState {
  int64_t step = 0;   ///< optimizer steps done
  int64_t epoch = 0;  ///< 1-based
  double loss = 0;
  double samples_per_second = 0;
};

/// Shows progress towards total_steps. Call update() every step: it draws
/// only when the rate limit allows, so it costs a clock read otherwise.
///
///   ampkit::track::Progress progress(total_steps);
///   progress.update({step, epoch, loss, samples_per_second});
///   progress.finish();
class Progress {
 public:
  explicit Progress(
      int64_t total_steps,
      ProgressOptions options = {},
      std::FILE* out = stderr);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(const ProgressState& state);
  /// Draws the final state (and ends the bar's line); idempotent.
  void finish();
  bool plain() const {
    return plain_;
  }
  /// The text of one update, without the carriage return or newline:
  /// "epoch 2 [#####-----] 1200/4690 26% loss 0.3123 2950 samples/s ETA 1:12".
  std::string format(const ProgressState& state) const;

 private:
  using Clock = std::chrono::steady_clock;
  void draw(const ProgressState& state);

  int64_t total_steps_;
  ProgressOptions options_;
  std::FILE* out_;
  bool plain_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  bool drawn_ = false;
  bool finished_ = false;
  ProgressState last_;
};

/// Whether the plain-line mode applies: stderr is not a terminal, or CI is
/// set (to anything but "" or "false").
bool plain_progress_by_default();

}  // namespace ampkit::track
