// CRC32C (Castagnoli) and TensorFlow's masked form of it, which frames every
// record of a TensorBoard event file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ampkit::detail {

/// CRC32C of `size` bytes at `data` (reflected, polynomial 0x82F63B78,
/// initial value and final xor 0xFFFFFFFF); "123456789" gives 0xE3069283.
uint32_t crc32c(const void* data, size_t size);

/// crc32c of the bytes of `bytes`.
inline uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

/// TensorFlow's masked CRC: rotated right by 15 bits plus 0xa282ead8, so
/// that a CRC stored inside the data it covers does not check itself.
inline uint32_t mask_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// mask_crc32c(crc32c(bytes)).
inline uint32_t masked_crc32c(std::string_view bytes) {
  return mask_crc32c(crc32c(bytes));
}

}  // namespace ampkit::detail
