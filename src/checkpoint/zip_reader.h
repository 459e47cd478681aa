// torch.save's container read by ampkit itself: the zip's central
// directory first, every entry's claimed size and place checked against
// the file before anything is allocated, then stored entries read straight
// into their destination with their CRC-32 checked. (LibTorch's reader
// allocates what an entry claims, and leaks when a malformed zip makes its
// constructor throw.)
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ampkit::checkpoint {

/// One file of a zip, as its central directory describes it.
struct ZipEntry {
  std::string name;
  uint64_t size = 0;             // uncompressed bytes
  uint64_t compressed_size = 0;  // bytes stored in the file
  uint64_t offset = 0;           // of its local header
  uint32_t crc32 = 0;
  uint16_t method = 0;  // 0: stored (torch.save's); 8: deflated
  uint16_t flags = 0;   // bit 0: encrypted
};

/// The `n` bytes at `offset` of the file; fewer only at its end.
using ReadAt = std::function<std::string(uint64_t offset, size_t n)>;

/// The entries of the zip of `file_size` bytes that `read` gives (zip64
/// included). Throws ampkit::IoError naming `where` for anything that is
/// not a well-formed directory, and for an entry that claims more bytes,
/// or lies further, than the file has.
std::vector<ZipEntry> read_zip_directory(
    uint64_t file_size, const ReadAt& read, const std::string& where);

/// A torch.save file open for reading its entries by their names inside
/// its archive folder ("data.pkl", "data/0").
class ZipReader {
 public:
  /// Opens `path` and reads its directory; ampkit::IoError naming it for a
  /// file that cannot be read or is not such a zip.
  explicit ZipReader(std::string path);

  /// The entry `name` in the archive's folder, or nullptr.
  const ZipEntry* find(const std::string& name) const;
  /// Entry `e`'s `e.size` bytes into `dst`, checked against its CRC-32.
  void read(const ZipEntry& e, void* dst);
  std::string read(const ZipEntry& e);

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
  std::vector<ZipEntry> entries_;
  // Each entry's name inside the archive folder, to its first entry.
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace ampkit::checkpoint
