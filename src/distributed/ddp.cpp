#include "ampkit/distributed/ddp.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <atomic>
#include <sstream>

#include "ampkit/error.h"
#include "distributed/compat.h"
#include "distributed/group_impl.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::dist {
namespace {

// DDP's first bucket: small, so the last layers' gradients (ready first)
// start their all-reduce early.
constexpr int64_t kFirstBucketBytes = 1024 * 1024;

/// DDP's bf16/fp16 compression hooks: divide, all-reduce in the narrow
/// type, write back into the fp32 bucket.
// (On CommHookInterface itself: CppCommHookInterface's inline
// parseHookResult needs a c10d helper that Debian's libtorch does not
// export.)
class CompressionHook : public c10d::CommHookInterface {
 public:
  CompressionHook(
      const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::ScalarType dtype)
      : state_(group), dtype_(dtype) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(
      c10d::GradBucket& bucket) override {
    auto compressed = bucket.getBufferRef().to(dtype_);
    // Divide first, so that the narrow sum cannot overflow.
    compressed.div_(state_->getSize());
    std::vector<at::Tensor> tensors{compressed};
    auto future = state_->allreduce(tensors)->getFuture();
    at::Tensor out = bucket.getBufferRef();
    return future->then(
        [out](c10::ivalue::Future& done) {
          out.copy_(done.value().toTensorVector()[0]);
          return c10::IValue(out);
        },
        future->elementType());
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    return result.isTensor() ? result.toTensor() : result.toTensorVector()[0];
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> state_;
  at::ScalarType dtype_;
};

}  // namespace

struct DelayedReduce {
  std::atomic<bool> armed{false};
  std::atomic<bool> queued{false};  // once: the Reducer's first iteration
  c10d::Reducer* reducer = nullptr;
};

struct GradientSynchronizer::Impl {
  std::shared_ptr<ProcessGroup> group;
  SyncOptions options;
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> buffers;
  std::unique_ptr<c10d::Reducer> reducer;
  size_t num_buckets = 0;
  // Which parameters got a gradient in the current synchronising backward.
  std::shared_ptr<std::vector<std::atomic<bool>>> got_grad;
  // static_graph: armed for the first synchronising backward, whose first
  // gradient queues the Reducer's delayed all-reduce at the end of that
  // backward (what Python DDP's _DDPSink does from the outputs).
  std::shared_ptr<DelayedReduce> delayed = std::make_shared<DelayedReduce>();
  std::vector<unsigned> hooks;
  bool expecting_backward = false;
  bool require_forward_param_sync = true;
};

GradientSynchronizer::GradientSynchronizer(
    std::shared_ptr<ProcessGroup> group,
    std::vector<std::pair<std::string, torch::Tensor>> parameters,
    std::vector<torch::Tensor> buffers,
    SyncOptions options)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  if (!group) {
    throw InvalidArgument(
        component::kDistributed,
        "GradientSynchronizer needs a process group, got none.");
  }
  if (options.bucket_cap_mb() <= 0) {
    std::ostringstream v;
    v << options.bucket_cap_mb();
    throw InvalidArgument(
        component::kDistributed,
        "bucket_cap_mb must be positive, got " + v.str() +
            ". DDP's default is 25.");
  }
  if (auto c = options.compression();
      c && *c != torch::kBFloat16 && *c != torch::kHalf) {
    throw InvalidArgument(
        component::kDistributed,
        std::string("gradient compression must be bf16 or fp16, got ") +
            c10::toString(*c) + ".");
  }
  im.group = std::move(group);
  im.options = options;
  im.buffers = std::move(buffers);
  for (auto& [name, p] : parameters) {
    if (p.requires_grad()) {
      im.names.push_back(name);
      im.params.push_back(p);
    }
  }
  auto& pg = im.group->impl().pg;
  // Python DDP's checks and start: the same parameter shapes everywhere,
  // then rank 0's parameters and buffers on every process.
  try {
    c10d::verify_params_across_processes(pg, im.params, {});
  } catch (...) {
    im.group->rethrow_explained(
        "prepare(model): checking that every process has the same model");
  }
  std::vector<torch::Tensor> state;
  for (auto& [name, p] : parameters) {
    state.push_back(p);
  }
  state.insert(state.end(), im.buffers.begin(), im.buffers.end());
  im.group->broadcast_coalesced(state, 0);

