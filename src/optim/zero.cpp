#include "ampkit/optim/zero.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_set>

#include "ampkit/error.h"
#include "optim/compat.h"
#include "utils/components.h"

namespace ampkit::optim {
namespace {

/// Runs `ready` after a leaf's gradient accumulator has written .grad (the
/// hook c10d's Reducer sits on, too).
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready)
      : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

std::string position_name(size_t g, size_t i) {
  return "param_groups[" + std::to_string(g) + "][" + std::to_string(i) + "]";
}

int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

/// The values of a 1-dim `buffer` from `offset` on, seen with `param`'s
/// shape and strides: the layout the flat buffers keep each parameter in.
torch::Tensor laid_out_like(
    const torch::Tensor& buffer, const torch::Tensor& param, int64_t offset) {
  return buffer.as_strided(param.sizes(), param.strides(), offset);
}

/// `t` (a gradient laid out like `param`) as one 1-dim tensor in the order
/// of `param`'s storage, which is the order of the flat buffer.
torch::Tensor in_storage_order(
    const torch::Tensor& t, const torch::Tensor& param) {
  if (t.is_contiguous() && param.is_contiguous()) {
    return t.reshape({-1});
  }
  auto out = torch::empty({param.numel()}, t.options());
  laid_out_like(out, param, 0).copy_(t);
  return out;
}

// Bytes of the distinct storages behind the defined tensors.
int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (t.defined() && seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      bytes += static_cast<int64_t>(t.storage().nbytes());
    }
  }
  return bytes;
}

}  // namespace

std::vector<int64_t> partition_boundaries(
    const std::vector<int64_t>& sizes, int64_t num_shards) {
  if (num_shards < 1) {
    throw InvalidArgument(
        component::kZero,
        "the parameters need at least 1 shard, got " +
            std::to_string(num_shards) + ".");
  }
  std::vector<int64_t> ends{0};
  for (int64_t n : sizes) {
    ends.push_back(ends.back() + n);
  }
  const int64_t total = ends.back();
  // Within 2.5% of a shard on either side, a shard stays within 5% above
  // an even share.
  const int64_t tolerance = total / num_shards / 40;
  std::vector<int64_t> bounds{0};
  for (int64_t r = 1; r < num_shards; ++r) {
    const int64_t even = total * r / num_shards;
    auto at = std::lower_bound(ends.begin(), ends.end(), even);
    int64_t nearest = at == ends.end() ? ends.back() : *at;
    if (at != ends.begin() && even - *(at - 1) < nearest - even) {
      nearest = *(at - 1);
    }
    const int64_t chosen =
        std::abs(nearest - even) <= tolerance ? nearest : even;
    bounds.push_back(std::max(chosen, bounds.back()));
  }
  bounds.push_back(total);
  return bounds;
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    const auto* s = state.get();
    if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(s)) {
      bytes += bytes_of(a->exp_avg()) + bytes_of(a->exp_avg_sq()) +
               bytes_of(a->max_exp_avg_sq());
    } else if (
        const auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(s)) {
      bytes += bytes_of(w->exp_avg()) + bytes_of(w->exp_avg_sq()) +
               bytes_of(w->max_exp_avg_sq());
    } else if (
        const auto* g = dynamic_cast<const torch::optim::SGDParamState*>(s)) {
      bytes += bytes_of(g->momentum_buffer());
    } else if (
        const auto* r =
            dynamic_cast<const torch::optim::RMSpropParamState*>(s)) {
      bytes += bytes_of(r->square_avg()) + bytes_of(r->momentum_buffer()) +
               bytes_of(r->grad_avg());
    } else if (
        const auto* d =
            dynamic_cast<const torch::optim::AdagradParamState*>(s)) {
      bytes += bytes_of(d->sum());
    } else {
      throw UsageError(
          component::kZero,
          "optimizer_state_bytes counts the state of Adam, AdamW, SGD, "
          "RMSprop and Adagrad, got another optimizer's state. Count its "
          "tensors yourself.");
    }
  }
  return bytes;
}

