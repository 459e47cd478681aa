#include "ampkit/diag/memory_estimate.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "ampkit/error.h"

#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit {
namespace {}  // namespace

MemoryEstimate estimate_memory(
    int64_t parameters,
    const std::string& optimizer,
    Precision precision,
    int64_t zero_stage,
    int64_t processes) {
  if (zero_stage < 0 || zero_stage > 3) {
    throw InvalidArgument(
        component::kMemoryEstimate,
        "zero_stage must be 0, 1, 2 or 3 (FSDP's FULL_SHARD), got " +
            std::to_string(zero_stage) + ".");
  }
  if (processes < 1) {
    throw InvalidArgument(
        component::kMemoryEstimate,
        "the number of processes must be >= 1, got " +
            std::to_string(processes) + ".");
  }
  if (parameters <= 0) {
    throw InvalidArgument(
        component::kMemoryEstimate,
        "the parameter count must be positive, got " +
            std::to_string(parameters) + ". Pass e.g. --params 7B.");
  }
  if (precision == Precision::automatic) {
    throw InvalidArgument(
        component::kMemoryEstimate,
        "mixed_precision must be no, fp16 or bf16, got auto. Name the "
        "precision to estimate.");
  }
  const int64_t n = parameters;
  MemoryEstimate e;
  e.precision = precision;
  if (optimizer == "adamw") {
    e.optimizer_state = 8 * n;
  } else if (optimizer == "sgd") {
    e.optimizer_state = 4 * n;
  } else {
    throw InvalidArgument(
        component::kMemoryEstimate,
        "optimizer must be adamw or sgd, got '" + optimizer + "'.");
  }
  if (precision == Precision::no) {
    e.weights = 4 * n;
    e.gradients = 4 * n;
  } else {
    e.weights = 2 * n;
    e.master_weights = 4 * n;
    e.gradients = 6 * n;
  }
  e.zero_stage = zero_stage;
  e.processes = processes;
  const auto share = [processes](int64_t bytes) {
    return (bytes + processes - 1) / processes;
  };
  if (zero_stage >= 1) {
    e.optimizer_state = share(e.optimizer_state);
  }
  if (zero_stage == 2) {
    // The fp32 gradients are sharded; the half gradients of the GEMMs in
    // mixed precision live only within backward.
    e.gradients = share(4 * n) + (e.gradients - 4 * n);
  }
  if (zero_stage == 3) {
    // FSDP FULL_SHARD: between steps each process holds its fp32 shard of
    // the weights and of the gradients; a unit's full parameters (gathered
    // in fp32) and autocast's half copies exist only while it computes.
    e.gradients = share(4 * n);
    if (precision == Precision::no) {
      e.weights = share(4 * n);
    } else {
      e.weights = 0;
      e.master_weights = share(4 * n);
    }
  }
  return e;
}

int64_t parse_parameter_count(const std::string& text) {
  const auto bad = [&text]() {
    return InvalidArgument(
        component::kMemoryEstimate,
        "--params must be a count with an optional K, M or B suffix, got '" +
            text + "'. Examples: 350M, 1.5B, 125000.");
  };
  if (text.empty()) {
    throw bad();
  }
  double scale = 1;
  std::string number = text;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K':
      scale = 1e3;
      break;
    case 'M':
      scale = 1e6;
      break;
    case 'B':
      scale = 1e9;
      break;
    default:
      break;
  }
  if (scale != 1) {
    number.pop_back();
  }
  if (number.empty() ||
      number.find_first_not_of("0123456789.") != std::string::npos ||
      number.find('.') != number.rfind('.')) {
    throw bad();
  }
  const auto parsed = detail::parse_double(number);  // "." is not a number
  if (!parsed) {
    throw bad();
  }
  const double value = *parsed * scale;
  if (!(value >= 1) || value > 1e15) {
    throw bad();
  }
  return static_cast<int64_t>(std::llround(value));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof(out), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return out;
}

std::string memory_table(
    int64_t parameters, const std::vector<MemoryEstimate>& rows) {
  std::ostringstream out;
  out << "Training memory for " << parameters
      << " parameters (activations and the allocator's overhead excluded)\n";
  if (!rows.empty() && rows.front().zero_stage == 3) {
    const auto& r = rows.front();
    out << "Per process, ZeRO stage 3 (FSDP FULL_SHARD) over " << r.processes
        << " processes, between steps: the weights, the fp32 gradients and "
           "the optimizer state divided by "
        << r.processes
        << " (each unit padded to a multiple of it); while a unit computes, "
           "add its full fp32 parameters and its activations\n";
  } else if (!rows.empty() && rows.front().zero_stage > 0) {
    const auto& r = rows.front();
    out << "Per process, ZeRO stage " << r.zero_stage << " over " << r.processes
        << " processes: the optimizer state"
        << (r.zero_stage == 2 ? " and the fp32 gradients" : "")
        << " divided by " << r.processes
        << " (a shard can be up to 5% larger, where a parameter is not "
           "split); the weights stay whole"
        << (r.zero_stage == 2
                ? ", and backward still builds the full local gradients "
                  "before the reduce-scatter"
                : "")
        << "\n";
  }
  const char* header[] = {
      "precision",
      "weights",
      "gradients",
      "optimizer state",
      "fp32 master weights",
      "total"};
  const int width[] = {10, 12, 12, 16, 20, 12};
  for (int i = 0; i < 6; ++i) {
    out << std::left << std::setw(width[i]) << header[i];
  }
  out << '\n';
  for (const auto& r : rows) {
    const std::string cells[] = {
        to_string(r.precision),
        format_bytes(r.weights),
        format_bytes(r.gradients),
        format_bytes(r.optimizer_state),
        r.master_weights ? format_bytes(r.master_weights) : "-",
        format_bytes(r.total())};
    for (int i = 0; i < 6; ++i) {
      out << std::left << std::setw(width[i]) << cells[i];
    }
    out << '\n';
  }
  if (!rows.empty() && rows.front().zero_stage == 0) {
    // accelerate estimate-memory's "Training using Adam" is the largest of
    // its four stages (model, gradients, optimizer, step) for Adam, not
    // their sum: in fp32 the step's 4 x the fp32 weights, under mixed
    // precision the Adam state's 2 x (commands/estimate.py,
    // estimate_training_usage). Its figure is shown for comparison.
    const int64_t fp32 = 4 * parameters;
    out << "accelerate estimate-memory's \"Training using Adam\" shows the "
           "largest single stage, not this sum of what is held at once at "
           "the optimizer step: "
        << format_bytes(4 * fp32) << " in fp32, " << format_bytes(2 * fp32)
        << " in fp16/bf16\n";
  }
  return out.str();
}

}  // namespace ampkit
