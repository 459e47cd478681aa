// Seeding and saving torch's default generators, locking each generator's
// mutex as PyTorch does around every read or write of its state.
#include "ampkit/utils/random.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <mutex>
#include <string>

#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit {

namespace {

const at::Generator& cuda_generator(size_t index) {
  return at::globalContext().defaultGenerator(
      c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)));
}

at::Tensor read_state(at::Generator gen) {
  // See PyTorch's Note [Acquire lock when using random generators].
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void write_state(
    at::Generator gen, const at::Tensor& state, const std::string& name) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state);
  } catch (const c10::Error& e) {
    throw InvalidArgument(
        component::kSetRngState,
        "the " + name + " generator rejected its state, got \"" +
            e.what_without_backtrace() +
            "\". Pass a state from ampkit::get_rng_state() saved with this "
            "LibTorch version.");
  }
}

}  // namespace

void set_seed(uint64_t seed) {
  // at::manual_seed seeds the CPU generator and, when LibTorch has CUDA and
  // sees GPUs, each device's default generator.
  torch::manual_seed(seed);
}

RngState get_rng_state() {
  RngState state;
  state.cpu = read_state(at::detail::getDefaultCPUGenerator());
  const size_t devices = torch::cuda::device_count();
  state.cuda.reserve(devices);
  for (size_t i = 0; i < devices; ++i) {
    state.cuda.push_back(read_state(cuda_generator(i)));
  }
  return state;
}

void set_rng_state(const RngState& state) {
  // Everything is checked before any generator is written, so a bad state
  // leaves the generators as they were.
  if (!state.cpu.defined()) {
    throw InvalidArgument(
        component::kSetRngState,
        "the cpu state is undefined, got an RngState without a cpu tensor. "
        "Pass a state from ampkit::get_rng_state().");
  }
  if (state.cpu.scalar_type() != at::kByte || !state.cpu.device().is_cpu()) {
    throw InvalidArgument(
        component::kSetRngState,
        std::string("the cpu state must be a CPU uint8 tensor, got ") +
            c10::toString(state.cpu.scalar_type()) + " on " +
            state.cpu.device().str() +
            ". Pass a state from ampkit::get_rng_state().");
  }
  const size_t devices = torch::cuda::device_count();
  if (state.cuda.size() != devices) {
    throw InvalidArgument(
        component::kSetRngState,
        "the number of CUDA generator states does not match the visible "
        "CUDA devices, got " +
            std::to_string(state.cuda.size()) + " states for " +
            std::to_string(devices) + " visible devices" +
            ". Restore on a machine with the same number of visible GPUs "
            "(CUDA_VISIBLE_DEVICES) as the one that saved it.");
  }
  for (size_t i = 0; i < devices; ++i) {
    if (!state.cuda[i].defined()) {
      throw InvalidArgument(
          component::kSetRngState,
          "the state of CUDA device " + std::to_string(i) +
              " is undefined, got an undefined tensor in RngState::cuda. "
              "Pass a state from ampkit::get_rng_state().");
    }
  }
  write_state(at::detail::getDefaultCPUGenerator(), state.cpu, "cpu");
  for (size_t i = 0; i < devices; ++i) {
    write_state(cuda_generator(i), state.cuda[i], "cuda:" + std::to_string(i));
  }
}

}  // namespace ampkit