struct ShardedOptimizer::Bucket {
  int64_t begin = 0;  // flat range
  int64_t end = 0;
  size_t first = 0;  // parameters [first, last)
  size_t last = 0;
  // This process's part of the range, [lo, hi) in flat offsets (empty when
  // hi <= lo).
  int64_t lo = 0;
  int64_t hi = 0;
  size_t waiting = 0;   // parameters whose gradient has not come yet
  torch::Tensor flat;   // the bucket's gradients, while reduced
  torch::Tensor part;   // this process's part of their sum
  bool direct = false;  // `part` is the shard gradient's own memory
  dist::PendingCollective reducing;
};

namespace {

// Refuses a bucket size, stage or optimizer that cannot be sharded.
void zero_check_arguments(
    const torch::optim::Optimizer& optimizer,
    int64_t stage,
    int64_t bucket_bytes) {
  if (bucket_bytes <= 0) {
    throw InvalidArgument(
        component::kZero,
        "the reduce-scatter bucket size must be positive, got " +
            std::to_string(bucket_bytes) +
            " bytes. DDP's default bucket_cap_mb is 25.");
  }
  if (stage != 1 && stage != 2) {
    throw InvalidArgument(
        component::kZero,
        "ShardedOptimizer implements ZeRO stages 1 and 2, got stage " +
            std::to_string(stage) + ". Use 0 (no sharding), 1 or 2.");
  }
  if (!optimizer.state().empty()) {
    throw UsageError(
        component::kZero,
        "the optimizer has already stepped (it holds state), so its state "
        "cannot be partitioned. Prepare the optimizer before training.");
  }
}

// The parameters that get gradients, in flat order, into `params` (checked
// to be distinct, dense and of one dtype and device), their sizes, and the
// end of each param group in `params`.
void zero_collect_params(
    const std::vector<torch::optim::OptimizerParamGroup>& groups,
    std::vector<torch::Tensor>& params,
    std::vector<int64_t>& sizes,
    std::vector<int64_t>& group_ends) {
  std::unordered_set<const void*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      const auto& p = groups[g].params()[i];
      // Frozen parameters get no gradient and are never stepped: they stay
      // where they are, out of the shards.
      if (!p.requires_grad()) {
        continue;
      }
      const std::string where = position_name(g, i);
      if (!seen.insert(p.unsafeGetTensorImpl()).second) {
        throw InvalidArgument(
            component::kZero,
            "the optimizer's parameter " + where +
                " appears twice. Give each parameter to one param group.");
      }
      if (p.is_sparse() || !p.is_non_overlapping_and_dense()) {
        throw InvalidArgument(
            component::kZero,
            "ZeRO flattens the parameters into one buffer, but " + where +
                " is sparse or not dense. Use zero_stage 0 for this model.");
      }
      if (!params.empty() && (p.scalar_type() != params[0].scalar_type() ||
                              p.device() != params[0].device())) {
        throw InvalidArgument(
            component::kZero,
            "ZeRO flattens an optimizer's parameters into one buffer, so "
            "they must share one dtype and device: param_groups[0] starts "
            "with " +
                std::string(c10::toString(params[0].scalar_type())) + " on " +
                params[0].device().str() + ", but " + where + " is " +
                c10::toString(p.scalar_type()) + " on " + p.device().str() +
                ". Convert the model to one dtype, or use one optimizer per "
                "dtype.");
      }
      params.push_back(p);
      sizes.push_back(p.numel());
    }
    group_ends.push_back(static_cast<int64_t>(params.size()));
  }
  if (params.empty()) {
    throw InvalidArgument(
        component::kZero,
        "the optimizer holds no parameter that requires a gradient, so there "
        "is nothing to partition.");
  }
}

