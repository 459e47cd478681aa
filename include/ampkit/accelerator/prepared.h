// What Accelerator::prepare returns: a model whose forward runs under
// autocast, an optimizer and a scheduler that respect accumulation and
// skipped steps, and a data loader that puts batches on the device.
#pragma once

#include <torch/data/example.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "ampkit/amp/autocast.h"
#include "ampkit/data/sharded_sampler.h"
#include "ampkit/data/stream.h"
#include "ampkit/diag/hints.h"
#include "ampkit/optim/scheduler.h"
#include "ampkit/utils/operations.h"

namespace ampkit {

namespace detail {
/// The Accelerator's shared state; prepared objects keep it alive.
struct AcceleratorState;
struct PreparedOptimizerEntry;

/// The autocast settings of the prepared forward; nullptr for precision no.
const AutocastOptions* forward_autocast(AcceleratorState& state);
/// Counts a forward run under the Accelerator's autocast, so that backward
/// can tell when none ran.
void note_forward(AcceleratorState& state);
void set_end_of_dataloader(AcceleratorState& state, bool end);
/// mixed_precision "auto" with several candidates is decided at the first
/// forward, on the model and its first batch (accelerator/auto_precision).
bool auto_precision_pending(const AcceleratorState& state);
/// Rank 0 times `forward` and its backward in each candidate (or reads the
/// cache), every process takes the answer; nothing of the run changes.
void decide_auto_precision(
    AcceleratorState& state,
    torch::nn::Module& module,
    const std::function<std::vector<torch::Tensor>()>& forward,
    const std::vector<torch::Tensor>& inputs);
/// A step boundary (a prepared loader asked for its next batch, or an
/// accumulate() scope began) after an optimizer step: where a stop signal
/// (SIGTERM, SIGINT, SIGUSR1) ends the run, see handle_signals.
void preemption_point(AcceleratorState& state);
/// Real samples in the last gathered step of the loader now at its end, for
/// gather_for_metrics (0: nothing to drop).
void set_gather_remainder(AcceleratorState& state, int64_t remainder);
/// Counts the samples of a batch for the samples/s the Accelerator logs.
void note_batch(AcceleratorState& state, int64_t samples);
c10::Device device(const AcceleratorState& state);
/// Copies batches to a CUDA device ahead of use: each tensor goes to pinned
/// host memory, then to the device with non_blocking on a side stream; the
/// compute stream waits for the batch (an event) when it is handed out, and
/// the tensors are marked as used there (record_stream).
class DevicePrefetch {
 public:
  virtual ~DevicePrefetch() = default;
  /// Queues the copy of `t`; returns the device tensor (not ready yet).
  virtual torch::Tensor copy(const torch::Tensor& t) = 0;
  /// After a batch's copies: marks where the batch is complete.
  virtual void batch_queued() = 0;
  /// The current stream waits for the last queued batch.
  virtual void wait() = 0;
  /// `t` (of the batch waited for) is used on the current stream.
  virtual void hand_over(const torch::Tensor& t) = 0;
};
/// A DevicePrefetch for a prepared loader of `state`, or nullptr where
/// batches are copied as they are handed out (the CPU, or non_blocking or
/// pin_memory off).
std::unique_ptr<DevicePrefetch> make_prefetch(const AcceleratorState& state);
/// Where the training loop is in a loader built by prepare_data_loader:
/// the batches handed out in the current epoch (the sampler runs ahead by
/// what the loader prefetched). save_state stores this position.
struct LoaderPosition {
  data::ShardedSampler sampler;
  size_t consumed = 0;
};
std::shared_ptr<LoaderPosition> register_loader(
    AcceleratorState& state, const data::ShardedSampler& sampler);
/// A stream was prepared (save_state says that its position is not saved).
void note_stream_loader(AcceleratorState& state);
/// A PreparedDataLoader without a ShardedSampler was asked `what`.
[[noreturn]] void throw_no_sampler(const char* what);
/// Distributed runs: whether gradients of this model are synchronised
/// across processes, and the synchronizer's calls around its forward.
bool is_distributed(const AcceleratorState& state);
/// A UsageError when free_memory() released `module`.
void check_not_released(
    const AcceleratorState& state, const torch::nn::Module& module);
void before_forward(AcceleratorState& state, const torch::nn::Module& module);
void after_forward(
    AcceleratorState& state,
    const torch::nn::Module& module,
    const std::vector<torch::Tensor>& outputs);
/// Inside a catch of the prepared forward: rethrows with a hint
/// (diag::rethrow_with_hint), or under FSDP, when some unit was not entered
/// through dist::fsdp_forward, as a UsageError naming those units (their
/// parameters hold no values outside it).
[[noreturn]] void rethrow_forward_failure(
    AcceleratorState& state, const torch::nn::Module& module);

template <typename M>
std::shared_ptr<torch::nn::Module> module_ptr(const M& model) {
  if constexpr (std::is_base_of_v<torch::detail::ModuleHolderIndicator, M>) {
    return model.ptr();
  } else {
    return model;
  }
}
}  // namespace detail

/// The part of a prepared model that does not depend on its type: what
/// Accelerator::accumulate takes.
class PreparedModelBase {
 public:
  const std::shared_ptr<torch::nn::Module>& module_ptr() const {
    return module_;
  }

