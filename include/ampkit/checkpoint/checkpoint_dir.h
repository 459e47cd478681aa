// A checkpoint directory that is either complete or ignored: files are
// written into DIR.partial and fsynced, a manifest.json listing every file
// with its size and CRC32C goes in last, and the directory is then swapped
// into place by one rename. A directory without a manifest that matches its
// files is never loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampkit::checkpoint {

struct FileRecord {
  std::string name;  ///< a plain file name inside the checkpoint
  uint64_t size = 0;
  uint32_t crc32c = 0;
};

/// manifest.json: {"format": "ampkit-checkpoint", "version": 1,
/// "ampkit_version", "world_size", "step", "files": [{name, size, crc32c}]}.
struct Manifest {
  std::string ampkit_version;
  int64_t world_size = 1;
  int64_t step = 0;
  std::vector<FileRecord> files;
  /// ZeRO: how a sharded optimizer's flattened parameters were split among
  /// the ranks, which must match to resume its shards.
  struct Partition {
    int64_t zero_stage = 0;  ///< 0: not sharded; 3: FSDP's shards
    /// world_size + 1 offsets: rank r held [boundaries[r], boundaries[r+1])
    /// (FSDP: 0, 1, ..., world_size, one shard file per process).
    std::vector<int64_t> boundaries;
  };
  /// One per prepared optimizer, in order; empty when none was sharded.
  std::vector<Partition> optimizer_partitions;

  /// The record of `name`, or nullptr.
  const FileRecord* find(const std::string& name) const;
};

constexpr const char* kManifestName = "manifest.json";

std::string encode_manifest(const Manifest& manifest);
/// Throws ampkit::IoError naming `origin` for malformed JSON, another
/// format or a newer version, or a file entry that is not a plain name.
Manifest decode_manifest(std::string_view text, const std::string& origin);

/// Where the files of a checkpoint in `dir` are written before commit().
std::string partial_dir(const std::string& dir);

/// Writes one checkpoint. The constructor removes a partial directory a
/// crashed save left and creates a fresh one (the main process only; the
/// other ranks write their own files into partial_dir() with write_file()).
class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string dir);
  /// Abandons an uncommitted checkpoint: the partial directory is removed.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  const std::string& dir() const {
    return dir_;
  }
  /// Writes and fsyncs `name` in the partial directory and records it.
  void write(const std::string& name, std::string_view bytes);
  /// Records a file another process wrote into the partial directory.
  void record(const std::string& name);
  /// Writes the manifest (with `manifest.files` set to what was written or
  /// recorded) and atomically replaces `dir` with the partial directory.
  void commit(Manifest manifest);

 private:
  std::string dir_;
  std::string partial_;
  std::vector<FileRecord> files_;
  bool committed_ = false;
};

/// Writes and fsyncs `name` into the partial directory of `dir` (a non-main
/// rank's file; the main process then record()s it).
void write_file(
    const std::string& dir, const std::string& name, std::string_view bytes);

/// Reads `dir`/manifest.json without checking the files: IoError when `dir`
/// is no folder or has no manifest (an incomplete save), or it is malformed.
Manifest read_manifest(const std::string& dir);

/// read_manifest, then checks every listed file's size and CRC32C.
/// Throws ampkit::IoError naming the directory and the first problem: no
/// manifest (an incomplete save), a missing file, a size or checksum that
/// differs.
Manifest verify_checkpoint(const std::string& dir);

/// The bytes of `name` in a verified checkpoint (size and CRC checked again
/// against the manifest, so a file changed since is still caught).
std::string read_checkpoint_file(
    const std::string& dir, const Manifest& manifest, const std::string& name);

/// checkpoint_N directories under `checkpoints_dir`, in increasing N.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(
    const std::string& checkpoints_dir);

/// The intact checkpoint with the largest N, or nullopt when there is no
/// checkpoint_N at all. Each damaged one passed over (a file missing,
/// truncated or failing its CRC, no manifest) is warned about by name; when
/// checkpoints exist and none is intact, an IoError lists them (starting
/// fresh would save over them).
std::optional<std::string> latest_checkpoint(
    const std::string& checkpoints_dir);

/// Deletes the oldest complete checkpoints until at most `limit` remain
/// (0: no limit), and partial directories of crashed saves; returns the
/// deleted paths.
std::vector<std::string> enforce_total_limit(
    const std::string& checkpoints_dir, int64_t limit);

}  // namespace ampkit::checkpoint
