// GradScaler::state_dict and load_state_dict: PyTorch's five keys, and
// ampkit's extra ones only when its extensions are on.
#include "ampkit/amp/grad_scaler.h"

#include <ATen/ATen.h>

#include <string>

#include "amp/scale_update.h"
#include "ampkit/error.h"

#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit {

using detail::uses_extensions;
using detail::validate;

namespace {}  // namespace

namespace {
constexpr const char* kStateKeys[] = {
    "scale",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "_growth_tracker",
    "hysteresis",
    "min_scale",
    "max_skipped_steps_at_min_scale",
    "_consecutive_overflows",
    "_skipped_at_min_scale"};
constexpr size_t kPyTorchKeys = 5;

std::string known_keys() {
  std::string out;
  for (const char* k : kStateKeys) {
    out += (out.empty() ? "" : ", ") + std::string(k);
  }
  return out;
}

double read_double(const GradScalerState& state, const std::string& key) {
  const c10::IValue& v = state.at(key);
  if (v.isDouble()) {
    return v.toDouble();
  }
  if (v.isInt()) {
    return double(v.toInt());
  }
  throw InvalidArgument(
      component::kGradScaler,
      "state key \"" + key + "\" must be a number, got a value of type " +
          v.tagKind() + ".");
}

int64_t read_int(const GradScalerState& state, const std::string& key) {
  const c10::IValue& v = state.at(key);
  if (v.isInt()) {
    return v.toInt();
  }
  if (v.isDouble() && std::floor(v.toDouble()) == v.toDouble()) {
    return static_cast<int64_t>(v.toDouble());
  }
  throw InvalidArgument(
      component::kGradScaler,
      "state key \"" + key + "\" must be an integer, got " +
          (v.isDouble() ? detail::exact_number(v.toDouble())
                        : "a value of type " + v.tagKind()) +
          ".");
}
}  // namespace

GradScalerState GradScaler::state_dict() const {
  if (!options_.enabled()) {
    return {};
  }
  GradScalerState state;
  state["scale"] = get_scale();
  state["growth_factor"] = options_.growth_factor();
  state["backoff_factor"] = options_.backoff_factor();
  state["growth_interval"] = options_.growth_interval();
  state["_growth_tracker"] = get_growth_tracker();
  if (uses_extensions(options_)) {
    state["hysteresis"] = options_.hysteresis();
    state["min_scale"] = options_.min_scale();
    state["max_skipped_steps_at_min_scale"] =
        options_.max_skipped_steps_at_min_scale();
    state["_consecutive_overflows"] = consecutive_overflows_;
    state["_skipped_at_min_scale"] = skipped_at_min_scale_;
  }
  return state;
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  if (!options_.enabled()) {
    return;
  }
  if (state.empty()) {
    throw UsageError(
        component::kGradScaler,
        "The source state dict is empty, possibly because it was saved from "
        "a disabled instance of GradScaler.");
  }
  for (const auto& [key, value] : state) {
    bool known = false;
    for (const char* k : kStateKeys) {
      known = known || key == k;
    }
    if (!known) {
      throw InvalidArgument(
          component::kGradScaler,
          "unknown state key \"" + key + "\"; known keys: " + known_keys() +
              ".");
    }
  }
  for (size_t i = 0; i < kPyTorchKeys; ++i) {
    if (state.count(kStateKeys[i]) == 0) {
      throw InvalidArgument(
          component::kGradScaler,
          std::string("state is missing the key \"") + kStateKeys[i] +
              "\"; a GradScaler state has scale, growth_factor, "
              "backoff_factor, growth_interval and _growth_tracker.");
    }
  }
  // Everything is read and checked before anything changes, so a bad state
  // leaves the scaler as it was.
  GradScalerOptions next = options_;
  next.init_scale(read_double(state, "scale"))
      .growth_factor(read_double(state, "growth_factor"))
      .backoff_factor(read_double(state, "backoff_factor"))
      .growth_interval(read_int(state, "growth_interval"));
  if (state.count("hysteresis")) {
    next.hysteresis(read_int(state, "hysteresis"));
  }
  if (state.count("min_scale")) {
    next.min_scale(read_double(state, "min_scale"));
  }
  if (state.count("max_skipped_steps_at_min_scale")) {
    next.max_skipped_steps_at_min_scale(
        read_int(state, "max_skipped_steps_at_min_scale"));
  }
  // The saved scale may sit below a floor it reached by update(new_scale);
  // only the floor's own range is checked against it here.
  GradScalerOptions check = next;
  check.min_scale(std::min(next.min_scale(), next.init_scale()));
  validate(check);
  const int64_t tracker = read_int(state, "_growth_tracker");
  if (tracker < 0 || tracker >= next.growth_interval()) {
    throw InvalidArgument(
        component::kGradScaler,
        "_growth_tracker must be in [0, growth_interval=" +
            std::to_string(next.growth_interval()) + "), got " +
            std::to_string(tracker) + ".");
  }
  const int64_t overflows = state.count("_consecutive_overflows")
                                ? read_int(state, "_consecutive_overflows")
                                : 0;
  const int64_t at_floor = state.count("_skipped_at_min_scale")
                               ? read_int(state, "_skipped_at_min_scale")
                               : 0;

  options_ = next;
  init_scale_ = next.init_scale();
  init_growth_tracker_ = tracker;
  if (scale_.defined()) {
    scale_.fill_(init_scale_);
  }
  if (growth_tracker_.defined()) {
    growth_tracker_.fill_(tracker);
  }
  consecutive_overflows_ = overflows;
  skipped_at_min_scale_ = at_floor;
}

}  // namespace ampkit
