// AcceleratorOptions (what the user asks for) and ResolvedAcceleratorOptions
// (what the Accelerator runs with, each value with where it came from).
#pragma once

#include <c10/core/Device.h>
#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ampkit/amp/capability.h"
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/amp/precision.h"
#include "ampkit/config/config.h"
#include "ampkit/diag/profiler.h"
#include "ampkit/distributed/ddp.h"
#include "ampkit/distributed/env.h"
#include "ampkit/distributed/fsdp.h"
#include "ampkit/distributed/process_group.h"
#include "ampkit/track/tracker.h"
#include "ampkit/utils/env.h"

namespace ampkit {

/// Environment variables a launcher sets for its workers (ampkit launch,
/// accelerate launch). The AMPKIT_ name wins when both are set.
/// mixed_precision: no, fp16, bf16 or auto.
constexpr const char* kEnvMixedPrecision = "AMPKIT_MIXED_PRECISION";
/// accelerate launch's name for the same setting.
constexpr const char* kEnvAccelerateMixedPrecision =
    "ACCELERATE_MIXED_PRECISION";
/// gradient_accumulation_steps: an integer >= 1.
constexpr const char* kEnvGradientAccumulationSteps =
    "AMPKIT_GRADIENT_ACCUMULATION_STEPS";
/// accelerate's name for the same setting.
constexpr const char* kEnvAccelerateGradientAccumulationSteps =
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS";
/// cpu: true/false (also 1/0, yes/no): train on the CPU even with a GPU.
constexpr const char* kEnvUseCpu = "AMPKIT_USE_CPU";
/// accelerate launch's name for the same setting.
constexpr const char* kEnvAccelerateUseCpu = "ACCELERATE_USE_CPU";
/// Debug mode for collectives (shape checks).
constexpr const char* kEnvDebug = "AMPKIT_DEBUG";
/// accelerate launch's name for the same setting.
constexpr const char* kEnvAccelerateDebug = "ACCELERATE_DEBUG_MODE";

/// zero_stage: 0, 1 or 2 (ZeRO's optimizer-state / gradient sharding).
constexpr const char* kEnvZeroStage = "AMPKIT_ZERO_STAGE";
/// accelerate launch's name for the same setting, set for a DeepSpeed
/// config.
constexpr const char* kEnvAccelerateZeroStage =
    "ACCELERATE_DEEPSPEED_ZERO_STAGE";

/// gradient_clipping: a global gradient norm >= 0 (0: none).
constexpr const char* kEnvGradientClipping = "AMPKIT_GRADIENT_CLIPPING";
/// accelerate launch's name for the same setting (DeepSpeed runs).
constexpr const char* kEnvAccelerateGradientClipping =
    "ACCELERATE_GRADIENT_CLIPPING";

/// The options the Accelerator takes as given: each is checked, none depends
/// on the environment, the config file or the hardware. This is their one
/// list, (type, name, default): AcceleratorOptions declares each as a
/// TORCH_ARG, ResolvedAcceleratorOptions holds it, and the start-up table and
/// the logged config (init_trackers) show it, so an option added here shows
/// everywhere. The distributed defaults are c10d's and DDP's, read from
/// ampkit's dist layer, which has them once.
#define AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS(_)                            \
  /* A prepared scheduler steps only when its optimizer really stepped: not   \
     on accumulation micro-steps, not on steps the GradScaler skipped. false  \
     steps it on every call. */                                               \
  _(bool, step_scheduler_with_optimizer, true)                                \
  /* Cache the reduced-precision copies of weights within one forward. */     \
  _(bool, autocast_cache_enabled, true)                                       \
  /* Step a prepared torch::optim::Adam, AdamW or SGD fused, with LibTorch's  \
     state: from LibTorch 2.4 through ATen's fused kernels (CPU and CUDA);    \
     before 2.4, Adam and AdamW on dense float32 CPU parameters in ampkit's   \
     one-pass loop. Both fold loss scaling in: no separate unscale_ pass.     \
     false always calls optimizer.step(). */                                  \
  _(bool, fused_optimizer_step, true)                                         \
  /* Lay out a prepared model's 4-dim floating parameters and buffers (conv   \
     weights) channels-last (NHWC), as torch.channels_last does: convolution, \
     batch norm and pooling then run their vectorised NHWC kernels, and their \
     outputs are channels-last too (on a 2-core Xeon the demo CNN trained     \
     1.1-1.2x faster in fp32, 1.5x in bf16). Off by default: a channels-last  \
     output is not contiguous, so a model's own x.view(...) on it fails       \
     (x.flatten(1) and x.reshape(...) work). */                               \
  _(bool, channels_last, false)                                               \
  /* Checks for inf/NaN: a non-finite loss in backward(), or a non-finite     \
     gradient at an optimizer step, throws ampkit::TrainingDiverged naming    \
     the step and the parameters (by module path) affected; under loss        \
     scaling, where such steps are skipped by design, each skipped step is    \
     reported instead with the old and new scale and those parameters. Costs  \
     a check of every gradient per step. */                                   \
  _(bool, detect_anomaly, false)                                              \
  /* Log loss, learning rate, loss scale, skipped steps, gradient norm,       \
     samples/s and memory by itself, every log_every_n_steps optimizer steps, \
     once init_trackers ran. */                                               \
  _(bool, auto_log, false)                                                    \
  /* Optimizer steps between automatic logs, >= 1. */                         \
  _(int64_t, log_every_n_steps, 1)                                            \
  /* Set glibc's mmap and trim thresholds so that LibTorch's CPU tensors      \
     reuse freed memory instead of page-faulting fresh mmap()s every step     \
     (ampkit::tune_malloc; the start-up table's malloc row says what it did). \
     Left alone when the environment sets MALLOC_*_ or glibc.malloc           \
     tunables; false keeps the process's own settings. */                     \
  _(bool, tune_malloc, true)                                                  \
  /* Prepared data loaders on a CUDA device copy each batch with              \
     non_blocking (accelerate's DataLoaderConfiguration.non_blocking), one    \
     batch ahead on a side stream, so the copy overlaps the step. Needs       \
     pin_memory. No effect on the CPU. On by default (accelerate: off). */    \
  _(bool, non_blocking, true)                                                 \
  /* Prepared data loaders on a CUDA device put each batch into pinned        \
     (page-locked) host memory before the copy (torch's DataLoader            \
     pin_memory), which lets the copy run asynchronously. On by default. */   \
  _(bool, pin_memory, true)                                                   \
  /* No start-up table or choice lines on stderr (warnings still print). */   \
  _(bool, quiet, false)                                                       \
  /* Distributed runs (several processes started by ampkit launch, torchrun,  \
     Slurm or OpenMPI; see ampkit/distributed/env.h). How long the rendezvous \
     and each collective wait for the other processes; c10d's 30 minutes. */  \
  _(std::chrono::milliseconds, timeout, dist::GroupOptions().timeout())       \
  /* The gradient all-reduce bucket size in MB (DDP's bucket_cap_mb, 25). */  \
  _(double, bucket_cap_mb, dist::SyncOptions().bucket_cap_mb())               \
  /* Allow parameters without a gradient in some steps (DDP's                 \
     find_unused_parameters). false: such a parameter is an error naming      \
     it. */                                                                   \
  _(bool,                                                                     \
    find_unused_parameters,                                                   \
    dist::SyncOptions().find_unused_parameters())                             \
  /* Gradients live in the all-reduce buckets as views, saving a              \
     gradient-sized buffer and two copies per step (DDP's                     \
     gradient_as_bucket_view; false, as PyTorch and accelerate). */           \
  _(bool,                                                                     \
    gradient_as_bucket_view,                                                  \
    dist::SyncOptions().gradient_as_bucket_view())                            \
  /* The model runs the same graph every step (DDP's static_graph; false):    \
     the first step records the parameters without a gradient, later steps    \
     skip them without find_unused_parameters' graph walk. */                 \
  _(bool, static_graph, dist::SyncOptions().static_graph())                   \
  /* The last accumulation window of an epoch, cut short by the data          \
     loader's end, averages over the micro-steps it had (its gradients are    \
     multiplied by gradient_accumulation_steps / micro-steps). false, as      \
     accelerate: divided by gradient_accumulation_steps all the same. */      \
  _(bool, count_short_window, false)                                          \
  /* Compress the gradient all-reduce to bf16 or fp16 (not auto). */          \
  _(Precision, gradient_compression, Precision::no)                           \
  /* Broadcast rank 0's buffers before each synchronising forward (DDP's      \
     broadcast_buffers, true). */                                             \
  _(bool, broadcast_buffers, dist::SyncOptions().broadcast_buffers())         \
  /* accelerate's ProjectConfiguration: save_state() without a folder writes  \
     project_dir/checkpoints/checkpoint_N, N counting up from the last one    \
     there. */                                                                \
  _(bool, automatic_checkpoint_naming, false)                                 \
  /* Keep at most this many checkpoints under project_dir/checkpoints, the    \
     oldest deleted after a new one is complete (0: keep all). */             \
  _(int64_t, total_limit, 0)                                                  \
  /* Preemption: on SIGTERM (a scheduler's notice before SIGKILL), SIGINT     \
     or SIGUSR1 (Slurm's --signal) the run finishes its current step, every   \
     process at the same step, then exits with 128 + the signal; a second     \
     signal stops it at once. false leaves the signals alone (they end the    \
     process on the spot); a signal the program ignores or handles itself is  \
     never taken over. */                                                     \
  _(bool, handle_signals, true)                                               \
  /* Save a checkpoint before that exit: save_state() under                   \
     automatic_checkpoint_naming (which turns this on), else                  \
     checkpoint_<step> under preemption_dir. */                               \
  _(bool, save_on_preemption, false)                                          \
  /* Where the preemption checkpoint goes ("": project_dir/checkpoints). */   \
  _(std::string, preemption_dir, "")                                          \
  /* load_state with a scheduler whose length (num_training_steps) differs    \
     from the checkpoint's: false refuses, true continues the new length      \
     from the saved step. */                                                  \
  _(bool, reset_schedule, false)

/// What a training run asks for. Every field left unset is taken, in this
/// order, from the environment a launcher set, the config file, or the
/// default shown.
///
///   ampkit::Accelerator accelerator(ampkit::AcceleratorOptions()
///                                       .mixed_precision("bf16")
///                                       .gradient_accumulation_steps(4));
struct AcceleratorOptions {
  /// no, fp16, bf16 or auto (resolved against the device). Default no.
  TORCH_ARG(std::optional<Precision>, mixed_precision);

