// Progress on stderr: an in-place bar on terminals, periodic lines elsewhere.
#include "ampkit/track/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ampkit/error.h"

namespace ampkit::track {

namespace {
std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return "?";
  }
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(
        buf,
        sizeof(buf),
        "%lld:%02lld:%02lld",
        static_cast<long long>(s / 3600),
        static_cast<long long>((s / 60) % 60),
        static_cast<long long>(s % 60));
  } else {
    std::snprintf(
        buf,
        sizeof(buf),
        "%lld:%02lld",
        static_cast<long long>(s / 60),
        static_cast<long long>(s % 60));
  }
  return buf;
}
}  // namespace

bool plain_progress_by_default() {
  const char* ci = std::getenv("CI");
  const bool in_ci = ci != nullptr && std::strcmp(ci, "") != 0 &&
                     std::strcmp(ci, "false") != 0 && std::strcmp(ci, "0") != 0;
  return in_ci || isatty(STDERR_FILENO) == 0;
}

Progress::Progress(int64_t total_steps, ProgressOptions options, std::FILE* out)
    : total_steps_(total_steps),
      options_(options),
      out_(out),
      plain_(options.plain.value_or(plain_progress_by_default())),
      start_(Clock::now()),
      last_draw_(start_) {
  if (total_steps < 1) {
    throw InvalidArgument(
        "Progress",
        "total_steps must be >= 1, got " + std::to_string(total_steps) +
            ". Pass the number of optimizer steps the run will take.");
  }
  if (!(options.max_redraws_per_second > 0) ||
      !(options.line_interval_seconds > 0) || options.bar_width < 1) {
    throw InvalidArgument(
        "Progress",
        "max_redraws_per_second and line_interval_seconds must be > 0 and "
        "bar_width >= 1, got " +
            std::to_string(options.max_redraws_per_second) + ", " +
            std::to_string(options.line_interval_seconds) + ", " +
            std::to_string(options.bar_width) + ".");
  }
}

Progress::~Progress() {
  finish();
}

std::string Progress::format(const ProgressState& state) const {
  const double fraction =
      std::min(1.0, std::max(0.0, double(state.step) / double(total_steps_)));
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start_).count();
  const double eta = state.step > 0 ? elapsed / double(state.step) *
                                          double(total_steps_ - state.step)
                                    : std::nan("");
  std::string text = "epoch " + std::to_string(state.epoch) + " ";
  if (!plain_) {
    const int filled = static_cast<int>(fraction * options_.bar_width);
    text += "[" + std::string(filled, '#') +
            std::string(options_.bar_width - filled, '-') + "] ";
  }
  char tail[160];
  std::snprintf(
      tail,
      sizeof(tail),
      "%lld/%lld %d%% loss %.4f %.0f samples/s ETA %s",
      static_cast<long long>(state.step),
      static_cast<long long>(total_steps_),
      static_cast<int>(fraction * 100),
      state.loss,
      state.samples_per_second,
      clock_text(eta).c_str());
  return text + tail;
}

void Progress::draw(const ProgressState& state) {
  if (!options_.enabled) {
    return;
  }
  const std::string text = format(state);
  if (plain_) {
    std::fprintf(out_, "%s\n", text.c_str());
  } else {
    // \r returns to the line start, ESC[K clears what a longer line left.
    std::fprintf(out_, "\r%s\x1b[K", text.c_str());
  }
  std::fflush(out_);
  drawn_ = true;
}

void Progress::update(const ProgressState& state) {
  last_ = state;
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  const double interval = plain_ ? options_.line_interval_seconds
                                 : 1.0 / options_.max_redraws_per_second;
  if (drawn_ && since < interval) {
    return;
  }
  last_draw_ = now;
  draw(state);
}

void Progress::finish() {
  if (finished_) {
    return;
  }
  finished_ = true;
  draw(last_);
  if (!plain_ && options_.enabled) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }
}

}  // namespace ampkit::track
