// Why a write failed, in the words a user acts on: a full disk says the
// disk is full (not "check that the folder is writable"), a read-only or
// forbidden folder says so. Every layer that writes files uses it.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

namespace ampkit::detail {

/// The reason for a failed write with errno `err`, with what to do.
inline std::string write_failure(int err) {
  const std::string system = std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return "the disk is full (" + system +
             "); free space on it, or write somewhere else";
    case EROFS:
    case EACCES:
    case EPERM:
      return "the folder is not writable (" + system +
             "); choose a folder you can write to";
    case ENOENT:
    case ENOTDIR:
      return "the folder does not exist (" + system + "); create it first";
    default:
      return system;
  }
}

}  // namespace ampkit::detail