// Stage 2's buckets, and each parameter's bucket in `bucket_of`; this
// process's shard is [begin, end). A template only so that the private
// ShardedOptimizer::Bucket is deduced, never named.
template <typename BucketT>
void zero_plan_buckets(
    std::vector<BucketT>& buckets,
    std::vector<size_t>& bucket_of,
    const std::vector<torch::Tensor>& params,
    const std::vector<int64_t>& offsets,
    int64_t element,
    int64_t bucket_bytes,
    int64_t begin,
    int64_t end) {
  // Buckets from the last parameter back (backward's order), the first
  // one small so that its reduce-scatter starts early (DDP's 1 MB).
  int64_t cap = std::min<int64_t>(bucket_bytes, 1024 * 1024);
  bucket_of.resize(params.size());
  for (size_t last = params.size(); last > 0;) {
    BucketT b;
    b.last = last;
    b.first = last;
    int64_t bytes = 0;
    while (b.first > 0 && (b.first == last || bytes < cap)) {
      --b.first;
      bytes += params[b.first].numel() * element;
    }
    b.begin = offsets[b.first];
    b.end = offsets[last - 1] + params[last - 1].numel();
    b.lo = std::clamp(begin, b.begin, b.end);
    b.hi = std::clamp(end, b.begin, b.end);
    for (size_t i = b.first; i < b.last; ++i) {
      bucket_of[i] = buckets.size();
    }
    last = b.first;
    buckets.push_back(std::move(b));
    cap = bucket_bytes;
  }
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(
    torch::optim::Optimizer& optimizer,
    std::shared_ptr<dist::ProcessGroup> group,
    int64_t stage,
    int64_t bucket_bytes)
    : optimizer_(optimizer), group_(std::move(group)), stage_(stage) {
  zero_check_arguments(optimizer, stage, bucket_bytes);
  if (group_) {
    rank_ = group_->rank();
    world_ = group_->size();
  }
  torch::NoGradGuard no_grad;
  auto& groups = optimizer.param_groups();
  std::vector<int64_t> sizes;
  std::vector<int64_t> group_ends;
  zero_collect_params(groups, params_, sizes, group_ends);
  boundaries_ = partition_boundaries(sizes, world_);
  const int64_t total = boundaries_.back();
  flat_ = torch::empty({total}, params_[0].options());
  int64_t offset = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    auto view = laid_out_like(flat_, p, offset);
    view.copy_(p.detach());
    // The parameter keeps its identity (the model, the synchronizer and
    // autograd refer to it); its values now live in the flat buffer.
    p.set_data(view);
    index_[p.unsafeGetTensorImpl()] = i;
    offsets_.push_back(offset);
    offset += p.numel();
  }
  const int64_t begin = boundaries_[rank_];
  const int64_t end = boundaries_[rank_ + 1];
  shard_grad_ = torch::zeros({end - begin}, flat_.options());
  if (stage_ == 2) {
    zero_plan_buckets(
        buckets_,
        bucket_of_,
        params_,
        offsets_,
        static_cast<int64_t>(flat_.element_size()),
        bucket_bytes,
        begin,
        end);
    if (world_ > 1) {
      for (size_t i = 0; i < params_.size(); ++i) {
        auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
        const uintptr_t key =
            accumulator->add_post_hook(std::make_unique<GradientReadyHook>(
                [this, i] { gradient_ready(i); }));
        hooks_.emplace_back(accumulator, key);
      }
    }
  }
  size_t first = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto last = static_cast<size_t>(group_ends[g]);
    const int64_t group_begin = first < last ? offsets_[first] : 0;
    const int64_t group_end =
        first < last ? offsets_[last - 1] + params_[last - 1].numel() : 0;
    group_ranges_.emplace_back(group_begin, group_end);
    const int64_t lo = std::clamp(group_begin, begin, end);
    const int64_t hi = std::clamp(group_end, begin, end);
    const int64_t length = std::max<int64_t>(hi - lo, 0);
    // A process whose shard misses a group keeps an empty slice of it, so
    // that every process checks and steps the same groups.
    auto shard = flat_.narrow(0, lo, length);
    shard.mutable_grad() = shard_grad_.narrow(0, lo - begin, length);
    groups[g].params() = {shard};
    first = last;
  }
}