  if (im.params.empty()) {
    throw UsageError(
        component::kDistributed,
        "prepare(model) found no parameter that requires a gradient, so "
        "there is nothing to synchronise. Prepare the model you train.");
  }
  im.got_grad =
      std::make_shared<std::vector<std::atomic<bool>>>(im.params.size());
  for (size_t i = 0; i < im.params.size(); ++i) {
    auto flags = im.got_grad;
    auto delayed = im.delayed;
    im.hooks.push_back(
        im.params[i].register_hook([flags, delayed, i](const torch::Tensor&) {
          (*flags)[i] = true;
          if (delayed->armed.exchange(false)) {
            delayed->queued = true;
            // Runs inside this backward, so the callback runs at its end.
            torch::autograd::Engine::get_default_engine().queue_callback(
                [reducer = delayed->reducer] { reducer->delay_all_reduce(); });
          }
        }));
  }
  if (!options.reduce_gradients()) {
    return;
  }
  const auto cap = static_cast<int64_t>(options.bucket_cap_mb() * 1024 * 1024);
  auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
      im.params,
      {static_cast<size_t>(kFirstBucketBytes), static_cast<size_t>(cap)},
      std::vector<bool>(im.params.size(), false));
  // The Reducer expects buckets in the order gradients become ready
  // (reverse registration order), as Python DDP passes them.
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(limits.begin(), limits.end());
  im.num_buckets = buckets.size();
  detail::ReducerArgs args;
  args.params = im.params;
  args.bucket_indices = std::move(buckets);
  args.per_bucket_size_limits = std::move(limits);
  args.group = pg;
  args.bucket_bytes_cap = cap;
  args.find_unused_parameters = options.find_unused_parameters();
  args.gradient_as_bucket_view = options.gradient_as_bucket_view();
  for (size_t i = 0; i < im.names.size(); ++i) {
    args.param_names[i] = im.names[i];
  }
  args.first_bucket_bytes_cap = cap;
  im.reducer = detail::make_reducer(std::move(args));
  im.delayed->reducer = im.reducer.get();
  if (options.static_graph()) {
    im.reducer->set_static_graph();
  }
  if (auto c = options.compression()) {
    // Gloo gained bf16 only in later LibTorch releases: ask it once, on
    // every rank, rather than fail in the middle of the first backward.
    try {
      std::vector<at::Tensor> probe{torch::zeros(
          {1}, torch::TensorOptions().dtype(*c).device(im.params[0].device()))};
      pg->allreduce(probe)->wait();
    } catch (const std::exception& e) {
      throw Unsupported(
          component::kDistributed,
          std::string("gradient compression to ") + c10::toString(*c) +
              " needs a backend that all-reduces that type; this LibTorch's " +
              im.group->backend() + " does not (" + e.what() +
              "). Use fp16 compression, or none.");
    }
    im.reducer->register_comm_hook(std::make_unique<CompressionHook>(pg, *c));
  }
}

GradientSynchronizer::~GradientSynchronizer() {
  auto& im = *impl_;
  for (size_t i = 0; i < im.hooks.size(); ++i) {
    try {
      im.params[i].remove_hook(im.hooks[i]);
    } catch (...) {
    }
  }
}

