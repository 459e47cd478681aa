// The built-in trackers: JSONL (one object per log call) and CSV (one row
// per metric), and the factory that also builds TensorBoard's.
#include "ampkit/track/tracker.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "ampkit/error.h"
#include "ampkit/track/tensorboard.h"
#include "track/run_dir.h"
#include "utils/components.h"
#include "utils/strings.h"
#include "utils/write_failure.h"

namespace ampkit::detail {

std::filesystem::path make_run_dir(
    const char* component, const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec || !std::filesystem::is_directory(run_dir)) {
    throw IoError(
        component,
        "cannot create the run directory " + run_dir + ": " +
            (ec ? ampkit::detail::write_failure(ec.value())
                : "a file of that name exists; remove it or choose another "
                  "project_dir") +
            ".");
  }
  return run_dir;
}

}  // namespace ampkit::detail

namespace ampkit::track {

namespace {

std::ofstream open_for_append(const std::filesystem::path& path) {
  errno = 0;
  std::ofstream out(path, std::ios::app);
  if (!out) {
    throw IoError(
        component::kTracker,
        "cannot open " + path.string() + " for writing: " +
            ampkit::detail::write_failure(errno != 0 ? errno : EIO) +
            " (or choose another project_dir).");
  }
  return out;
}

void check_written(std::ofstream& out, const std::filesystem::path& path) {
  out.flush();
  if (!out) {
    throw IoError(
        component::kTracker,
        "writing " + path.string() +
            " failed (disk full or the file was removed). Free space or "
            "choose another project_dir.");
  }
}

std::filesystem::path make_run_dir(const std::string& run_dir) {
  return ampkit::detail::make_run_dir(component::kTracker, run_dir);
}

// JSON has no inf/NaN; they are written as null so that a line stays valid.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// A tracker that appends text records to one file in the run directory:
// what JSONL and CSV share (opening, write checks, finishing).
class FileTracker : public Tracker {
 public:
  void finish() override {
    if (!finished_) {
      check_written(out_, path_);
      out_.close();
      finished_ = true;
    }
  }

 protected:
  explicit FileTracker(std::filesystem::path path) : path_(std::move(path)) {}
  /// Appends `text` and checks that it reached the file.
  void write(const std::string& text) {
    if (finished_) {
      throw UsageError(
          component::kTracker,
          "log after finish on " + path_.string() +
              ". Call end_training() once, after the last log().");
    }
    out_ << text;
    check_written(out_, path_);
  }

  std::filesystem::path path_;
  std::ofstream out_;

 private:
  bool finished_ = false;
};

class JsonlTracker : public FileTracker {
 public:
  explicit JsonlTracker(const std::filesystem::path& dir)
      : FileTracker(dir / kJsonlFile) {
    out_ = open_for_append(path_);
  }
  std::string name() const override {
    return "jsonl";
  }
  void log(const Metrics& metrics, int64_t step, double wall_time) override {
    nlohmann::json line = {{"step", step}, {"wall_time", wall_time}};
    for (const auto& [key, value] : metrics) {
      line[key] = number(value);
    }
    write(line.dump() + "\n");
  }
};

class CsvTracker : public FileTracker {
 public:
  explicit CsvTracker(const std::filesystem::path& dir)
      : FileTracker(dir / kCsvFile) {
    const bool fresh = !std::filesystem::exists(path_) ||
                       std::filesystem::file_size(path_) == 0;
    out_ = open_for_append(path_);
    if (fresh) {
      out_ << "step,wall_time,name,value\n";
    }
  }
  std::string name() const override {
    return "csv";
  }
  void log(const Metrics& metrics, int64_t step, double wall_time) override {
    std::ostringstream rows;
    rows.precision(17);
    for (const auto& [key, value] : metrics) {
      rows << step << ',' << wall_time << ',' << csv_field(key) << ',' << value
           << '\n';
    }
    write(rows.str());
  }

 private:
  static std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) {
      return text;
    }
    std::string quoted = "\"";
    for (char c : text) {
      quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    }
    return quoted + "\"";
  }
};

}  // namespace

std::vector<std::string> parse_log_with(const std::string& log_with) {
  const std::vector<std::string> all = {"jsonl", "csv", "tensorboard"};
  std::vector<std::string> names;
  for (const std::string& piece : ampkit::detail::split(log_with, ',')) {
    const std::string item = ampkit::detail::trim(piece, " \t");
    if (item.empty()) {
      continue;
    }
    if (item == "all") {
      return all;
    }
    if (std::find(all.begin(), all.end(), item) == all.end()) {
      throw InvalidArgument(
          component::kTracker,
          "unknown tracker in log_with, got '" + item +
              "'. Valid values: jsonl, csv, tensorboard, all "
              "(comma-separated).");
    }
    if (std::find(names.begin(), names.end(), item) == names.end()) {
      names.push_back(item);
    }
  }
  return names;
}

void write_run_config(const std::string& run_dir, const RunConfig& config) {
  const auto path = make_run_dir(run_dir) / kConfigFile;
  errno = 0;
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    throw IoError(
        component::kTracker,
        "cannot write " + path.string() + ": " +
            ampkit::detail::write_failure(errno != 0 ? errno : EIO) + ".");
  }
  out << nlohmann::json(config).dump(2) << '\n';
  check_written(out, path);
}

std::unique_ptr<Tracker> make_tracker(
    const std::string& name,
    const std::string& run_dir,
    const RunConfig& config) {
  write_run_config(run_dir, config);  // creates run_dir
  const std::filesystem::path dir(run_dir);
  if (name == "jsonl") {
    return std::make_unique<JsonlTracker>(dir);
  }
  if (name == "csv") {
    return std::make_unique<CsvTracker>(dir);
  }
  if (name == "tensorboard") {
    return make_tensorboard_tracker(run_dir, config);
  }
  throw InvalidArgument(
      component::kTracker,
      "unknown tracker, got '" + name +
          "'. Valid values: jsonl, csv, tensorboard.");
}

}  // namespace ampkit::track
