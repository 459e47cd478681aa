// safetensors (Hugging Face's weight format): an 8-byte little-endian header
// length, a JSON header mapping each tensor's name to its dtype, shape and
// data_offsets (plus an optional "__metadata__" of strings), and the raw
// little-endian bytes. The reader checks everything before it allocates, so
// a malformed or hostile file is an error naming the file, never a crash.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ampkit::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
using Metadata = std::map<std::string, std::string>;

struct Safetensors {
  NamedTensors tensors;  ///< in the order of their data_offsets
  Metadata metadata;     ///< "__metadata__", empty when absent
};

/// The largest JSON header read (safetensors' own limit): 100,000,000 bytes.
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

/// The bytes of a safetensors file holding `tensors` (CPU copies, contiguous,
/// in the order given) and `metadata`. The header is padded with spaces to a
/// multiple of 8 bytes. Throws ampkit::InvalidArgument for an undefined
/// tensor, a dtype safetensors has no name for, or a repeated name.
std::string encode_safetensors(
    const NamedTensors& tensors, const Metadata& metadata = {});

/// Parses safetensors bytes; `origin` (the file name) starts every error.
/// Throws ampkit::IoError naming the problem: too short, header length past
/// the end or over kMaxSafetensorsHeader, header not a JSON object, nested
/// too deep, an entry without dtype/shape/data_offsets, an unknown dtype,
/// offsets that do not match the shape, overlap, leave gaps or run past the
/// end of the file.
Safetensors decode_safetensors(
    std::string_view bytes, const std::string& origin);

/// encode_safetensors written to `path` (through a temporary file, fsynced
/// and renamed, so the file is either the old one or the complete new one).
void save_safetensors(
    const std::string& path,
    const NamedTensors& tensors,
    const Metadata& metadata = {});

/// Reads and decodes `path`; a missing or unreadable file is an IoError.
Safetensors load_safetensors(const std::string& path);

/// The safetensors dtype name ("F32", "BF16", ...) of a LibTorch dtype;
/// InvalidArgument for one safetensors cannot store.
std::string safetensors_dtype(c10::ScalarType dtype);

}  // namespace ampkit::checkpoint
