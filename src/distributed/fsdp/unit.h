// An FSDP unit: a module whose flat parameters are gathered, freed and
// reduced together (FSDP2's FSDPParamGroup).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ampkit/distributed/fsdp.h"
#include "distributed/fsdp/flat_param.h"

namespace ampkit::dist::detail {

struct FsdpUnit {
  FullyShardedModel::Impl* owner = nullptr;
  std::string name;  // module path, "" for the root
  const torch::nn::Module* module = nullptr;
  std::vector<FlatParam> flats;
  bool entered = false;   // through fsdp_forward since before_forward
  int64_t forwards = 0;   // with gradients, since the last after_backward
  int64_t backwards = 0;  // since the last after_backward
  bool trainable() const {
    for (const auto& f : flats) {
      if (f.shard.requires_grad()) {
        return true;
      }
    }
    return false;
  }
};

}  // namespace ampkit::dist::detail
