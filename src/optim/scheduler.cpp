// LR schedulers: the LRScheduler base with PyTorch 1.13's step and state_dict
// rules, and the helpers the schedulers share (optim/scheduler_internal.h).
#include "ampkit/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "optim/scheduler_internal.h"

#include "utils/strings.h"

namespace ampkit::optim {

namespace detail {

std::string in_quotes(const std::string& s) {
  return "\"" + s + "\"";
}

void check_num_warmup_steps(const char* component, int64_t v) {
  if (v < 0) {
    throw InvalidArgument(
        component,
        "num_warmup_steps must be >= 0, got " + std::to_string(v) +
            ". It is the number of steps over which the lr rises from 0 to "
            "the base lr; 0 means no warmup.");
  }
}

void check_num_training_steps(const char* component, int64_t v) {
  if (v < 0) {
    throw InvalidArgument(
        component,
        "num_training_steps must be >= 0, got " + std::to_string(v) +
            ". It is the total number of optimizer steps, warmup included.");
  }
}

void check_counter(
    const std::string& component, const std::string& key, int64_t v) {
  if (v < 0) {
    throw InvalidArgument(
        component,
        "state key " + in_quotes(key) + " must be >= 0, got " +
            std::to_string(v) + ". Load a value saved by state_dict().");
  }
}

double warmup_ramp(int64_t step, int64_t num_warmup_steps) {
  return double(step) / double(std::max<int64_t>(1, num_warmup_steps));
}

std::vector<double> times(const std::vector<double>& lrs, double factor) {
  std::vector<double> out;
  out.reserve(lrs.size());
  for (double lr : lrs) {
    out.push_back(lr * factor);
  }
  return out;
}

}  // namespace detail

using detail::check_counter;
using detail::in_quotes;

namespace {

constexpr const char* kKinds =
    "constant_with_warmup, linear_with_warmup, cosine_with_warmup, step, "
    "reduce_on_plateau";

std::string keys_of(const StateDict& state) {
  std::string out;
  for (const auto& kv : state) {
    out += (out.empty() ? "" : ", ") + kv.first;
  }
  return out.empty() ? "(none)" : out;
}

// `value` in the representation `like` (saved by state_dict()) has:
// integral doubles become Int, integers Double; lists need one entry per
// param group.
c10::IValue coerce(
    const std::string& component,
    const std::string& key,
    const c10::IValue& value,
    const c10::IValue& like,
    size_t num_groups) {
  const std::string where = "state key " + in_quotes(key);
  const std::string fix = " Load a value saved by state_dict().";
  if (like.isInt()) {
    if (value.isInt()) {
      return value;
    }
    if (value.isDouble() && std::floor(value.toDouble()) == value.toDouble()) {
      return static_cast<int64_t>(value.toDouble());
    }
    throw InvalidArgument(
        component,
        where + " must be an integer, got " +
            (value.isDouble() ? ampkit::detail::exact_number(value.toDouble())
                              : "a value of type " + value.tagKind()) +
            "." + fix);
  }
  if (like.isDouble()) {
    if (value.isDouble() || value.isInt()) {
      return value.isDouble() ? value.toDouble() : double(value.toInt());
    }
    throw InvalidArgument(
        component,
        where + " must be a number, got a value of type " + value.tagKind() +
            "." + fix);
  }
  if (like.isString()) {
    if (value.isString()) {
      return value;
    }
    throw InvalidArgument(
        component,
        where + " must be a string, got a value of type " + value.tagKind() +
            "." + fix);
  }
  // A list of numbers, one per param group.
  std::vector<double> list;
  if (value.isDoubleList()) {
    list = value.toDoubleVector();
  } else if (value.isIntList()) {
    for (int64_t v : value.toIntVector()) {
      list.push_back(double(v));
    }
  } else {
    throw InvalidArgument(
        component,
        where + " must be a list of numbers, one per param group, got a " +
            "value of type " + value.tagKind() + "." + fix);
  }
  if (list.size() != num_groups) {
    throw InvalidArgument(
        component,
        where + " has one entry per param group, got " +
            std::to_string(list.size()) + " entries for an optimizer with " +
            std::to_string(num_groups) +
            " param groups. Load a state saved with the same param groups.");
  }
  return list;
}

void check_lrs(
    const std::string& component,
    const std::string& key,
    const std::vector<double>& lrs) {
  for (size_t i = 0; i < lrs.size(); ++i) {
    if (!(lrs[i] >= 0.0) || !std::isfinite(lrs[i])) {
      throw InvalidArgument(
          component,
          "state key " + in_quotes(key) + " must hold finite lrs >= 0, got " +
              ampkit::detail::exact_number(lrs[i]) + " for param group " +
              std::to_string(i) + ". Load a value saved by state_dict().");
    }
  }
}

}  // namespace

// ------------------------------------------------------------- LRScheduler

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer)
    : optimizer_(optimizer) {
  base_lrs_ = current_lrs();
  last_lr_ = base_lrs_;
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply_lrs(get_lr());
}

