#pragma once
// What a checkpoint folder is made of: one CheckpointItem per kind of
// object (models, optimizers, data loader positions, the GradScaler,
// registered objects, generator states, the counters, the schedulers), as
// accelerate's checkpointing.py loops over its lists of objects.
// save_state and load_state (checkpointing.cpp) only name the folder, agree
// on who writes it and run the items' phases in order; the file format and
// crash safety are the checkpoint layer's, a model's or an optimizer's
// layout over the processes its strategy's.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ampkit/checkpoint/checkpoint_dir.h"

namespace ampkit::detail {

struct AcceleratorState;

/// The folder load_state reads: each file read once, its size and CRC
/// checked against the manifest as it is read.
struct CheckpointReader {
  const checkpoint::Manifest& manifest;
  std::string dir;
  int64_t process_index = 0;
  int64_t num_processes = 1;

  bool has(const std::string& name) const;
  std::string read(const std::string& name) const;
  /// The file's path, for errors.
  std::string path(const std::string& name) const;
  /// Throws unless the folder has `name`: a shard of `what` that a resume
  /// on num_processes processes reads from each process that saved it.
  void need(const std::string& name, const std::string& what) const;
};

/// Hands over one file: its name, and what encodes its bytes (called only
/// where the file is written, not where it is only recorded).
using FileVisitor = std::function<void(
    const std::string& name, const std::function<std::string()>& bytes)>;

/// One kind of object in a checkpoint. Saving runs gather (every process),
/// then process_files (each process's own files; for the processes a writer
/// holds, to record them), shared_files (the writer's, once) and describe
/// (the manifest). Loading runs every item's check, then every read, and
/// only then the setters the reads returned: nothing changes until the
/// whole folder is read and checked.
class CheckpointItem {
 public:
  virtual ~CheckpointItem() = default;
  /// Collectives every process runs before anything is written (FSDP's
  /// whole weights, gathered for the writers).
  virtual void gather(AcceleratorState& st, bool writer);
  /// The files process `rank` saves itself (its shards, its generators).
  virtual void process_files(
      const AcceleratorState& st, int64_t rank, const FileVisitor& visit) const;
  /// The files the writer saves once for every process.
  virtual void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const;
  /// What the manifest records of this item (optimizer partitions).
  virtual void describe(
      const AcceleratorState& st, checkpoint::Manifest& manifest) const;
  /// Whether the folder holds what this run prepared (counts, presence).
  virtual void check(
      const AcceleratorState& st, const CheckpointReader& in) const;
  /// Reads and checks the item's files, changing nothing; returns what
  /// sets the state from them (run before load_state returns, so it may
  /// keep a copy of `in`).
  virtual std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const = 0;
};

/// The items of a checkpoint, in the order they are checked, read and
/// applied.
std::vector<std::unique_ptr<CheckpointItem>> checkpoint_items();

}  // namespace ampkit::detail
