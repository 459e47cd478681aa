// The profiler's events (Kineto's on LibTorch 2.x, the legacy profiler's
// on 1.13) turned into torch's key_averages table and a Chrome trace, on
// torch.profiler's schedule when one is given.
#include "ampkit/diag/profiler.h"

#include "diag/compat.h"
#if AMPKIT_HAVE_KINETO
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#else
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "ampkit/error.h"
#include "utils/components.h"
#include "utils/write_failure.h"

namespace ampkit::diag {

namespace {
namespace prof = torch::autograd::profiler;

using StatsByName = std::map<std::string, OpStats>;

OpStats& at(StatsByName& by_name, const std::string& name) {
  auto& s = by_name[name];
  s.name = name;
  return s;
}

#if AMPKIT_HAVE_KINETO
using Result = std::unique_ptr<prof::ProfilerResult>;

std::set<torch::profiler::impl::ActivityType> activities() {
  std::set<torch::profiler::impl::ActivityType> a{
      torch::profiler::impl::ActivityType::CPU};
  if (torch::cuda::is_available()) {
    a.insert(torch::profiler::impl::ActivityType::CUDA);
  }
  return a;
}

torch::profiler::impl::ProfilerConfig config(const ProfileOptions& o) {
  return torch::profiler::impl::ProfilerConfig(
      torch::profiler::impl::ProfilerState::KINETO,
      o.record_shapes() || o.with_flops(),
      o.profile_memory(),
      /*with_stack=*/false,
      o.with_flops());
}

void start_backend(const ProfileOptions& o, bool prepared) {
  if (!prepared) {
    prof::prepareProfiler(config(o), activities());
  }
  prof::enableProfiler(config(o), activities());
}

Result stop_backend() {
  return prof::disableProfiler();
}

void save_trace(Result& r, const std::string& path) {
  r->save(path);
}

// Per thread, the CPU ops nest by time: an op's self time is its duration
// less its direct children's; a "[memory]" event counts for the op open
// around it. GPU kernels count their device time.
void add_stats(Result& r, StatsByName& by_name) {
  std::map<uint64_t, std::vector<const prof::KinetoEvent*>> threads;
  for (const auto& e : r->events()) {
    if (e.deviceType() == c10::DeviceType::CPU) {
      threads[e.startThreadId()].push_back(&e);
    } else if (e.durationNs() > 0) {
      auto& s = at(by_name, e.name());
      ++s.calls;
      s.device_time_total_us += static_cast<double>(e.durationNs()) / 1e3;
    }
  }
  for (auto& [thread, events] : threads) {
    std::stable_sort(events.begin(), events.end(), [](auto* a, auto* b) {
      return a->startNs() != b->startNs() ? a->startNs() < b->startNs()
                                          : a->endNs() > b->endNs();
    });
    struct Open {
      const prof::KinetoEvent* e;
      double children_us;
    };
    std::vector<Open> open;
    auto close_until = [&](uint64_t t) {
      while (!open.empty() && open.back().e->endNs() <= t) {
        const Open closed = open.back();
        open.pop_back();
        const double total = static_cast<double>(closed.e->durationNs()) / 1e3;
        auto& s = at(by_name, closed.e->name());
        ++s.calls;
        s.cpu_time_total_us += total;
        s.self_cpu_time_total_us += total - closed.children_us;
        s.flops += closed.e->flops();
        if (!open.empty()) {
          open.back().children_us += total;
        }
      }
    };
    for (const auto* e : events) {
      if (e->name() == "[memory]") {
        close_until(e->startNs());
        if (!open.empty()) {
          at(by_name, open.back().e->name()).self_cpu_memory_bytes +=
              e->nBytes();
        }
        continue;
      }
      close_until(e->startNs());
      open.push_back({e, 0});
    }
    close_until(std::numeric_limits<uint64_t>::max());
  }
}
#else
using Result = prof::thread_event_lists;

void start_backend(const ProfileOptions& o, bool /*prepared*/) {
  prof::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(
      torch::profiler::impl::ProfilerState::CPU,
      // FLOPs are estimated from the input shapes.
      o.record_shapes() || o.with_flops(),
      o.profile_memory(),
      /*with_stack=*/false,
      o.with_flops()));
}

Result stop_backend() {
  return prof::disableProfilerLegacy();
}

void save_trace(Result& events, const std::string& path) {
  std::ofstream out(path);
  std::vector<prof::LegacyEvent*> all;
  for (auto& list : events) {
    for (auto& e : list) {
      all.push_back(&e);
    }
  }
  prof::writeProfilerEventsToStream(out, all);
  out.flush();
  if (!out) {
    throw std::runtime_error("write failed");
  }
}

// Each thread's push/pop ranges: self time is a range's time less its
// children's; memory counts for the innermost open range.
void add_stats(Result& events, StatsByName& by_name) {
  for (auto& list : events) {
    struct Open {
      prof::LegacyEvent* push;
      double children_us;
    };
    std::vector<Open> open;
    for (auto& e : list) {
      switch (e.kind()) {
        case prof::EventKind::PushRange:
          open.push_back({&e, 0});
          break;
        case prof::EventKind::PopRange: {
          auto it = std::find_if(open.rbegin(), open.rend(), [&](auto& o) {
            return o.push->handle() == e.handle();
          });
          if (it == open.rend()) {
            break;  // opened before the profiler started
          }
          const Open closed = *it;
          open.erase(std::next(it).base());
          const double total = closed.push->cpuElapsedUs(e);
          auto& s = at(by_name, closed.push->name());
          ++s.calls;
          s.cpu_time_total_us += total;
          s.self_cpu_time_total_us += total - closed.children_us;
          s.flops += closed.push->flops();
          if (!open.empty()) {
            open.back().children_us += total;
          }
          break;
        }
        case prof::EventKind::MemoryAlloc:
          if (!open.empty()) {
            at(by_name, open.back().push->name()).self_cpu_memory_bytes +=
                e.cpuMemoryUsage();
          }
          break;
        default:
          break;
      }
    }
  }
}
#endif

// torch.profiler.schedule's action for step `s`.
enum class Action { none, warmup, record };

Action action(const ProfileOptions& o, int64_t s) {
  if (o.schedule_active() <= 0) {
    return Action::record;  // no schedule
  }
  if (s < o.schedule_skip_first()) {
    return Action::none;
  }
  s -= o.schedule_skip_first();
  const int64_t cycle =
      o.schedule_wait() + o.schedule_warmup() + o.schedule_active();
  if (o.schedule_repeat() > 0 && s / cycle >= o.schedule_repeat()) {
    return Action::none;
  }
  const int64_t pos = s % cycle;
  if (pos < o.schedule_wait()) {
    return Action::none;
  }
  return pos < o.schedule_wait() + o.schedule_warmup() ? Action::warmup
                                                       : Action::record;
}

}  // namespace