 protected:
  PreparedModelBase(
      std::shared_ptr<torch::nn::Module> module,
      std::shared_ptr<detail::AcceleratorState> state)
      : module_(std::move(module)), state_(std::move(state)) {}

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<detail::AcceleratorState> state_;
};

/// A model prepared by the Accelerator. `model(x)` runs forward under the
/// Accelerator's autocast and returns floating outputs as fp32;
/// `model->...` reaches the module itself (parameters(), train(), eval()),
/// and `model->forward(x)` bypasses autocast.
template <typename ModelType>
class PreparedModel : public PreparedModelBase {
 public:
  PreparedModel(ModelType model, std::shared_ptr<detail::AcceleratorState> st)
      : PreparedModelBase(detail::module_ptr(model), std::move(st)),
        model_(std::move(model)) {}

  template <typename... Args>
  auto operator()(Args&&... args) {
    // LibTorch's errors leave with an `ampkit hint:` where one applies.
    try {
      detail::check_not_released(*state_, *module_);
      if (detail::auto_precision_pending(*state_)) {
        detail::decide_auto_precision(
            *state_,
            *module_,
            [&] { return collect_tensors(model_->forward(args...)); },
            collect_tensors(std::forward_as_tuple(args...)));
      }
      if (!detail::is_distributed(*state_)) {
        return forward_under_autocast(std::forward<Args>(args)...);
      }
      detail::before_forward(*state_, *module_);
      auto output = forward_under_autocast(std::forward<Args>(args)...);
      // Its tensors, for DDP's unused-parameter search.
      detail::after_forward(*state_, *module_, collect_tensors(output));
      return output;
    } catch (...) {
      detail::rethrow_forward_failure(*state_, *module_);
    }
  }
  auto operator->() {
    return &*model_;
  }
  auto operator->() const {
    return &*model_;
  }
  /// The holder (or shared_ptr) given to prepare.
  const ModelType& module() const {
    return model_;
  }

 private:
  template <typename... Args>
  auto forward_under_autocast(Args&&... args) {
    const AutocastOptions* autocast = detail::forward_autocast(*state_);
    if (autocast == nullptr) {
      return model_->forward(std::forward<Args>(args)...);
    }
    Autocast guard(*autocast);
    detail::note_forward(*state_);
    return convert_to_fp32(model_->forward(std::forward<Args>(args)...));
  }

