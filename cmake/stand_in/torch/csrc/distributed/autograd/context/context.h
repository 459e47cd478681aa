// Stand-in for PyTorch's distributed-autograd context header, which
// c10d/reducer.hpp includes but Debian's libtorch-dev leaves out. It
// declares only what reducer.hpp names: the Reducer keeps a shared_ptr to a
// context (for RPC-based distributed autograd, which ampkit does not use),
// so the class can stay incomplete. CMake puts this folder on the include
// path only when LibTorch lacks the real header.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
