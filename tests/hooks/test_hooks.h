// The test suite's fault injection; see test_hooks.cpp.
#pragma once

namespace ampkit::testing_util {

/// Sets the library's test hooks from AMPKIT_FAULT_INJECT and
/// AMPKIT_SELF_TEST_INJECT (also done when the library is loaded).
void install_test_hooks();

}  // namespace ampkit::testing_util
