// tune_malloc: glibc's mmap and trim thresholds set for tensor-sized
// allocations, unless the user's environment already sets them.
#include <cstdlib>
#include <cstring>
#include <string>

#include "ampkit/error.h"
#include "ampkit/utils/memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ampkit {

namespace {

std::string mib(int64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

MallocTuning tune_malloc(int64_t mmap_threshold_bytes) {
  if (mmap_threshold_bytes < (int64_t(1) << 20) ||
      mmap_threshold_bytes > (int64_t(1) << 30)) {
    throw InvalidArgument(
        "tune_malloc",
        "mmap_threshold_bytes must be in [1 MiB, 1 GiB], got " +
            std::to_string(mmap_threshold_bytes) +
            ". The default, 256 MiB, keeps every tensor of a typical step "
            "out of mmap.");
  }
  MallocTuning t;
#if defined(__GLIBC__)
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_",
        "MALLOC_TRIM_THRESHOLD_",
        "MALLOC_TOP_PAD_"}) {
    if (std::getenv(name) != nullptr) {
      t.description = std::string("kept: ") + name + " is set";
      return t;
    }
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr &&
      std::strstr(tunables, "glibc.malloc.") != nullptr) {
    t.description = "kept: GLIBC_TUNABLES sets glibc.malloc";
    return t;
  }
  const int64_t trim = 2 * mmap_threshold_bytes;
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold_bytes)) != 1 ||
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(trim)) != 1) {
    t.description = "glibc refused mmap threshold " +
                    mib(mmap_threshold_bytes) + "; left as it was";
    return t;
  }
  t.applied = true;
  t.description = "mmap threshold " + mib(mmap_threshold_bytes) +
                  ", trim threshold " + mib(trim);
#else
  t.description = "not glibc: left as it is";
#endif
  return t;
}

}  // namespace ampkit
