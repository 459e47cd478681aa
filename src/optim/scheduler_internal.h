// Private declarations shared by the scheduler files: quoting for messages,
// the warmup checks, the state counter check and the lr arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampkit::optim::detail {

/// `s` in double quotes, as the messages quote keys, kinds and modes.
std::string in_quotes(const std::string& s);

/// Throws ampkit::InvalidArgument naming `component` when `v` < 0.
void check_num_warmup_steps(const char* component, int64_t v);
void check_num_training_steps(const char* component, int64_t v);

/// Throws ampkit::InvalidArgument naming `component` when state key `key`
/// holds a counter `v` < 0.
void check_counter(
    const std::string& component, const std::string& key, int64_t v);

/// The warmup factor at `step`: step / max(1, num_warmup_steps).
double warmup_ramp(int64_t step, int64_t num_warmup_steps);

/// Each of `lrs` times `factor`.
std::vector<double> times(const std::vector<double>& lrs, double factor);

}  // namespace ampkit::optim::detail
