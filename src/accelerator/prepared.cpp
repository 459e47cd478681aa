// The Accelerator's prepare() of models, optimizers and schedulers, and
// PreparedOptimizer and PreparedScheduler: they step only on micro-steps
// that synchronise gradients, through the GradScaler when loss scaling is on.
#include "ampkit/accelerator/prepared.h"

#include <torch/cuda.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <iostream>
#include <sstream>
#include <string>

#include "accelerator/state.h"
#include "ampkit/accelerator/accelerator.h"
#include "ampkit/error.h"
#include "ampkit/optim/fused.h"
#include "optim/compat.h"
#include "optim/fused_step.h"
#include "utils/components.h"

namespace ampkit {

namespace {

// The fused step `optimizer` was prepared with, or none where it no longer
// applies: re-checked each step, as parameters can change dtype or layout
// between steps, and the check is a few flag reads per parameter.
detail::FusedStep fused_step_now(
    detail::FusedStep prepared, torch::optim::Optimizer& optimizer) {
  switch (prepared) {
    case detail::FusedStep::aten:
      return optim::aten_fused_step_unsupported_reason(optimizer)
                 ? detail::FusedStep::none
                 : prepared;
    case detail::FusedStep::ampkit:
      return detail::fused_step_unsupported_reason(optimizer)
                 ? detail::FusedStep::none
                 : prepared;
    case detail::FusedStep::none:
      break;
  }
  return detail::FusedStep::none;
}

// One step of `kind` (aten or ampkit); loss scaling folded in where
// grad_scale and found_inf are defined.
void run_fused_step(
    detail::FusedStep kind,
    torch::optim::Optimizer& optimizer,
    const torch::Tensor& grad_scale,
    const torch::Tensor& found_inf) {
  if (kind == detail::FusedStep::aten) {
    optim::aten_fused_step(optimizer, grad_scale, found_inf);
  } else {
    detail::fused_step(optimizer, grad_scale, found_inf);
  }
}
}  // namespace

namespace detail {

void move_optimizer_state(
    torch::optim::Optimizer& optimizer, const c10::Device& device) {
  if (optimizer.state().empty()) {
    return;
  }
  torch::serialize::OutputArchive out;
  optimizer.save(out);
  std::ostringstream buffer;
  out.save_to(buffer);
  std::istringstream in_buffer(buffer.str());
  torch::serialize::InputArchive in;
  in.load_from(in_buffer, device);
  optimizer.load(in);
}

}  // namespace detail

std::shared_ptr<torch::nn::Module> Accelerator::prepare_module(
    std::shared_ptr<torch::nn::Module> module) {
  if (!module) {
    throw InvalidArgument(
        component::kAccelerator,
        "prepare got an empty model (a null module holder). Construct the "
        "model before preparing it.");
  }
  module->to(device());
  auto& st = *state_;
  if (st.options.channels_last) {
    // In place (set_data), so an optimizer made before prepare still holds
    // these parameters; before DDP lays its buckets out like them.
    torch::NoGradGuard no_grad;
    auto lay_out = [](torch::Tensor t) {
      if (t.defined() && t.dim() == 4 && t.is_floating_point()) {
        // As Module.to(memory_format=...) does: a weight with one input
        // channel is also channels-last by contiguity, where contiguous()
        // would keep its NCHW strides and the convolution would stay NCHW.
        t.set_data(t.to(
            t.options(),
            /*non_blocking=*/false,
            /*copy=*/false,
            at::MemoryFormat::ChannelsLast));
      }
    };
    for (auto& p : module->parameters()) {
      lay_out(p);
    }
    for (auto& b : module->buffers()) {
      lay_out(b);
    }
  }
  st.models.push_back(detail::ModelEntry{module, nullptr, nullptr});
  // Names by module path; a second model's are prefixed to stay unique.
  const std::string prefix =
      st.models.size() == 1
          ? std::string()
          : "model" + std::to_string(st.models.size() - 1) + ".";
  torch::OrderedDict<std::string, torch::Tensor> named;
  for (const auto& item : module->named_parameters()) {
    st.named_parameters.emplace_back(prefix + item.key(), item.value());
    named.insert(prefix + item.key(), item.value());
  }
  if (st.scaler) {
    st.scaler->register_parameter_names(named);
  }
  st.strategy->setup_module(st, st.models.back());
  return module;
}

PreparedOptimizer Accelerator::prepare_optimizer(
    torch::optim::Optimizer& optimizer) {
  auto& st = *state_;
  for (const auto& entry : st.optimizers) {
    if (entry.optimizer == &optimizer) {
      throw UsageError(
          component::kAccelerator,
          "this optimizer is already prepared, got a second prepare() of it. "
          "Prepare each optimizer once and keep the PreparedOptimizer.");
    }
  }
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      const auto& p = groups[g].params()[i];
      if (p.device() != device()) {
        throw UsageError(
            component::kAccelerator,
            "the optimizer's parameter param_groups[" + std::to_string(g) +
                "][" + std::to_string(i) + "] is on " + p.device().str() +
                ", but the Accelerator trains on " + device().str() +
                ". Prepare the model before the optimizer, and build the "
                "optimizer from the model's parameters.");
      }
    }
  }
  // Without a GPU every tensor is already on the CPU.
  if (device().type() != c10::DeviceType::CPU || torch::cuda::is_available()) {
    detail::move_optimizer_state(optimizer, device());
  }
  detail::PreparedOptimizerEntry entry;
  entry.optimizer = &optimizer;
  st.strategy->setup_optimizer(st, entry);
  // A fused step replaces optimizer.step() only where it computes the same
  // update: ATen's kernels where this LibTorch has them, else ampkit's CPU
  // Adam/AdamW pass; both fold loss scaling in.
  if (st.options.fused_optimizer_step) {
    auto reason = optim::aten_fused_step_unsupported_reason(optimizer);
    if (!reason) {
      entry.fused = detail::FusedStep::aten;
    } else if (!AMPKIT_HAS_ATEN_FUSED_OPTIM) {
      reason = detail::fused_step_unsupported_reason(optimizer);
      if (!reason) {
        entry.fused = detail::FusedStep::ampkit;
      }
    }
    if (is_main_process() && !st.options.quiet) {
      const std::string scaling = st.scaler ? ", loss scaling inside" : "";
      std::cerr << "ampkit: optimizer " << st.optimizers.size()
                << (entry.fused == detail::FusedStep::aten
                        ? " steps fused (ATen's fused kernels" + scaling + ")"
                    : entry.fused == detail::FusedStep::ampkit
                        ? " steps fused (one pass per parameter" + scaling + ")"
                        : " steps through optimizer.step(): " + *reason)
                << std::endl;
    }
  }
  st.optimizers.push_back(entry);
  return PreparedOptimizer(optimizer, st.optimizers.size() - 1, state_);
}

