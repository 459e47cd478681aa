// TensorBoard event files checked by an independent reader written here: its
// own bitwise CRC32C and protobuf decoder, sharing no code with the writer.
#include "ampkit/track/tensorboard.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "ampkit/error.h"
#include "test_util.h"
#include "utils/crc32c.h"

namespace ampkit::track {
namespace {

namespace fs = std::filesystem;

// ---- The independent reader -------------------------------------------------

// Bit by bit, the slow way, so that a wrong table cannot fool both sides.
uint32_t bitwise_crc32c(const std::string& bytes) {
  uint32_t crc = ~0u;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) {
      const uint32_t low_bit_set = 0u - (crc & 1u);
      crc = (crc >> 1) ^ (0x82F63B78u & low_bit_set);
    }
  }
  return ~crc;
}

uint32_t reader_mask(uint32_t crc) {
  const uint32_t rotated = (crc >> 15) | (crc << 17);
  return rotated + 0xa282ead8u;
}

uint64_t read_le(const std::string& bytes, size_t at, int size) {
  uint64_t value = 0;
  for (int i = size - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return value;
}

struct Records {
  std::vector<std::string> payloads;
  std::string error;  // empty when every record checked out
};

// TFRecord framing: u64 length, masked crc(length), payload, masked
// crc(payload).
Records read_records(const std::string& file) {
  Records records;
  size_t at = 0;
  while (at < file.size()) {
    if (file.size() - at < 12) {
      records.error = "truncated header at " + std::to_string(at);
      return records;
    }
    const uint64_t length = read_le(file, at, 8);
    const auto length_crc = static_cast<uint32_t>(read_le(file, at + 8, 4));
    if (reader_mask(bitwise_crc32c(file.substr(at, 8))) != length_crc) {
      records.error = "length crc mismatch at " + std::to_string(at);
      return records;
    }
    if (file.size() - at - 12 < length + 4) {
      records.error = "truncated payload at " + std::to_string(at);
      return records;
    }
    std::string payload = file.substr(at + 12, length);
    const auto data_crc =
        static_cast<uint32_t>(read_le(file, at + 12 + length, 4));
    if (reader_mask(bitwise_crc32c(payload)) != data_crc) {
      records.error = "data crc mismatch at " + std::to_string(at);
      return records;
    }
    records.payloads.push_back(std::move(payload));
    at += 12 + length + 4;
  }
  return records;
}

// One decoded field: varint and fixed values in `number`, wire type 2 in
// `bytes`.
struct Field {
  int wire_type = 0;
  uint64_t number = 0;
  std::string bytes;
};
using Message = std::multimap<int, Field>;

uint64_t decode_varint(const std::string& in, size_t& at) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= in.size()) {
      throw std::runtime_error("varint runs past the end");
    }
    const auto byte = static_cast<unsigned char>(in[at++]);
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      return value;
    }
  }
  throw std::runtime_error("varint longer than 10 bytes");
}

Message decode(const std::string& in) {
  Message message;
  size_t at = 0;
  while (at < in.size()) {
    const uint64_t key = decode_varint(in, at);
    Field field;
    field.wire_type = static_cast<int>(key & 7);
    switch (field.wire_type) {
      case 0:
        field.number = decode_varint(in, at);
        break;
      case 1:
      case 5: {
        const int size = field.wire_type == 1 ? 8 : 4;
        if (in.size() - at < static_cast<size_t>(size)) {
          throw std::runtime_error("fixed field runs past the end");
        }
        field.number = read_le(in, at, size);
        at += size;
        break;
      }
      case 2: {
        const uint64_t size = decode_varint(in, at);
        if (in.size() - at < size) {
          throw std::runtime_error("length-delimited field past the end");
        }
        field.bytes = in.substr(at, size);
        at += size;
        break;
      }
      default:
        throw std::runtime_error(
            "unexpected wire type " + std::to_string(field.wire_type));
    }
    message.emplace(static_cast<int>(key >> 3), std::move(field));
  }
  return message;
}

