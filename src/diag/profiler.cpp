// The legacy profiler's events turned into torch's key_averages table and a
// Chrome trace.
#include "ampkit/diag/profiler.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "ampkit/error.h"
#include "utils/components.h"
#include "utils/write_failure.h"

namespace ampkit::diag {

namespace {
namespace legacy = torch::autograd::profiler;
}  // namespace

struct Profiler::Recording {
  ProfileOptions options;
  bool running = false;
  legacy::thread_event_lists events;
  std::string trace_path;
};

Profiler::Profiler(ProfileOptions options)
    : recording_(std::make_unique<Recording>()) {
  recording_->options = std::move(options);
  const auto& o = recording_->options;
  try {
    legacy::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(
        torch::profiler::impl::ProfilerState::CPU,
        // FLOPs are estimated from the input shapes.
        o.record_shapes() || o.with_flops(),
        o.profile_memory(),
        /*with_stack=*/false,
        o.with_flops()));
  } catch (const c10::Error& e) {
    throw UsageError(
        component::kProfiler,
        std::string("cannot start: ") + e.what_without_backtrace() +
            ". Stop the running profiler (one per thread) first.");
  }
  recording_->running = true;
}

Profiler::Profiler(Profiler&&) noexcept = default;

Profiler::~Profiler() {
  if (recording_ && recording_->running) {
    try {
      stop();
    } catch (...) {
      // A destructor must not throw; an unwritable trace is lost.
    }
  }
}

void Profiler::stop() {
  auto& r = *recording_;
  if (!r.running) {
    return;
  }
  r.running = false;
  r.events = legacy::disableProfilerLegacy();
  if (!r.options.output_trace_dir().empty()) {
    std::error_code ec;
    std::filesystem::create_directories(r.options.output_trace_dir(), ec);
    if (ec) {
      throw IoError(
          component::kProfiler,
          "cannot create output_trace_dir " + r.options.output_trace_dir() +
              ": " + ampkit::detail::write_failure(ec.value()) + ".");
    }
    const auto path = (std::filesystem::path(r.options.output_trace_dir()) /
                       r.options.trace_file())
                          .string();
    export_chrome_trace(path);
    r.trace_path = path;
  }
}

void Profiler::export_chrome_trace(const std::string& path) {
  stop();
  auto failed = [&path]() {
    return IoError(
        component::kProfiler,
        "cannot write the trace " + path + ": " +
            ampkit::detail::write_failure(errno != 0 ? errno : EIO) + ".");
  };
  errno = 0;
  std::ofstream out(path);
  if (!out) {
    throw failed();
  }
  std::vector<legacy::LegacyEvent*> all;
  for (auto& list : recording_->events) {
    for (auto& e : list) {
      all.push_back(&e);
    }
  }
  legacy::writeProfilerEventsToStream(out, all);
  out.flush();
  if (!out) {
    throw failed();
  }
}

const std::string& Profiler::trace_path() const {
  return recording_->trace_path;
}

