#include "ampkit/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>

#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"
#include "ampkit/version.h"
#include "checkpoint/files.h"
#include "utils/crc32c.h"

#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "ampkit-checkpoint";
constexpr int kVersion = 1;

bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

FileRecord record_of(const std::string& name, std::string_view bytes) {
  return {name, bytes.size(), ampkit::detail::crc32c(bytes)};
}

std::string parent_of(const std::string& dir) {
  const auto parent = fs::path(dir).parent_path();
  return parent.empty() ? "." : parent.string();
}

// What an error says, without its "Component: " prefix.
std::string problem_of(const Error& e) {
  const std::string what = e.what();
  const std::string prefix = e.component() + ": ";
  return what.compare(0, prefix.size(), prefix) == 0
             ? what.substr(prefix.size())
             : what;
}

// A checkpoint folder that fails verification is evidence (of a bad disk,
// of a crash, of someone's edit) and may be all that is left of a run: it
// is renamed to <dir>.damaged (.damaged.1, ... when taken), never deleted,
// with a warning. An intact one, or one that is not there, is left alone.
void set_aside_if_damaged(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return;
  }
  std::string problem;
  try {
    verify_checkpoint(dir);
    return;
  } catch (const IoError& e) {
    problem = problem_of(e);
  }
  std::string aside = dir + ".damaged";
  for (int i = 1; fs::exists(aside, ec); ++i) {
    aside = dir + ".damaged." + std::to_string(i);
  }
  if (::rename(dir.c_str(), aside.c_str()) != 0) {
    throw IoError(
        component::kCheckpoint,
        dir + " is damaged (" + problem + ") and could not be moved aside to " +
            aside + ": " + std::strerror(errno) +
            ". It is not overwritten; move it away yourself, then save again.");
  }
  warn(
      component::kCheckpoint,
      dir + " was damaged (" + problem + "); it is kept as " + aside +
          " and a new checkpoint takes its name.",
      /*main_process_only=*/false);
}

// Replaces `to` (which may exist) with `from` in one step where the file
// system allows it; a damaged `to` is set aside rather than replaced.
void replace_directory(const std::string& from, const std::string& to) {
  std::error_code ec;
  set_aside_if_damaged(to);
  if (!fs::exists(to, ec)) {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      throw IoError(
          component::kCheckpoint,
          "cannot rename " + from + " to " + to + ": " + std::strerror(errno) +
              ".");
    }
    return;
  }
  if (::renameat2(
          AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(from, ec);  // now the old checkpoint
    return;
  }
  // No RENAME_EXCHANGE here: move the old one aside first.
  const std::string old = to + ".old";
  fs::remove_all(old, ec);
  if (::rename(to.c_str(), old.c_str()) != 0 ||
      ::rename(from.c_str(), to.c_str()) != 0) {
    throw IoError(
        component::kCheckpoint,
        "cannot replace " + to + " with " + from + ": " + std::strerror(errno) +
            ".");
  }
  fs::remove_all(old, ec);
}

}  // namespace

const FileRecord* Manifest::find(const std::string& name) const {
  for (const auto& f : files) {
    if (f.name == name) {
      return &f;
    }
  }
  return nullptr;
}

std::string encode_manifest(const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["ampkit_version"] = m.ampkit_version;
  j["world_size"] = m.world_size;
  j["step"] = m.step;
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& f : m.files) {
    j["files"].push_back(
        {{"name", f.name}, {"size", f.size}, {"crc32c", f.crc32c}});
  }
  if (!m.optimizer_partitions.empty()) {
    auto& parts = j["optimizer_partitions"] = nlohmann::ordered_json::array();
    for (const auto& p : m.optimizer_partitions) {
      parts.push_back(
          {{"zero_stage", p.zero_stage}, {"boundaries", p.boundaries}});
    }
  }
  return j.dump(2) + "\n";
}

