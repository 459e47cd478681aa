// TensorBoard event files: Event protos encoded by hand (track/protobuf.h) and
// framed as TFRecords with masked CRC32C (track/crc32c.h).
#include "ampkit/track/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <system_error>

#include "ampkit/error.h"
#include "track/protobuf.h"
#include "track/run_dir.h"
#include "utils/components.h"
#include "utils/crc32c.h"
#include "utils/write_failure.h"

namespace ampkit::track {

namespace {

constexpr const char* kFileVersion = "brain.Event:2";
constexpr const char* kTextPluginName = "text";
constexpr uint64_t kDtString = 7;  // tensorflow DataType DT_STRING

// Field numbers of the protos in tensorboard/compat/proto.
namespace event {
constexpr int kWallTime = 1;     // double
constexpr int kStep = 2;         // int64
constexpr int kFileVersion = 3;  // string
constexpr int kSummary = 5;      // Summary
}  // namespace event
namespace summary {
constexpr int kValue = 1;  // repeated Summary.Value
}  // namespace summary
namespace value {
constexpr int kTag = 1;          // string
constexpr int kSimpleValue = 2;  // float
constexpr int kTensor = 8;       // TensorProto
constexpr int kMetadata = 9;     // SummaryMetadata
}  // namespace value
namespace metadata {
constexpr int kPluginData = 1;  // SummaryMetadata.PluginData
constexpr int kPluginName = 1;  // PluginData.plugin_name, string
}  // namespace metadata
namespace tensor {
constexpr int kDtype = 1;        // DataType enum
constexpr int kTensorShape = 2;  // TensorShapeProto
constexpr int kStringVal = 8;    // repeated bytes
constexpr int kShapeDim = 2;     // TensorShapeProto.dim, repeated Dim
constexpr int kDimSize = 1;      // Dim.size, int64
}  // namespace tensor

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name;
}

// A fresh name, so that two writers started in the same second never write
// into one file.
std::filesystem::path event_file_path(const std::filesystem::path& dir) {
  const auto seconds = static_cast<long long>(now_seconds());
  const std::string base =
      "events.out.tfevents." + std::to_string(seconds) + "." + host_name();
  std::filesystem::path path = dir / base;
  for (int n = 1; std::filesystem::exists(path); ++n) {
    path = dir / (base + "." + std::to_string(n));
  }
  return path;
}

ampkit::detail::ProtoWriter event_header(int64_t step, double wall_time) {
  ampkit::detail::ProtoWriter event;
  event.double_field(event::kWallTime, wall_time);
  event.varint_field(event::kStep, static_cast<uint64_t>(step));
  return event;
}

std::string summary_event(
    const ampkit::detail::ProtoWriter& summary_value,
    int64_t step,
    double wall_time) {
  ampkit::detail::ProtoWriter summary;
  summary.message_field(summary::kValue, summary_value);
  ampkit::detail::ProtoWriter event = event_header(step, wall_time);
  event.message_field(event::kSummary, summary);
  return event.bytes();
}

void append_le(std::string& out, uint64_t value, int size) {
  for (int i = 0; i < size; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  }
}

std::string markdown_cell(const std::string& text) {
  std::string cell;
  for (char c : text) {
    if (c == '|') {
      cell += "\\|";
    } else if (c == '\n' || c == '\r') {
      cell += ' ';
    } else {
      cell += c;
    }
  }
  return cell;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir) {
  const auto path = event_file_path(
      ampkit::detail::make_run_dir(component::kTensorBoardWriter, run_dir));
  path_ = path.string();
  errno = 0;
  out_.open(path, std::ios::binary | std::ios::trunc);
  if (!out_) {
    throw IoError(
        component::kTensorBoardWriter,
        "cannot open the event file " + path_ + " for writing: " +
            ampkit::detail::write_failure(errno != 0 ? errno : EIO) +
            " (or choose another project_dir).");
  }
  ampkit::detail::ProtoWriter event;
  event.double_field(event::kWallTime, now_seconds());
  event.bytes_field(event::kFileVersion, kFileVersion);
  write_event(event.bytes());
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    close();
  } catch (const std::exception&) {
    // A destructor must not throw; close() reports the same error.
  }
}