std::vector<OpStats> Profiler::key_averages(const std::string& sort_by) {
  stop();
  std::map<std::string, OpStats> by_name;
  for (auto& list : recording_->events) {
    // Open ranges of this thread, innermost last, with their children's
    // time so far.
    struct Open {
      legacy::LegacyEvent* push;
      double children_us;
    };
    std::vector<Open> open;
    for (auto& e : list) {
      switch (e.kind()) {
        case legacy::EventKind::PushRange:
          open.push_back({&e, 0});
          break;
        case legacy::EventKind::PopRange: {
          auto it = std::find_if(open.rbegin(), open.rend(), [&](auto& o) {
            return o.push->handle() == e.handle();
          });
          if (it == open.rend()) {
            break;  // opened before the profiler started
          }
          const Open closed = *it;
          open.erase(std::next(it).base());
          const double total = closed.push->cpuElapsedUs(e);
          auto& s = by_name[closed.push->name()];
          s.name = closed.push->name();
          ++s.calls;
          s.cpu_time_total_us += total;
          s.self_cpu_time_total_us += total - closed.children_us;
          s.flops += closed.push->flops();
          if (!open.empty()) {
            open.back().children_us += total;
          }
          break;
        }
        case legacy::EventKind::MemoryAlloc:
          if (!open.empty()) {
            const std::string name = open.back().push->name();
            by_name[name].name = name;
            by_name[name].self_cpu_memory_bytes += e.cpuMemoryUsage();
          }
          break;
        default:
          break;
      }
    }
  }
  std::vector<OpStats> stats;
  for (auto& [name, s] : by_name) {
    if (s.calls > 0) {
      stats.push_back(s);
    }
  }
  using Key = double (*)(const OpStats&);
  static const std::map<std::string, Key> keys = {
      {"self_cpu_time_total",
       [](const OpStats& s) { return s.self_cpu_time_total_us; }},
      {"cpu_time_total", [](const OpStats& s) { return s.cpu_time_total_us; }},
      {"count", [](const OpStats& s) { return double(s.calls); }},
      {"self_cpu_memory_usage",
       [](const OpStats& s) { return double(s.self_cpu_memory_bytes); }},
      {"flops", [](const OpStats& s) { return double(s.flops); }}};
  const auto key = keys.find(sort_by);
  if (key == keys.end()) {
    throw InvalidArgument(
        component::kProfiler,
        "sort_by must be self_cpu_time_total, cpu_time_total, count, "
        "self_cpu_memory_usage or flops, got '" +
            sort_by + "'.");
  }
  std::stable_sort(stats.begin(), stats.end(), [&](auto& a, auto& b) {
    return key->second(a) > key->second(b);
  });
  return stats;
}

std::string Profiler::table(const std::string& sort_by, int row_limit) {
  const auto stats = key_averages(sort_by);
  const auto& o = recording_->options;
  double self_total = 0;
  for (const auto& s : stats) {
    self_total += s.self_cpu_time_total_us;
  }
  size_t name_width = 4;
  for (const auto& s : stats) {
    name_width = std::max(name_width, std::min<size_t>(s.name.size(), 60));
  }
  auto time = [](double us) {
    char b[32];
    if (us >= 1e6) {
      std::snprintf(b, sizeof b, "%.3fs", us / 1e6);
    } else if (us >= 1e3) {
      std::snprintf(b, sizeof b, "%.3fms", us / 1e3);
    } else {
      std::snprintf(b, sizeof b, "%.3fus", us);
    }
    return std::string(b);
  };
  std::ostringstream out;
  char line[256];
  const std::string rule(
      name_width + 2 + 13 * 4 + (o.profile_memory() ? 15 : 0) +
          (o.with_flops() ? 15 : 0),
      '-');
  out << rule << "\n";
  std::snprintf(
      line,
      sizeof line,
      "%-*s  %11s  %11s  %11s  %11s",
      int(name_width),
      "Name",
      "Self CPU %",
      "Self CPU",
      "CPU total",
      "# of Calls");
  out << line;
  if (o.profile_memory()) {
    std::snprintf(line, sizeof line, "  %13s", "Self CPU Mem");
    out << line;
  }
  if (o.with_flops()) {
    std::snprintf(line, sizeof line, "  %13s", "Total MFLOPs");
    out << line;
  }
  out << "\n" << rule << "\n";
  int rows = 0;
  for (const auto& s : stats) {
    if (row_limit >= 0 && rows++ >= row_limit) {
      break;
    }
    std::snprintf(
        line,
        sizeof line,
        "%-*s  %10.2f%%  %11s  %11s  %11lld",
        int(name_width),
        s.name.substr(0, 60).c_str(),
        self_total > 0 ? 100 * s.self_cpu_time_total_us / self_total : 0.0,
        time(s.self_cpu_time_total_us).c_str(),
        time(s.cpu_time_total_us).c_str(),
        static_cast<long long>(s.calls));
    out << line;
    if (o.profile_memory()) {
      std::snprintf(
          line,
          sizeof line,
          "  %10.2f Mb",
          double(s.self_cpu_memory_bytes) / (1024.0 * 1024.0));
      out << line;
    }
    if (o.with_flops()) {
      std::snprintf(line, sizeof line, "  %13.3f", double(s.flops) / 1e6);
      out << line;
    }
    out << "\n";
  }
  out << rule << "\nSelf CPU time total: " << time(self_total) << "\n";
  return out.str();
}

}  // namespace ampkit::diag
