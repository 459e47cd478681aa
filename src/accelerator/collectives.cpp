// The Accelerator's processes and collectives: process indices, barriers,
// gather, reduce, broadcast, padding and the cross-process trigger.
#include "ampkit/accelerator/accelerator.h"

#include <torch/serialize.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "accelerator/state.h"
#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit {

namespace {}  // namespace

bool Accelerator::is_main_process() const {
  return state_->process.process_index == 0;
}

bool Accelerator::is_last_process() const {
  return state_->process.process_index == state_->process.num_processes - 1;
}

bool Accelerator::is_local_main_process() const {
  return state_->process.local_process_index == 0;
}

int64_t Accelerator::process_index() const {
  return state_->process.process_index;
}

int64_t Accelerator::local_process_index() const {
  return state_->process.local_process_index;
}

int64_t Accelerator::num_processes() const {
  return state_->process.num_processes;
}

void Accelerator::wait_for_everyone() {
  if (state_->process.group) {
    state_->process.group->barrier();
  }
}

torch::Tensor Accelerator::gather(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.dim() == 0 ? tensor.unsqueeze(0) : tensor;
  if (!state_->process.group) {
    return t;
  }
  return torch::cat(state_->process.group->all_gather(t), 0);
}

std::vector<char> Accelerator::to_pickle(const c10::IValue& value) {
  return torch::pickle_save(value);
}

c10::IValue Accelerator::from_pickle(const std::vector<char>& bytes) {
  return torch::pickle_load(bytes);
}

namespace {
torch::Tensor byte_tensor(const std::vector<char>& bytes, size_t length) {
  auto t = torch::zeros({static_cast<int64_t>(length)}, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return t;
}
std::vector<char> bytes_of(const torch::Tensor& t, int64_t length) {
  const auto cpu = t.to(torch::kCPU).contiguous();
  const auto* p = reinterpret_cast<const char*>(cpu.data_ptr<uint8_t>());
  return std::vector<char>(p, p + length);
}
}  // namespace

std::vector<std::vector<char>> Accelerator::gather_bytes(
    const std::vector<char>& bytes) {
  if (!state_->process.group) {
    return {bytes};
  }
  const auto lengths =
      gather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong))
          .to(torch::kCPU);
  const int64_t longest = lengths.max().item<int64_t>();
  // One copy to the host for every process's bytes.
  const auto all =
      gather(byte_tensor(bytes, static_cast<size_t>(longest)).unsqueeze(0))
          .to(torch::kCPU);
  std::vector<std::vector<char>> out;
  for (int64_t r = 0; r < all.size(0); ++r) {
    out.push_back(bytes_of(all[r], lengths[r].item<int64_t>()));
  }
  return out;
}

std::vector<char> Accelerator::broadcast_bytes(
    const std::vector<char>& bytes, int64_t from_process) {
  const auto length = broadcast(
      torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong),
      from_process);
  if (!state_->process.group) {
    return bytes;
  }
  const int64_t n = length.to(torch::kCPU).item<int64_t>();
  const auto all = broadcast(
      process_index() == from_process ? byte_tensor(bytes, bytes.size())
                                      : torch::zeros({n}, torch::kUInt8),
      from_process);
  return bytes_of(all, n);
}

torch::Tensor Accelerator::gather_for_metrics(const torch::Tensor& tensor) {
  torch::Tensor all = gather(tensor);
  auto& st = *state_;
  if (st.process.group && st.gradient.end_of_dataloader &&
      st.gather_remainder > 0 && st.gather_remainder < all.size(0)) {
    return all.narrow(0, 0, st.gather_remainder);
  }
  return all;
}

torch::Tensor Accelerator::reduce(const torch::Tensor& tensor, ReduceOp op) {
  if (!state_->process.group) {
    // The sum, mean and max of one process's tensor are the tensor.
    return tensor;
  }
  torch::Tensor t = tensor.clone();
  if (op == ReduceOp::mean && !t.is_floating_point()) {
    t = t.to(torch::kFloat);
  }
  state_->process.group->all_reduce(t, op);
  return t;
}

torch::Tensor Accelerator::broadcast(
    const torch::Tensor& tensor, int64_t from_process) {
  if (from_process < 0 || from_process >= num_processes()) {
    throw InvalidArgument(
        component::kAccelerator,
        "broadcast from_process must be in [0, " +
            std::to_string(num_processes()) + "), got " +
            std::to_string(from_process) + ".");
  }
  if (!state_->process.group) {
    return tensor;
  }
  torch::Tensor t = tensor.clone();
  state_->process.group->broadcast(t, from_process);
  return t;
}

torch::Tensor Accelerator::pad_across_processes(
    const torch::Tensor& tensor,
    int64_t dim,
    double pad_index,
    bool pad_first) {
  if (tensor.dim() == 0 || dim < -tensor.dim() || dim >= tensor.dim()) {
    throw InvalidArgument(
        component::kAccelerator,
        "pad_across_processes needs dim within the tensor's " +
            std::to_string(tensor.dim()) + " dimensions, got " +
            std::to_string(dim) + ".");
  }
  if (!state_->process.group) {
    return tensor;
  }
  const int64_t d = dim < 0 ? dim + tensor.dim() : dim;
  auto size = torch::tensor({tensor.size(d)}, torch::kLong).to(tensor.device());
  state_->process.group->all_reduce(size, dist::ReduceOp::max);
  const int64_t longest = size.cpu().item<int64_t>();
  if (longest == tensor.size(d)) {
    return tensor;
  }
  auto shape = tensor.sizes().vec();
  shape[d] = longest;
  auto out = torch::full(shape, pad_index, tensor.options());
  const int64_t start = pad_first ? longest - tensor.size(d) : 0;
  out.narrow(d, start, tensor.size(d)).copy_(tensor);
  return out;
}

std::tuple<int64_t, int64_t, int64_t> Accelerator::share_of(int64_t n) const {
  const int64_t w = num_processes();
  const int64_t i = process_index();
  const int64_t per = n / w;
  const int64_t extra = n % w;
  const int64_t begin = i * per + std::min(i, extra);
  const int64_t end = begin + per + (i < extra ? 1 : 0);
  return {begin, end, per + (extra > 0 ? 1 : 0)};
}

Accelerator::MainProcessFirst::MainProcessFirst(
    Accelerator& accelerator, bool first)
    : accelerator_(accelerator), first_(first) {
  if (!first_) {
    accelerator_.wait_for_everyone();
  }
}

Accelerator::MainProcessFirst::~MainProcessFirst() noexcept(false) {
  if (first_ && std::uncaught_exceptions() == 0) {
    accelerator_.wait_for_everyone();
  }
}

Accelerator::MainProcessFirst Accelerator::main_process_first() {
  return MainProcessFirst(*this, is_main_process());
}

Accelerator::MainProcessFirst Accelerator::local_main_process_first() {
  return MainProcessFirst(*this, is_local_main_process());
}

void Accelerator::set_trigger() {
  state_->trigger = true;
}

bool Accelerator::check_trigger() {
  const bool any =
      detail::max_over_processes(*state_, state_->trigger ? 1 : 0) > 0;
  if (any) {
    state_->trigger = false;
  }
  return any;
}

dist::ProcessGroup* Accelerator::process_group() const {
  return state_->process.group.get();
}

void Accelerator::print_line(const std::string& line) const {
  std::cout << line << std::endl;
}

}  // namespace ampkit
