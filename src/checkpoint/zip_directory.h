// The central directory of a zip file (torch.save's container), read on its
// own so that every entry's claimed size is checked against the file's
// size before LibTorch's reader allocates a buffer of that size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ampkit::checkpoint {

/// One file of a zip, as its central directory describes it.
struct ZipEntry {
  std::string name;
  uint64_t size = 0;             // uncompressed bytes
  uint64_t compressed_size = 0;  // bytes stored in the file
  uint64_t offset = 0;           // of its local header
};

/// The `n` bytes at `offset` of the file; fewer only at its end.
using ReadAt = std::function<std::string(uint64_t offset, size_t n)>;

/// The entries of the zip of `file_size` bytes that `read` gives (zip64
/// included). Throws ampkit::IoError naming `where` for anything that is
/// not a well-formed directory, and for an entry that claims more bytes,
/// or lies further, than the file has.
std::vector<ZipEntry> read_zip_directory(
    uint64_t file_size, const ReadAt& read, const std::string& where);

}  // namespace ampkit::checkpoint
