// Error translation: LibTorch's and c10d's error messages, rethrown with an
// "ampkit hint:" line saying the likely cause and the fix in ampkit's terms.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ampkit::diag {

/// What every hint starts with; a message holding it already has its hint.
inline constexpr std::string_view kHintPrefix = "ampkit hint:";

/// The hint for a LibTorch error message, or empty when no known pattern
/// matches: "ampkit hint: <cause>. <fix>." Matches exact substrings of
/// messages from LibTorch 1.13 and 2.x (device and dtype mismatches, missing
/// CPU fp16 kernels, out of memory, GradScaler's fp16-gradient error, c10d
/// rendezvous failures, Gloo/NCCL collective timeouts).
std::optional<std::string> hint_for(std::string_view message);

/// Rethrows the exception being handled, with its hint appended to its
/// message when one applies, keeping its type. Call it inside a catch block:
///
///   try { train_step(); } catch (...) { ampkit::diag::rethrow_with_hint(); }
///
/// A c10::Error (or subclass such as c10::OutOfMemoryError) gets the hint as
/// context (add_context) and is rethrown as the same object. Other
/// exceptions are rebuilt with "<message>\n<hint>" when their exact type is
/// std::runtime_error, an ampkit::Error type, c10d's C10dError/TimeoutError
/// (plain std::runtime_error subclasses in LibTorch 1.13) or gloo's
/// Exception/IoException/InvalidOperationException; any other type, a
/// message with no hint, and a message that already holds kHintPrefix are
/// rethrown unchanged. Out-of-memory errors (ampkit::is_out_of_memory) get
/// the out-of-memory hint whatever their text. Throws ampkit::UsageError when
/// no exception is being handled.
[[noreturn]] void rethrow_with_hint();

/// The LibTorch version the process runs, "x.y.z" as at::show_config()
/// reports it (TORCH_VERSION=...), or empty when it reports none.
std::string running_torch_version();

/// The LibTorch version ampkit was built against, "major.minor" from
/// <torch/version.h> when ampkit was compiled.
std::string built_torch_version();

/// A hint-style message when `built` and `running` ("1.13", "2.11.0", ...)
/// differ in major.minor; empty when they agree or either does not parse.
std::optional<std::string> version_mismatch(
    std::string_view built, std::string_view running);

/// version_mismatch(built_torch_version(), running_torch_version()).
std::optional<std::string> check_torch_version();

}  // namespace ampkit::diag
