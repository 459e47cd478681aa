#include "utils/test_hooks.h"

namespace ampkit::detail {

TestHooks& test_hooks() {
  static TestHooks hooks;
  return hooks;
}

}  // namespace ampkit::detail