struct Profiler::Recording {
  ProfileOptions options;
  bool recording = false;
  bool warming = false;
  bool stopped = false;
  int64_t step = 0;
  int64_t cycles = 0;
  StatsByName stats;
  std::string trace_path;

  void start() {
    try {
      start_backend(options, warming);
    } catch (const c10::Error& e) {
      throw UsageError(
          component::kProfiler,
          std::string("cannot start: ") + e.what_without_backtrace() +
              ". Stop the running profiler (one per thread) first.");
    }
    warming = false;
    recording = true;
  }

  // Ends the recording: its stats are kept, its trace written.
  void finish() {
    recording = false;
    Result result = stop_backend();
    add_stats(result, stats);
    if (!options.output_trace_dir().empty()) {
      std::error_code ec;
      std::filesystem::create_directories(options.output_trace_dir(), ec);
      if (ec) {
        throw IoError(
            component::kProfiler,
            "cannot create output_trace_dir " + options.output_trace_dir() +
                ": " + ampkit::detail::write_failure(ec.value()) + ".");
      }
      std::string name = options.trace_file();
      if (cycles > 0) {
        const auto dot = name.rfind(".json");
        name = name.substr(0, dot) + "_cycle" + std::to_string(cycles) +
               (dot == std::string::npos ? "" : ".json");
      }
      const auto path =
          (std::filesystem::path(options.output_trace_dir()) / name).string();
      write_trace(result, path);
      trace_path = path;
    }
    ++cycles;
  }

