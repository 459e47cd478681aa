// `ampkit test`: the built-in check that distributed training works on this
// machine. For every precision the CPU supports it trains a tiny regression
// model once as one process and once as N processes (started by
// dist::launch), and requires the same final weights: over NCCL, one GPU
// per process, where there are N GPUs (as `accelerate test`), else over Gloo
// on the CPU.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "ampkit/amp/precision.h"

namespace ampkit {

struct SelfTestOptions {
  /// Processes of the distributed half (at least 2).
  int64_t num_processes = 2;
  /// The program and leading arguments that run one worker; run_self_test
  /// appends "PRECISION DIR GLOBAL_BATCH". `ampkit test` passes itself with
  /// its hidden worker subcommand.
  std::vector<std::string> worker_command;
  bool quiet = false;
  /// Gloo on the CPU even where there are GPUs enough (`ampkit test --cpu`).
  bool cpu = false;
};

/// One precision's outcome.
struct SelfTestCase {
  Precision precision = Precision::no;
  /// Largest |distributed - single-process| over every weight.
  double max_difference = 0;
  double tolerance = 0;
  /// Empty when it ran; otherwise why this machine cannot run it.
  std::string skipped;
  /// Empty when it passed; otherwise what failed.
  std::string failure;
};

/// The precisions the check covers on this CPU, each with the reason it is
/// skipped where autocast cannot run it.
std::vector<SelfTestCase> self_test_cases();

/// The allowed difference: 1e-6 in fp32 (summation order only), 2e-2 in bf16
/// and 5e-3 in fp16 (autocast rounds the activations differently when the
/// batch is split).
double self_test_tolerance(Precision precision);

/// Runs every case and prints one line per precision and a final verdict to
/// `out` (failures and worker lines to `err`). Returns 0 when every case that
/// ran matched, 1 otherwise.
int run_self_test(
    const SelfTestOptions& options, std::ostream& out, std::ostream& err);

/// The worker run_self_test launches: trains the model under an Accelerator
/// set up from this process's launcher environment (the CPU when the
/// launcher says so, else this process's GPU), each rank on its slice
/// of every global batch. With one process it writes the weights to
/// DIR/reference-P.pt; with several, the main process compares against that
/// file and writes DIR/result-P.txt. Returns the process's exit code.
int run_self_test_worker(
    Precision precision,
    const std::string& dir,
    int64_t global_batch,
    std::ostream& err);

}  // namespace ampkit
