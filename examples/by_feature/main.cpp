// The by_feature program: `gradient_accumulation --flags` (a link named as
// the twin) or `by_feature gradient_accumulation --flags` runs that twin.
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include "by_feature/twins.h"

namespace {

using Main = int (*)(int, char**);

Main find(const std::string& name) {
#define BY_FEATURE_MATCH(twin)      \
  if (name == #twin) {              \
    return &by_feature::twin::main; \
  }
  BY_FEATURE_TWINS(BY_FEATURE_MATCH)
#undef BY_FEATURE_MATCH
  return nullptr;
}

int usage() {
  std::cerr << "usage: by_feature TWIN [FLAGS...], or a link named TWIN.\n"
               "The twins of accelerate's examples:";
#define BY_FEATURE_LIST(twin) std::cerr << "\n  " #twin;
  BY_FEATURE_TWINS(BY_FEATURE_LIST)
#undef BY_FEATURE_LIST
  std::cerr << "\n";
  return 2;
}

int run(Main twin, int argc, char** argv) {
  try {
    return twin(argc, argv);
  } catch (const std::exception& e) {
    // ampkit's errors name their component, the value and the fix.
    std::cerr << e.what() << '\n';
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string called = std::filesystem::path(argv[0]).filename();
  if (Main twin = find(called)) {
    return run(twin, argc, argv);
  }
  if (argc < 2) {
    return usage();
  }
  if (Main twin = find(argv[1])) {
    // The twin sees its own name as argv[0].
    return run(twin, argc - 1, argv + 1);
  }
  std::cerr << "by_feature: no twin named '" << argv[1] << "'.\n";
  return usage();
}
