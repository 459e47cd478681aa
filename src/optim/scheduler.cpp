// LR schedulers: PyTorch 1.13's torch/optim/lr_scheduler.py step and state
// rules, and transformers' optimization.py warmup lambdas, in C++.
#include "ampkit/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "ampkit/error.h"

#include "utils/strings.h"

namespace ampkit::optim {

namespace {

// Python's math.pi; the cosine schedule must compute the same doubles.
constexpr double kPi = 3.141592653589793;
constexpr const char* kKinds =
    "constant_with_warmup, linear_with_warmup, cosine_with_warmup, step, "
    "reduce_on_plateau";

std::string in_quotes(const std::string& s) {
  return "\"" + s + "\"";
}

std::string keys_of(const StateDict& state) {
  std::string out;
  for (const auto& kv : state) {
    out += (out.empty() ? "" : ", ") + kv.first;
  }
  return out.empty() ? "(none)" : out;
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

void check_num_cycles(const char* component, double v) {
  if (!(v >= 0.0) || !std::isfinite(v)) {
    throw InvalidArgument(
        component,
        "num_cycles must be >= 0 and finite, got " + detail::exact_number(v) +
            ". It counts the cosine waves after warmup; 0.5 (the default) "
            "decays once from the base lr to 0.");
  }
}

void check_step_size(const char* component, int64_t v) {
  if (v < 1) {
    throw InvalidArgument(
        component,
        "step_size must be >= 1, got " + std::to_string(v) +
            ". It is the number of steps between two decays by gamma.");
  }
}

void check_gamma(const char* component, double v) {
  if (!(v > 0.0) || !std::isfinite(v)) {
    throw InvalidArgument(
        component,
        "gamma must be > 0 and finite, got " + detail::exact_number(v) +
            ". It multiplies the lr every step_size steps; PyTorch's default "
            "is 0.1.");
  }
}

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
            detail::exact_number(v) + ". " + hint);
  }
}

void validate(const ReduceLROnPlateauOptions& o) {
  // mode and threshold_mode are enums: parse_* checked the strings.
  if (!(o.factor() >= 0.0 && o.factor() < 1.0)) {
    throw InvalidArgument(
        kPlateau,
        "factor must be in [0, 1), got " + detail::exact_number(o.factor()) +
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
            (value.isDouble() ? detail::exact_number(value.toDouble())
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
              detail::exact_number(lrs[i]) + " for param group " +
              std::to_string(i) + ". Load a value saved by state_dict().");
    }
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
          detail::exact_number(metric) + ") on a " + in_quotes(name()) +
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

// ------------------------------------------------------ ConstantWithWarmup

ConstantWithWarmup::ConstantWithWarmup(
    torch::optim::Optimizer& optimizer, int64_t num_warmup_steps)
    : LRScheduler(optimizer), num_warmup_steps_(num_warmup_steps) {
  check_num_warmup_steps("ConstantWithWarmup", num_warmup_steps);
  initial_step();
}

std::vector<double> ConstantWithWarmup::get_lr() const {
  const int64_t step = last_epoch_;
  const double factor =
      step < num_warmup_steps_ ? warmup_ramp(step, num_warmup_steps_) : 1.0;
  return times(base_lrs_, factor);
}

void ConstantWithWarmup::save_own_state(StateDict& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
}

void ConstantWithWarmup::load_own_state(const StateDict& state) {
  const int64_t warmup = state.at("num_warmup_steps").toInt();
  check_num_warmup_steps("ConstantWithWarmup", warmup);
  num_warmup_steps_ = warmup;
}

// -------------------------------------------------------- LinearWithWarmup

LinearWithWarmup::LinearWithWarmup(
    torch::optim::Optimizer& optimizer,
    int64_t num_warmup_steps,
    int64_t num_training_steps)
    : LRScheduler(optimizer),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps) {
  check_num_warmup_steps("LinearWithWarmup", num_warmup_steps);
  check_num_training_steps("LinearWithWarmup", num_training_steps);
  initial_step();
}

std::vector<double> LinearWithWarmup::get_lr() const {
  const int64_t step = last_epoch_;
  if (step < num_warmup_steps_) {
    return times(base_lrs_, warmup_ramp(step, num_warmup_steps_));
  }
  const double factor = std::max(
      0.0,
      double(num_training_steps_ - step) /
          double(
              std::max<int64_t>(1, num_training_steps_ - num_warmup_steps_)));
  return times(base_lrs_, factor);
}

void LinearWithWarmup::save_own_state(StateDict& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
  state["num_training_steps"] = num_training_steps_;
}

void LinearWithWarmup::load_own_state(const StateDict& state) {
  const int64_t warmup = state.at("num_warmup_steps").toInt();
  const int64_t total = state.at("num_training_steps").toInt();
  check_num_warmup_steps("LinearWithWarmup", warmup);
  check_num_training_steps("LinearWithWarmup", total);
  num_warmup_steps_ = warmup;
  num_training_steps_ = total;
}

// -------------------------------------------------------- CosineWithWarmup

CosineWithWarmup::CosineWithWarmup(
    torch::optim::Optimizer& optimizer,
    int64_t num_warmup_steps,
    int64_t num_training_steps,
    double num_cycles)
    : LRScheduler(optimizer),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps),
      num_cycles_(num_cycles) {
  check_num_warmup_steps("CosineWithWarmup", num_warmup_steps);
  check_num_training_steps("CosineWithWarmup", num_training_steps);
  check_num_cycles("CosineWithWarmup", num_cycles);
  initial_step();
}

std::vector<double> CosineWithWarmup::get_lr() const {
  const int64_t step = last_epoch_;
  if (step < num_warmup_steps_) {
    return times(base_lrs_, warmup_ramp(step, num_warmup_steps_));
  }
  const double progress =
      double(step - num_warmup_steps_) /
      double(std::max<int64_t>(1, num_training_steps_ - num_warmup_steps_));
  // Left to right as in Python, so that the doubles are the same.
  const double factor =
      std::max(0.0, 0.5 * (1.0 + std::cos(kPi * num_cycles_ * 2.0 * progress)));
  return times(base_lrs_, factor);
}

void CosineWithWarmup::save_own_state(StateDict& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
  state["num_training_steps"] = num_training_steps_;
  state["num_cycles"] = num_cycles_;
}

void CosineWithWarmup::load_own_state(const StateDict& state) {
  const int64_t warmup = state.at("num_warmup_steps").toInt();
  const int64_t total = state.at("num_training_steps").toInt();
  const double cycles = state.at("num_cycles").toDouble();
  check_num_warmup_steps("CosineWithWarmup", warmup);
  check_num_training_steps("CosineWithWarmup", total);
  check_num_cycles("CosineWithWarmup", cycles);
  num_warmup_steps_ = warmup;
  num_training_steps_ = total;
  num_cycles_ = cycles;
}

// ------------------------------------------------------------------ StepLR

StepLR::StepLR(
    torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  check_step_size("StepLR", step_size);
  check_gamma("StepLR", gamma);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  return times(base_lrs_, std::pow(gamma_, double(last_epoch_ / step_size_)));
}

void StepLR::save_own_state(StateDict& state) const {
  state["step_size"] = step_size_;
  state["gamma"] = gamma_;
}

void StepLR::load_own_state(const StateDict& state) {
  const int64_t step_size = state.at("step_size").toInt();
  const double gamma = state.at("gamma").toDouble();
  check_step_size("StepLR", step_size);
  check_gamma("StepLR", gamma);
  step_size_ = step_size;
  gamma_ = gamma;
}

// ------------------------------------------------------- ReduceLROnPlateau

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