// The only field `number` of `message`, checked for its wire type.
const Field& only(const Message& message, int number, int wire_type) {
  if (message.count(number) != 1) {
    throw std::runtime_error(
        "field " + std::to_string(number) + " appears " +
        std::to_string(message.count(number)) + " times");
  }
  const Field& field = message.find(number)->second;
  if (field.wire_type != wire_type) {
    throw std::runtime_error(
        "field " + std::to_string(number) + " has wire type " +
        std::to_string(field.wire_type));
  }
  return field;
}

double as_double(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::optional<Message> summary_value;  // the one Summary.Value
};

Event parse_event(const std::string& payload) {
  const Message event = decode(payload);
  Event parsed;
  parsed.wall_time = as_double(only(event, 1, 1).number);
  if (event.count(2)) {
    parsed.step = static_cast<int64_t>(only(event, 2, 0).number);
  }
  if (event.count(3)) {
    parsed.file_version = only(event, 3, 2).bytes;
  }
  if (event.count(5)) {
    const Message summary = decode(only(event, 5, 2).bytes);
    parsed.summary_value = decode(only(summary, 1, 2).bytes);
  }
  return parsed;
}

using testing_util::read_file;

std::vector<Event> read_events(const fs::path& path) {
  const Records records = read_records(read_file(path));
  if (!records.error.empty()) {
    throw std::runtime_error(records.error);
  }
  std::vector<Event> events;
  for (const auto& payload : records.payloads) {
    events.push_back(parse_event(payload));
  }
  return events;
}

// A fresh directory under the system's temp dir, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("ampkit_tb_test_" + std::to_string(getpid()) + "_" +
             std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const {
    return path_;
  }

 private:
  fs::path path_;
};

// ---- CRC32C ----------------------------------------------------------------

TEST(Crc32cTest, BothImplementationsGiveTheStandardCheckValue) {
  EXPECT_EQ(detail::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(bitwise_crc32c("123456789"), 0xE3069283u);
}

TEST(Crc32cTest, TableAndBitwiseAgreeOnEveryLengthAndByteValue) {
  std::string bytes;
  for (int i = 0; i < 600; ++i) {
    EXPECT_EQ(detail::crc32c(bytes), bitwise_crc32c(bytes)) << "length " << i;
    bytes.push_back(static_cast<char>((i * 167 + 13) & 0xFF));
  }
}

TEST(Crc32cTest, MaskedCrcOfTheEmptyStringIsTensorFlowsDelta) {
  // crc32c("") is 0, so the mask leaves only its constant.
  EXPECT_EQ(detail::crc32c(""), 0u);
  EXPECT_EQ(detail::masked_crc32c(""), 0xa282ead8u);
  EXPECT_EQ(reader_mask(bitwise_crc32c("")), 0xa282ead8u);
  EXPECT_EQ(
      detail::masked_crc32c("123456789"),
      reader_mask(bitwise_crc32c("123456789")));
}

// ---- TensorBoardWriter
// -------------------------------------------------------

TEST(TensorBoardWriterTest, NamesTheFileAfterTimeAndHostAndCreatesRunDir) {
  TempDir dir;
  const fs::path run_dir = dir.path() / "project" / "run";
  TensorBoardWriter writer(run_dir.string());
  ASSERT_TRUE(fs::is_directory(run_dir));
  const fs::path path(writer.path());
  EXPECT_EQ(path.parent_path(), run_dir);
  EXPECT_TRUE(std::regex_match(
      path.filename().string(),
      std::regex(R"(events\.out\.tfevents\.\d{10}\..+)")))
      << path;
  TensorBoardWriter second(run_dir.string());
  EXPECT_NE(second.path(), writer.path());
}

TEST(TensorBoardWriterTest, FirstEventIsTheFileVersion) {
  TempDir dir;
  TensorBoardWriter writer(dir.path().string());
  writer.close();
  const auto events = read_events(writer.path());
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].file_version.has_value());
  EXPECT_EQ(*events[0].file_version, "brain.Event:2");
  EXPECT_FALSE(events[0].summary_value.has_value());
  EXPECT_GT(events[0].wall_time, 1.5e9);  // seconds since the epoch, not ms
  EXPECT_LT(events[0].wall_time, 1e11);
}

