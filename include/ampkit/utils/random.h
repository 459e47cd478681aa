// Seeding and saving the random number generators torch draws from, so a run
// can be made reproducible and a checkpoint can resume the same random stream.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ampkit {

/// Seeds torch's default CPU generator and the default generator of every
/// visible CUDA device with `seed` (torch::manual_seed, which is what
/// accelerate's set_seed does for torch; C++ has no Python or NumPy RNG to
/// seed).
void set_seed(uint64_t seed);

/// A snapshot of torch's default generators, as their get_state() gives it.
struct RngState {
  at::Tensor cpu;                ///< CPU generator state, uint8 [N]
  std::vector<at::Tensor> cuda;  ///< one uint8 state per visible CUDA device
};

/// Reads the state of the default CPU generator and of each visible CUDA
/// device's default generator (torch.get_rng_state and
/// torch.cuda.get_rng_state_all).
RngState get_rng_state();

/// Restores a state from get_rng_state(). Throws ampkit::InvalidArgument when
/// `state.cpu` is undefined or not a CPU uint8 tensor, when `state.cuda` holds
/// a different number of states than there are visible CUDA devices, or when
/// a generator rejects its state (wrong size).
void set_rng_state(const RngState& state);

}  // namespace ampkit