PreparedScheduler Accelerator::prepare_scheduler(
    optim::LRScheduler& scheduler) {
  state_->checkpoints.schedulers.push_back(&scheduler);
  return PreparedScheduler(scheduler, state_);
}

detail::PreparedOptimizerEntry& PreparedOptimizer::entry() const {
  auto& st = *state_;
  if (index_ >= st.optimizers.size() ||
      st.optimizers[index_].optimizer != optimizer_) {
    throw UsageError(
        component::kAccelerator,
        "this optimizer was prepared before accelerator.free_memory(), "
        "which released it. Prepare the optimizer again after "
        "free_memory().");
  }
  return st.optimizers[index_];
}

void PreparedOptimizer::step() {
  try {
    step_unhinted();
  } catch (...) {
    diag::rethrow_with_hint();
  }
}

void PreparedOptimizer::step_unhinted() {
  auto& st = *state_;
  if (!st.gradient.sync_gradients) {
    return;
  }
  auto& entry = this->entry();
  st.strategy->before_optimizer_step(st, entry);
  if (st.options.gradient_clipping > 0) {
    // DeepSpeed's gradient_clipping: this optimizer's gradients to the
    // global norm before it steps.
    detail::clip_grad_norm(
        st,
        st.strategy->clipped_parameters(entry),
        st.options.gradient_clipping,
        2.0);
  }
  step_optimizer();
  st.strategy->after_optimizer_step(st, entry);
}

