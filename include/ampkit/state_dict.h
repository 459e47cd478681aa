// The state_dict type shared by every stateful ampkit object (GradScaler,
// LR schedulers, the Accelerator's checkpoints): PyTorch's key names, values
// as IValues so that they serialise through torch::serialize archives.
#pragma once

#include <ATen/core/ivalue.h>

#include <map>
#include <string>

namespace ampkit {

using StateDict = std::map<std::string, c10::IValue>;

}  // namespace ampkit
