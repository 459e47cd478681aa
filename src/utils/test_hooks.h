// Points where ampkit's own test suite injects faults (a crash between the
// files of a checkpoint, a rank that trains on other data). The library
// only calls what is set here; nothing in it sets them or reads the
// environment for them: tests/hooks/ (built with the tests only) does, in
// test programs and, through LD_PRELOAD, in the shipped programs under test.
#pragma once

#include <cstdint>

namespace ampkit::detail {

struct TestHooks {
  /// Called after each file a checkpoint writes.
  void (*after_checkpoint_file)() = nullptr;
  /// Whether `ampkit test`'s worker of this rank must train on perturbed
  /// inputs (the check must then fail).
  bool (*perturb_self_test_rank)(int64_t rank) = nullptr;
};

/// The process's hooks; all unset in a normal run.
TestHooks& test_hooks();

}  // namespace ampkit::detail
