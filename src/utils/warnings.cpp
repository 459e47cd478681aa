// The warning sink: a handler behind a lock, and the default that prints.
#include "ampkit/utils/warnings.h"

#include <iostream>
#include <mutex>
#include <utility>

namespace ampkit {

namespace {

struct Sink {
  std::mutex mutex;
  WarningHandler handler;
  int64_t rank = 0;
  int64_t world_size = 1;
};

Sink& sink() {
  static Sink* s = new Sink();  // never destroyed: warnings at exit still work
  return *s;
}

void print_to_stderr(const Warning& w) {
  if (w.main_process_only && w.rank != 0) {
    return;
  }
  std::cerr << format_warning(w) + "\n" << std::flush;
}

}  // namespace

std::string format_warning(const Warning& w) {
  std::string line = "ampkit " + w.component;
  if (w.world_size > 1) {
    line += " [rank " + std::to_string(w.rank) + "/" +
            std::to_string(w.world_size) + "]";
  }
  return line + ": warning: " + w.message;
}

WarningHandler set_warning_handler(WarningHandler handler) {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  return std::exchange(s.handler, std::move(handler));
}

void set_warning_rank(int64_t rank, int64_t world_size) {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.rank = rank;
  s.world_size = world_size;
}

void warn(
    const std::string& component,
    const std::string& message,
    bool main_process_only) {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  Warning w;
  w.component = component;
  w.message = message;
  w.rank = s.rank;
  w.world_size = s.world_size;
  w.main_process_only = main_process_only;
  if (s.handler) {
    s.handler(w);
  } else {
    print_to_stderr(w);
  }
}

}  // namespace ampkit
