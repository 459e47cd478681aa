// ampkit::Autocast: an RAII guard that runs the code in its scope under
// LibTorch's autocast, as Python's `with torch.autocast(...)` does.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/arg.h>

#include "ampkit/amp/precision.h"

namespace ampkit {

struct AutocastOptions {
  AutocastOptions(c10::DeviceType device_type, c10::ScalarType dtype)
      : device_type_(device_type), dtype_(dtype) {}
  /// Device whose ops are autocast: torch::kCPU or torch::kCUDA.
  TORCH_ARG(c10::DeviceType, device_type);
  /// Reduced precision to cast to: torch::kBFloat16 or torch::kHalf.
  TORCH_ARG(c10::ScalarType, dtype);
  /// false runs the scope in full precision (autocast off for the device);
  /// a disabled guard neither checks nor sets the dtype.
  TORCH_ARG(bool, enabled) = true;
  /// Cache the low-precision copies of weights within the outermost scope.
  TORCH_ARG(bool, cache_enabled) = true;
};

/// On construction saves the device's autocast state, applies the options and
/// increments autocast's nesting counter; on destruction (also during stack
/// unwinding) decrements it, clears the cast cache when the outermost guard
/// exits, and restores the enabled flag, dtype and cache flag it found.
/// What the running LibTorch or hardware cannot do is refused here, with a
/// message that says what to use instead (ampkit::Unsupported).
///
///   ampkit::Autocast guard(torch::kCPU, torch::kBFloat16);
///   auto out = model->forward(x); // linear/conv/matmul run in bf16
class Autocast {
 public:
  Autocast(
      c10::DeviceType device_type,
      c10::ScalarType dtype,
      bool enabled = true,
      bool cache_enabled = true);
  explicit Autocast(const AutocastOptions& options);
  /// Precision::no gives a disabled guard; `automatic` is rejected (resolve
  /// it first).
  Autocast(c10::DeviceType device_type, Precision precision);
  ~Autocast();

  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;
  Autocast(Autocast&&) = delete;
  Autocast& operator=(Autocast&&) = delete;

  const AutocastOptions& options() const {
    return options_;
  }

 private:
  AutocastOptions options_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
  bool prev_cache_enabled_;
};

}  // namespace ampkit
