// A flat parameter's forms: made and sharded, gathered into its full
// buffer, freed again (FSDP2's _fsdp_param).
#include <c10/core/StorageImpl.h>
#include <torch/types.h>

#include <algorithm>

#include "distributed/fsdp/fsdp_impl.h"

namespace ampkit::dist {

void detail::set_storage(torch::Tensor& t, bool allocate) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (allocate) {
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    s->set_data_ptr(s->allocator()->allocate(bytes));
    s->set_nbytes(bytes);
  } else {
    s->set_data_ptr(at::DataPtr(nullptr, t.device()));
    s->set_nbytes(0);
  }
}

// A flat buffer of `numel` elements that holds no memory until a gather
// allocates it (set_storage).
torch::Tensor detail::freed_buffer(
    int64_t numel, const torch::TensorOptions& options) {
  torch::Tensor t = torch::empty({numel}, options);
  set_storage(t, false);
  return t;
}

FlatParam FullyShardedModel::Impl::make_flat(
    const std::vector<std::string>& names,
    const std::vector<torch::Tensor>& params,
    const std::vector<torch::Tensor>& values) {
  FlatParam f;
  f.names = names;
  f.params = params;
  for (const auto& v : values) {
    f.offsets.push_back(f.total);
    f.numels.push_back(v.numel());
    f.shapes.push_back(v.sizes().vec());
    f.total += v.numel();
  }
  const auto options = values.front().options().requires_grad(false);
  f.shard_size = (f.total + parts() - 1) / parts();
  const int64_t padded = f.shard_size * parts();
  torch::Tensor flat = torch::zeros({padded}, options);
  for (size_t i = 0; i < params.size(); ++i) {
    flat.narrow(0, f.offsets[i], f.numels[i]).copy_(values[i].reshape({-1}));
  }
  const int64_t begin = sharded() ? rank * f.shard_size : 0;
  f.shard = flat.narrow(0, begin, f.shard_size).clone();
  f.shard.set_requires_grad(params.front().requires_grad());
  f.compute_dtype = options.dtype().toScalarType();
  if (this->options.param_dtype() && c10::isFloatingType(f.compute_dtype)) {
    f.compute_dtype = *this->options.param_dtype();
  }
  f.empty = torch::empty({0}, options.dtype(f.compute_dtype));
  if (sharded()) {
    f.full = detail::freed_buffer(padded, options.dtype(f.compute_dtype));
    for (auto& p : f.params) {
      p.set_data(f.empty);
    }
  } else {
    // Nothing sharded: the parameters are views of the shard itself.
    f.full = f.shard.detach();
    for (size_t i = 0; i < f.params.size(); ++i) {
      f.params[i].set_data(f.piece(f.full, i));
    }
    f.gathered = true;
  }
  return f;
}

void FullyShardedModel::Impl::start_gather(FlatParam& f) {
  if (f.gathered) {
    return;
  }
  torch::NoGradGuard no_grad;
  detail::set_storage(f.full, true);
  // In the compute dtype (MixedPrecision) the cast comes first, so the
  // gather moves the smaller values.
  torch::Tensor mine = f.shard.detach();
  if (mine.scalar_type() != f.full.scalar_type()) {
    mine = mine.to(f.full.scalar_type());
  }
  if (world == 1) {
    f.full.copy_(mine);
  } else {
    f.inflight = group->all_gather_into_async(f.full, mine);
  }
  for (size_t i = 0; i < f.params.size(); ++i) {
    f.params[i].set_data(f.piece(f.full, i));
  }
  f.gathered = true;
  gathered_bytes += f.full.numel() * f.full.element_size();
  peak_gathered_bytes = std::max(peak_gathered_bytes, gathered_bytes);
}

void FullyShardedModel::Impl::gather(FlatParam& f) {
  start_gather(f);
  f.inflight.wait();
}

void FullyShardedModel::Impl::release(FlatParam& f) {
  if (!f.gathered || !sharded() || summoned) {
    return;
  }
  f.inflight.wait();  // its memory is the gather's target
  torch::NoGradGuard no_grad;
  for (auto& p : f.params) {
    p.set_data(f.empty);
  }
  detail::set_storage(f.full, false);
  f.gathered = false;
  gathered_bytes -= f.full.numel() * f.full.element_size();
}

}  // namespace ampkit::dist
