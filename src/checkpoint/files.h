// File primitives of the checkpoint layer: whole-file reads, writes that
// reach the disk (fsync) before they count, and the fault-injection point
// the crash tests use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ampkit::checkpoint::detail {

/// The whole file; IoError naming `path` and errno's reason when it cannot
/// be read.
std::string read_file(const std::string& path);

/// Creates or truncates `path`, writes `bytes` and fsyncs it; a short write
/// (a full disk) is an IoError naming the file and the bytes written.
void write_file_synced(const std::string& path, std::string_view bytes);

/// fsync of a directory, so that the names created in it are on disk.
void fsync_directory(const std::string& path);

/// write_file_synced to `path`.tmp-<pid>, then rename over `path` and fsync
/// the directory: readers see the old file or the whole new one.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Called after each file a checkpoint writes: the test hook that crashes a
/// save midway (utils/test_hooks.h); nothing in a normal run.
void fault_point();

}  // namespace ampkit::checkpoint::detail
