// The zip reader of zip_reader.h, as APPNOTE.TXT (PKWARE's specification)
// lays a zip out: the end-of-directory record within the last 64 KiB, its
// zip64 form where a field is saturated, one directory record per entry,
// and each entry's local header before its bytes. Every length is checked
// before it is used.
#include "checkpoint/zip_reader.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "ampkit/error.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::checkpoint {
namespace {

constexpr uint64_t kEndRecord = 22;  // without its comment
constexpr uint64_t kMaxComment = 0xffff;
constexpr uint64_t kZip64Locator = 20;
constexpr uint64_t kZip64EndRecord = 56;
constexpr uint64_t kEntryRecord = 46;  // without name, extra and comment
// A torch.save file's directory holds about 100 bytes per tensor; 256 MiB
// is millions of tensors, and bounds what a damaged field makes us read.
constexpr uint64_t kMaxDirectory = uint64_t(256) << 20;

// The little-endian number of `n` bytes at `p`.
uint64_t little_endian(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) {
    v |= uint64_t(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  return v;
}

class Directory {
 public:
  Directory(uint64_t file_size, const ReadAt& read, const std::string& where)
      : size_(file_size), read_(read), where_(where) {}

  std::vector<ZipEntry> entries() {
    const uint64_t window = std::min(size_, kEndRecord + kMaxComment);
    const std::string tail = read_(size_ - window, window);
    if (tail.size() != window) {
      bad(ampkit::detail::str("cannot read its last ", window, " bytes"));
    }
    uint64_t at = std::string::npos;
    for (size_t i = tail.size() >= kEndRecord ? tail.size() - kEndRecord + 1
                                              : 0;
         i-- > 0;) {
      if (tail.compare(i, 4, "PK\x05\x06") == 0) {
        at = i;
        break;
      }
    }
    if (at == std::string::npos) {
      bad("has no zip end-of-directory record (it is not a zip file)");
    }
    const char* end = tail.data() + at;
    uint64_t count = little_endian(end + 10, 2);
    uint64_t dir_size = little_endian(end + 12, 4);
    uint64_t dir_offset = little_endian(end + 16, 4);
    if (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
      zip64(size_ - window + at, count, dir_size, dir_offset);
    }
    if (dir_offset > size_ || dir_size > size_ - dir_offset) {
      bad(ampkit::detail::str(
          "says its directory is ",
          dir_size,
          " bytes at byte ",
          dir_offset,
          ", beyond the file's end"));
    }
    if (dir_size > kMaxDirectory) {
      bad(ampkit::detail::str(
          "has a zip directory of ",
          dir_size,
          " bytes, more than the ",
          kMaxDirectory,
          " ampkit reads"));
    }
    if (count > dir_size / kEntryRecord) {
      bad(ampkit::detail::str(
          "says it holds ",
          count,
          " files in a directory of ",
          dir_size,
          " bytes"));
    }
    const std::string dir = read_(dir_offset, dir_size);
    if (dir.size() != dir_size) {
      bad("cannot read its zip directory");
    }
    std::vector<ZipEntry> out;
    out.reserve(count);
    size_t pos = 0;
    for (uint64_t i = 0; i < count; ++i) {
      out.push_back(entry(dir, pos));
    }
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    throw IoError(
        component::kAccelerator,
        "cannot read " + where_ + " as a torch.save file (zip format): it " +
            what +
            ". The file is damaged or was not written by torch.save; save it "
            "again with torch.save (PyTorch 1.6 or later).");
  }
  // The zip64 end record, which the locator just before the end record
  // points at, holds the fields the end record left saturated.
  void zip64(
      uint64_t end_at,
      uint64_t& count,
      uint64_t& dir_size,
      uint64_t& dir_offset) {
    if (end_at < kZip64Locator) {
      bad("saturates its end record's fields without a zip64 locator");
    }
    const std::string locator = read_(end_at - kZip64Locator, kZip64Locator);
    if (locator.size() != kZip64Locator ||
        locator.compare(0, 4, "PK\x06\x07") != 0) {
      bad("saturates its end record's fields without a zip64 locator");
    }
    const uint64_t record_at = little_endian(locator.data() + 8, 8);
    if (record_at > size_ || kZip64EndRecord > size_ - record_at) {
      bad(ampkit::detail::str(
          "puts its zip64 end record at byte ",
          record_at,
          ", beyond the file's end"));
    }
    const std::string record = read_(record_at, kZip64EndRecord);
    if (record.size() != kZip64EndRecord ||
        record.compare(0, 4, "PK\x06\x06") != 0) {
      bad(ampkit::detail::str("has no zip64 end record at byte ", record_at));
    }
    count = little_endian(record.data() + 32, 8);
    dir_size = little_endian(record.data() + 40, 8);
    dir_offset = little_endian(record.data() + 48, 8);
  }
  ZipEntry entry(const std::string& dir, size_t& pos) {
    if (dir.size() - pos < kEntryRecord ||
        dir.compare(pos, 4, "PK\x01\x02") != 0) {
      bad(ampkit::detail::str(
          "has a damaged zip directory record at its byte ", pos));
    }
    const char* r = dir.data() + pos;
    const size_t name_len = little_endian(r + 28, 2);
    const size_t extra_len = little_endian(r + 30, 2);
    const size_t comment_len = little_endian(r + 32, 2);
    if (dir.size() - pos - kEntryRecord < name_len + extra_len + comment_len) {
      bad(ampkit::detail::str(
          "has a zip directory record cut short at byte ", pos));
    }
    ZipEntry e;
    e.name.assign(r + kEntryRecord, name_len);
    e.flags = static_cast<uint16_t>(little_endian(r + 8, 2));
    e.method = static_cast<uint16_t>(little_endian(r + 10, 2));
    e.crc32 = static_cast<uint32_t>(little_endian(r + 16, 4));
    e.compressed_size = little_endian(r + 20, 4);
    e.size = little_endian(r + 24, 4);
    e.offset = little_endian(r + 42, 4);
    zip64_sizes(std::string_view(r + kEntryRecord + name_len, extra_len), e);
    pos += kEntryRecord + name_len + extra_len + comment_len;
    if (e.size > size_ || e.compressed_size > size_) {
      bad(ampkit::detail::str(
          "has a zip entry ",
          e.name,
          " that claims ",
          std::max(e.size, e.compressed_size),
          " bytes, more than the whole file's ",
          size_));
    }
    if (e.offset > size_ || e.compressed_size > size_ - e.offset) {
      bad(ampkit::detail::str(
          "has a zip entry ",
          e.name,
          " of ",
          e.compressed_size,
          " bytes at byte ",
          e.offset,
          ", beyond the file's end (",
          size_,
          " bytes)"));
    }
    return e;
  }
  // Extra field 0x0001 holds, in this order, each of the size, compressed
  // size and offset that the record itself saturated.
  void zip64_sizes(std::string_view extra, ZipEntry& e) {
    while (extra.size() >= 4) {
      const uint64_t id = little_endian(extra.data(), 2);
      const size_t n = little_endian(extra.data() + 2, 2);
      if (extra.size() - 4 < n) {
        bad(ampkit::detail::str(
            "has a zip entry ", e.name, " with a cut extra field"));
      }
      std::string_view data = extra.substr(4, n);
      if (id == 1) {
        for (uint64_t* v : {&e.size, &e.compressed_size, &e.offset}) {
          if (*v != 0xffffffff) {
            continue;
          }
          if (data.size() < 8) {
            bad(ampkit::detail::str(
                "has a zip entry ", e.name, " with a short zip64 field"));
          }
          *v = little_endian(data.data(), 8);
          data.remove_prefix(8);
        }
        return;
      }
      extra.remove_prefix(4 + n);
    }
  }

  uint64_t size_;
  const ReadAt& read_;
  const std::string& where_;
};

}  // namespace

std::vector<ZipEntry> read_zip_directory(
    uint64_t file_size, const ReadAt& read, const std::string& where) {
  return Directory(file_size, read, where).entries();
}

ZipReader::ZipReader(std::string path)
    : path_(std::move(path)), in_(path_, std::ios::binary) {
  std::error_code ec;
  size_ = std::filesystem::file_size(path_, ec);
  if (!in_ || ec) {
    throw IoError(
        component::kAccelerator,
        "cannot read " + path_ + " as a torch.save file: " +
            (ec ? ec.message() : std::string("it cannot be opened")) + ".");
  }
  const ReadAt read_at = [this](uint64_t offset, size_t n) {
    std::string out(n, '\0');
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(out.data(), static_cast<std::streamsize>(n));
    out.resize(static_cast<size_t>(std::max<std::streamsize>(0, in_.gcount())));
    return out;
  };
  entries_ = read_zip_directory(size_, read_at, path_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto slash = entries_[i].name.find('/');
    if (slash != std::string::npos) {
      by_name_.emplace(entries_[i].name.substr(slash + 1), i);
    }
  }
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

void ZipReader::read(const ZipEntry& e, void* dst) {
  auto bad = [&](const std::string& what) {
    throw IoError(
        component::kAccelerator,
        ampkit::detail::str(
            path_,
            ": its zip entry ",
            e.name,
            " ",
            what,
            ". The file is damaged or was not written by torch.save; save it "
            "again with torch.save."));
  };
  if ((e.flags & 1) != 0 || e.method != 0 || e.compressed_size != e.size) {
    bad(ampkit::detail::str(
        "is ",
        (e.flags & 1) != 0 ? "encrypted" : "compressed",
        " (method ",
        e.method,
        "), where torch.save stores entries as they are"));
  }
  char header[30];
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(e.offset));
  if (!in_.read(header, sizeof(header)) ||
      std::string_view(header, 4) != "PK\x03\x04") {
    bad(ampkit::detail::str("has no local header at byte ", e.offset));
  }
  const uint64_t data_at =
      e.offset + sizeof(header) +
      static_cast<uint64_t>(little_endian(header + 26, 2)) +
      little_endian(header + 28, 2);
  if (data_at > size_ || e.size > size_ - data_at) {
    bad(ampkit::detail::str(
        "of ",
        e.size,
        " bytes at byte ",
        data_at,
        " runs past the file's end"));
  }
  in_.seekg(static_cast<std::streamoff>(data_at));
  auto* out = static_cast<char*>(dst);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (uint64_t done = 0; done < e.size;) {
    // zlib's crc32 takes a uInt length: 1 GiB at a time.
    const uint64_t n = std::min<uint64_t>(e.size - done, uint64_t(1) << 30);
    if (!in_.read(out + done, static_cast<std::streamsize>(n))) {
      bad(ampkit::detail::str("cannot be read whole (", e.size, " bytes)"));
    }
    crc = ::crc32(
        crc, reinterpret_cast<const Bytef*>(out + done), static_cast<uInt>(n));
    done += n;
  }
  if (static_cast<uint32_t>(crc) != e.crc32) {
    bad("does not match its CRC-32");
  }
}

std::string ZipReader::read(const ZipEntry& e) {
  std::string out(e.size, '\0');
  read(e, out.data());
  return out;
}

}  // namespace ampkit::checkpoint