void ShardedOptimizer::reduce_gradients() {
  torch::NoGradGuard no_grad;
  pending_ = true;
  if (stage_ == 1) {
    for (size_t i = 0; i < params_.size(); ++i) {
      int64_t start = 0;
      auto target = owned_gradient(i, &start);
      if (!target.defined()) {
        continue;
      }
      const auto& grad = params_[i].grad();
      if (!grad.defined()) {
        target.zero_();
        continue;
      }
      target.copy_(
          in_storage_order(grad, params_[i]).narrow(0, start, target.numel()));
    }
    return;
  }
  // Stage 2: the buckets the backward did not launch (all of them without
  // prepare_for_backward), in order, then each bucket's part of the sum
  // into the shard's gradient.
  armed_ = false;
  while (next_bucket_ < buckets_.size()) {
    launch(next_bucket_++);
  }
  next_bucket_ = 0;
  const int64_t begin = boundaries_[rank_];
  for (auto& b : buckets_) {
    b.reducing.wait();
    if (b.hi > b.lo) {
      auto target = shard_grad_.narrow(0, b.lo - begin, b.hi - b.lo);
      if (reduced_) {
        target.add_(b.part);
      } else if (!b.direct) {
        target.copy_(b.part);
      }
    }
    b.flat = torch::Tensor();
    b.part = torch::Tensor();
  }
  reduced_ = true;
}

ShardedOptimizer::~ShardedOptimizer() {
  for (auto& [accumulator, key] : hooks_) {
    std::static_pointer_cast<torch::autograd::Node>(accumulator)
        ->del_post_hook(key);
  }
  // A reduce-scatter still in flight writes into this object's tensors.
  for (auto& b : buckets_) {
    try {
      b.reducing.wait();
    } catch (...) {
    }
  }
}

void ShardedOptimizer::prepare_for_backward() {
  if (stage_ != 2 || world_ == 1) {
    return;
  }
  armed_ = true;
  for (size_t k = next_bucket_; k < buckets_.size(); ++k) {
    buckets_[k].waiting = buckets_[k].last - buckets_[k].first;
  }
}

void ShardedOptimizer::gradient_ready(size_t i) {
  const size_t k = bucket_of_[i];
  if (!armed_ || k < next_bucket_ || buckets_[k].waiting == 0) {
    return;
  }
  if (--buckets_[k].waiting > 0) {
    return;
  }
  // In bucket order, so that every process issues the same collectives in
  // the same order even when its gradients come in another.
  while (next_bucket_ < buckets_.size() &&
         buckets_[next_bucket_].waiting == 0) {
    launch(next_bucket_++);
  }
}

void ShardedOptimizer::launch(size_t k) {
  torch::NoGradGuard no_grad;
  Bucket& b = buckets_[k];
  // The local gradients in flat order, averaged as DDP averages (divided
  // before the sum) in the same pass; a parameter without one contributes
  // zeros.
  b.flat = torch::empty({b.end - b.begin}, flat_.options());
  const auto processes =
      torch::scalar_tensor(static_cast<double>(world_), flat_.options());
  for (size_t i = b.first; i < b.last; ++i) {
    auto& p = params_[i];
    auto piece = laid_out_like(b.flat, p, offsets_[i] - b.begin);
    if (p.grad().defined()) {
      at::div_out(piece, p.grad(), processes);
      p.mutable_grad() = torch::Tensor();
    } else {
      piece.zero_();
    }
  }
  b.direct = false;
  if (world_ == 1) {
    b.part = b.flat;
    return;
  }
  std::vector<int64_t> parts;
  for (int64_t r = 0; r <= world_; ++r) {
    parts.push_back(std::clamp(boundaries_[r], b.begin, b.end) - b.begin);
  }
  // The first reduce since zero_grad writes straight into the shard's
  // gradient; a later one (a second backward) into a part added to it.
  b.direct = !reduced_ && b.hi > b.lo;
  b.part = b.direct
               ? shard_grad_.narrow(0, b.lo - boundaries_[rank_], b.hi - b.lo)
               : torch::empty({b.hi - b.lo}, flat_.options());
  b.reducing = group_->reduce_scatter_async(b.part, b.flat, parts);
}

