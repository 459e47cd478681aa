// Experiment trackers: where logged metrics go (JSONL, CSV, TensorBoard), and
// the run directory layout that `ampkit report` reads back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ampkit::track {

/// Metrics logged at one step: name -> value ("loss" -> 0.31).
using Metrics = std::map<std::string, double>;
/// The run's configuration as text: setting -> value.
using RunConfig = std::map<std::string, std::string>;

/// Files of a run directory (project_dir/project_name):
constexpr const char* kConfigFile =
    "config.json";  ///< RunConfig as a JSON object of strings
constexpr const char* kJsonlFile =
    "metrics.jsonl";  ///< {"step":N,"wall_time":s,"name":v,...} per log call
constexpr const char* kCsvFile =
    "metrics.csv";  ///< step,wall_time,name,value per metric
/// TensorBoard event files are named events.out.tfevents.<seconds>.<host>.

/// Metric names the Accelerator logs by itself (AcceleratorOptions::auto_log).
constexpr const char* kLoss = "loss";
constexpr const char* kLearningRate = "lr";
constexpr const char* kLossScale = "loss_scale";
constexpr const char* kSkippedSteps = "skipped_steps";  ///< cumulative count
constexpr const char* kGradNorm = "grad_norm";
constexpr const char* kSamplesPerSecond = "samples_per_second";
constexpr const char* kMemoryRssMb = "memory_rss_mb";
constexpr const char* kGpuMemoryMb = "gpu_memory_mb";
constexpr const char* kGpuUtilization = "gpu_utilization";  ///< percent

/// One destination for metrics. Implementations write as they go, so a run
/// that crashes keeps what was logged before. Derive from it for your own
/// tracker (accelerate's GeneralTracker) and pass it in
/// AcceleratorOptions::trackers.
class Tracker {
 public:
  virtual ~Tracker() = default;
  /// "jsonl", "csv" or "tensorboard"; your tracker's own name.
  virtual std::string name() const = 0;
  /// Receives the run's configuration once, from init_trackers (the
  /// built-in trackers wrote config.json when make_tracker created them,
  /// so they keep this default, which does nothing).
  virtual void store_init_configuration(const RunConfig& config) {
    (void)config;
  }
  /// Whether only the main process runs this tracker (accelerate's
  /// main_process_only, default true); false runs it on every process.
  virtual bool main_process_only() const {
    return true;
  }
  /// Records `metrics` at `step`; wall_time in seconds since the epoch.
  virtual void log(const Metrics& metrics, int64_t step, double wall_time) = 0;
  /// Flushes and closes; later log calls are errors.
  virtual void finish() = 0;
};

/// The tracker names log_with accepts: jsonl, csv, tensorboard, and "all".
/// Parses a comma-separated list ("jsonl,tensorboard"); unknown names throw
/// ampkit::InvalidArgument listing the valid ones. "" gives none.
std::vector<std::string> parse_log_with(const std::string& log_with);

/// Creates the named tracker writing into run_dir (created if missing),
/// after writing config.json there.
std::unique_ptr<Tracker> make_tracker(
    const std::string& name,
    const std::string& run_dir,
    const RunConfig& config);

/// Writes config.json into run_dir.
void write_run_config(const std::string& run_dir, const RunConfig& config);

}  // namespace ampkit::track
