// Python accelerate's checkpoint folders (save_state's layout, torch.save's
// files) for Accelerator::load_state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampkit::detail {

struct AcceleratorState;

/// accelerate's file names, in both layouts: model.safetensors,
/// model_1.safetensors, ... (`stem`, the index from 1 on, `ext`).
std::string indexed(const std::string& stem, size_t i, const std::string& ext);

/// A folder accelerate's save_state wrote: no ampkit manifest.json, a
/// model.safetensors (or pytorch_model.bin) and random_states_0.pkl.
bool is_accelerate_folder(const std::string& dir);

/// Loads such a folder into the prepared objects of `state` (process
/// `rank`'s random states): the weights, the optimizers (torch.optim's
/// Adam, AdamW and SGD states into LibTorch's), the schedulers, the
/// GradScaler and torch's generators. Everything is read and checked
/// before anything changes; a folder of another model, optimizer or count
/// of objects is an ampkit::InvalidArgument naming the file and what
/// differs.
void load_accelerate_state(
    AcceleratorState& state, int64_t rank, const std::string& dir);

/// Writes accelerate's save_state layout into `dir`: the main process the
/// weights (model.safetensors), the optimizers (optimizer.bin, torch.optim's
/// state_dict), the schedulers and the GradScaler; each process its
/// random_states_<rank>.pkl. ZeRO-sharded optimizers and optimizers other
/// than Adam, AdamW and SGD are refused.
void save_accelerate_state(
    AcceleratorState& state,
    int64_t rank,
    bool main_process,
    int64_t step,
    const std::string& dir);

}  // namespace ampkit::detail
