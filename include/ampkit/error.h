// ampkit's exception types: each names the component that raised it, and its
// message reads "<Component>: <what is wrong>, got <value>. <How to fix>."
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace ampkit {

/// Base of every exception ampkit throws. `component()` is where it came from
/// ("GradScaler", "Autocast", ...); `what()` is the full message.
class Error : public std::runtime_error {
 public:
  Error(std::string component, const std::string& message)
      : std::runtime_error(component + ": " + message),
        component_(std::move(component)) {}
  const std::string& component() const noexcept {
    return component_;
  }

 private:
  std::string component_;
};

/// A value given by the user is out of range or not one of the valid ones.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// Calls made in an order the API does not allow (PyTorch raises
/// RuntimeError for these).
class UsageError : public Error {
 public:
  using Error::Error;
};

/// The running LibTorch or the hardware cannot do what was asked.
class Unsupported : public Error {
 public:
  using Error::Error;
};

/// A file could not be read or written, or its contents are malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

/// Training cannot go on (for example the loss scale is stuck at its floor).
class TrainingDiverged : public Error {
 public:
  using Error::Error;
};

/// A distributed run cannot go on: a peer process failed, left, or did not
/// answer within the timeout. The message names the rank where known.
class DistributedError : public Error {
 public:
  using Error::Error;
};

}  // namespace ampkit
