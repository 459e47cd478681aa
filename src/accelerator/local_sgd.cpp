// LocalSGD: no_sync for the whole scope, parameters averaged every K steps.
#include "ampkit/accelerator/local_sgd.h"

#include <torch/torch.h>

#include <exception>
#include <string>

#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit {

namespace {}  // namespace

LocalSGD::LocalSGD(
    Accelerator& accelerator,
    const PreparedModelBase& model,
    int64_t local_sgd_steps,
    bool enabled)
    : accelerator_(accelerator),
      module_(model.module_ptr()),
      local_sgd_steps_(local_sgd_steps),
      enabled_(enabled && accelerator.num_processes() > 1) {
  if (enabled && local_sgd_steps < 1) {
    throw InvalidArgument(
        component::kLocalSgd,
        "local_sgd_steps must be >= 1, got " + std::to_string(local_sgd_steps) +
            ". Pass how many optimizer steps each process takes between "
            "averages (accelerate's example uses 8), or enabled = false.");
  }
  if (accelerator.options().zero_stage > 0) {
    throw Unsupported(
        component::kLocalSgd,
        "LocalSGD runs over DDP, got zero_stage " +
            std::to_string(accelerator.options().zero_stage) +
            " (a sharded optimizer steps only its shard, so local steps "
            "cannot diverge and be averaged). Use zero_stage 0, as "
            "accelerate refuses LocalSGD with DeepSpeed.");
  }
  if (enabled_) {
    // Guaranteed elision: the scope is built in place, never moved.
    no_sync_.reset(new Accelerator::NoSyncScope(accelerator.no_sync(model)));
  }
}

LocalSGD::~LocalSGD() noexcept(false) {
  if (enabled_ && std::uncaught_exceptions() == 0) {
    average_parameters();
  }
}

void LocalSGD::step() {
  ++num_steps_;
  if (enabled_ && num_steps_ % local_sgd_steps_ == 0) {
    average_parameters();
  }
}

void LocalSGD::average_parameters() {
  accelerator_.wait_for_everyone();
  torch::NoGradGuard no_grad;
  for (auto& p : module_->parameters()) {
    p.copy_(accelerator_.reduce(p.detach(), ReduceOp::mean));
  }
}

}  // namespace ampkit
