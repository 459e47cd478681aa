// Local SGD over the Accelerator (accelerate's LocalSGD): each process takes
// optimizer steps on its own gradients, and the model's parameters are
// averaged across processes every local_sgd_steps steps and at the end.
#pragma once

#include <cstdint>
#include <memory>

#include "ampkit/accelerator/accelerator.h"

namespace ampkit {

/// RAII, Python's `with LocalSGD(accelerator, model, K) as local_sgd:`.
/// While it lives, the model's backward keeps gradients local (no_sync);
/// step() after each optimizer step averages the parameters every K calls,
/// and the destructor averages them once more (skipped while an exception
/// unwinds). With one process, or enabled = false, it does nothing, as
/// accelerate's. ZeRO (zero_stage 1 or 2) is refused, as accelerate
/// refuses DeepSpeed.
///
///   ampkit::LocalSGD local_sgd(accelerator, model, 8);
///   for (auto& batch : loader) {
///     ... accelerator.backward(loss); optimizer.step(); ...
///     local_sgd.step();
///   }
class LocalSGD {
 public:
  LocalSGD(
      Accelerator& accelerator,
      const PreparedModelBase& model,
      int64_t local_sgd_steps,
      bool enabled = true);
  ~LocalSGD() noexcept(false);
  LocalSGD(const LocalSGD&) = delete;
  LocalSGD& operator=(const LocalSGD&) = delete;

  /// Counts an optimizer step; every local_sgd_steps-th averages the
  /// parameters across processes (a collective: every process calls it).
  void step();
  /// Whether it synchronises (enabled and several processes).
  bool enabled() const {
    return enabled_;
  }
  /// step() calls so far.
  int64_t num_steps() const {
    return num_steps_;
  }

 private:
  void average_parameters();

  Accelerator& accelerator_;
  std::shared_ptr<torch::nn::Module> module_;
  int64_t local_sgd_steps_;
  bool enabled_;
  int64_t num_steps_ = 0;
  std::unique_ptr<Accelerator::NoSyncScope> no_sync_;
};

}  // namespace ampkit
