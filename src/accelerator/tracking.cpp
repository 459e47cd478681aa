// The Accelerator's experiment tracking: init_trackers, log and
// end_training over the trackers that log_with names, and profile().
#include "ampkit/accelerator/accelerator.h"

#include <chrono>
#include <filesystem>
#include <string>

#include "accelerator/state.h"
#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit {

namespace {}  // namespace

namespace detail {

double wall_time_now() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void log_to_trackers(
    AcceleratorState& state, const track::Metrics& metrics, int64_t step) {
  const double now = wall_time_now();
  for (auto& tracker : state.tracking.trackers) {
    tracker->log(metrics, step, now);
  }
}

}  // namespace detail

void Accelerator::init_trackers(
    const std::string& project_name, const track::RunConfig& config) {
  auto& st = *state_;
  if (st.options.log_with.empty() && st.options.trackers.empty()) {
    throw UsageError(
        component::kAccelerator,
        "init_trackers needs log_with to name a tracker, got none. Set "
        "AcceleratorOptions().log_with(\"jsonl\") (or csv, tensorboard, "
        "all), log_with in the config file, or pass your own in "
        "AcceleratorOptions().trackers({...}).");
  }
  if (project_name.empty() || project_name.find('/') != std::string::npos ||
      project_name == "." || project_name == "..") {
    throw InvalidArgument(
        component::kAccelerator,
        "init_trackers needs a project name usable as a folder name, got '" +
            project_name + "'. Use letters, digits, '-' or '_'.");
  }
  if (!st.tracking.trackers.empty()) {
    throw UsageError(
        component::kAccelerator,
        "init_trackers was already called for " + st.tracking.run_dir +
            ". Call it once per run, or end_training() first.");
  }
  st.tracking.run_dir =
      (std::filesystem::path(st.options.project_dir) / project_name).string();
  track::RunConfig run_config;
  for (const auto& row : st.options.rows) {
    run_config[row.name] = row.value;
  }
  for (const auto& [key, value] : config) {
    run_config[key] = value;
  }
  if (is_main_process()) {
    for (const auto& name : st.options.log_with) {
      st.tracking.trackers.push_back(
          track::make_tracker(name, st.tracking.run_dir, run_config));
    }
  }
  for (const auto& tracker : st.options.trackers) {
    if (is_main_process() || !tracker->main_process_only()) {
      tracker->store_init_configuration(run_config);
      st.tracking.trackers.push_back(tracker);
    }
  }
  st.tracking.last_log_time = std::chrono::steady_clock::now();
  st.tracking.samples_since_log = 0;
}

void Accelerator::log(
    const track::Metrics& metrics, std::optional<int64_t> step) {
  detail::log_to_trackers(
      *state_, metrics, step.value_or(state_->tracking.optimizer_steps));
}

void Accelerator::end_training() {
  for (auto& tracker : state_->tracking.trackers) {
    tracker->finish();
  }
  state_->tracking.trackers.clear();
}

diag::Profiler Accelerator::profile() const {
  auto options = state_->options.profile_options;
  options.trace_file("profile_" + std::to_string(process_index()) + ".json");
  return diag::Profiler(options);
}

const std::string& Accelerator::run_dir() const {
  return state_->tracking.run_dir;
}

}  // namespace ampkit