void ShardedOptimizer::gather_parameters() {
  pending_ = false;
  if (world_ == 1) {
    return;
  }
  torch::NoGradGuard no_grad;
  for (int64_t r = 0; r < world_; ++r) {
    const int64_t length = boundaries_[r + 1] - boundaries_[r];
    if (length > 0) {
      auto part = flat_.narrow(0, boundaries_[r], length);
      group_->broadcast(part, r);
    }
  }
}

void clear_gradients(std::vector<torch::Tensor>& parameters, bool set_to_none) {
  torch::NoGradGuard no_grad;
  for (auto& p : parameters) {
    auto& grad = p.mutable_grad();
    if (!grad.defined()) {
      continue;
    }
    if (set_to_none) {
      grad = torch::Tensor();
    } else {
      grad = grad.detach();
      grad.zero_();
    }
  }
}

void ShardedOptimizer::zero_grad(bool set_to_none) {
  // A prepared backward whose reduce never came: the buckets it did not
  // issue here (a gradient this process never got) are issued now, so that
  // every process issued the same ones; all are finished and dropped before
  // the shard's gradient is zeroed (one reduced straight into it writes
  // there).
  while (armed_ && next_bucket_ < buckets_.size()) {
    launch(next_bucket_++);
  }
  clear_gradients(params_, set_to_none);
  torch::NoGradGuard no_grad;
  armed_ = false;
  next_bucket_ = 0;
  for (auto& b : buckets_) {
    b.reducing.wait();
    b.flat = torch::Tensor();
    b.part = torch::Tensor();
  }
  shard_grad_.zero_();
  reduced_ = false;
}