  static void write_trace(Result& result, const std::string& path) {
    errno = 0;
    {
      std::ofstream probe(path);
      if (!probe) {
        throw IoError(
            component::kProfiler,
            "cannot write the trace " + path + ": " +
                ampkit::detail::write_failure(errno != 0 ? errno : EIO) + ".");
      }
    }
    try {
      save_trace(result, path);
    } catch (const std::exception& e) {
      throw IoError(
          component::kProfiler,
          "cannot write the trace " + path + ": " + e.what() + ".");
    }
  }

  // Moves to what the schedule says for the current step.
  void follow_schedule() {
    const Action now = action(options, step);
    if (recording && now != Action::record) {
      finish();
    } else if (
        recording && now == Action::record && options.schedule_active() > 0 &&
        step > 0 && action(options, step - 1) == Action::record &&
        (step - options.schedule_skip_first()) %
                (options.schedule_wait() + options.schedule_warmup() +
                 options.schedule_active()) ==
            0) {
      finish();  // a cycle without wait or warmup: the next one starts now
    }
#if AMPKIT_HAVE_KINETO
    if (now == Action::warmup && !warming && !recording) {
      prof::prepareProfiler(config(options), activities());
      warming = true;
    }
#endif
    if (now == Action::record && !recording) {
      start();
    }
  }
};

Profiler::Profiler(ProfileOptions options)
    : recording_(std::make_unique<Recording>()) {
  recording_->options = std::move(options);
  const auto& o = recording_->options;
  if (o.schedule_wait() < 0 || o.schedule_warmup() < 0 ||
      o.schedule_active() < 0 || o.schedule_repeat() < 0 ||
      o.schedule_skip_first() < 0) {
    throw InvalidArgument(
        component::kProfiler,
        "the schedule's wait, warmup, active, repeat and skip_first must be "
        ">= 0, got " +
            std::to_string(o.schedule_wait()) + ", " +
            std::to_string(o.schedule_warmup()) + ", " +
            std::to_string(o.schedule_active()) + ", " +
            std::to_string(o.schedule_repeat()) + ", " +
            std::to_string(o.schedule_skip_first()) + ".");
  }
  recording_->follow_schedule();
}

Profiler::Profiler(Profiler&&) noexcept = default;

Profiler::~Profiler() {
  if (recording_ && !recording_->stopped) {
    try {
      stop();
    } catch (...) {
      // A destructor must not throw; an unwritable trace is lost.
    }
  }
}

void Profiler::stop() {
  auto& r = *recording_;
  if (r.stopped) {
    return;
  }
  r.stopped = true;
  if (r.recording) {
    r.finish();
  } else if (r.warming) {
    // Kineto was prepared for a recording that never came.
    r.warming = false;
    stop_backend();
  }
}

void Profiler::step() {
  auto& r = *recording_;
  if (r.stopped || r.options.schedule_active() <= 0) {
    return;
  }
  ++r.step;
  r.follow_schedule();
}

int64_t Profiler::cycles() const {
  return recording_->cycles;
}

const char* Profiler::backend() {
#if AMPKIT_HAVE_KINETO
  return "kineto";
#else
  return "legacy";
#endif
}

void Profiler::export_chrome_trace(const std::string& path) {
  stop();
  const auto& from = recording_->trace_path;
  if (from.empty()) {
    throw UsageError(
        component::kProfiler,
        "export_chrome_trace needs a recorded trace: set output_trace_dir "
        "(the trace of each recording is written there when it ends).");
  }
  std::ifstream in(from, std::ios::binary);
  const std::string text(
      (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto failed = [&path]() {
    return IoError(
        component::kProfiler,
        "cannot write the trace " + path + ": " +
            ampkit::detail::write_failure(errno != 0 ? errno : EIO) + ".");
  };
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    throw failed();
  }
  out << text;
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
  const StatsByName& by_name = recording_->stats;
  std::vector<OpStats> stats;
  for (const auto& [name, s] : by_name) {
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
