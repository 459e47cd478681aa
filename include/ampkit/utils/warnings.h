// ampkit's warnings: one sink, rank-aware and replaceable, as c10's
// WarningHandler is for TORCH_WARN. Every layer warns through it, so it
// lives in the lowest one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace ampkit {

/// One warning, as the handler receives it.
struct Warning {
  /// The part of ampkit that raised it: "Accelerator", "GradScaler",
  /// "ProcessGroup", "find_executable_batch_size", ...
  std::string component;
  std::string message;
  /// This process's rank and the number of processes (0 and 1 until a
  /// distributed run starts).
  int64_t rank = 0;
  int64_t world_size = 1;
  /// True for what every process would say alike (a skipped step, a setting):
  /// the default handler prints it on rank 0 only, as accelerate's logger
  /// does with main_process_only=True.
  bool main_process_only = true;
};

/// Receives every warning, on every rank. Called under a lock: one warning
/// at a time, so it must not warn itself.
using WarningHandler = std::function<void(const Warning&)>;

/// Installs `handler` and returns the one it replaces; an empty handler
/// restores the default, which writes
///   ampkit <component>: warning: <message>
/// (with " [rank r/N]" after the component in a distributed run) to stderr.
WarningHandler set_warning_handler(WarningHandler handler);

/// Sends a warning to the handler.
void warn(
    const std::string& component,
    const std::string& message,
    bool main_process_only = true);

/// Tells the sink which process this is; the Accelerator and ProcessGroup
/// call it when they learn it.
void set_warning_rank(int64_t rank, int64_t world_size);

/// The default handler's line for `w`, without the newline.
std::string format_warning(const Warning& w);

}  // namespace ampkit