void PreparedOptimizer::step_optimizer() {
  auto& st = *state_;
  auto& entry = this->entry();
  if (!st.scaler && st.options.detect_anomaly) {
    const std::string where = st.non_finite_gradients();
    if (!where.empty()) {
      throw TrainingDiverged(
          component::kAccelerator,
          "detect_anomaly: non-finite gradients at step " +
              std::to_string(st.tracking.optimizer_steps + 1) + " in " + where +
              "; the step was not taken. Lower the learning "
              "rate, clip gradients (clip_grad_norm_), or look for an "
              "overflowing op in the forward (fp16: use loss scaling).");
    }
  }
  const detail::FusedStep fused = fused_step_now(entry.fused, *optimizer_);
  if (fused == detail::FusedStep::none &&
      entry.fused == detail::FusedStep::aten) {
    // Falling back to the optimizer's own step: its step() counts first.
    optim::sync_fused_step_counts(*optimizer_);
  }
  if (!st.scaler) {
    if (fused == detail::FusedStep::none) {
      optimizer_->step();
    } else {
      run_fused_step(fused, *optimizer_, {}, {});
    }
    entry.skipped_known = false;
    if (index_ == 0) {
      st.after_optimizer_step(entry);
    }
    return;
  }
  if (entry.stepped) {
    // Stepped twice without a backward in between: finish the last one.
    st.update_scaler();
  }
  if (fused != detail::FusedStep::none) {
    const torch::Tensor found_inf = st.scaler->step_supporting_amp_scaling(
        *optimizer_,
        [&](const torch::Tensor& grad_scale, const torch::Tensor& found_inf) {
          run_fused_step(fused, *optimizer_, grad_scale, found_inf);
        });
    // Read only if someone asks (optimizer_step_was_skipped, the
    // scheduler's skip rule, a log line): no host sync in the step.
    entry.found_inf = found_inf;
    entry.skipped_known.reset();
  } else {
    // GradScaler::step reads found_inf to decide whether to call
    // optimizer.step(), as torch.amp's does.
    entry.skipped_known = !st.scaler->step(*optimizer_).has_value();
  }
  entry.stepped = true;
  st.gradient.scaler_update_pending = true;
  bool all_stepped = true;
  for (const auto& e : st.optimizers) {
    all_stepped = all_stepped && e.stepped;
  }
  if (all_stepped) {
    st.update_scaler();
  }
  if (index_ == 0) {
    st.after_optimizer_step(entry);
  }
}

void PreparedOptimizer::zero_grad(bool set_to_none) {
  if (!state_->gradient.sync_gradients) {
    return;
  }
  state_->strategy->zero_grad(entry(), set_to_none);
}

int64_t PreparedOptimizer::state_bytes() const {
  return optim::optimizer_state_bytes(*optimizer_);
}

int64_t PreparedOptimizer::gradient_bytes() const {
  return state_->strategy->gradient_bytes(entry());
}

bool PreparedOptimizer::step_was_skipped() const {
  return entry().skipped();
}

bool PreparedScheduler::should_step() const {
  const auto& st = *state_;
  if (!st.options.step_scheduler_with_optimizer) {
    return true;
  }
  if (!st.gradient.sync_gradients) {
    return false;
  }
  for (const auto& entry : st.optimizers) {
    if (entry.skipped()) {  // with loss scaling on CUDA: the step's one read
      return false;
    }
  }
  return true;
}

void PreparedScheduler::step() {
  if (!should_step()) {
    return;
  }
  // As accelerate: a schedule written for one process advances once per
  // process, since each optimizer step consumed num_processes batches;
  // with split_batches a step consumed one batch, so it advances once.
  const bool per_process =
      state_->options.step_scheduler_with_optimizer && !state_->split_batches;
  const int64_t times = per_process ? state_->process.num_processes : 1;
  for (int64_t i = 0; i < times; ++i) {
    scheduler_->step();
  }
}

void PreparedScheduler::step(double metric) {
  // A metric-driven schedule steps on each evaluation, whatever the last
  // optimizer step did.
  scheduler_->step(metric);
}

}  // namespace ampkit