TEST(TensorBoardWriterTest, ScalarsReadBackBitExact) {
  struct Logged {
    std::string tag;
    float value;
    int64_t step;
    double wall_time;
  };
  const std::vector<Logged> logged = {
      {"loss", 0.1f, 0, 1700000000.123456789},
      {"train/lr", 3e-4f, 1, 1700000001.5},
      {"tiny", std::numeric_limits<float>::denorm_min(), 127, 0.0},
      {"neg", -2.5e-20f, 128, 1.0},
      {"inf", std::numeric_limits<float>::infinity(), int64_t{1} << 40, 2.0},
      {"nan", std::numeric_limits<float>::quiet_NaN(), 300, 3.0},
      {"negative_step", 7.0f, -5, 4.0},
      {"max_step", 8.0f, std::numeric_limits<int64_t>::max(), 5.0},
  };
  TempDir dir;
  TensorBoardWriter writer(dir.path().string());
  for (const auto& l : logged) {
    writer.add_scalar(l.tag, l.value, l.step, l.wall_time);
  }
  writer.close();

  const auto events = read_events(writer.path());
  ASSERT_EQ(events.size(), logged.size() + 1);
  for (size_t i = 0; i < logged.size(); ++i) {
    SCOPED_TRACE(logged[i].tag);
    const Event& event = events[i + 1];
    EXPECT_FALSE(event.file_version.has_value());
    EXPECT_EQ(event.step, logged[i].step);
    EXPECT_EQ(event.wall_time, logged[i].wall_time);
    ASSERT_TRUE(event.summary_value.has_value());
    const Message& value = *event.summary_value;
    EXPECT_EQ(only(value, 1, 2).bytes, logged[i].tag);
    EXPECT_EQ(only(value, 2, 5).number, float_bits(logged[i].value));
  }
}

TEST(TensorBoardWriterTest, TextIsATextPluginStringTensorOfShapeOne) {
  const std::string text = "| a | b |\n|---|---|\n| x | \xC3\xA9 |\n";
  TempDir dir;
  TensorBoardWriter writer(dir.path().string());
  writer.add_text("notes", text, 42, 1700000000.25);
  writer.close();

  const auto events = read_events(writer.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 42);
  EXPECT_EQ(events[1].wall_time, 1700000000.25);
  ASSERT_TRUE(events[1].summary_value.has_value());
  const Message& value = *events[1].summary_value;
  EXPECT_EQ(only(value, 1, 2).bytes, "notes");
  const Message metadata = decode(only(value, 9, 2).bytes);
  const Message plugin_data = decode(only(metadata, 1, 2).bytes);
  EXPECT_EQ(only(plugin_data, 1, 2).bytes, "text");
  const Message tensor = decode(only(value, 8, 2).bytes);
  EXPECT_EQ(only(tensor, 1, 0).number, 7u);  // DT_STRING
  const Message shape = decode(only(tensor, 2, 2).bytes);
  const Message dim = decode(only(shape, 2, 2).bytes);
  EXPECT_EQ(only(dim, 1, 0).number, 1u);
  EXPECT_EQ(only(tensor, 8, 2).bytes, text);
}

TEST(TensorBoardWriterTest, ReaderDetectsAFlippedByte) {
  TempDir dir;
  TensorBoardWriter writer(dir.path().string());
  writer.add_scalar("loss", 1.0f, 1, 2.0);
  writer.close();
  const std::string good = read_file(writer.path());
  ASSERT_TRUE(read_records(good).error.empty()) << read_records(good).error;
  const size_t second_record = 12 + read_le(good, 0, 8) + 4;

  std::string bad_payload = good;
  bad_payload[second_record + 12 + 3] ^= 0x01;
  EXPECT_THAT(
      read_records(bad_payload).error,
      ::testing::HasSubstr("data crc mismatch"));

  std::string bad_length = good;
  bad_length[second_record] ^= 0x40;
  EXPECT_THAT(
      read_records(bad_length).error,
      ::testing::HasSubstr("length crc mismatch"));

  std::string bad_footer = good;
  bad_footer[good.size() - 1] ^= 0x80;
  EXPECT_THAT(
      read_records(bad_footer).error,
      ::testing::HasSubstr("data crc mismatch"));
}