void LRScheduler::step(double metric) {
  throw UsageError(
      component(),
      "step(metric) is only for ReduceLROnPlateau, got step(" +
          ampkit::detail::exact_number(metric) + ") on a " + in_quotes(name()) +
          " scheduler. Call step() after each optimizer step; this schedule "
          "depends on the step count alone.");
}

const std::vector<double>& LRScheduler::get_last_lr() const {
  return last_lr_;
}

int64_t LRScheduler::last_epoch() const {
  return last_epoch_;
}

torch::optim::Optimizer& LRScheduler::optimizer() {
  return optimizer_;
}

std::vector<double> LRScheduler::get_lr() const {
  return current_lrs();
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  last_epoch_ = -1;
  LRScheduler::step();
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> lrs;
  for (const auto& group : optimizer_.param_groups()) {
    lrs.push_back(group.options().get_lr());
  }
  return lrs;
}

void LRScheduler::apply_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size() && i < lrs.size(); ++i) {
    groups[i].options().set_lr(lrs[i]);
  }
  last_lr_ = lrs;
}

std::string LRScheduler::component() const {
  const std::string kind = name();
  if (kind == "constant_with_warmup") {
    return "ConstantWithWarmup";
  }
  if (kind == "linear_with_warmup") {
    return "LinearWithWarmup";
  }
  if (kind == "cosine_with_warmup") {
    return "CosineWithWarmup";
  }
  if (kind == "step") {
    return "StepLR";
  }
  if (kind == "reduce_on_plateau") {
    return "ReduceLROnPlateau";
  }
  return "LRScheduler";
}

StateDict LRScheduler::state_dict() const {
  StateDict state;
  state["scheduler"] = name();
  state["last_epoch"] = last_epoch_;
  state["_last_lr"] = last_lr_;
  // PyTorch 1.13's ReduceLROnPlateau is no _LRScheduler: it has neither.
  if (!takes_metric()) {
    state["base_lrs"] = base_lrs_;
    state["_step_count"] = step_count_;
  }
  save_own_state(state);
  return state;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const std::string who = component();
  const StateDict expected = state_dict();
  // The kind comes first: another kind's keys differ, and saying so is
  // clearer than listing them.
  auto kind = state.find("scheduler");
  if (kind == state.end()) {
    throw InvalidArgument(
        who,
        "state is missing the key \"scheduler\", got the keys " +
            keys_of(state) + ". Load a state saved by state_dict() of a " +
            in_quotes(name()) + " scheduler.");
  }
  if (!kind->second.isString()) {
    throw InvalidArgument(
        who,
        "state key \"scheduler\" must be a string, got a value of type " +
            kind->second.tagKind() +
            ". It is the kind that saved the state: " + kKinds + ".");
  }
  if (kind->second.toStringRef() != name()) {
    throw InvalidArgument(
        who,
        "state is from another kind of scheduler, got " +
            in_quotes(kind->second.toStringRef()) + " for a " +
            in_quotes(name()) +
            " scheduler. Load it into a scheduler of its kind (" + kKinds +
            ").");
  }
  for (const auto& kv : state) {
    if (expected.count(kv.first) == 0) {
      throw InvalidArgument(
          who,
          "state has an unknown key, got " + in_quotes(kv.first) + ". A " +
              in_quotes(name()) + " state has the keys " + keys_of(expected) +
              ".");
    }
  }
  for (const auto& kv : expected) {
    if (state.count(kv.first) == 0) {
      throw InvalidArgument(
          who,
          "state is missing the key " + in_quotes(kv.first) +
              ", got the keys " + keys_of(state) + ". A " + in_quotes(name()) +
              " state has the keys " + keys_of(expected) + ".");
    }
  }
  const size_t num_groups = optimizer_.param_groups().size();
  StateDict checked;
  for (const auto& [key, like] : expected) {
    checked[key] = coerce(who, key, state.at(key), like, num_groups);
  }
  const int64_t last_epoch = checked.at("last_epoch").toInt();
  check_counter(who, "last_epoch", last_epoch);
  const std::vector<double> last_lr = checked.at("_last_lr").toDoubleVector();
  check_lrs(who, "_last_lr", last_lr);
  const bool has_base = checked.count("base_lrs") > 0;
  std::vector<double> base_lrs = base_lrs_;
  int64_t step_count = step_count_;
  if (has_base) {
    base_lrs = checked.at("base_lrs").toDoubleVector();
    check_lrs(who, "base_lrs", base_lrs);
    step_count = checked.at("_step_count").toInt();
    check_counter(who, "_step_count", step_count);
  }
  // The last check that can throw; nothing below does.
  load_own_state(checked);
  last_epoch_ = last_epoch;
  base_lrs_ = std::move(base_lrs);
  step_count_ = step_count;
  apply_lrs(last_lr);
}

}  // namespace ampkit::optim
