#include "ampkit/checkpoint/safetensors.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "ampkit/error.h"
#include "checkpoint/files.h"
#include "utils/components.h"

namespace ampkit::checkpoint {
namespace {

static_assert(
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
    "safetensors data is little-endian; this reader copies bytes as they are");

constexpr int kMaxDepth = 8;  // the header is {name: {shape: [..]}}: depth 3

struct DtypeName {
  const char* name;
  c10::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"BOOL", c10::ScalarType::Bool},
    {"U8", c10::ScalarType::Byte},
    {"I8", c10::ScalarType::Char},
    {"I16", c10::ScalarType::Short},
    {"I32", c10::ScalarType::Int},
    {"I64", c10::ScalarType::Long},
    {"F16", c10::ScalarType::Half},
    {"BF16", c10::ScalarType::BFloat16},
    {"F32", c10::ScalarType::Float},
    {"F64", c10::ScalarType::Double},
};

[[noreturn]] void bad(const std::string& origin, const std::string& problem) {
  throw IoError(component::kCheckpoint, origin + ": " + problem);
}

// Nesting depth of the JSON text, outside strings: nlohmann's parser
// recurses, so a header of a million '[' must be refused before it runs.
int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxDepth) {
        return deepest;
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

uint64_t read_u64_le(std::string_view bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  }
  return v;
}

}  // namespace

std::string safetensors_dtype(c10::ScalarType dtype) {
  for (const auto& d : kDtypes) {
    if (d.type == dtype) {
      return d.name;
    }
  }
  throw InvalidArgument(
      component::kCheckpoint,
      std::string("safetensors cannot store dtype ") + c10::toString(dtype) +
          "; convert the tensor to one of bool, uint8, int8, int16, int32, "
          "int64, float16, bfloat16, float32, float64.");
}

