// The Accelerator: construction, and accelerate's semantics for mixed
// precision, gradient accumulation and gradient clipping (prepare() is in
// prepared.cpp).
#include "ampkit/accelerator/accelerator.h"

#include <ATen/Context.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <iostream>
#include <unordered_set>

#include "accelerator/state.h"
#include "amp/cuda_capability.h"
#include "ampkit/distributed/env.h"
#include "ampkit/error.h"
#include "ampkit/track/system_stats.h"
#include "ampkit/utils/memory.h"
#include "ampkit/utils/random.h"
#include "ampkit/utils/warnings.h"
#include "utils/components.h"
#include "utils/non_finite.h"
#include "utils/strings.h"

namespace ampkit {

namespace {}  // namespace

namespace detail {

void AcceleratorState::update_scaler() {
  scaler->update();
  gradient.scaler_update_pending = false;
  for (auto& entry : optimizers) {
    entry.stepped = false;
    entry.unscaled = false;
  }
}

int64_t AcceleratorState::skipped_step_count() {
  if (tracking.skipped_pending.defined()) {
    tracking.skipped_steps +=
        static_cast<int64_t>(tracking.skipped_pending.item<double>());
    tracking.skipped_pending = torch::Tensor();
  }
  return tracking.skipped_steps;
}

void AcceleratorState::after_optimizer_step(
    const PreparedOptimizerEntry& entry) {
  ++tracking.optimizer_steps;
  if (entry.skipped_known) {
    tracking.skipped_steps += *entry.skipped_known ? 1 : 0;
  } else {
    // Counted on the device: no host read in the step.
    tracking.skipped_pending =
        tracking.skipped_pending.defined()
            ? tracking.skipped_pending + entry.found_inf.to(
                                             tracking.skipped_pending.device(),
                                             /*non_blocking=*/true)
            : entry.found_inf.clone();
  }
  if (!options.auto_log || tracking.trackers.empty() ||
      tracking.optimizer_steps % options.log_every_n_steps != 0) {
    return;
  }
  track::Metrics m;
  if (tracking.loss_count > 0) {
    m[track::kLoss] =
        tracking.loss_sum.item<double>() / double(tracking.loss_count);
  }
  const auto& groups = optimizers.front().optimizer->param_groups();
  if (!groups.empty()) {
    m[track::kLearningRate] = groups.front().options().get_lr();
  }
  if (scaler) {
    m[track::kLossScale] = scaler->get_scale();
  }
  m[track::kSkippedSteps] = double(skipped_step_count());
  if (tracking.last_grad_norm.defined()) {
    m[track::kGradNorm] = tracking.last_grad_norm.item<double>();
  }
  const auto now = std::chrono::steady_clock::now();
  const double seconds =
      std::chrono::duration<double>(now - tracking.last_log_time).count();
  if (tracking.samples_since_log > 0 && seconds > 0) {
    m[track::kSamplesPerSecond] =
        double(tracking.samples_since_log * process.num_processes) / seconds;
  }
  if (auto rss = track::process_rss_mb()) {
    m[track::kMemoryRssMb] = *rss;
  }
  if (options.device.is_cuda()) {
    if (auto gpu = track::gpu_stats(options.gpu_pci_bus_id)) {
      m[track::kGpuMemoryMb] = gpu->memory_used_mb;
      m[track::kGpuUtilization] = gpu->utilization_percent;
    }
  }
  log_to_trackers(*this, m, tracking.optimizer_steps);
  tracking.loss_sum = torch::Tensor();
  tracking.loss_count = 0;
  tracking.last_grad_norm = torch::Tensor();
  tracking.samples_since_log = 0;
  tracking.last_log_time = now;
}

std::string AcceleratorState::non_finite_gradients() const {
  std::vector<std::pair<std::string, torch::Tensor>> grads;
  grads.reserve(named_parameters.size());
  for (const auto& [name, param] : named_parameters) {
    grads.emplace_back(name, strategy->gradient_of(*this, param));
  }
  return describe_non_finite(find_non_finite(grads));
}

const AutocastOptions* forward_autocast(AcceleratorState& state) {
  return state.autocast ? &*state.autocast : nullptr;
}

void note_forward(AcceleratorState& state) {
  ++state.gradient.forwards_since_backward;
}

void set_end_of_dataloader(AcceleratorState& state, bool end) {
  state.gradient.end_of_dataloader = end;
}

void note_batch(AcceleratorState& state, int64_t samples) {
  state.tracking.samples_since_log += samples;
}

std::shared_ptr<LoaderPosition> register_loader(
    AcceleratorState& state, const data::ShardedSampler& sampler) {
  auto position = std::make_shared<LoaderPosition>(LoaderPosition{sampler, 0});
  state.checkpoints.loaders.push_back(position);
  // accelerate's split_batches is the Accelerator's: one prepared loader
  // that splits its batches makes the schedulers step once per step.
  state.split_batches =
      state.split_batches || sampler.options().split_batches();
  return position;
}

void note_stream_loader(AcceleratorState& state) {
  ++state.checkpoints.stream_loaders;
}

void throw_no_sampler(const char* what) {
  throw UsageError(
      component::kAccelerator,
      std::string(what) +
          " needs the loader's ShardedSampler, got a loader prepared "
          "without one: a stream (it has no length; iterate it to its end) "
          "or a LibTorch loader passed to prepare(). For a dataset with a "
          "size, build it with accelerator.prepare_data_loader(...).");
}

void set_gather_remainder(AcceleratorState& state, int64_t remainder) {
  state.gather_remainder = remainder;
}

bool is_distributed(const AcceleratorState& state) {
  return state.process.group != nullptr || state.options.fsdp.has_value();
}

bool prepared_here(
    const AcceleratorState& state, const torch::nn::Module& module) {
  return std::any_of(state.models.begin(), state.models.end(), [&](auto& m) {
    return m.module.get() == &module;
  });
}

void check_not_released(
    const AcceleratorState& state, const torch::nn::Module& module) {
  if (!prepared_here(state, module)) {
    throw UsageError(
        component::kAccelerator,
        "this model was prepared before accelerator.free_memory(), which "
        "released it (its gradients would no longer be synchronised). "
        "Prepare the model again after free_memory().");
  }
}

void before_forward(AcceleratorState& state, const torch::nn::Module& module) {
  if (auto* model = state.model_entry(&module)) {
    state.strategy->before_forward(state, *model);
  }
}

void after_forward(
    AcceleratorState& state,
    const torch::nn::Module& module,
    const std::vector<torch::Tensor>& outputs) {
  if (auto* model = state.model_entry(&module)) {
    state.strategy->after_forward(state, *model, outputs);
  }
}

ModelEntry* AcceleratorState::model_entry(const torch::nn::Module* m) {
  for (auto& model : models) {
    if (model.module.get() == m) {
      return &model;
    }
  }
  return nullptr;
}

std::vector<std::shared_ptr<torch::nn::Module>> AcceleratorState::modules()
    const {
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  out.reserve(models.size());
  for (const auto& model : models) {
    out.push_back(model.module);
  }
  return out;
}

void rethrow_forward_failure(
    AcceleratorState& state, const torch::nn::Module& module) {
  auto* model = state.model_entry(&module);
  const auto missing = model != nullptr
                           ? state.strategy->units_not_entered(*model)
                           : std::vector<std::string>();
  if (missing.empty()) {
    diag::rethrow_with_hint();
  }
  std::string what;
  try {
    throw;
  } catch (const Error&) {
    throw;  // ampkit's own errors already say what to do
  } catch (const c10::Error& e) {
    what = e.what_without_backtrace();
  } catch (const std::exception& e) {
    what = e.what();
  }
  throw UsageError(
      component::kAccelerator,
      "the model's forward failed under FSDP: " + what +
          "\nA unit's parameters hold no values outside "
          "ampkit::dist::fsdp_forward, and this forward had not entered " +
          join(missing, ", ") +
          " through it when it failed. Call each unit in its parent's "
          "forward as x = ampkit::dist::fsdp_forward(*unit, x); instead of "
          "unit->forward(x).");
}

c10::Device device(const AcceleratorState& state) {
  return state.options.device;
}

}  // namespace detail

AccumulateScope::AccumulateScope(
    std::shared_ptr<detail::AcceleratorState> state,
    const torch::Tensor& num_items)
    : state_(std::move(state)) {
  auto& st = *state_;
  if (st.gradient.in_accumulate) {
    throw UsageError(
        component::kAccelerator,
        "accumulate() scopes do not nest, got a second one while the first "
        "is open. Open one scope per micro-batch, at the top of the loop "
        "body.");
  }
  // accelerate's _do_sync: the last batch of the data loader always syncs
  // and restarts the count.
  if (st.gradient.end_of_dataloader) {
    st.gradient.micro_step = 0;
    st.gradient.sync_gradients = true;
  } else {
    ++st.gradient.micro_step;
    st.gradient.sync_gradients =
        st.gradient.micro_step % st.options.gradient_accumulation_steps == 0;
  }
  st.gradient.in_accumulate = true;
  st.gradient.window_factor = torch::Tensor();
  ++st.gradient.window_micro_steps;
  if (num_items.defined()) {
    st.gradient.window_items = st.gradient.window_items.defined()
                                   ? st.gradient.window_items + num_items
                                   : num_items;
  }
}

AccumulateScope::~AccumulateScope() {
  state_->gradient.in_accumulate = false;
}

Accelerator::Accelerator(AcceleratorOptions options)
    : state_(std::make_shared<detail::AcceleratorState>()) {
  auto& st = *state_;
  st.options = resolve_options(options);
  const ResolvedAcceleratorOptions& r = st.options;
  if (r.device.is_cuda()) {
    // One GPU per process: before any CUDA tensor, stream or process group,
    // so bare kCUDA tensors, NCCL and the autocast cache use this rank's
    // GPU, and no process makes a context on GPU 0 it does not use.
    detail::set_current_cuda_device(r.device.index());
  }
  set_warning_rank(r.dist.rank, r.dist.world_size);
  st.options.rows.push_back(
      r.tune_malloc
          ? OptionRow{"malloc", tune_malloc().description, "tune_malloc"}
          : OptionRow{
                "malloc", "the process's own settings", "tune_malloc false"});
  if (r.mixed_precision != Precision::no) {
    st.autocast.emplace(
        AutocastOptions(r.device.type(), to_dtype(r.mixed_precision))
            .cache_enabled(r.autocast_cache_enabled));
  }
  if (r.loss_scaling) {
    GradScalerOptions scaler_options = r.grad_scaler;
    if (r.detect_anomaly) {
      scaler_options.report_overflow(true);
    }
    st.scaler.emplace(scaler_options);
    if (r.detect_anomaly) {
      // Skipped steps are loss scaling working as designed: logged, named by
      // the Accelerator's step count rather than the scaler's updates.
      detail::AcceleratorState* raw = state_.get();
      st.scaler->set_overflow_callback([raw](const OverflowReport& report) {
        warn(
            component::kAccelerator,
            detail::skipped_step_line(
                raw->tracking.optimizer_steps + 1,
                report.where,
                report.old_scale,
                report.new_scale));
      });
    }
  }
  if (r.dist.distributed()) {
    st.process.num_processes = r.dist.world_size;
    st.process.process_index = r.dist.rank;
    st.process.local_process_index = r.dist.local_rank;
    st.process.group = std::make_shared<dist::ProcessGroup>(
        r.dist,
        dist::GroupOptions().timeout(r.timeout).debug(r.debug),
        r.device);
    st.options.rows.push_back(
        {"network", st.process.group->network(), "process group"});
  }
  st.strategy = detail::make_strategy(st.options, st.process.group != nullptr);
  if (r.seed) {
    set_seed(*r.seed);
  }
  if (auto mismatch = diag::check_torch_version()) {
    st.options.warnings.push_back(*mismatch);
  }
  if (is_main_process()) {
    if (!r.quiet) {
      std::cerr << "ampkit: Accelerator settings\n" << r.table();
      if (!r.auto_precision_reason.empty()) {
        std::cerr << "ampkit: mixed_precision auto chose "
                  << to_string(r.mixed_precision) << ": "
                  << r.auto_precision_reason << '\n';
      }
      std::cerr << std::flush;
    }
  }
  for (const auto& w : r.warnings) {
    warn(component::kAccelerator, w);
  }
  if (r.handle_signals) {
    st.on_preemption = [this](int signal) { preempt(signal); };
    detail::install_preemption_handlers();
  }
}

Accelerator::~Accelerator() {
  if (state_->on_preemption) {
    state_->on_preemption = nullptr;
    detail::remove_preemption_handlers();
  }
  if (state_->process.group && std::uncaught_exceptions() > 0) {
    // Unwinding: let the other ranks' waits end with this rank's name.
    state_->process.group->report_failure(
        "it left the training loop with an exception (see its output)");
  }
  try {
    end_training();
  } catch (const std::exception& e) {
    // A destructor must not throw; the trackers' last error is reported.
    warn(
        component::kAccelerator,
        std::string("closing the trackers failed: ") + e.what());
  }
}

int64_t Accelerator::optimizer_steps() const {
  return state_->tracking.optimizer_steps;
}

int64_t Accelerator::skipped_optimizer_steps() const {
  return state_->skipped_step_count();
}

const ResolvedAcceleratorOptions& Accelerator::options() const {
  return state_->options;
}

c10::Device Accelerator::device() const {
  return state_->options.device;
}

Precision Accelerator::mixed_precision() const {
  return state_->options.mixed_precision;
}

int64_t Accelerator::gradient_accumulation_steps() const {
  return state_->options.gradient_accumulation_steps;
}

void Accelerator::set_gradient_accumulation_steps(int64_t n) {
  auto& st = *state_;
  if (n < 1) {
    throw InvalidArgument(
        component::kAccelerator,
        "gradient_accumulation_steps must be >= 1, got " + std::to_string(n) +
            ". With an automatic batch size, use observed_batch_size / "
            "batch_size, at least 1.");
  }
  if (st.gradient.in_accumulate) {
    throw UsageError(
        component::kAccelerator,
        "set_gradient_accumulation_steps inside an accumulate() scope. "
        "Set it between micro-steps, before the scope opens.");
  }
  st.options.gradient_accumulation_steps = n;
  st.gradient.micro_step = 0;
}

void Accelerator::backward(const torch::Tensor& loss) {
  backward(loss, /*retain_graph=*/false, /*create_graph=*/false);
}

void Accelerator::backward(
    const torch::Tensor& loss, bool retain_graph, bool create_graph) {
  try {
    backward_unhinted(loss, retain_graph, create_graph);
  } catch (...) {
    diag::rethrow_with_hint();
  }
}

void Accelerator::backward_unhinted(
    const torch::Tensor& loss, bool retain_graph, bool create_graph) {
  auto& st = *state_;
  const int64_t steps = st.options.gradient_accumulation_steps;
  if (steps > 1 && !st.gradient.in_accumulate) {
    throw UsageError(
        component::kAccelerator,
        "backward() with gradient_accumulation_steps " + std::to_string(steps) +
            " must run inside an accumulate() scope, got a call outside "
            "one. Start each micro-step with `auto scope = "
            "accelerator.accumulate(model);` so that the optimizer steps "
            "every " +
            std::to_string(steps) + " micro-batches.");
  }
  if (st.gradient.scaler_update_pending) {
    st.update_scaler();
  }
  if (st.autocast && st.gradient.forwards_since_backward == 0 &&
      !st.gradient.warned_no_forward) {
    st.gradient.warned_no_forward = true;
    warn(
        component::kAccelerator,
        "backward() found no forward under the Accelerator's autocast since "
        "the previous backward, so nothing ran in " +
            to_string(st.options.mixed_precision) +
            ". Call the prepared model (model(x)), not model->forward(x), or "
            "compute inside `auto guard = accelerator.autocast();`.");
  }
  st.gradient.forwards_since_backward = 0;
  if (st.options.detect_anomaly && !st.scaler &&
      !torch::isfinite(loss.detach()).all().item<bool>()) {
    throw TrainingDiverged(
        component::kAccelerator,
        "detect_anomaly: the loss is non-finite at step " +
            std::to_string(st.tracking.optimizer_steps + 1) + " (micro-step " +
            std::to_string(st.gradient.micro_step) + "), got " +
            std::to_string(
                loss.detach().to(torch::kDouble).sum().item<double>()) +
            ". Lower the learning rate, check the inputs of this batch for "
            "inf/NaN, or clip gradients (clip_grad_norm_).");
  }
  if (st.options.auto_log && !st.tracking.trackers.empty()) {
    // Summed on the device; read once per log, not once per step.
    const auto value = loss.detach().to(torch::kFloat);
    st.tracking.loss_sum =
        st.tracking.loss_sum.defined() ? st.tracking.loss_sum + value : value;
    ++st.tracking.loss_count;
  }
  // Counted items: the loss is a sum, divided by the window's items after
  // its synchronising backward. A further backward in that micro-step (two
  // losses, a GAN's two models) is scaled as the window's gradients were.
  const bool closed = st.gradient.window_factor.defined();
  torch::Tensor scaled =
      closed ? loss * st.gradient.window_factor.to(loss.scalar_type())
      : steps > 1 && !st.gradient.window_items.defined()
          ? loss / static_cast<double>(steps)
          : loss;
  if (st.scaler) {
    scaled = st.scaler->scale(scaled);
  }
  st.strategy->before_backward(st);
  st.collective("backward (gradient all-reduce)", [&] {
    scaled.backward({}, retain_graph, create_graph);
  });
  st.strategy->after_backward(st);
  if (st.gradient.sync_gradients && !closed) {
    st.finish_window();
  }
}

namespace detail {
void AcceleratorState::finish_window() {
  const int64_t steps = options.gradient_accumulation_steps;
  const int64_t had = gradient.window_micro_steps;
  torch::Tensor items = std::move(gradient.window_items);
  gradient.window_micro_steps = 0;
  gradient.window_items = torch::Tensor();
  torch::Tensor factor;
  if (had == 0) {
    return;  // no accumulate() scope: nothing was counted
  }
  if (items.defined()) {
    // One all-reduce per window. The processes' gradients were averaged
    // (DDP and ZeRO divide by the process count), so the sum over
    // processes is that times the count.
    auto total = items.to(torch::kDouble);
    if (process.group && options.dist.world_size > 1) {
      collective("item count all-reduce", [&] {
        process.group->all_reduce(total, ReduceOp::sum);
      });
    }
    factor =
        static_cast<double>(options.dist.world_size) / total.clamp_min(1.0);
  } else if (options.count_short_window && had < steps) {
    factor = torch::tensor(
        static_cast<double>(steps) / static_cast<double>(had),
        torch::dtype(torch::kDouble).device(detail::device(*this)));
  } else {
    return;
  }
  gradient.window_factor = factor;
  torch::NoGradGuard no_grad;
  // Every gradient once: the prepared models' and the optimizers'
  // parameters (a tensor may be in both, or registered twice). Under ZeRO
  // an optimizer's parameters are its shard slices, whose gradients are
  // the shard gradient it steps on.
  std::unordered_set<const void*> seen;
  auto scale = [&](torch::Tensor& p) {
    if (p.grad().defined() && seen.insert(p.unsafeGetTensorImpl()).second) {
      p.mutable_grad().mul_(factor.to(p.grad().scalar_type()));
    }
  };
  for (const auto& model : models) {
    for (auto& p : model.module->parameters()) {
      scale(p);
    }
  }
  for (auto& entry : optimizers) {
    for (auto& group : entry.optimizer->param_groups()) {
      for (auto& p : group.params()) {
        scale(p);
      }
    }
  }
}
}  // namespace detail

void Accelerator::throw_negative_skip(int64_t n) {
  throw InvalidArgument(
      component::kAccelerator,
      "skip_first_batches needs a number of batches >= 0, got " +
          std::to_string(n) + ".");
}

Accelerator::FullParamsScope::FullParamsScope(
    std::shared_ptr<detail::AcceleratorState> state)
    : state_(std::move(state)) {
  state_->strategy->gather_full_params(*state_);
}

Accelerator::FullParamsScope::~FullParamsScope() {
  state_->strategy->release_full_params(*state_);
}

Accelerator::FullParamsScope Accelerator::summon_full_params() {
  return FullParamsScope(state_);
}

void Accelerator::free_memory() {
  auto& st = *state_;
  if (st.gradient.in_accumulate || st.gradient.no_sync_depth > 0) {
    throw UsageError(
        component::kAccelerator,
        "free_memory() inside an accumulate() or no_sync() scope. Call it "
        "between training runs, after the scopes closed.");
  }
  st.models.clear();  // each entry's wrappers before its module
  st.named_parameters.clear();
  st.optimizers.clear();
  st.checkpoints.schedulers.clear();
  st.checkpoints.loaders.clear();
  st.checkpoints.stream_loaders = 0;
  st.checkpoints.registered.clear();
  st.split_batches = false;
  st.tracking.optimizer_steps = 0;
  st.tracking.skipped_steps = 0;
  st.tracking.skipped_pending = torch::Tensor();
  st.gradient.micro_step = 0;
  st.gradient.sync_gradients = true;
  st.gradient.end_of_dataloader = false;
  st.gradient.scaler_update_pending = false;
  st.gradient.forwards_since_backward = 0;
  st.tracking.loss_sum = torch::Tensor();
  st.tracking.loss_count = 0;
  st.tracking.last_grad_norm = torch::Tensor();
  st.gather_remainder = 0;
  detail::release_cached_memory();
}

void Accelerator::check_prepared(const PreparedModelBase& model) const {
  if (detail::prepared_here(*state_, *model.module_ptr())) {
    return;
  }
  throw UsageError(
      component::kAccelerator,
      "got a model this Accelerator did not prepare. Pass the PreparedModel "
      "returned by accelerator.prepare(model).");
}

AccumulateScope Accelerator::accumulate(const PreparedModelBase& model) {
  check_prepared(model);
  detail::preemption_point(*state_);
  if (state_->gradient.window_items.defined()) {
    throw UsageError(
        component::kAccelerator,
        "accumulate(model) without an item count in a window whose earlier "
        "micro-steps counted items (accumulate(model, num_items)). Count "
        "the items of every micro-step, or of none.");
  }
  return AccumulateScope(state_, torch::Tensor());
}

AccumulateScope Accelerator::accumulate(
    const PreparedModelBase& model, const torch::Tensor& num_items) {
  check_prepared(model);
  auto& st = *state_;
  if (!num_items.defined() || num_items.numel() != 1 ||
      num_items.is_floating_point() || num_items.is_complex()) {
    throw InvalidArgument(
        component::kAccelerator,
        "accumulate(model, num_items) needs one integer count, got " +
            (num_items.defined()
                 ? std::string(c10::toString(num_items.scalar_type())) +
                       " with " + std::to_string(num_items.numel()) +
                       " elements"
                 : std::string("an undefined tensor")) +
            ". Pass e.g. (labels != -100).sum().");
  }
  if (st.gradient.window_micro_steps > 0 &&
      !st.gradient.window_items.defined()) {
    throw UsageError(
        component::kAccelerator,
        "accumulate(model, num_items) in a window whose earlier micro-steps "
        "counted no items (accumulate(model)). Count the items of every "
        "micro-step, or of none.");
  }
  detail::preemption_point(st);
  return AccumulateScope(
      state_,
      num_items.detach().reshape({}).to(detail::device(st), torch::kLong));
}

AccumulateScope Accelerator::accumulate(
    const PreparedModelBase& model, int64_t num_items) {
  if (num_items < 0) {
    throw InvalidArgument(
        component::kAccelerator,
        "accumulate(model, num_items) got " + std::to_string(num_items) +
            " items. Pass the count of this micro-batch's items (0 or "
            "more).");
  }
  return accumulate(model, torch::tensor(num_items, torch::kLong));
}

Accelerator::NoSyncScope Accelerator::no_sync(const PreparedModelBase& model) {
  check_prepared(model);
  if (state_->options.static_graph) {
    throw UsageError(
        component::kAccelerator,
        "no_sync() with static_graph is not supported: the DDP Reducer's "
        "first static iteration must synchronise. Use static_graph(false) "
        "(the default) when the loop accumulates without synchronising.");
  }
  return NoSyncScope(state_);
}

Accelerator::NoSyncScope::NoSyncScope(
    std::shared_ptr<detail::AcceleratorState> state)
    : state_(std::move(state)) {
  ++state_->gradient.no_sync_depth;
}

Accelerator::NoSyncScope::~NoSyncScope() {
  --state_->gradient.no_sync_depth;
}

void set_seed(uint64_t seed, bool device_specific, bool deterministic) {
  uint64_t value = seed;
  if (device_specific) {
    value +=
        static_cast<uint64_t>(dist::detect_env(process_environment()).rank);
  }
  set_seed(value);
  if (deterministic) {
    at::globalContext().setDeterministicAlgorithms(true, false);
    at::globalContext().setDeterministicCuDNN(true);
  }
}

bool Accelerator::sync_gradients() const {
  return state_->gradient.sync_gradients;
}

bool Accelerator::end_of_dataloader() const {
  return state_->gradient.end_of_dataloader;
}

bool Accelerator::optimizer_step_was_skipped() const {
  for (const auto& entry : state_->optimizers) {
    if (entry.skipped()) {
      return true;
    }
  }
  return false;
}

GradScaler* Accelerator::scaler() {
  return state_->scaler ? &*state_->scaler : nullptr;
}

Autocast Accelerator::autocast() const {
  if (!state_->autocast) {
    return Autocast(device().type(), Precision::no);
  }
  detail::note_forward(*state_);
  return Autocast(*state_->autocast);
}

void Accelerator::throw_unsized_dataset() const {
  throw InvalidArgument(
      component::kAccelerator,
      "prepare_data_loader needs a dataset with a size, got one whose size() "
      "is empty. Give the dataset a size, or shard a stream yourself.");
}

void Accelerator::check_stream_sampler(
    const data::ShardedSamplerOptions& sampler) const {
  const data::ShardedSamplerOptions defaults;
  std::string set;
  auto note = [&](bool differs, const char* what) {
    if (differs) {
      set += std::string(set.empty() ? "" : ", ") + what;
    }
  };
  note(sampler.shuffle() != defaults.shuffle(), "shuffle");
  note(sampler.seed() != defaults.seed(), "seed");
  note(sampler.even_batches() != defaults.even_batches(), "even_batches");
  note(sampler.split_batches() != defaults.split_batches(), "split_batches");
  note(sampler.drop_last() != defaults.drop_last(), "drop_last");
  if (!set.empty()) {
    throw UsageError(
        component::kAccelerator,
        "prepare_data_loader got a stream with ShardedSamplerOptions " + set +
            ", which only a dataset with a size has: a stream is read in "
            "order, and a pass ends where the first process runs out. "
            "Shuffle inside the stream (a ChunkDataset's samplers), or pass "
            "data::StreamSharding::stride or per_process instead.");
  }
}

void Accelerator::check_stream_loader(
    const torch::data::DataLoaderOptions& options) const {
  if (options.workers() != 0 || options.drop_last()) {
    throw UsageError(
        component::kAccelerator,
        std::string(
            "prepare_data_loader got a stream with DataLoaderOptions ") +
            (options.workers() != 0
                 ? "workers(" + std::to_string(options.workers()) + ")"
                 : "drop_last(true)") +
            ": a stream is read on the training thread, one batch ahead, "
            "and its batches are whole until the stream ends (then the "
            "pass ends on every process). Leave workers at 0 and drop_last "
            "false; a ChunkDataset reads ahead with its own preloaders.");
  }
}

std::function<int64_t(int64_t)> Accelerator::process_counter() const {
  return [state = state_](int64_t flag) -> int64_t {
    if (!state->process.group) {
      return flag;
    }
    auto t = torch::full(
        {1}, flag, torch::dtype(torch::kLong).device(detail::device(*state)));
    state->collective("stream end all-reduce", [&] {
      state->process.group->all_reduce(t, ReduceOp::sum);
    });
    return t.item<int64_t>();
  };
}

void Accelerator::throw_unsharded_loader() const {
  throw UsageError(
      component::kAccelerator,
      "prepare(data_loader) got a LibTorch loader built outside the "
      "Accelerator in a run of " +
          std::to_string(num_processes()) +
          " processes: its sampler cannot be sharded, so every process would "
          "read the same batches. Build it with "
          "`accelerator.prepare_data_loader(std::move(dataset), "
          "torch::data::DataLoaderOptions(batch_size))`.");
}

}  // namespace ampkit
