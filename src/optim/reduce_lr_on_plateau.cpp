// ReduceLROnPlateau: PyTorch 1.13's step and state rules, the validation of
// its options, and the names of PlateauMode and ThresholdMode.
#include "ampkit/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "optim/scheduler_internal.h"

#include "utils/strings.h"

namespace ampkit::optim {

using detail::check_counter;
using detail::in_quotes;

namespace {

constexpr const char* kPlateau = "ReduceLROnPlateau";

void check_non_negative(const char* what, int64_t v, const char* hint) {
  if (v < 0) {
    throw InvalidArgument(
        kPlateau,
        std::string(what) + " must be >= 0, got " + std::to_string(v) + ". " +
            hint);
  }
}

void check_non_negative(const char* what, double v, const char* hint) {
  if (!(v >= 0.0) || !std::isfinite(v)) {
    throw InvalidArgument(
        kPlateau,
        std::string(what) + " must be >= 0 and finite, got " +
            ampkit::detail::exact_number(v) + ". " + hint);
  }
}

void validate(const ReduceLROnPlateauOptions& o) {
  // mode and threshold_mode are enums: parse_* checked the strings.
  if (!(o.factor() >= 0.0 && o.factor() < 1.0)) {
    throw InvalidArgument(
        kPlateau,
        "factor must be in [0, 1), got " +
            ampkit::detail::exact_number(o.factor()) +
            ". It multiplies the lr on a plateau; PyTorch's default is 0.1.");
  }
  check_non_negative(
      "patience",
      o.patience(),
      "It is the number of steps without improvement tolerated before the lr "
      "is reduced; PyTorch's default is 10.");
  check_non_negative(
      "threshold",
      o.threshold(),
      "It is how much better than the best a metric must be; PyTorch's "
      "default is 1e-4.");
  check_non_negative(
      "cooldown",
      o.cooldown(),
      "It is the number of steps after a reduction in which bad steps are "
      "not counted; PyTorch's default is 0.");
  check_non_negative(
      "min_lr", o.min_lr(), "It is the lowest lr of every group; default 0.");
  check_non_negative(
      "eps",
      o.eps(),
      "Reductions smaller than eps are skipped; PyTorch's default is 1e-8.");
}

}  // namespace

std::string to_string(PlateauMode mode) {
  return mode == PlateauMode::min ? "min" : "max";
}

std::string to_string(ThresholdMode mode) {
  return mode == ThresholdMode::rel ? "rel" : "abs";
}

PlateauMode parse_plateau_mode(const std::string& text) {
  if (text == "min" || text == "max") {
    return text == "min" ? PlateauMode::min : PlateauMode::max;
  }
  throw InvalidArgument(
      kPlateau,
      "mode must be one of \"min\", \"max\", got " + in_quotes(text) +
          ". Use \"min\" for a metric that should decrease (a loss), "
          "\"max\" for one that should increase (an accuracy).");
}

ThresholdMode parse_threshold_mode(const std::string& text) {
  if (text == "rel" || text == "abs") {
    return text == "rel" ? ThresholdMode::rel : ThresholdMode::abs;
  }
  throw InvalidArgument(
      kPlateau,
      "threshold_mode must be one of \"rel\", \"abs\", got " + in_quotes(text) +
          ". \"rel\" compares with best * (1 -/+ threshold), \"abs\" with "
          "best -/+ threshold.");
}

ReduceLROnPlateau::ReduceLROnPlateau(
    torch::optim::Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  validate(options_);
  min_lrs_.assign(base_lrs_.size(), options_.min_lr());
  const double inf = std::numeric_limits<double>::infinity();
  best_ =
      options_.mode() == PlateauMode::min ? inf : -inf;  // PyTorch's mode_worse
  // PyTorch starts it at 0 and makes no initial step.
  last_epoch_ = 0;
}

void ReduceLROnPlateau::step() {
  throw UsageError(
      kPlateau,
      "step() needs the metric this scheduler watches, got no metric. Call "
      "step(metric) once per evaluation with the monitored value (mode " +
          in_quotes(to_string(options_.mode())) + ").");
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad steps in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience()) {
    auto& groups = optimizer_.param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].options().get_lr();
      const double new_lr = std::max(old_lr * options_.factor(), min_lrs_[i]);
      if (old_lr - new_lr > options_.eps()) {
        groups[i].options().set_lr(new_lr);
      }
    }
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
  last_lr_ = current_lrs();
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const double t = options_.threshold();
  const bool rel = options_.threshold_mode() == ThresholdMode::rel;
  if (options_.mode() == PlateauMode::min) {
    return rel ? a < best * (1.0 - t) : a < best - t;
  }
  return rel ? a > best * (t + 1.0) : a > best + t;
}

void ReduceLROnPlateau::save_own_state(StateDict& state) const {
  state["mode"] = to_string(options_.mode());
  state["factor"] = options_.factor();
  state["patience"] = options_.patience();
  state["threshold"] = options_.threshold();
  state["threshold_mode"] = to_string(options_.threshold_mode());
  state["cooldown"] = options_.cooldown();
  state["min_lrs"] = min_lrs_;
  state["eps"] = options_.eps();
  state["best"] = best_;
  state["num_bad_epochs"] = num_bad_epochs_;
  state["cooldown_counter"] = cooldown_counter_;
}

void ReduceLROnPlateau::load_own_state(const StateDict& state) {
  ReduceLROnPlateauOptions next = options_;
  next.mode(parse_plateau_mode(state.at("mode").toStringRef()))
      .factor(state.at("factor").toDouble())
      .patience(state.at("patience").toInt())
      .threshold(state.at("threshold").toDouble())
      .threshold_mode(
          parse_threshold_mode(state.at("threshold_mode").toStringRef()))
      .cooldown(state.at("cooldown").toInt())
      .eps(state.at("eps").toDouble());
  validate(next);
  const std::vector<double> min_lrs = state.at("min_lrs").toDoubleVector();
  for (size_t i = 0; i < min_lrs.size(); ++i) {
    check_non_negative(
        ("min_lrs[" + std::to_string(i) + "]").c_str(),
        min_lrs[i],
        "It is the lowest lr of that param group.");
  }
  const double best = state.at("best").toDouble();
  if (std::isnan(best)) {
    throw InvalidArgument(
        kPlateau,
        "state key \"best\" must be a number or +-inf, got nan. Load a value "
        "saved by state_dict().");
  }
  const int64_t bad = state.at("num_bad_epochs").toInt();
  check_counter(kPlateau, "num_bad_epochs", bad);
  const int64_t counter = state.at("cooldown_counter").toInt();
  if (counter < 0 || counter > next.cooldown()) {
    throw InvalidArgument(
        kPlateau,
        "state key \"cooldown_counter\" must be in [0, cooldown=" +
            std::to_string(next.cooldown()) + "], got " +
            std::to_string(counter) + ". Load a value saved by state_dict().");
  }
  options_ = next;
  min_lrs_ = min_lrs;
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = counter;
}

}  // namespace ampkit::optim
