// The single-node rendezvous: a FileStore in a private (0700) directory,
// and the marker that tells the ranks of this run where it is.
#include "distributed/file_rendezvous.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit::dist::detail {

namespace {

std::string sanitize(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
            c == '_' || c == '.')
               ? c
               : '_';
  }
  return out.empty() ? "run" : out.substr(0, 64);
}

/// A directory only this user can enter, created when missing; anything
/// else at that path (a symlink, another owner, group/other access) is
/// refused rather than trusted.
void ensure_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    throw IoError(
        component::kDistributed,
        "cannot create the rendezvous directory " + path + ": " +
            std::strerror(errno) +
            ". Set AMPKIT_RDZV_DIR to a writable directory.");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != ::getuid() || (st.st_mode & 077) != 0) {
    throw IoError(
        component::kDistributed,
        "the rendezvous directory " + path +
            " must be a directory owned by this user with mode 0700 (no "
            "symlink), got something else. Remove it, or set "
            "AMPKIT_RDZV_DIR to a private directory.");
  }
}

/// The start time of a process (field 22 of /proc/PID/stat), or "" when it
/// does not exist: a PID alone may be reused.
std::string process_start_time(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const auto close = stat.rfind(')');
  if (close == std::string::npos) {
    return "";
  }
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
  }
  return field;
}

std::string random_nonce() {
  std::random_device device;
  std::mt19937_64 gen(
      (static_cast<uint64_t>(device()) << 32) ^ device() ^
      static_cast<uint64_t>(
          std::chrono::steady_clock::now().time_since_epoch().count()));
  char text[17];
  std::snprintf(
      text, sizeof(text), "%016llx", static_cast<unsigned long long>(gen()));
  return text;
}

}  // namespace

std::string seconds(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

FileRendezvous file_rendezvous(
    const DistEnv& env, std::chrono::milliseconds timeout) {
  std::string base;
  if (const char* d = std::getenv("AMPKIT_RDZV_DIR"); d && *d) {
    base = d;
  } else {
    const char* tmp = std::getenv("XDG_RUNTIME_DIR");
    if (tmp == nullptr || *tmp == '\0') {
      tmp = std::getenv("TMPDIR");
    }
    base = std::string(tmp && *tmp ? tmp : "/tmp") + "/ampkit-" +
           std::to_string(::getuid());
  }
  ensure_private_dir(base);
  FileRendezvous r;
  r.dir = base + "/rdzv-" + sanitize(env.run_id) + "-" +
          std::to_string(env.master_port);
  r.marker = r.dir + "/owner";
  if (env.rank == 0) {
    ensure_private_dir(r.dir);
    // Stores of earlier runs with this name are stale: their rank 0 is us.
    if (DIR* d = ::opendir(r.dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name.rfind("store-", 0) == 0 || name.rfind("owner.", 0) == 0) {
          ::unlink((r.dir + "/" + name).c_str());
        }
      }
      ::closedir(d);
    }
    const std::string nonce = random_nonce();
    const long pid = static_cast<long>(::getpid());
    const std::string tmp = r.marker + "." + std::to_string(pid);
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << pid << ' ' << process_start_time(pid) << ' ' << nonce << '\n';
      if (!out.flush()) {
        throw IoError(
            component::kDistributed,
            "cannot write the rendezvous marker " + tmp);
      }
    }
    if (::rename(tmp.c_str(), r.marker.c_str()) != 0) {
      throw IoError(
          component::kDistributed,
          "cannot publish the rendezvous marker " + r.marker + ": " +
              std::strerror(errno));
    }
    r.store_path = r.dir + "/store-" + nonce;
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_seen = "no marker yet";
  while (true) {
    std::ifstream in(r.marker);
    long pid = 0;
    std::string start, nonce;
    if (in >> pid >> start >> nonce) {
      if (process_start_time(pid) == start) {
        r.store_path = r.dir + "/store-" + nonce;
        return r;
      }
      last_seen = "a stale marker of process " + std::to_string(pid) +
                  ", which is no longer running";
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw DistributedError(
          component::kDistributed,
          "rank " + std::to_string(env.rank) + " waited " + seconds(timeout) +
              " for rank 0 to open the rendezvous " + r.marker + ", got " +
              last_seen +
              ". Start all WORLD_SIZE=" + std::to_string(env.world_size) +
              " processes with the same MASTER_PORT (" +
              std::to_string(env.master_port) +
              ") within the timeout, e.g. with `ampkit launch`.");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ampkit::dist::detail
