// `ampkit estimate-memory`: sizes a model's training memory.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ampkit/amp/precision.h"
#include "ampkit/diag/memory_estimate.h"
#include "command.h"

namespace commands {
namespace {

struct EstimateArgs {
  std::string params;
  std::string optimizer = "adamw";
  std::string precision;  // "" = all three
  int64_t zero_stage = 0;
  int64_t processes = 1;
};

int run_estimate_memory(const EstimateArgs& args) {
  const int64_t n = ampkit::parse_parameter_count(args.params);
  std::vector<ampkit::MemoryEstimate> rows;
  for (const char* p : {"no", "bf16", "fp16"}) {
    if (args.precision.empty() || args.precision == p) {
      rows.push_back(ampkit::estimate_memory(
          n,
          args.optimizer,
          ampkit::parse_precision(p),
          args.zero_stage,
          args.processes));
    }
  }
  std::cout << ampkit::memory_table(n, rows);
  return 0;
}

}  // namespace

Command add_estimate_memory(CLI::App& app) {
  auto args = std::make_shared<EstimateArgs>();
  CLI::App* estimate = app.add_subcommand(
      "estimate-memory",
      "Estimate the training memory of a model's weights, gradients, "
      "optimizer state and fp32 master weights, per precision (activations "
      "excluded). no: 4+4 bytes per parameter; fp16/bf16 under autocast: 2 "
      "(half copies) + 4+2 (gradients) + 4 (fp32 master); optimizer state in "
      "fp32: adamw 8, sgd 4.");
  estimate
      ->add_option(
          flags("params"),
          args->params,
          "the parameter count, with an optional K, M or B suffix (7B)")
      ->required();
  estimate
      ->add_option(
          flags("optimizer"),
          args->optimizer,
          "adamw or sgd (with momentum); default adamw")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  estimate
      ->add_option(
          flags("mixed-precision"),
          args->precision,
          "no, fp16 or bf16 (default: all three)")
      ->check(CLI::IsMember({"no", "fp16", "bf16"}));
  estimate->add_option(
      flags("zero-stage"),
      args->zero_stage,
      "0 (DDP: everything on every process), 1 (optimizer state sharded), "
      "2 (and the fp32 gradients) or 3 (FSDP FULL_SHARD: and the weights); "
      "figures per process");
  estimate->add_option(
      flags("num-processes"),
      args->processes,
      "processes sharing the state under --zero-stage (default 1)");
  return {estimate, [args] {
            try {
              return run_estimate_memory(*args);
            } catch (const std::exception& e) {
              print_error("estimate-memory", e);
              return 1;
            }
          }};
}

}  // namespace commands