  ModelType model_;
};

/// An optimizer prepared by the Accelerator (it refers to the optimizer,
/// which must outlive it).
class PreparedOptimizer {
 public:
  /// On a synchronising step: optimizer.step() through the GradScaler when
  /// loss scaling is on (skipped on inf/NaN gradients), then the scale
  /// update once every prepared optimizer has stepped. On an accumulation
  /// micro-step: nothing.
  void step();
  /// Clears the gradients on a synchronising step (undefined with
  /// set_to_none, else zeroed in place, in every LibTorch version); nothing
  /// on a micro-step.
  void zero_grad(bool set_to_none = true);
  /// Whether the last step that ran was skipped by the GradScaler.
  bool step_was_skipped() const;
  /// Bytes of optimizer state this process holds (with zero_stage, its
  /// shard's only): Adam's moments, SGD's momentum buffers...
  int64_t state_bytes() const;
  /// Bytes of gradients this process holds for this optimizer's parameters
  /// now (DDP's buckets; with zero_stage 2 after the reduce, the shard's).
  int64_t gradient_bytes() const;

  torch::optim::Optimizer& optimizer() const {
    return *optimizer_;
  }
  torch::optim::Optimizer* operator->() const {
    return optimizer_;
  }

 private:
  friend class Accelerator;
  PreparedOptimizer(
      torch::optim::Optimizer& optimizer,
      size_t index,
      std::shared_ptr<detail::AcceleratorState> state)
      : optimizer_(&optimizer), index_(index), state_(std::move(state)) {}

  void step_unhinted();
  void step_optimizer();
  // This optimizer's entry in the Accelerator; a UsageError once
  // free_memory() released it.
  detail::PreparedOptimizerEntry& entry() const;

  torch::optim::Optimizer* optimizer_;
  size_t index_;
  std::shared_ptr<detail::AcceleratorState> state_;
};

/// A scheduler prepared by the Accelerator: with step_scheduler_with_optimizer
/// (the default) it steps only when the optimizers really stepped, and once
/// per process, as accelerate's AcceleratedScheduler.
class PreparedScheduler {
 public:
  void step();
  /// For ReduceLROnPlateau, which steps on a metric.
  void step(double metric);
  const std::vector<double>& get_last_lr() const {
    return scheduler_->get_last_lr();
  }
  optim::LRScheduler& scheduler() const {
    return *scheduler_;
  }
  optim::LRScheduler* operator->() const {
    return scheduler_;
  }

 private:
  friend class Accelerator;
  PreparedScheduler(
      optim::LRScheduler& scheduler,
      std::shared_ptr<detail::AcceleratorState> state)
      : scheduler_(&scheduler), state_(std::move(state)) {}
  /// Whether a step now is one the optimizers really took.
  bool should_step() const;

  optim::LRScheduler* scheduler_;
  std::shared_ptr<detail::AcceleratorState> state_;
};

/// A data loader prepared by the Accelerator: iterating it yields the
/// loader's batches moved to the device, and it reads one batch ahead so
/// that the Accelerator knows the last batch while it is being used (the
/// final micro-step of an epoch then synchronises).
template <typename Loader>
class PreparedDataLoader {
  using BaseIterator = decltype(std::declval<Loader&>().begin());

 public:
  using Batch = std::decay_t<decltype(*std::declval<BaseIterator&>())>;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Batch& operator*() {
      return *current_;
    }
    Batch* operator->() {
      return &*current_;
    }
    Iterator& operator++() {
      detail::preemption_point(*owner_->state_);
      advance();
      return *this;
    }
    bool operator==(const Iterator& other) const {
      return !current_.has_value() && !other.current_.has_value();
    }
    bool operator!=(const Iterator& other) const {
      return !(*this == other);
    }