void TensorBoardWriter::add_scalar(
    const std::string& tag, float value, int64_t step, double wall_time) {
  check_open("add_scalar");
  ampkit::detail::ProtoWriter summary_value;
  summary_value.bytes_field(value::kTag, tag);
  summary_value.float_field(value::kSimpleValue, value);
  write_event(summary_event(summary_value, step, wall_time));
}

void TensorBoardWriter::add_text(
    const std::string& tag,
    const std::string& text,
    int64_t step,
    double wall_time) {
  check_open("add_text");
  ampkit::detail::ProtoWriter plugin_data;
  plugin_data.bytes_field(metadata::kPluginName, kTextPluginName);
  ampkit::detail::ProtoWriter summary_metadata;
  summary_metadata.message_field(metadata::kPluginData, plugin_data);

  ampkit::detail::ProtoWriter dim;
  dim.varint_field(tensor::kDimSize, 1);
  ampkit::detail::ProtoWriter shape;
  shape.message_field(tensor::kShapeDim, dim);
  ampkit::detail::ProtoWriter tensor_proto;
  tensor_proto.varint_field(tensor::kDtype, kDtString);
  tensor_proto.message_field(tensor::kTensorShape, shape);
  tensor_proto.bytes_field(tensor::kStringVal, text);

  ampkit::detail::ProtoWriter summary_value;
  summary_value.bytes_field(value::kTag, tag);
  summary_value.message_field(value::kMetadata, summary_metadata);
  summary_value.message_field(value::kTensor, tensor_proto);
  write_event(summary_event(summary_value, step, wall_time));
}

void TensorBoardWriter::flush() {
  check_open("flush");
  out_.flush();
  check_written();
}

void TensorBoardWriter::close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  out_.flush();
  const bool flushed = static_cast<bool>(out_);
  out_.close();
  if (!flushed || !out_) {
    throw IoError(
        component::kTensorBoardWriter,
        "closing the event file failed, got " + path_ +
            " (disk full or the file was removed). Free space or choose "
            "another project_dir.");
  }
}

void TensorBoardWriter::write_event(const std::string& event) {
  std::string header;
  append_le(header, event.size(), 8);
  append_le(header, ampkit::detail::masked_crc32c(header), 4);
  std::string footer;
  append_le(footer, ampkit::detail::masked_crc32c(event), 4);
  out_.write(header.data(), static_cast<std::streamsize>(header.size()));
  out_.write(event.data(), static_cast<std::streamsize>(event.size()));
  out_.write(footer.data(), static_cast<std::streamsize>(footer.size()));
  check_written();
}

void TensorBoardWriter::check_open(const char* what) const {
  if (closed_) {
    throw UsageError(
        component::kTensorBoardWriter,
        std::string(what) + " after close, got the closed file " + path_ +
            ". Create a new TensorBoardWriter to write more events.");
  }
}

void TensorBoardWriter::check_written() {
  if (!out_) {
    throw IoError(
        component::kTensorBoardWriter,
        "writing the event file failed, got " + path_ +
            " (disk full or the file was removed). Free space or choose "
            "another project_dir.");
  }
}

std::string config_markdown_table(const RunConfig& config) {
  std::string table = "| setting | value |\n|---|---|\n";
  for (const auto& [key, value] : config) {
    table += "| " + markdown_cell(key) + " | " + markdown_cell(value) + " |\n";
  }
  return table;
}

TensorBoardTracker::TensorBoardTracker(
    const std::string& run_dir, const RunConfig& config)
    : writer_(run_dir) {
  writer_.add_text("config", config_markdown_table(config), 0, now_seconds());
  writer_.flush();
}

void TensorBoardTracker::log(
    const Metrics& metrics, int64_t step, double wall_time) {
  if (finished_) {
    throw UsageError(
        "Tracker",
        "log after finish, got step " + std::to_string(step) + " for " +
            writer_.path() +
            ". Call end_training() once, after the last "
            "log().");
  }
  for (const auto& [name, value] : metrics) {
    writer_.add_scalar(name, static_cast<float>(value), step, wall_time);
  }
  writer_.flush();
}

void TensorBoardTracker::finish() {
  if (!finished_) {
    finished_ = true;
    writer_.close();
  }
}

std::unique_ptr<Tracker> make_tensorboard_tracker(
    const std::string& run_dir, const RunConfig& config) {
  return std::make_unique<TensorBoardTracker>(run_dir, config);
}

}  // namespace ampkit::track