 public:
  /// The same, parsed from accelerate's spelling ("bf16"); an unknown value
  /// throws ampkit::InvalidArgument listing the valid ones.
  AcceleratorOptions& mixed_precision(const std::string& precision) {
    mixed_precision_ = parse_precision(precision);
    return *this;
  }
  AcceleratorOptions& mixed_precision(const char* precision) {
    return mixed_precision(std::string(precision));
  }
  /// Micro-batches per optimizer step, >= 1. Default 1.
  TORCH_ARG(std::optional<int64_t>, gradient_accumulation_steps);
  /// Train on the CPU even when a GPU is present. Default false.
  TORCH_ARG(std::optional<bool>, cpu);
  /// Seeds torch's CPU and CUDA generators at construction. Default unset
  /// (the generators are left alone).
  TORCH_ARG(std::optional<uint64_t>, seed);
  /// Where checkpoints and logs go. Default the working directory.
  TORCH_ARG(std::optional<std::string>, project_dir);
  /// The GradScaler's settings, used when loss scaling is on.
  TORCH_ARG(GradScalerOptions, grad_scaler);
  /// Loss scaling: unset means on for fp16 only; true uses the GradScaler in
  /// any precision (for example bf16 with very small gradients), false turns
  /// it off even for fp16 (small gradients then underflow to zero).
  TORCH_ARG(std::optional<bool>, loss_scaling);
  /// The config file's values (the command-line layer reads the file).
  TORCH_ARG(ConfigValues, config);
  /// Trackers init_trackers starts: a comma-separated list of jsonl, csv,
  /// tensorboard, or "all". Default none.
  TORCH_ARG(std::optional<std::string>, log_with);
  /// Your own trackers beside log_with's (accelerate's GeneralTracker
  /// instances in log_with): init_trackers hands each the run's
  /// configuration, log and end_training reach them as the built-in ones.
  /// Default none.
  TORCH_ARG(std::vector<std::shared_ptr<track::Tracker>>, trackers);
  /// What Accelerator::profile() records (accelerate's ProfileKwargs).
  TORCH_ARG(diag::ProfileOptions, profile_options);
  // Distributed runs (several processes started by ampkit launch, torchrun,
  // Slurm or OpenMPI; see ampkit/distributed/env.h).
  /// Before each collective, compare shapes across processes and fail with
  /// every rank's shape instead of hanging. Default false, or the
  /// environment's AMPKIT_DEBUG / ACCELERATE_DEBUG_MODE.
  TORCH_ARG(std::optional<bool>, debug);
  /// Shard what DDP replicates (DeepSpeed's ZeRO, over c10d): 1 keeps
  /// only this process's shard of the optimizer state (each process steps
  /// its shard, then the updated parameters are broadcast); 2 also
  /// reduce-scatters the gradients, so each process keeps only its shard's.
  /// 0 (default): plain DDP. 3 shards the parameters too: FSDP's
  /// FULL_SHARD (see fsdp below; the whole model one unit unless fsdp or
  /// the FSDP_* variables name units).
  /// Also from AMPKIT_ZERO_STAGE / ACCELERATE_DEEPSPEED_ZERO_STAGE, or a
  /// config's deepspeed_config zero_stage.
  TORCH_ARG(std::optional<int64_t>, zero_stage);
  /// Fully sharded data parallel (accelerate's distributed_type FSDP with
  /// its fsdp_config; DeepSpeed's zero_stage 3): every prepared model's
  /// parameters, gradients and optimizer state sharded across the
  /// processes, unit by unit (ampkit/distributed/fsdp.h; the units' forward
  /// goes through dist::fsdp_forward). Empty (default): DDP, or ZeRO 1/2. Also
  /// from accelerate launch's ACCELERATE_USE_FSDP and FSDP_* variables, or a
  /// config's distributed_type FSDP with fsdp_config.
  TORCH_ARG(std::optional<dist::FsdpOptions>, fsdp);
  /// Clip each prepared optimizer's gradients to this global L2 norm before
  /// it steps, without a clip_grad_norm_ call (DeepSpeed's
  /// gradient_clipping). 0 (default): none. Also from
  /// AMPKIT_GRADIENT_CLIPPING / ACCELERATE_GRADIENT_CLIPPING, or a config's
  /// deepspeed_config gradient_clipping.
  TORCH_ARG(std::optional<double>, gradient_clipping);