void ShardedOptimizer::load_resplit(
    const std::vector<int64_t>& saved,
    const std::function<void(int64_t)>& load) {
  const int64_t total = boundaries_.back();
  if (saved.size() < 2 || saved.front() != 0 || saved.back() != total ||
      !std::is_sorted(saved.begin(), saved.end())) {
    throw InvalidArgument(
        component::kZero,
        "the saved optimizer shards cover " +
            (saved.empty() ? std::string("nothing")
                           : std::to_string(saved.back()) + " elements") +
            ", but this optimizer's parameters have " + std::to_string(total) +
            ". Resume with the model and optimizer parameters it was saved "
            "with.");
  }
  torch::NoGradGuard no_grad;
  auto& groups = optimizer_.param_groups();
  std::vector<torch::Tensor> mine;
  for (auto& group : groups) {
    mine.push_back(group.params()[0]);
  }
  const int64_t begin = boundaries_[rank_];
  const int64_t end = boundaries_[rank_ + 1];
  // Per group: each tensor field's parts within [begin, end) in flat order,
  // the other fields, and a state to copy the type from.
  std::vector<ampkit::detail::JoinedState> found(groups.size());
  auto restore = [&] {
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g].params() = {mine[g]};
    }
    optimizer_.state().clear();
  };
  try {
    bool loaded_any = false;
    const auto saved_count = static_cast<int64_t>(saved.size()) - 1;
    for (int64_t q = 0; q < saved_count; ++q) {
      const int64_t lo = saved[q];
      const int64_t hi = saved[q + 1];
      const bool overlaps = lo < end && begin < hi;
      // An empty shard still needs the param groups' options once.
      if (!overlaps && (loaded_any || begin < end || q + 1 < saved_count)) {
        continue;
      }
      loaded_any = true;
      std::vector<torch::Tensor> slices;
      std::vector<int64_t> starts;
      for (size_t g = 0; g < groups.size(); ++g) {
        const auto [group_begin, group_end] = group_ranges_[g];
        const int64_t a = std::clamp(group_begin, lo, hi);
        const int64_t b = std::clamp(group_end, lo, hi);
        starts.push_back(a);
        slices.push_back(
            torch::empty({std::max<int64_t>(b - a, 0)}, flat_.options()));
        groups[g].params() = {slices.back()};
      }
      optimizer_.state().clear();
      load(q);
      for (size_t g = 0; g < groups.size(); ++g) {
        auto it = optimizer_.state().find(ampkit::detail::state_key(slices[g]));
        if (it == optimizer_.state().end()) {
          continue;
        }
        const int64_t length = slices[g].numel();
        // The part of this slice inside [begin, end) (empty when this
        // group's slice lies wholly before or after it).
        const int64_t from = std::clamp(begin - starts[g], int64_t{0}, length);
        const int64_t to = std::clamp(end - starts[g], from, length);
        const auto differs = found[g].add(
            *it->second, [&](const std::string& key, const torch::Tensor& t) {
              if (t.numel() != length) {
                throw InvalidArgument(
                    component::kZero,
                    "saved shard " + std::to_string(q) + "'s '" + key +
                        "' of param group " + std::to_string(g) + " has " +
                        std::to_string(t.numel()) + " elements, its slice " +
                        std::to_string(length) +
                        ". Resume with the optimizer it was saved with.");
              }
              return t.reshape({-1}).narrow(0, from, to - from);
            });
        if (differs) {
          throw InvalidArgument(
              component::kZero,
              "the saved shards disagree on '" + *differs +
                  "' of param group " + std::to_string(g) + " (shard " +
                  std::to_string(q) +
                  " differs from the one before), so they cannot be "
                  "joined. Resume with the number of processes they were "
                  "saved by.");
        }
      }
    }
    restore();
    for (size_t g = 0; g < groups.size(); ++g) {
      if (!found[g].like) {
        continue;
      }
      std::map<std::string, c10::IValue> fields = found[g].values;
      for (auto& [key, parts] : found[g].parts) {
        auto joined = torch::cat(parts);
        if (joined.numel() != mine[g].numel()) {
          throw InvalidArgument(
              component::kZero,
              "the saved shards hold " + std::to_string(joined.numel()) +
                  " elements of '" + key + "' for param group " +
                  std::to_string(g) + " of this process, which needs " +
                  std::to_string(mine[g].numel()) +
                  " (a saved shard had no state). Resume with the number of "
                  "processes they were saved by.");
        }
        fields[key] = joined.clone();
      }
      optimizer_.state()[ampkit::detail::state_key(mine[g])] =
          ampkit::detail::state_with_fields(*found[g].like, fields);
    }
  } catch (...) {
    restore();
    throw;
  }
}

torch::Tensor ShardedOptimizer::owned_gradient(size_t i, int64_t* start) const {
  const int64_t begin = boundaries_[rank_];
  const int64_t o = offsets_[i];
  const int64_t lo = std::max(o, begin);
  const int64_t hi = std::min(o + params_[i].numel(), boundaries_[rank_ + 1]);
  if (lo >= hi) {
    return {};
  }
  if (start != nullptr) {
    *start = lo - o;
  }
  return shard_grad_.narrow(0, lo - begin, hi - lo);
}

std::vector<torch::Tensor> ShardedOptimizer::shard_gradients(
    const std::vector<torch::Tensor>& parameters,
    std::vector<bool>& managed) const {
  std::vector<torch::Tensor> parts;
  managed.resize(parameters.size(), false);
  for (size_t k = 0; k < parameters.size(); ++k) {
    auto it = index_.find(parameters[k].unsafeGetTensorImpl());
    if (it == index_.end()) {
      continue;
    }
    managed[k] = true;
    if (auto part = owned_gradient(it->second); part.defined()) {
      parts.push_back(part);
    }
  }
  return parts;
}

int64_t gradient_bytes(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    grads.push_back(p.grad());
  }
  return storage_bytes(grads);
}

int64_t ShardedOptimizer::gradient_bytes() const {
  std::vector<torch::Tensor> grads{shard_grad_};
  for (const auto& p : params_) {
    grads.push_back(p.grad());
  }
  return storage_bytes(grads);
}

}  // namespace ampkit::optim
