// The test suite's fault injection (utils/test_hooks.h), from the
// environment, built only with the tests and never installed:
//   AMPKIT_FAULT_INJECT=kill_after_files=N  SIGKILL after the N-th file a
//                                           checkpoint writes (counted over
//                                           the process)
//   AMPKIT_SELF_TEST_INJECT=skew            `ampkit test`'s rank 1 trains on
//                                           shifted inputs
// Test programs link this library and call install_test_hooks(); shipped
// programs under test get it through LD_PRELOAD, where its constructor runs.
#include "hooks/test_hooks.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "utils/test_hooks.h"

namespace ampkit::testing_util {
namespace {

long kill_after_files = 0;

void count_file_and_maybe_die() {
  static std::atomic<long> files{0};
  if (++files >= kill_after_files) {
    ::raise(SIGKILL);
  }
}

bool skew_rank_one(int64_t rank) {
  return rank == 1;
}

}  // namespace

void install_test_hooks() {
  auto& hooks = detail::test_hooks();
  const std::string key = "kill_after_files=";
  if (const char* v = std::getenv("AMPKIT_FAULT_INJECT");
      v != nullptr && std::string(v).rfind(key, 0) == 0) {
    kill_after_files = std::strtol(v + key.size(), nullptr, 10);
    if (kill_after_files > 0) {
      hooks.after_checkpoint_file = count_file_and_maybe_die;
    }
  }
  if (const char* v = std::getenv("AMPKIT_SELF_TEST_INJECT");
      v != nullptr && std::string(v) == "skew") {
    hooks.perturb_self_test_rank = skew_rank_one;
  }
}

namespace {
// Under LD_PRELOAD nothing calls install_test_hooks(): do it at load.
[[maybe_unused]] const bool installed_at_load = (install_test_hooks(), true);
}  // namespace

}  // namespace ampkit::testing_util