   private:
    friend class PreparedDataLoader;
    Iterator() = default;
    Iterator(PreparedDataLoader* owner) : owner_(owner) {
      detail::preemption_point(*owner_->state_);
      if (owner_->position_) {
        // A resumed epoch starts at its saved position.
        owner_->position_->consumed = owner_->position_->sampler.pending_skip();
      }
      prefetch_ = detail::make_prefetch(*owner_->state_);
      it_.emplace(owner_->loader_->begin());
      end_.emplace(owner_->loader_->end());
      detail::set_end_of_dataloader(*owner_->state_, false);
      advance();
    }
    // Hands out the batch staged last (copied one batch ahead with a
    // DevicePrefetch, else copied now) and stages the next one.
    void advance() {
      if (!staged_) {
        if (*it_ == *end_) {
          current_.reset();
          detail::set_end_of_dataloader(*owner_->state_, false);
          return;
        }
        stage();
      }
      current_ = take();
      detail::note_batch(*owner_->state_, find_batch_size(*current_));
      if (owner_->position_) {
        ++owner_->position_->consumed;
      }
      const bool end = *it_ == *end_;
      if (!end && prefetch_) {
        stage();
      }
      detail::set_end_of_dataloader(*owner_->state_, end);
      detail::set_gather_remainder(
          *owner_->state_,
          end && owner_->sampler_
              ? static_cast<int64_t>(owner_->sampler_->remainder())
              : 0);
    }
    void stage() {
      if (prefetch_) {
        staged_.emplace(recursively_apply(
            [this](torch::Tensor t) {
              return t.defined() ? prefetch_->copy(t) : t;
            },
            std::move(**it_)));
        prefetch_->batch_queued();
      } else {
        staged_.emplace(
            send_to_device(std::move(**it_), detail::device(*owner_->state_)));
      }
      ++*it_;
    }
    Batch take() {
      Batch batch = std::move(*staged_);
      staged_.reset();
      if (prefetch_) {
        prefetch_->wait();
        batch = recursively_apply(
            [this](torch::Tensor t) {
              if (t.defined()) {
                prefetch_->hand_over(t);
              }
              return t;
            },
            std::move(batch));
      }
      return batch;
    }

    PreparedDataLoader* owner_ = nullptr;
    std::optional<BaseIterator> it_;
    std::optional<BaseIterator> end_;
    std::optional<Batch> current_;
    std::optional<Batch> staged_;  // the next batch, on its way
    std::shared_ptr<detail::DevicePrefetch> prefetch_;
  };

  PreparedDataLoader(
      std::unique_ptr<Loader> loader,
      std::shared_ptr<detail::AcceleratorState> state,
      std::optional<data::ShardedSampler> sampler = std::nullopt)
      : loader_(std::move(loader)),
        state_(std::move(state)),
        sampler_(std::move(sampler)) {
    if (sampler_) {
      position_ = detail::register_loader(*state_, *sampler_);
    } else if constexpr (data::detail::IsStreamLoader<Loader>::value) {
      detail::note_stream_loader(*state_);
    }
  }

  /// Starts an epoch (a new pass over the underlying loader).
  Iterator begin() {
    return Iterator(this);
  }
  Iterator end() {
    return Iterator();
  }
  Loader& loader() const {
    return *loader_;
  }
  /// The sampler of a loader built by prepare_data_loader (its epoch and
  /// position), else nullptr.
  const data::ShardedSampler* sampler() const {
    return sampler_ ? &*sampler_ : nullptr;
  }
  /// Batches per epoch on this process (Python's len(dataloader)).
  size_t size() const {
    return checked_sampler("size()").batches_per_epoch(
        loader_->options().batch_size);
  }
  /// The next epoch starts at batch n (accelerate's skip_first_batches;
  /// see ShardedSampler::skip_first_batches). Returns this loader.
  PreparedDataLoader& skip_first_batches(size_t n) {
    checked_sampler("skip_first_batches").skip_first_batches(n);
    return *this;
  }

 private:
  // A copy shares the sampler's state (see ShardedSampler).
  data::ShardedSampler checked_sampler(const char* what) const {
    if (!sampler_) {
      detail::throw_no_sampler(what);
    }
    return *sampler_;
  }

  std::unique_ptr<Loader> loader_;
  std::shared_ptr<detail::AcceleratorState> state_;
  std::optional<data::ShardedSampler> sampler_;
  std::shared_ptr<detail::LoaderPosition> position_;
};

}  // namespace ampkit