Manifest decode_manifest(std::string_view text, const std::string& origin) {
  auto bad = [&](const std::string& problem) {
    throw IoError(component::kCheckpoint, origin + ": " + problem);
  };
  if (text.size() > 64 * 1024 * 1024) {
    bad("the manifest is " + std::to_string(text.size()) +
        " bytes, over the 64 MiB limit.");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("the manifest is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat) {
    bad(std::string(
            "not an ampkit checkpoint manifest (\"format\" must be \"") +
        kFormat + "\").");
  }
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      j["version"].get<int64_t>() < 1) {
    bad("the manifest has no valid \"version\".");
  }
  if (j["version"].get<int64_t>() > kVersion) {
    bad("the manifest has version " + j["version"].dump() +
        ", newer than this ampkit reads (" + std::to_string(kVersion) +
        "); load it with a newer ampkit.");
  }
  // An integer field in [lo, hi]; a fraction, an exponent form or a number
  // out of range is an error, never a conversion.
  auto integer = [&](const nlohmann::json& object,
                     const char* key,
                     int64_t lo,
                     int64_t hi) {
    const auto& v = object.at(key);
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                          : v.is_number_integer() && v.get<int64_t>() >= lo &&
                                v.get<int64_t>() <= hi;
    if (!fits) {
      bad(std::string("\"") + key + "\" must be an integer in [" +
          std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
          v.dump() + ".");
    }
    return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>())
                                  : v.get<int64_t>();
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Manifest m;
  try {
    m.ampkit_version = j.at("ampkit_version").get<std::string>();
    m.world_size = integer(j, "world_size", 1, 1 << 24);
    m.step = integer(j, "step", 0, kMax);
    if (!j.at("files").is_array()) {
      bad("\"files\" must be an array.");
    }
    for (const auto& f : j.at("files")) {
      FileRecord r;
      r.name = f.at("name").get<std::string>();
      r.size = static_cast<uint64_t>(integer(f, "size", 0, kMax));
      r.crc32c = static_cast<uint32_t>(integer(f, "crc32c", 0, 0xffffffffLL));
      if (!plain_name(r.name)) {
        bad("the file entry '" + r.name + "' is not a plain file name.");
      }
      m.files.push_back(std::move(r));
    }
    if (j.contains("optimizer_partitions")) {
      if (!j["optimizer_partitions"].is_array()) {
        bad("\"optimizer_partitions\" must be an array.");
      }
      for (const auto& p : j["optimizer_partitions"]) {
        Manifest::Partition part;
        part.zero_stage = integer(p, "zero_stage", 0, 3);
        for (const auto& b : p.at("boundaries")) {
          if (!b.is_number_integer() || b.get<int64_t>() < 0) {
            bad("\"boundaries\" must hold offsets >= 0, got " + b.dump() + ".");
          }
          part.boundaries.push_back(b.get<int64_t>());
        }
        m.optimizer_partitions.push_back(std::move(part));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("a manifest field is missing or has the wrong type: ") +
        e.what());
  }
  return m;
}

std::string partial_dir(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') {
    d.pop_back();
  }
  return d + ".partial";
}

CheckpointWriter::CheckpointWriter(std::string dir)
    : dir_(std::move(dir)), partial_(partial_dir(dir_)) {
  std::error_code ec;
  fs::remove_all(partial_, ec);
  fs::create_directories(partial_, ec);
  if (ec) {
    throw IoError(
        component::kCheckpoint,
        "cannot create the checkpoint folder " + partial_ + ": " +
            ec.message() + ". Pass a writable project_dir or output folder.");
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(partial_, ec);
  }
}

void CheckpointWriter::write(const std::string& name, std::string_view bytes) {
  if (!plain_name(name) || name == kManifestName) {
    throw InvalidArgument(
        component::kCheckpoint,
        "a checkpoint file needs a plain name other than manifest.json, got '" +
            name + "'.");
  }
  detail::write_file_synced((fs::path(partial_) / name).string(), bytes);
  files_.push_back(record_of(name, bytes));
  detail::fault_point();
}

void CheckpointWriter::record(const std::string& name) {
  const std::string bytes =
      detail::read_file((fs::path(partial_) / name).string());
  files_.push_back(record_of(name, bytes));
}

void CheckpointWriter::commit(Manifest manifest) {
  manifest.files = files_;
  if (manifest.ampkit_version.empty()) {
    manifest.ampkit_version = AMPKIT_VERSION;
  }
  detail::write_file_synced(
      (fs::path(partial_) / kManifestName).string(), encode_manifest(manifest));
  detail::fsync_directory(partial_);
  detail::fault_point();
  replace_directory(partial_, dir_);
  detail::fsync_directory(parent_of(dir_));
  committed_ = true;
}

void write_file(
    const std::string& dir, const std::string& name, std::string_view bytes) {
  if (!plain_name(name) || name == kManifestName) {
    throw InvalidArgument(
        component::kCheckpoint,
        "a checkpoint file needs a plain name other than manifest.json, got '" +
            name + "'.");
  }
  const std::string partial = partial_dir(dir);
  detail::write_file_synced((fs::path(partial) / name).string(), bytes);
  detail::fsync_directory(partial);
  detail::fault_point();
}

