// An optimizer state's fields by name, for the layers that re-split saved
// optimizer state (ZeRO's shards in optim/, FSDP's in distributed/): what a
// state's serialize() writes (its tensors and numbers), a state of the same
// type built back from such fields, and the key of a parameter in
// torch::optim::Optimizer::state() (the stringified TensorImpl* up to 2.1,
// the TensorImpl* itself from 2.2, pytorch/pytorch#108480).
#pragma once

#include <c10/util/Type.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "utils/compat.h"

namespace ampkit::detail {

#if AMPKIT_OPTIM_STATE_KEY_IS_POINTER
inline void* state_key(const at::Tensor& p) {
  return p.unsafeGetTensorImpl();
}
#else
inline std::string state_key(const at::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif

inline std::vector<std::pair<std::string, c10::IValue>> state_fields(
    const torch::optim::OptimizerParamState& state) {
  torch::serialize::OutputArchive out;
  state.serialize(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  std::vector<std::pair<std::string, c10::IValue>> fields;
  for (const auto& key : in.keys()) {
    c10::IValue value;
    in.read(key, value);
    fields.emplace_back(key, std::move(value));
  }
  return fields;
}

inline std::unique_ptr<torch::optim::OptimizerParamState> state_with_fields(
    const torch::optim::OptimizerParamState& like,
    const std::map<std::string, c10::IValue>& fields) {
  torch::serialize::OutputArchive out;
  for (const auto& [key, value] : fields) {
    out.write(key, value);
  }
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  auto state = like.clone();
  state->serialize(in);
  return state;
}

/// Whether two fields hold the same value (tensors: equal elements).
inline bool same_field(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() || b.isTensor()) {
    return a.isTensor() && b.isTensor() && a.toTensor().equal(b.toTensor());
  }
  return a == b;
}

/// One parameter's optimizer state joined from saved shards (ZeRO's and
/// FSDP's re-split on another process count): each tensor field's parts in
/// the order the shards were added, the other fields (step counts, which
/// every shard must agree on), and a saved state to copy the type from.
struct JoinedState {
  std::map<std::string, std::vector<at::Tensor>> parts;
  std::map<std::string, c10::IValue> values;
  std::unique_ptr<torch::optim::OptimizerParamState> like;

  /// Adds one shard's state: of each tensor field the part `part(key,
  /// tensor)` returns, each other field as it is. Returns the key of a
  /// field that differs from an earlier shard's (the caller says why that
  /// cannot be joined), or nothing.
  std::optional<std::string> add(
      const torch::optim::OptimizerParamState& state,
      const std::function<at::Tensor(const std::string&, const at::Tensor&)>&
          part) {
    for (auto& [key, value] : state_fields(state)) {
      if (value.isTensor()) {
        parts[key].push_back(part(key, value.toTensor()));
        continue;
      }
      auto [known, fresh] = values.emplace(key, value);
      if (!fresh && !same_field(known->second, value)) {
        return key;
      }
    }
    if (!like) {
      like = state.clone();
    }
    return std::nullopt;
  }
};

}  // namespace ampkit::detail