std::string encode_safetensors(
    const NamedTensors& tensors, const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  std::vector<at::Tensor> data;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      throw InvalidArgument(
          component::kCheckpoint,
          "tensor '" + name +
              "' is undefined; safetensors stores only defined tensors.");
    }
    if (name == "__metadata__" || !names.insert(name).second) {
      throw InvalidArgument(
          component::kCheckpoint,
          "the tensor name '" + name +
              "' is repeated or reserved; names must be unique.");
    }
    auto cpu = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t size =
        static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {
        {"dtype", safetensors_dtype(cpu.scalar_type())},
        {"shape", cpu.sizes().vec()},
        {"data_offsets", {offset, offset + size}}};
    offset += size;
    data.push_back(std::move(cpu));
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>((json.size() >> (8 * i)) & 0xff));
  }
  out += json;
  for (const auto& t : data) {
    out.append(
        static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  return out;
}

namespace {

// A safetensors file's JSON header, and the data bytes after it.
struct SafetensorsHeader {
  nlohmann::json json;
  std::string_view data;
};

// Reads the header length and parses the JSON header, refusing truncated,
// oversized and too deeply nested headers.
SafetensorsHeader safetensors_parse_header(
    std::string_view bytes, const std::string& origin) {
  if (bytes.size() < 8) {
    bad(origin,
        "the file has " + std::to_string(bytes.size()) +
            " bytes, fewer than the 8 of a safetensors header length; it is "
            "truncated or not safetensors.");
  }
  const uint64_t n = read_u64_le(bytes);
  if (n > kMaxSafetensorsHeader) {
    bad(origin,
        "the header length " + std::to_string(n) + " exceeds the limit of " +
            std::to_string(kMaxSafetensorsHeader) +
            " bytes; the file is corrupt or not safetensors.");
  }
  if (n > bytes.size() - 8) {
    bad(origin,
        "the header length " + std::to_string(n) +
            " runs past the end of the file (" + std::to_string(bytes.size()) +
            " bytes); the file is truncated.");
  }
  const std::string_view text = bytes.substr(8, n);
  if (text.empty() || text.front() != '{') {
    bad(origin, "the header is not a JSON object (it must start with '{').");
  }
  if (json_depth(text) > kMaxDepth) {
    bad(origin,
        "the JSON header nests deeper than " + std::to_string(kMaxDepth) +
            " levels.");
  }
  SafetensorsHeader header;
  try {
    header.json = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    bad(origin, std::string("the JSON header is malformed: ") + e.what());
  }
  if (!header.json.is_object()) {
    bad(origin, "the header is not a JSON object.");
  }
  header.data = bytes.substr(8 + n);
  return header;
}

// The header's __metadata__ object, whose values must all be strings.
void safetensors_read_metadata(
    const std::string& origin, const nlohmann::json& value, Metadata& out) {
  if (!value.is_object()) {
    bad(origin, "__metadata__ must be an object of strings.");
  }
  for (const auto& [k, v] : value.items()) {
    if (!v.is_string()) {
      bad(origin,
          "__metadata__['" + k + "'] must be a string, got " + v.dump() + ".");
    }
    out[k] = v.get<std::string>();
  }
}

// One tensor's header entry, and where its bytes lie in the data.
struct SafetensorsEntry {
  std::string name;
  c10::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// Checks one tensor's dtype, shape and data_offsets, which must hold exactly
// the bytes its shape needs.
SafetensorsEntry safetensors_read_entry(
    const std::string& origin,
    const std::string& name,
    const nlohmann::json& value) {
  const std::string where = "tensor '" + name + "'";
  if (!value.is_object() || !value.contains("dtype") ||
      !value.contains("shape") || !value.contains("data_offsets")) {
    bad(origin, where + " needs dtype, shape and data_offsets.");
  }
  const auto& dtype = value["dtype"];
  if (!dtype.is_string()) {
    bad(origin, where + ": dtype must be a string.");
  }
  SafetensorsEntry e{name, c10::ScalarType::Undefined, {}, 0, 0};
  for (const auto& d : kDtypes) {
    if (dtype.get<std::string>() == d.name) {
      e.type = d.type;
    }
  }
  if (e.type == c10::ScalarType::Undefined) {
    bad(origin,
        where + " has the dtype " + dtype.dump() +
            ", which ampkit does not read; known: BOOL, U8, I8, I16, I32, "
            "I64, F16, BF16, F32, F64.");
  }
  const auto& shape = value["shape"];
  if (!shape.is_array() || shape.size() > 64) {
    bad(origin, where + ": shape must be an array of at most 64 sizes.");
  }
  uint64_t numel = 1;
  for (const auto& s : shape) {
    if (!s.is_number_unsigned()) {
      bad(origin,
          where + ": shape holds " + s.dump() +
              "; sizes are non-negative integers.");
    }
    const uint64_t size = s.get<uint64_t>();
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (size != 0 &&
         numel > std::numeric_limits<uint64_t>::max() / 16 / size)) {
      bad(origin, where + ": the shape " + shape.dump() + " is too large.");
    }
    numel *= size;
    e.shape.push_back(static_cast<int64_t>(size));
  }
  const auto& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 ||
      !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    bad(origin,
        where + ": data_offsets must be [begin, end], got " + offsets.dump() +
            ".");
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  const uint64_t expected = numel * c10::elementSize(e.type);
  if (e.end < e.begin || e.end - e.begin != expected) {
    bad(origin,
        where + ": data_offsets " + offsets.dump() + " hold " +
            std::to_string(e.end >= e.begin ? e.end - e.begin : 0) +
            " bytes, but shape " + shape.dump() + " of " +
            dtype.get<std::string>() + " needs " + std::to_string(expected) +
            ".");
  }
  return e;
}

// Sorts the entries by offset and checks that they tile the data exactly,
// without overlap, gap or trailing bytes.
void safetensors_check_layout(
    const std::string& origin,
    std::vector<SafetensorsEntry>& entries,
    size_t data_size) {
  std::sort(
      entries.begin(),
      entries.end(),
      [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
      });
  uint64_t at = 0;
  for (const auto& e : entries) {
    if (e.begin != at) {
      bad(origin,
          "tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) +
              " of the data, expected " + std::to_string(at) +
              ": the offsets overlap or leave a gap.");
    }
    at = e.end;
  }
  if (at != data_size) {
    bad(origin,
        "the tensors cover " + std::to_string(at) +
            " bytes of data, but the file holds " + std::to_string(data_size) +
            " after the header; it is " +
            (at > data_size ? "truncated." : "followed by unexpected bytes."));
  }
}

}  // namespace

Safetensors decode_safetensors(
    std::string_view bytes, const std::string& origin) {
  const SafetensorsHeader header = safetensors_parse_header(bytes, origin);
  const std::string_view data = header.data;
  std::vector<SafetensorsEntry> entries;
  Safetensors result;
  for (const auto& [name, value] : header.json.items()) {
    if (name == "__metadata__") {
      safetensors_read_metadata(origin, value, result.metadata);
      continue;
    }
    entries.push_back(safetensors_read_entry(origin, name, value));
  }
  safetensors_check_layout(origin, entries, data.size());
  for (const auto& e : entries) {
    if (e.type == c10::ScalarType::Bool) {
      for (uint64_t i = e.begin; i < e.end; ++i) {
        if (static_cast<unsigned char>(data[i]) > 1) {
          bad(origin,
              "tensor '" + e.name + "' is BOOL but holds the byte " +
                  std::to_string(static_cast<unsigned char>(data[i])) +
                  "; bools are 0 or 1.");
        }
      }
    }
    auto t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
    if (e.end > e.begin) {
      std::memcpy(t.data_ptr(), data.data() + e.begin, e.end - e.begin);
    }
    result.tensors.emplace_back(e.name, std::move(t));
  }
  return result;
}

void save_safetensors(
    const std::string& path,
    const NamedTensors& tensors,
    const Metadata& metadata) {
  detail::write_file_atomic(path, encode_safetensors(tensors, metadata));
}

Safetensors load_safetensors(const std::string& path) {
  return decode_safetensors(detail::read_file(path), path);
}

}  // namespace ampkit::checkpoint