std::string read_checkpoint_file(
    const std::string& dir, const Manifest& m, const std::string& name) {
  const FileRecord* r = m.find(name);
  const std::string path = (fs::path(dir) / name).string();
  if (r == nullptr) {
    throw IoError(
        component::kCheckpoint,
        dir + ": the manifest lists no " + name +
            "; the checkpoint was saved without it.");
  }
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw IoError(
        component::kCheckpoint,
        path +
            " is missing, though the manifest lists it; the checkpoint is "
            "damaged.");
  }
  std::string bytes = detail::read_file(path);
  if (bytes.size() != r->size) {
    throw IoError(
        component::kCheckpoint,
        path + " has " + std::to_string(bytes.size()) +
            " bytes, the manifest says " + std::to_string(r->size) +
            "; the file is truncated or was changed.");
  }
  if (ampkit::detail::crc32c(bytes) != r->crc32c) {
    throw IoError(
        component::kCheckpoint,
        path + " fails its checksum (CRC32C " +
            std::to_string(ampkit::detail::crc32c(bytes)) +
            ", the manifest says " + std::to_string(r->crc32c) +
            "); the file is corrupt.");
  }
  return bytes;
}

Manifest read_manifest(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw IoError(
        component::kCheckpoint,
        "no checkpoint at " + dir + " (not a directory).");
  }
  const std::string path = (fs::path(dir) / kManifestName).string();
  if (!fs::exists(path, ec)) {
    throw IoError(
        component::kCheckpoint,
        dir +
            " has no manifest.json: the save did not complete, so it is not "
            "loaded. Load an earlier checkpoint.");
  }
  return decode_manifest(detail::read_file(path), path);
}

Manifest verify_checkpoint(const std::string& dir) {
  Manifest m = read_manifest(dir);
  for (const auto& f : m.files) {
    read_checkpoint_file(dir, m, f.name);
  }
  return m;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(
    const std::string& checkpoints_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) {
    return found;
  }
  static const std::regex pattern("checkpoint_([0-9]{1,18})");
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && std::regex_match(name, match, pattern)) {
      found.emplace_back(
          *ampkit::detail::parse_int(match[1].str()), entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::optional<std::string> latest_checkpoint(
    const std::string& checkpoints_dir) {
  auto found = list_checkpoints(checkpoints_dir);
  std::vector<std::string> damaged;
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    try {
      verify_checkpoint(it->second);
      return it->second;
    } catch (const IoError& e) {
      // Saves are written aside (.partial) and renamed into place, so a
      // checkpoint_N that fails its checks was damaged after it was saved.
      damaged.push_back("  " + problem_of(e));
      warn(
          component::kCheckpoint,
          "skipping a damaged checkpoint: " + problem_of(e) +
              " Trying the one before it.");
    }
  }
  if (!damaged.empty()) {
    std::string list;
    for (const auto& d : damaged) {
      list += "\n" + d;
    }
    throw IoError(
        component::kCheckpoint,
        checkpoints_dir + " holds checkpoints, but none is intact:" + list +
            "\nStarting fresh would save over them, so nothing was started. "
            "Restore them from a copy, or start fresh on purpose: move them "
            "out of " +
            checkpoints_dir +
            " (mv), or do not resume (the examples' "
            "--resume-from-checkpoint none).");
  }
  return std::nullopt;
}

std::vector<std::string> enforce_total_limit(
    const std::string& checkpoints_dir, int64_t limit) {
  std::vector<std::string> deleted;
  std::error_code ec;
  if (fs::is_directory(checkpoints_dir, ec)) {
    for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 8 &&
          name.compare(name.size() - 8, 8, ".partial") == 0) {
        fs::remove_all(entry.path(), ec);
        deleted.push_back(entry.path().string());
      }
    }
  }
  if (limit <= 0) {
    return deleted;
  }
  auto found = list_checkpoints(checkpoints_dir);
  std::vector<std::string> complete;
  for (const auto& [n, path] : found) {
    if (fs::exists(fs::path(path) / kManifestName, ec)) {
      complete.push_back(path);
    }
  }
  for (size_t i = 0; i + static_cast<size_t>(limit) < complete.size(); ++i) {
    fs::remove_all(complete[i], ec);
    deleted.push_back(complete[i]);
  }
  return deleted;
}

}  // namespace ampkit::checkpoint
