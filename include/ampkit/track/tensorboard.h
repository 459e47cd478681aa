// TensorBoard event files written without libprotobuf: scalars and text, in
// the TFRecord framing TensorBoard reads (`tensorboard --logdir project_dir`).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "ampkit/track/tracker.h"

namespace ampkit::track {

/// Writes one event file, events.out.tfevents.<unix seconds>.<hostname>, in
/// run_dir. Every record is framed as TensorFlow's RecordWriter frames it:
/// uint64 length, masked CRC32C of the length, payload, masked CRC32C of the
/// payload (all little-endian). The first record is the file_version event
/// "brain.Event:2". Records are buffered until flush() or close().
class TensorBoardWriter {
 public:
  /// Creates run_dir if missing and opens a new event file there (".1",
  /// ".2", ... is appended if one of that name exists). Throws
  /// ampkit::IoError naming the directory or the file if either cannot be
  /// created.
  explicit TensorBoardWriter(const std::string& run_dir);
  /// Closes the file; errors at this point are swallowed, so call close()
  /// to see them.
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Appends a scalar event: Summary.Value{tag, simple_value} at `step`;
  /// wall_time in seconds since the epoch.
  void add_scalar(
      const std::string& tag, float value, int64_t step, double wall_time);
  /// Appends a text event as the text plugin expects it: a DT_STRING tensor
  /// of shape [1] holding `text` (Markdown is rendered), with plugin_name
  /// "text".
  void add_text(
      const std::string& tag,
      const std::string& text,
      int64_t step,
      double wall_time);
  /// Writes buffered records to disk; throws ampkit::IoError if that fails.
  void flush();
  /// Flushes and closes; later add_* calls throw ampkit::UsageError. A
  /// second close() does nothing.
  void close();
  /// The event file's full path.
  const std::string& path() const {
    return path_;
  }

 private:
  void write_event(const std::string& event);
  void check_open(const char* what) const;
  void check_written();

  std::string path_;
  std::ofstream out_;
  bool closed_ = false;
};

/// The "tensorboard" tracker: one scalar per metric per log() call (values
/// narrowed to float, as TensorBoard stores them), flushed at every call. The
/// run's config is written first as a Markdown table, text tag "config" at
/// step 0.
class TensorBoardTracker : public Tracker {
 public:
  /// Opens an event file in run_dir (created if missing) and writes
  /// `config`. Throws ampkit::IoError if the file cannot be written.
  TensorBoardTracker(const std::string& run_dir, const RunConfig& config);
  std::string name() const override {
    return "tensorboard";
  }
  void log(const Metrics& metrics, int64_t step, double wall_time) override;
  void finish() override;
  /// The event file's full path.
  const std::string& path() const {
    return writer_.path();
  }

 private:
  TensorBoardWriter writer_;
  bool finished_ = false;
};

/// The config as TensorBoard's text plugin shows it: "| setting | value |",
/// a separator row, then "| key | value |" per entry in key order; '|' in a
/// key or value is escaped and newlines become spaces.
std::string config_markdown_table(const RunConfig& config);

/// A TensorBoardTracker, for make_tracker.
std::unique_ptr<Tracker> make_tensorboard_tracker(
    const std::string& run_dir, const RunConfig& config);

}  // namespace ampkit::track
