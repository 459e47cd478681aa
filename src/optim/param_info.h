// What the fused optimizer steps say of a parameter: its position and its
// layout, for messages; its key in torch::optim::Optimizer::state() is
// optim/compat.h's state_key.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Type.h>
#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "optim/compat.h"

namespace ampkit::detail {

using OptimizerStateMap =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
static_assert(
    std::is_same_v<
        decltype(state_key(std::declval<const at::Tensor&>())),
        OptimizerStateMap::key_type>,
    "state_key must match Optimizer::state()'s key type");

inline std::string param_position(size_t group, size_t index) {
  return "parameter " + std::to_string(index) + " of param group " +
         std::to_string(group);
}

/// "Float Strided on cpu with sizes [2, 3] and strides [3, 1]".
inline std::string describe_tensor(const at::Tensor& t) {
  std::ostringstream out;
  out << t.scalar_type() << " " << t.layout() << " on " << t.device()
      << " with sizes " << t.sizes() << " and strides ";
  if (t.layout() == c10::kStrided) {
    out << t.strides();
  } else {
    out << "(none)";
  }
  return out.str();
}

}  // namespace ampkit::detail
