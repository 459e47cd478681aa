// The Autocast guard: the enter/exit sequence of Python's torch.autocast.
#include "ampkit/amp/autocast.h"

#include <ATen/autocast_mode.h>

#include <mutex>
#include <set>
#include <tuple>

#include "amp/compat.h"
#include "amp/cuda_capability.h"
#include "ampkit/amp/capability.h"
#include "ampkit/error.h"

namespace ampkit {

namespace {
AutocastOptions options_for(c10::DeviceType device_type, Precision precision) {
  if (precision == Precision::automatic) {
    throw InvalidArgument(
        "Autocast",
        "precision auto must be resolved before autocast, got auto. Pass "
        "Precision::no, fp16 or bf16 (the Accelerator resolves auto).");
  }
  if (precision == Precision::no) {
    // The dtype of a disabled guard is never used for casting; keep the
    // device's current one so that restoring changes nothing.
    return AutocastOptions(device_type, detail::autocast_get_dtype(device_type))
        .enabled(false);
  }
  return AutocastOptions(device_type, to_dtype(precision));
}

// The hardware and LibTorch do not change within a process, so each
// (device type, dtype, CUDA device) is checked once: a prepared forward
// opens a guard every step, and the full query reads every GPU's properties.
void check_supported_once(c10::DeviceType device_type, c10::ScalarType dtype) {
  using Key = std::tuple<c10::DeviceType, c10::ScalarType, int>;
  static std::mutex mutex;
  static std::set<Key> supported;
  const Key key{device_type, dtype, detail::current_cuda_device()};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (supported.count(key) != 0) {
      return;
    }
  }
  check_autocast_supported(device_type, dtype);
  std::lock_guard<std::mutex> lock(mutex);
  supported.insert(key);
}

const AutocastOptions& validated(const AutocastOptions& options) {
  if (options.device_type() != c10::DeviceType::CPU &&
      options.device_type() != c10::DeviceType::CUDA) {
    throw InvalidArgument(
        "Autocast",
        "autocast supports the device types CPU and CUDA, got " +
            c10::DeviceTypeName(options.device_type()) +
            ". Use torch::kCPU or torch::kCUDA.");
  }
  if (options.enabled()) {
    check_supported_once(options.device_type(), options.dtype());
  }
  return options;
}
}  // namespace

Autocast::Autocast(
    c10::DeviceType device_type,
    c10::ScalarType dtype,
    bool enabled,
    bool cache_enabled)
    : Autocast(AutocastOptions(device_type, dtype)
                   .enabled(enabled)
                   .cache_enabled(cache_enabled)) {}

Autocast::Autocast(c10::DeviceType device_type, Precision precision)
    : Autocast(options_for(device_type, precision)) {}

Autocast::Autocast(const AutocastOptions& options)
    : options_(validated(options)),
      prev_enabled_(detail::autocast_is_enabled(options_.device_type())),
      prev_dtype_(detail::autocast_get_dtype(options_.device_type())),
      prev_cache_enabled_(at::autocast::is_autocast_cache_enabled()) {
  const c10::DeviceType device = options_.device_type();
  detail::autocast_set_enabled(device, options_.enabled());
  // A disabled guard leaves the dtype alone: LibTorch 1.13 rejects kHalf as a
  // CPU autocast dtype even when autocast is off.
  if (options_.enabled()) {
    detail::autocast_set_dtype(device, options_.dtype());
  }
  at::autocast::increment_nesting();
  at::autocast::set_autocast_cache_enabled(options_.cache_enabled());
}

Autocast::~Autocast() {
  const c10::DeviceType device = options_.device_type();
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  detail::autocast_set_enabled(device, prev_enabled_);
  detail::autocast_set_dtype(device, prev_dtype_);
  at::autocast::set_autocast_cache_enabled(prev_cache_enabled_);
}

}  // namespace ampkit
