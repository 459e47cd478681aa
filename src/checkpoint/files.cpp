#include "checkpoint/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ampkit/error.h"
#include "utils/components.h"
#include "utils/test_hooks.h"

namespace ampkit::checkpoint::detail {
namespace {

std::string reason() {
  return std::strerror(errno);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const {
    return fd_;
  }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

std::string read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    throw IoError(
        component::kCheckpoint, "cannot read " + path + ": " + reason() + ".");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw IoError(
        component::kCheckpoint,
        "cannot read " + path + ": not a regular file.");
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      throw IoError(
          component::kCheckpoint,
          "cannot read " + path + ": " + reason() + ".");
    }
    if (n == 0) {
      bytes.resize(done);  // shrank while reading
      break;
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

void write_file_synced(const std::string& path, std::string_view bytes) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    throw IoError(
        component::kCheckpoint,
        "cannot create " + path + ": " + reason() + ".");
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw IoError(
          component::kCheckpoint,
          "writing " + path + " stopped after " + std::to_string(done) +
              " of " + std::to_string(bytes.size()) + " bytes: " + reason() +
              ". Free space on that disk (the previous checkpoint is "
              "untouched).");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) {
    throw IoError(
        component::kCheckpoint,
        "fsync of " + path + " failed: " + reason() + ".");
  }
  if (::close(fd.release()) != 0) {
    throw IoError(
        component::kCheckpoint,
        "closing " + path + " failed: " + reason() + ".");
  }
}

void fsync_directory(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    throw IoError(
        component::kCheckpoint,
        "fsync of the directory " + path + " failed: " + reason() + ".");
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    write_file_synced(tmp, bytes);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw IoError(
          component::kCheckpoint,
          "cannot rename " + tmp + " to " + path + ": " + reason() + ".");
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  auto parent = std::filesystem::path(path).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

void fault_point() {
  if (auto hook = ampkit::detail::test_hooks().after_checkpoint_file) {
    hook();
  }
}

}  // namespace ampkit::checkpoint::detail