TEST(TensorBoardWriterTest, RunDirUnderARegularFileIsAnIoErrorNamingIt) {
  TempDir dir;
  const fs::path file = dir.path() / "not_a_dir";
  std::ofstream(file) << "x";
  const std::string run_dir = (file / "run").string();
  AMPKIT_EXPECT_THROWS_WITH(
      TensorBoardWriter{run_dir}, IoError, "TensorBoardWriter: ");
  AMPKIT_EXPECT_THROWS_WITH(TensorBoardWriter{run_dir}, IoError, run_dir);
}

TEST(TensorBoardWriterTest, AddAfterCloseIsAUsageError) {
  TempDir dir;
  TensorBoardWriter writer(dir.path().string());
  writer.close();
  writer.close();  // a second close does nothing
  AMPKIT_EXPECT_THROWS_WITH(
      writer.add_scalar("loss", 1.0f, 0, 0.0), UsageError, "after close");
  AMPKIT_EXPECT_THROWS_WITH(
      writer.add_text("t", "x", 0, 0.0), UsageError, "after close");
}

// ---- TensorBoardTracker
// ------------------------------------------------------

TEST(TensorBoardTrackerTest, WritesTheConfigTableThenOneScalarPerMetric) {
  TempDir dir;
  const RunConfig config = {
      {"lr", "0.001"}, {"mixed_precision", "bf16"}, {"note", "a|b"}};
  auto tracker = make_tensorboard_tracker(dir.path().string(), config);
  EXPECT_EQ(tracker->name(), "tensorboard");
  tracker->log({{"loss", 0.31}, {"lr", 1e-3}}, 10, 1700000010.0);
  tracker->log({{"loss", 0.29}}, 20, 1700000020.0);

  // Flushed at every log(), before finish().
  const auto path = static_cast<TensorBoardTracker&>(*tracker).path();
  const auto events = read_events(path);
  ASSERT_EQ(events.size(), 5u);
  ASSERT_TRUE(events[0].file_version.has_value());

  const Message& text = *events[1].summary_value;
  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(only(text, 1, 2).bytes, "config");
  const Message plugin =
      decode(only(decode(only(text, 9, 2).bytes), 1, 2).bytes);
  EXPECT_EQ(only(plugin, 1, 2).bytes, "text");
  const Message tensor = decode(only(text, 8, 2).bytes);
  EXPECT_EQ(only(tensor, 1, 0).number, 7u);
  EXPECT_EQ(
      only(tensor, 8, 2).bytes,
      "| setting | value |\n|---|---|\n"
      "| lr | 0.001 |\n| mixed_precision | bf16 |\n| note | a\\|b |\n");

  struct Expected {
    int64_t step;
    double wall_time;
    const char* tag;
    double value;
  };
  const std::vector<Expected> expected = {
      {10, 1700000010.0, "loss", 0.31},
      {10, 1700000010.0, "lr", 1e-3},
      {20, 1700000020.0, "loss", 0.29},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const Event& event = events[i + 2];
    EXPECT_EQ(event.step, expected[i].step);
    EXPECT_EQ(event.wall_time, expected[i].wall_time);
    EXPECT_EQ(only(*event.summary_value, 1, 2).bytes, expected[i].tag);
    EXPECT_EQ(
        only(*event.summary_value, 2, 5).number,
        float_bits(static_cast<float>(expected[i].value)));
  }

  tracker->finish();
  tracker->finish();
  AMPKIT_EXPECT_THROWS_WITH(
      tracker->log({{"loss", 1.0}}, 30, 0.0), UsageError, "after finish");
  EXPECT_EQ(read_events(path).size(), 5u);
}

}  // namespace
}  // namespace ampkit::track
