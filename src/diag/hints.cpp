// The pattern -> hint table and rethrow_with_hint, which appends the hint to
// the exception being handled without changing its type.
#include "ampkit/diag/hints.h"

#include <ATen/Version.h>  // at::show_config
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <exception>
#include <string>
#include <typeinfo>
#include <utility>

#include "ampkit/error.h"
#include "ampkit/utils/memory.h"

#include "diag/compat.h"  // AMPKIT_HAVE_C10D_EXCEPTIONS, ..._GLOO_...

namespace ampkit::diag {

namespace {

constexpr std::string_view kDeviceMismatch =
    "the op's tensors are on different devices (for example the model on "
    "CUDA and the batch on the CPU). Move inputs with "
    ".to(accelerator.device()), or pass the data loader through "
    "accelerator.prepare so batches arrive on the device; the model must be "
    "prepared (accelerator.prepare) too, so its parameters are there.";

constexpr std::string_view kDtypeMismatch =
    "an op ran outside autocast on a reduced-precision (bf16/fp16) tensor and "
    "an fp32 one. Run it inside the Accelerator's autocast "
    "(auto guard = accelerator.autocast(); or the prepared model's forward), "
    "or cast with .to(torch::kFloat); prepared models return fp32 outputs.";

constexpr std::string_view kHalfOnCpu =
    "a float16 kernel this op needs is missing on the CPU (LibTorch 1.13 has "
    "almost none, 2.x still lacks many). Use mixed_precision bf16 on the CPU "
    "(AcceleratorOptions().mixed_precision(\"bf16\")), or train fp16 on a "
    "GPU.";

constexpr std::string_view kOutOfMemory =
    "the process ran out of memory. Use a smaller batch with a larger "
    "gradient_accumulation_steps to keep the effective batch, let "
    "ampkit::find_executable_batch_size find the largest batch that fits, or "
    "train with mixed_precision bf16/fp16 to halve activation memory.";

constexpr std::string_view kFp16Gradients =
    "the trainable parameters are float16, so their gradients are too and "
    "GradScaler cannot unscale them reliably. Keep trainable parameters fp32 "
    "(do not call model->to(torch::kHalf)); autocast casts them to fp16 "
    "inside the forward.";

constexpr std::string_view kRendezvous =
    "this process could not reach the store of rank 0 at "
    "MASTER_ADDR:MASTER_PORT. Check that MASTER_ADDR and MASTER_PORT are the "
    "same on every process and reachable from this machine (firewall), that "
    "all machines are on the same network, and that rank 0 started.";

constexpr std::string_view kCollectiveTimeout =
    "a collective (all-reduce, broadcast, barrier) did not complete on every "
    "rank: a rank died, is stuck, or took a different code path (a different "
    "number of collectives, or different shapes). Run with AMPKIT_DEBUG=1, "
    "which compares shapes before each collective, to see where the ranks "
    "part.";

struct Rule {
  std::string_view pattern;  // an exact, case-sensitive substring
  std::string_view hint;
};

// First match wins: specific patterns come before general ones (Gloo's
// "Timed out waiting" before the store's "has timed out").
constexpr Rule kRules[] = {
    {"Attempting to unscale FP16 gradients", kFp16Gradients},
    {"out of memory", kOutOfMemory},
    {"DefaultCPUAllocator: can't allocate memory", kOutOfMemory},
    {"not enough memory", kOutOfMemory},
    {"Expected all tensors to be on the same device", kDeviceMismatch},
    {"expected scalar type Float but found BFloat16", kDtypeMismatch},
    {"expected scalar type Float but found Half", kDtypeMismatch},
    {"expected scalar type BFloat16 but found Float", kDtypeMismatch},
    {"expected scalar type Half but found Float", kDtypeMismatch},
    {"mat1 and mat2 must have the same dtype", kDtypeMismatch},
    {"expected mat1 and mat2 to have the same dtype", kDtypeMismatch},
    {"expected m1 and m2 to have the same dtype", kDtypeMismatch},
    {"not implemented for 'Half'", kHalfOnCpu},
    {"Timed out waiting", kCollectiveTimeout},
    {"Watchdog caught collective operation timeout", kCollectiveTimeout},
    {"Application timeout caused pair closure", kCollectiveTimeout},
    {"Connection closed by peer", kCollectiveTimeout},
    {"Connection refused", kRendezvous},
    {"Connection reset by peer", kRendezvous},
    {"Socket Timeout", kRendezvous},
    {"while trying to connect to", kRendezvous},
    {"failed to connect to any network address", kRendezvous},
    {"has timed out", kRendezvous},
};

std::string with_prefix(std::string_view hint) {
  std::string out(kHintPrefix);
  out += ' ';
  out += hint;
  return out;
}

std::optional<std::string> hint_for_exception(
    const std::exception& e, std::string_view message) {
  if (message.find(kHintPrefix) != std::string_view::npos) {
    return std::nullopt;
  }
  if (is_out_of_memory(e)) {
    return with_prefix(kOutOfMemory);
  }
  return hint_for(message);
}

// Throws a new E(message) when `e` is exactly an E; returns otherwise.
template <class E>
void rethrow_if_exactly(const std::exception& e, const std::string& message) {
  if (typeid(e) == typeid(E)) {
    throw E(message);
  }
}

// ampkit's errors are rebuilt from their component and the message after
// the "<component>: " that their constructor puts in front.
template <class E>
void rethrow_ampkit_if_exactly(
    const std::exception& e, const std::string& suffix) {
  if (typeid(e) == typeid(E)) {
    const auto& error = static_cast<const Error&>(e);
    std::string message = error.what();
    const std::string lead = error.component() + ": ";
    if (message.compare(0, lead.size(), lead) == 0) {
      message.erase(0, lead.size());
    }
    throw E(error.component(), message + suffix);
  }
}

// Parses the "major.minor" at the start of `version`.
std::optional<std::pair<int, int>> major_minor(std::string_view version) {
  auto number = [&](size_t& i) -> std::optional<int> {
    const size_t start = i;
    int value = 0;
    while (i < version.size() && version[i] >= '0' && version[i] <= '9' &&
           i - start < 6) {
      value = value * 10 + (version[i] - '0');
      ++i;
    }
    if (i == start) {
      return std::nullopt;
    }
    return value;
  };
  size_t i = 0;
  auto major = number(i);
  if (!major || i >= version.size() || version[i] != '.') {
    return std::nullopt;
  }
  ++i;
  auto minor = number(i);
  if (!minor) {
    return std::nullopt;
  }
  return std::make_pair(*major, *minor);
}

}  // namespace

std::optional<std::string> hint_for(std::string_view message) {
  for (const Rule& rule : kRules) {
    if (message.find(rule.pattern) != std::string_view::npos) {
      return with_prefix(rule.hint);
    }
  }
  return std::nullopt;
}

void rethrow_with_hint() {
  if (!std::current_exception()) {
    throw UsageError(
        "rethrow_with_hint",
        "no exception is being handled. Call it inside a catch block: "
        "catch (...) { ampkit::diag::rethrow_with_hint(); }");
  }
  try {
    throw;
  } catch (c10::Error& e) {
    if (auto hint = hint_for_exception(e, e.what_without_backtrace())) {
      e.add_context(*hint);
    }
    throw;
  } catch (const std::exception& e) {
    const std::string message = e.what();
    const auto hint = hint_for_exception(e, message);
    if (!hint) {
      throw;
    }
    const std::string hinted = message + "\n" + *hint;
    const std::string suffix = "\n" + *hint;
    rethrow_if_exactly<std::runtime_error>(e, hinted);
    rethrow_ampkit_if_exactly<Error>(e, suffix);
    rethrow_ampkit_if_exactly<InvalidArgument>(e, suffix);
    rethrow_ampkit_if_exactly<UsageError>(e, suffix);
    rethrow_ampkit_if_exactly<Unsupported>(e, suffix);
    rethrow_ampkit_if_exactly<IoError>(e, suffix);
    rethrow_ampkit_if_exactly<TrainingDiverged>(e, suffix);
#ifdef AMPKIT_HAVE_C10D_EXCEPTIONS
    rethrow_if_exactly<c10d::C10dError>(e, hinted);
    rethrow_if_exactly<c10d::TimeoutError>(e, hinted);
#endif
#ifdef AMPKIT_HAVE_GLOO_EXCEPTIONS
    rethrow_if_exactly<gloo::Exception>(e, hinted);
    rethrow_if_exactly<gloo::IoException>(e, hinted);
    rethrow_if_exactly<gloo::InvalidOperationException>(e, hinted);
#endif
    throw;
  }
}

std::string running_torch_version() {
  constexpr std::string_view kKey = "TORCH_VERSION=";
  const std::string config = at::show_config();
  const size_t at = config.find(kKey);
  if (at == std::string::npos) {
    return "";
  }
  const size_t start = at + kKey.size();
  const size_t end = config.find_first_of(", \n\r\t", start);
  return config.substr(
      start, end == std::string::npos ? std::string::npos : end - start);
}

std::string built_torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR);
}

std::optional<std::string> version_mismatch(
    std::string_view built, std::string_view running) {
  const auto b = major_minor(built);
  const auto r = major_minor(running);
  if (!b || !r || *b == *r) {
    return std::nullopt;
  }
  return with_prefix(
      "ampkit was built against LibTorch " + std::string(built) +
      " but this process runs LibTorch " + std::string(running) +
      ", and LibTorch's C++ API and ABI change between minor versions. "
      "Rebuild ampkit against the LibTorch you run (CMAKE_PREFIX_PATH pointing "
      "at it), or run with the LibTorch it was built with (LD_LIBRARY_PATH).");
}

std::optional<std::string> check_torch_version() {
  return version_mismatch(built_torch_version(), running_torch_version());
}

}  // namespace ampkit::diag
