// Reading a run directory's files back: config.json into a RunConfig, and
// metrics.jsonl or metrics.csv into one (step, value) series per metric.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ampkit/track/tracker.h"

namespace ampkit::track::detail {

/// (step, value) pairs of one metric, in the order they were logged.
using Series = std::vector<std::pair<int64_t, double>>;

/// Parses config.json at `path`; every value that is not a string is kept
/// as its JSON text. Throws ampkit::IoError naming the file (and line) when
/// it cannot be read, is not valid JSON or is not one JSON object.
RunConfig read_config(const std::string& path);

/// Appends every metric of every line of metrics.jsonl at `path` to
/// `series`; NaN, Infinity and null read back as non-finite values. Throws
/// ampkit::IoError naming "file:line" for a malformed line.
void read_jsonl(const std::string& path, std::map<std::string, Series>& series);

/// Appends every row of metrics.csv (step,wall_time,name,value) at `path`
/// to `series`. Throws ampkit::IoError naming "file:line" for a missing
/// header or a malformed row.
void read_csv(const std::string& path, std::map<std::string, Series>& series);

}  // namespace ampkit::track::detail