  // The options below are taken as given (checked, not resolved); each is
  // documented in AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS above.
#define AMPKIT_DECLARE_OPTION(type, name, default_value) \
  TORCH_ARG(type, name) = default_value;
  AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS(AMPKIT_DECLARE_OPTION)
#undef AMPKIT_DECLARE_OPTION
};

/// One resolved setting as the start-up table shows it.
struct OptionRow {
  std::string name;
  std::string value;
  /// "explicit", "env AMPKIT_MIXED_PRECISION", the config's origin,
  /// "default" or "auto: <reason>".
  std::string source;
};

/// Every setting decided, from AcceleratorOptions, the environment, the
/// config and the hardware. The Accelerator runs with exactly this.
struct ResolvedAcceleratorOptions {
  // Set by resolve_options from the options, the environment, the config
  // and the hardware; their defaults are AcceleratorOptions'.
  Precision requested_precision{};  ///< may be automatic
  Precision mixed_precision{};      ///< never automatic
  int64_t gradient_accumulation_steps{};
  bool cpu{};
  std::optional<uint64_t> seed;
  std::string project_dir;
  bool loss_scaling{};
  GradScalerOptions grad_scaler;
  std::vector<std::string> log_with;
  std::vector<std::shared_ptr<track::Tracker>> trackers;  ///< as given
  diag::ProfileOptions profile_options;                   ///< as given
  dist::DistEnv dist;
  bool debug{};
  int64_t zero_stage{};
  std::optional<dist::FsdpOptions> fsdp;
  double gradient_clipping{};
#define AMPKIT_RESOLVED_OPTION(type, name, default_value) \
  type name = default_value;
  AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS(AMPKIT_RESOLVED_OPTION)
#undef AMPKIT_RESOLVED_OPTION
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  /// The PCI bus id of `device` when it is a GPU ("" otherwise), which NVML
  /// looks the GPU up by: CUDA's indices change with CUDA_VISIBLE_DEVICES,
  /// NVML's do not.
  std::string gpu_pci_bus_id;
  /// What "auto" became and why; empty unless auto was asked for.
  std::string auto_precision_reason;
  /// auto with more than one candidate (a CPU with native bf16): they are
  /// timed on the prepared model at its first forward, which then sets
  /// mixed_precision (fp32 until then). Empty once decided.
  std::vector<Precision> auto_candidates;
  /// Start-up warnings (fp16 without loss scaling, for example).
  std::vector<std::string> warnings;
  std::vector<OptionRow> rows;

  /// The rows as an aligned three-column table, one setting per line.
  std::string table() const;
};

/// Applies the precedence explicit > environment > config > default, picks
/// the device (CUDA when present unless cpu), resolves auto and checks the
/// precision against the device and LibTorch. Bad values throw
/// ampkit::InvalidArgument and unsupported precisions ampkit::Unsupported,
/// each naming the setting, the value and where it came from.
ResolvedAcceleratorOptions resolve_options(
    const AcceleratorOptions& options,
    const EnvLookup& env = process_environment(),
    const Capabilities& caps = Capabilities::current());

}  // namespace ampkit
