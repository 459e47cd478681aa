// A write-only protocol buffer encoder, just enough for TensorBoard's Event
// messages, so that ampkit does not depend on libprotobuf.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ampkit::detail {

/// Serialises one message field by field, in the order they are added.
/// Every field added is written, defaults included (parsers accept that).
class ProtoWriter {
 public:
  /// int64, uint64, int32, bool and enum fields (wire type 0); a negative
  /// int64 takes ten bytes, as protobuf writes it.
  void varint_field(int field, uint64_t value) {
    tag(field, kVarint);
    varint(value);
  }
  /// double fields (wire type 1), little-endian IEEE 754.
  void double_field(int field, double value) {
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    tag(field, kFixed64);
    little_endian(bits, 8);
  }
  /// float fields (wire type 5), little-endian IEEE 754.
  void float_field(int field, float value) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    tag(field, kFixed32);
    little_endian(bits, 4);
  }
  /// string and bytes fields (wire type 2).
  void bytes_field(int field, std::string_view bytes) {
    tag(field, kLengthDelimited);
    varint(bytes.size());
    out_.append(bytes.data(), bytes.size());
  }
  /// Embedded message fields (wire type 2).
  void message_field(int field, const ProtoWriter& message) {
    bytes_field(field, message.bytes());
  }
  /// The serialised message so far.
  const std::string& bytes() const {
    return out_;
  }

 private:
  enum WireType : uint32_t {
    kVarint = 0,
    kFixed64 = 1,
    kLengthDelimited = 2,
    kFixed32 = 5,
  };

  void tag(int field, WireType type) {
    varint((static_cast<uint64_t>(field) << 3) | type);
  }
  void varint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }
  void little_endian(uint64_t value, int size) {
    for (int i = 0; i < size; ++i) {
      out_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
    }
  }

  std::string out_;
};

}  // namespace ampkit::detail