void GradientSynchronizer::before_forward(bool sync) {
  auto& im = *impl_;
  if (!torch::GradMode::is_enabled()) {
    return;
  }
  if (im.reducer) {
    if (sync) {
      im.reducer->prepare_for_forward();
    }
    // After the first synchronising backward the Reducer re-buckets once,
    // in the order gradients really arrived (a collective: every rank does
    // it).
    try {
      im.reducer->rebuild_buckets();
    } catch (...) {
      im.group->rethrow_explained("rebuilding the all-reduce buckets");
    }
  }
  if (im.options.broadcast_buffers() && im.require_forward_param_sync &&
      !im.buffers.empty()) {
    im.group->broadcast_coalesced(im.buffers, 0);
  }
}

void GradientSynchronizer::after_forward(
    const std::vector<torch::Tensor>& outputs, bool sync) {
  auto& im = *impl_;
  if (!torch::GradMode::is_enabled()) {
    return;
  }
  if (!sync) {
    im.require_forward_param_sync = false;
    return;
  }
  im.require_forward_param_sync = true;
  for (auto& flag : *im.got_grad) {
    flag = false;
  }
  if (im.options.find_unused_parameters() && outputs.empty()) {
    throw UsageError(
        component::kDistributed,
        "find_unused_parameters needs the forward's output tensors, got a "
        "model output ampkit cannot look into. Return a tensor, a vector, "
        "pair or tuple of tensors from forward.");
  }
  if (im.reducer) {
    const bool search =
        im.options.find_unused_parameters() && !im.options.static_graph();
    im.reducer->prepare_for_backward(
        search ? outputs : std::vector<torch::Tensor>{});
    // Until a backward has queued it (one that reached no parameter
    // queues nothing, and the next synchronising one is still the
    // Reducer's first iteration).
    if (im.options.static_graph() && !im.delayed->queued) {
      im.delayed->armed = true;
    }
  }
  im.expecting_backward = true;
}

void GradientSynchronizer::after_backward() {
  auto& im = *impl_;
  if (!im.expecting_backward) {
    return;
  }
  if (im.options.find_unused_parameters() || im.options.static_graph()) {
    im.expecting_backward = false;
    return;
  }
  std::string missing;
  size_t count = 0;
  for (size_t i = 0; i < im.params.size(); ++i) {
    if (!(*im.got_grad)[i]) {
      missing += (count++ ? ", " : "") + im.names[i];
    }
  }
  if (count == im.params.size() && count > 0) {
    // This backward reached none of the model's parameters (a GAN's
    // discriminator loss, the generator's forward having run): not this
    // model's backward. As PyTorch's DDP, its reduction still waits for the
    // one that reaches it.
    return;
  }
  im.expecting_backward = false;
  if (count > 0) {
    throw_without_gradient(count, missing, "in this backward");
  }
}

bool GradientSynchronizer::awaiting_backward() const {
  const auto& im = *impl_;
  return im.expecting_backward && !im.options.find_unused_parameters() &&
         !im.options.static_graph();
}

void GradientSynchronizer::check_backward_done() const {
  const auto& im = *impl_;
  if (!awaiting_backward()) {
    return;
  }
  throw_without_gradient(
      im.params.size(),
      ampkit::detail::join(im.names, ", "),
      "since its forward (no backward reached the model)");
}

void GradientSynchronizer::throw_without_gradient(
    size_t count, const std::string& missing, const std::string& when) {
  throw UsageError(
      component::kDistributed,
      std::to_string(count) + " parameter(s) got no gradient " + when +
          ", so their all-reduce never ran and the processes "
          "would drift apart: " +
          missing +
          ". Make every parameter take part in the loss, freeze the "
          "unused ones (requires_grad false) before prepare(), or set "
          "AcceleratorOptions().find_unused_parameters(true) (DDP's "
          "find_unused_parameters, which costs a graph walk per step).");
}

size_t GradientSynchronizer::num_buckets() const {
  return impl_->num_buckets;
}

const SyncOptions& GradientSynchronizer::options() const {
  return impl_->options;
}

}  // namespace ampkit::dist
