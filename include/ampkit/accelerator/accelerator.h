// ampkit::Accelerator: turns a plain LibTorch training loop into a
// mixed-precision, gradient-accumulating one, as Hugging Face accelerate does.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/data/dataloader.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ampkit/accelerator/options.h"
#include "ampkit/accelerator/prepared.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/data/stream.h"
#include "ampkit/distributed/process_group.h"
#include "ampkit/optim/scheduler.h"
#include "ampkit/track/tracker.h"
#include "ampkit/utils/random.h"

namespace ampkit {

/// How reduce() combines one tensor across processes: the process group's
/// own (sum, mean, max), one enum for both layers.
using ReduceOp = dist::ReduceOp;

/// The RAII scope of one micro-step (accelerate's `with
/// accelerator.accumulate(model)`): on entry it decides whether this
/// micro-step synchronises gradients (every gradient_accumulation_steps-th,
/// and the last batch of a prepared data loader); the prepared optimizer and
/// scheduler step only on those.
class [[nodiscard]] AccumulateScope {
 public:
  ~AccumulateScope();
  AccumulateScope(const AccumulateScope&) = delete;
  AccumulateScope& operator=(const AccumulateScope&) = delete;
  AccumulateScope(AccumulateScope&&) = delete;
  AccumulateScope& operator=(AccumulateScope&&) = delete;

 private:
  friend class Accelerator;
  /// `num_items`: this micro-step's counted items, or undefined.
  AccumulateScope(
      std::shared_ptr<detail::AcceleratorState> state,
      const torch::Tensor& num_items);
  std::shared_ptr<detail::AcceleratorState> state_;
};

/// A training loop with the Accelerator:
///
///   ampkit::Accelerator accelerator(ampkit::AcceleratorOptions()
///       .mixed_precision("bf16").gradient_accumulation_steps(2));
///   Net net;
///   torch::optim::AdamW adamw(net->parameters(), 1e-3);
///   auto [model, optimizer, loader] =
///       accelerator.prepare(net, adamw, std::move(data_loader));
///   for (auto& batch : loader) {
///     auto scope = accelerator.accumulate(model);
///     auto loss = torch::cross_entropy_loss(model(batch.data), batch.target);
///     accelerator.backward(loss);
///     optimizer.step();
///     optimizer.zero_grad();
///   }
/// The layout Accelerator::save_state writes.
enum class SaveFormat {
  ampkit,      ///< ampkit's own: a manifest of sizes and CRC32Cs, atomic
  accelerate,  ///< Python accelerate's, for its load_state
};

class Accelerator {
 public:
  /// Resolves the options (see resolve_options), seeds the generators when a
  /// seed is set, and prints the resolved settings on the main process.
  explicit Accelerator(AcceleratorOptions options = {});
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;
  ~Accelerator();

  const ResolvedAcceleratorOptions& options() const;
  /// CUDA when present and not `cpu`, else CPU.
  c10::Device device() const;
  /// The precision in use, "auto" resolved.
  Precision mixed_precision() const;
  int64_t gradient_accumulation_steps() const;
  /// accelerate's `accelerator.gradient_accumulation_steps = n` (>= 1), as
  /// automatic gradient accumulation sets it between tries; outside an
  /// accumulate() scope.
  void set_gradient_accumulation_steps(int64_t n);
  /// Whether several processes train (accelerate's use_distributed).
  bool use_distributed() const {
    return num_processes() > 1;
  }

  /// Prepares one object for training on device():
  /// - a model (a TORCH_MODULE holder or std::shared_ptr to an nn::Module):
  ///   moved to the device; calling the returned PreparedModel runs forward
  ///   under autocast and returns floating outputs as fp32;
  /// - an optimizer (by reference; it must outlive the PreparedOptimizer):
  ///   its state moves to the device; its step goes through the GradScaler
  ///   and, like zero_grad, does nothing on accumulation micro-steps;
  /// - an ampkit::optim::LRScheduler (by reference): steps only when an
  ///   optimizer step really happened;
  /// - a data loader (the std::unique_ptr of torch::data::make_data_loader):
  ///   batches come on the device, and the last one is known in advance.
  /// Prepare the model before its optimizer, as PyTorch moves parameters in
  /// place and the optimizer keeps referring to them.
  template <typename T>
  auto prepare(T&& object);
  /// Several at once, in order: auto [model, opt] = prepare(net, adamw).
  template <typename T1, typename T2, typename... Rest>
  auto prepare(T1&& first, T2&& second, Rest&&... rest) {
    // Braced initialisation evaluates left to right: the model moves first.
    return std::tuple<
        decltype(prepare(std::forward<T1>(first))),
        decltype(prepare(std::forward<T2>(second))),
        decltype(prepare(std::forward<Rest>(rest)))...>{
        prepare(std::forward<T1>(first)),
        prepare(std::forward<T2>(second)),
        prepare(std::forward<Rest>(rest))...};
  }

  /// Builds a data loader over `dataset` (a batch or example dataset with a
  /// size) whose ampkit::data::ShardedSampler gives this process its shard
  /// of each epoch, and prepares it. `sampler` sets shuffle (default false,
  /// as torch's DataLoader; shuffle(true) reshuffles from seed + epoch),
  /// seed, even_batches, split_batches and drop_last; the process fields
  /// are the Accelerator's.
  ///
  /// A stream (a StreamDataset, or a StatefulDataset such as ChunkDataset;
  /// see data/stream.h) has no size: every process reads it and keeps its
  /// stride of the batches, and a pass ends at the same step on every
  /// process (data::StreamLoader). `sampler` must then keep its defaults;
  /// the overload below takes data::StreamSharding::per_process for a
  /// stream that is already this process's own.
  template <typename Dataset>
  auto prepare_data_loader(
      Dataset dataset,
      torch::data::DataLoaderOptions options,
      data::ShardedSamplerOptions sampler = {}) {
    if constexpr (data::is_stream_v<Dataset>) {
      check_stream_sampler(sampler);
      return prepare_stream(
          std::move(dataset), options, data::StreamSharding::stride);
    } else {
      const auto size = dataset.size();
      if (!size) {
        throw_unsized_dataset();
      }
      sampler.num_processes(num_processes()).process_index(process_index());
      data::ShardedSampler shard(*size, sampler);
      auto loader =
          torch::data::make_data_loader(std::move(dataset), shard, options);
      return PreparedDataLoader<typename decltype(loader)::element_type>(
          std::move(loader), state_, shard);
    }
  }
  template <typename Stream>
  auto prepare_data_loader(
      Stream stream,
      torch::data::DataLoaderOptions options,
      data::StreamSharding sharding) {
    static_assert(
        data::is_stream_v<Stream>,
        "prepare_data_loader(dataset, options, StreamSharding) takes a "
        "stream (a StreamDataset or a StatefulDataset such as ChunkDataset)");
    return prepare_stream(std::move(stream), options, sharding);
  }

  /// accelerate's skip_first_batches: `loader`'s next epoch starts at batch
  /// n, and the loader is returned. load_state already resumes a prepared
  /// loader where it was saved; skipping the same n after it is harmless
  /// (n replaces the resumed position, it does not add to it).
  template <typename Loader>
  PreparedDataLoader<Loader>& skip_first_batches(
      PreparedDataLoader<Loader>& loader, int64_t n) {
    if (n < 0) {
      throw_negative_skip(n);
    }
    return loader.skip_first_batches(static_cast<size_t>(n));
  }

  /// accelerate's free_memory (and clear): forgets every prepared model,
  /// optimizer, scheduler, data loader and registered object, resets the
  /// step count, and returns cached GPU memory to the driver. Objects
  /// prepared before are released by the Accelerator: using them again is
  /// an ampkit::UsageError; prepare new ones (find_executable_batch_size
  /// retries do this).
  void free_memory();
  void clear() {
    free_memory();
  }

  /// loss.backward(), divided by gradient_accumulation_steps and scaled by
  /// the GradScaler when loss scaling is on. With accumulation, call it
  /// inside accumulate().
  void backward(const torch::Tensor& loss);
  /// The same with LibTorch's retain_graph and create_graph (accelerate's
  /// backward(loss, **kwargs)): keep the graph for a second backward, or
  /// build one for higher-order gradients.
  void backward(
      const torch::Tensor& loss, bool retain_graph, bool create_graph = false);
  /// Opens one micro-step; see AccumulateScope.
  AccumulateScope accumulate(const PreparedModelBase& model);
  /// One micro-step of a token-level loss (accelerate's num_items_in_batch,
  /// transformers#34373): `num_items` counts the items (tokens that are not
  /// padding) of this micro-batch on this process, and backward() takes
  /// the loss SUMMED over them. At the window's last backward the counts of
  /// its micro-steps and processes are all-reduced once and the gradients
  /// divided by the total, so that they equal one big batch's mean over
  /// all its items, however unevenly they fall. Every micro-step of a
  /// window counts, or none (a UsageError).
  AccumulateScope accumulate(
      const PreparedModelBase& model, const torch::Tensor& num_items);
  AccumulateScope accumulate(const PreparedModelBase& model, int64_t num_items);
  /// accelerate's accumulate(*models): one micro-step for several prepared
  /// models trained together (a GAN's generator and discriminator).
  template <typename... Rest>
  AccumulateScope accumulate(
      const PreparedModelBase& first,
      const PreparedModelBase& second,
      const Rest&... rest) {
    check_prepared(second);
    (check_prepared(rest), ...);
    return accumulate(first);
  }
  /// The scope of accelerate's no_sync(model) (DDP's no_sync): backward
  /// inside it keeps local gradients, without the all-reduce (or ZeRO's
  /// reduce), whatever accumulate() decided; the next synchronising
  /// backward outside it averages the sum. Step the optimizer outside it.
  class [[nodiscard]] NoSyncScope {
   public:
    ~NoSyncScope();
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;

   private:
    friend class Accelerator;
    explicit NoSyncScope(std::shared_ptr<detail::AcceleratorState> state);
    std::shared_ptr<detail::AcceleratorState> state_;
  };
  NoSyncScope no_sync(const PreparedModelBase& model);
  /// FSDP's summon_full_params: while the scope lives, every FSDP model's
  /// parameters hold their full values (to sample from the model, inspect
  /// or change its weights); every process must open it. At its end each
  /// process keeps its shard of what they then hold. Without FSDP it does
  /// nothing.
  class [[nodiscard]] FullParamsScope {
   public:
    ~FullParamsScope();
    FullParamsScope(const FullParamsScope&) = delete;
    FullParamsScope& operator=(const FullParamsScope&) = delete;

   private:
    friend class Accelerator;
    explicit FullParamsScope(std::shared_ptr<detail::AcceleratorState> state);
    std::shared_ptr<detail::AcceleratorState> state_;
  };
  FullParamsScope summon_full_params();
  /// The model given to prepare (accelerate's unwrap_model): the holder
  /// itself, for saving or inspecting it without the prepared forward.
  template <typename M>
  const M& unwrap_model(const PreparedModel<M>& model) const {
    return model.module();
  }
  /// Whether the current micro-step synchronises gradients and steps.
  bool sync_gradients() const;
  /// Whether the current batch is the last of a prepared data loader.
  bool end_of_dataloader() const;

  /// torch::nn::utils::clip_grad_norm_ on the unscaled gradients (unscaling
  /// the prepared optimizers first under loss scaling). Returns the total
  /// norm (0-dim, float) before clipping. On an accumulation micro-step the
  /// gradients are partial: nothing is clipped or unscaled, and the result
  /// is the norm accumulated so far (divided by the loss scale); the
  /// synchronising micro-step clips the whole sum.
  torch::Tensor clip_grad_norm_(
      const std::vector<torch::Tensor>& parameters,
      double max_norm,
      double norm_type = 2.0);
  /// Clamps every gradient to [-clip_value, clip_value] after unscaling;
  /// nothing on a micro-step.
  void clip_grad_value_(
      const std::vector<torch::Tensor>& parameters, double clip_value);
  /// Unscales the prepared optimizers' gradients now (once per step); a
  /// no-op without loss scaling.
  void unscale_gradients();
  /// Whether the last optimizer step that ran was skipped because the
  /// GradScaler found inf/NaN gradients. With ATen's fused step the flag
  /// stays on the device until asked: on CUDA this call waits for the step
  /// (a host sync), so ask when you need it, not every step.
  bool optimizer_step_was_skipped() const;
  /// The GradScaler when loss scaling is on, else nullptr.
  GradScaler* scaler();
  /// A guard running its scope under the Accelerator's autocast, for work
  /// outside the prepared forward (a disabled guard for precision no).
  Autocast autocast() const;

  /// accelerate's profile(): LibTorch's profiler on this thread until the
  /// returned Profiler stops (stop() or its end of scope), with
  /// AcceleratorOptions::profile_options; the Chrome trace goes to
  /// output_trace_dir/profile_<process_index>.json. Print its table():
  ///   auto prof = accelerator.profile();
  ///   ... train ...
  ///   prof.stop();
  ///   accelerator.print(prof.table());
  diag::Profiler profile() const;

  /// Starts the trackers of log_with in project_dir/project_name (the run
  /// directory), writing the run's configuration there: the resolved
  /// options plus `config`. Only the main process writes. Throws
  /// ampkit::UsageError when log_with names no tracker.
  void init_trackers(
      const std::string& project_name, const track::RunConfig& config = {});
  /// Records metrics at `step` (default: optimizer_steps()) in every tracker.
  void log(
      const track::Metrics& metrics,
      std::optional<int64_t> step = std::nullopt);
  /// Flushes and closes the trackers (also done by the destructor).
  void end_training();
  /// project_dir/project_name once init_trackers ran, else "".
  const std::string& run_dir() const;
  /// Optimizer steps taken (synchronising steps, skipped ones included).
  int64_t optimizer_steps() const;
  /// Of those, the steps loss scaling skipped. Counted on the device; the
  /// call reads the count (one host sync on CUDA): call it when logging or
  /// at the end, not every step.
  int64_t skipped_optimizer_steps() const;

  /// accelerate's save_state: writes a checkpoint that load_state resumes
  /// exactly: every prepared model (model.safetensors, model_1...),
  /// optimizer (optimizer.bin...), scheduler (scheduler.bin...), the
  /// GradScaler (scaler.pt), each rank's RNG states (random_states_R.bin),
  /// each prepare_data_loader loader's epoch and position (sampler.bin...),
  /// objects passed to register_for_checkpointing (custom_checkpoint_I.bin),
  /// the step counters (accelerator_state.json) and a manifest.json with
  /// every file's size and CRC32C. The files go to DIR.partial first, are
  /// fsynced, and the folder is renamed into place: a crash leaves the
  /// previous checkpoint intact. Without `dir`, automatic_checkpoint_naming
  /// picks project_dir/checkpoints/checkpoint_N and total_limit prunes.
  /// Returns the folder written. A collective in a distributed run.
  std::string save_state(const std::optional<std::string>& dir = std::nullopt);
  /// save_state in `format`: SaveFormat::accelerate writes Python
  /// accelerate's layout into `dir`, which its load_state reads (a run moves
  /// from C++ to Python): model.safetensors, optimizer.bin (torch.optim's
  /// state_dict of LibTorch's Adam, AdamW or SGD), scheduler.bin,
  /// scaler.pt and random_states_<rank>.pkl, written by torch.save's
  /// format. No manifest, and not atomic (accelerate's is neither); ZeRO
  /// shards and other optimizers are refused. load_state reads such a
  /// folder back (and one accelerate wrote). A collective.
  std::string save_state(const std::string& dir, SaveFormat format);
  /// Restores what save_state wrote; without `dir`, the newest complete
  /// checkpoint under project_dir/checkpoints. Every file is checked
  /// against the manifest before anything is changed; a missing, truncated
  /// or corrupt file, another world size or another set of prepared
  /// objects is an ampkit::IoError or InvalidArgument naming the file.
  /// Call it after prepare() and before iterating the loaders. Returns the
  /// folder loaded.
  std::string load_state(const std::optional<std::string>& dir = std::nullopt);
  /// The newest checkpoint_N under `checkpoints_dir` that is intact for
  /// every process, or nullopt when no process has any. A collective: on
  /// machines that share no filesystem each looks at its own folder and
  /// they agree on N (the newest that all have; a newer one that only some
  /// finished is passed over with a warning). Damaged ones are passed over
  /// as checkpoint::latest_checkpoint does; a process with none while
  /// others have one is an IoError on every process.
  std::optional<std::string> latest_checkpoint(
      const std::string& checkpoints_dir);
  /// accelerate's register_save_state_pre_hook / register_load_state_pre_hook:
  /// `hook(models, dir)` runs on every process before save_state writes (or
  /// load_state reads) anything, with the prepared models in order and the
  /// folder being written (its files become part of the checkpoint, which
  /// is renamed into place when complete) or read, so a hook can keep its
  /// own files beside ampkit's. Returns a handle for remove_state_hook.
  using StateHook = std::function<void(
      const std::vector<std::shared_ptr<torch::nn::Module>>& models,
      const std::string& dir)>;
  size_t register_save_state_pre_hook(StateHook hook);
  size_t register_load_state_pre_hook(StateHook hook);
  /// Removes a hook; an unknown handle is an InvalidArgument.
  void remove_state_hook(size_t handle);
  /// Adds an object with `StateDict state_dict() const` and
  /// `void load_state_dict(const StateDict&)` to what save_state/load_state
  /// keep, in registration order. It must outlive the Accelerator's use.
  template <typename T>
  void register_for_checkpointing(T& object) {
    register_checkpoint_object(
        [&object] { return object.state_dict(); },
        [&object](const StateDict& s) { object.load_state_dict(s); });
  }
  /// Weights only, safetensors, sharded above max_shard_size ("10GB") with
  /// model.safetensors.index.json; the main process writes, all wait.
  void save_model(
      const PreparedModelBase& model,
      const std::string& dir,
      const std::string& max_shard_size = "10GB");
  /// Loads save_model's files into the model (each process).
  void load_model(const PreparedModelBase& model, const std::string& dir);

  /// Process topology; one process until the distributed layer runs.
  bool is_main_process() const;
  bool is_local_main_process() const;
  bool is_last_process() const;
  /// accelerate's on_main_process / on_local_main_process /
  /// on_last_process / on_process(i) decorators: run `fn` on that process
  /// only; return whether it ran.
  template <typename F>
  bool on_main_process(F&& fn) const {
    return run_if(is_main_process(), std::forward<F>(fn));
  }
  template <typename F>
  bool on_local_main_process(F&& fn) const {
    return run_if(is_local_main_process(), std::forward<F>(fn));
  }
  template <typename F>
  bool on_last_process(F&& fn) const {
    return run_if(is_last_process(), std::forward<F>(fn));
  }
  template <typename F>
  bool on_process(int64_t process_index, F&& fn) const {
    return run_if(this->process_index() == process_index, std::forward<F>(fn));
  }
  /// accelerate's on_local_process(local_process_index=i): on every
  /// machine, the process with that local index.
  template <typename F>
  bool on_local_process(int64_t local_process_index, F&& fn) const {
    return run_if(
        this->local_process_index() == local_process_index,
        std::forward<F>(fn));
  }
  int64_t process_index() const;
  int64_t local_process_index() const;
  int64_t num_processes() const;
  /// Blocks until every process reaches it.
  void wait_for_everyone();
  /// accelerate's gather_object: every process's `object`, in process
  /// order, for anything c10::IValue holds (numbers, strings, tensors, and
  /// vectors and dicts of them). Objects travel pickled by LibTorch's
  /// pickler, as accelerate pickles them. A collective.
  template <typename T>
  std::vector<T> gather_object(const T& object) {
    std::vector<T> all;
    for (const auto& bytes : gather_bytes(to_pickle(c10::IValue(object)))) {
      all.push_back(from_pickle(bytes).template to<T>());
    }
    return all;
  }
  /// A vector is gathered into one: the processes' elements in process
  /// order (accelerate concatenates gathered lists).
  template <typename T>
  std::vector<T> gather_object(const std::vector<T>& objects) {
    std::vector<T> all;
    for (const auto& bytes : gather_bytes(to_pickle(c10::IValue(objects)))) {
      auto part = from_pickle(bytes).template to<std::vector<T>>();
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  }
  /// accelerate's broadcast_object_list: `from_process`'s objects replace
  /// every process's, in place; returns them. A collective.
  template <typename T>
  std::vector<T>& broadcast_object_list(
      std::vector<T>& objects, int64_t from_process = 0) {
    const auto bytes = broadcast_bytes(
        process_index() == from_process ? to_pickle(c10::IValue(objects))
                                        : std::vector<char>{},
        from_process);
    objects = from_pickle(bytes).template to<std::vector<T>>();
    return objects;
  }
  // gather, reduce, gather_for_metrics, broadcast and pad_across_processes
  // also take tensors nested in pairs, tuples, vectors and maps (accelerate's
  // recursively_apply): each tensor inside is collected in turn, in the same
  // order on every process, and the structure comes back with the results:
  //   auto [predictions, references] = accelerator.gather_for_metrics(
  //       std::make_tuple(predictions, batch.target));
  template <typename T, typename = detail::if_nested<T>>
  T gather(const T& data) {
    return recursively_apply([this](const auto& t) { return gather(t); }, data);
  }
  template <typename T, typename = detail::if_nested<T>>
  T reduce(const T& data, ReduceOp op = ReduceOp::sum) {
    return recursively_apply(
        [this, op](const auto& t) { return reduce(t, op); }, data);
  }
  template <typename T, typename = detail::if_nested<T>>
  T gather_for_metrics(const T& data) {
    return recursively_apply(
        [this](const auto& t) { return gather_for_metrics(t); }, data);
  }
  template <typename T, typename = detail::if_nested<T>>
  T broadcast(const T& data, int64_t from_process = 0) {
    return recursively_apply(
        [this, from_process](const auto& t) {
          return broadcast(t, from_process);
        },
        data);
  }
  template <typename T, typename = detail::if_nested<T>>
  T pad_across_processes(
      const T& data,
      int64_t dim = 0,
      double pad_index = 0,
      bool pad_first = false) {
    return recursively_apply(
        [=](const auto& t) {
          return pad_across_processes(t, dim, pad_index, pad_first);
        },
        data);
  }
  /// Concatenates `tensor` from every process on dim 0; a 0-dim tensor
  /// becomes shape [num_processes()], so shapes do not depend on whether
  /// training is distributed.
  torch::Tensor gather(const torch::Tensor& tensor);
  /// Combines `tensor` across processes (sum, mean or max); integer
  /// tensors are averaged in float.
  torch::Tensor reduce(
      const torch::Tensor& tensor, ReduceOp op = ReduceOp::sum);
  /// gather() for evaluation: on the last batch of a prepared data loader
  /// whose sampler padded the epoch (even_batches), the duplicated samples
  /// are dropped, so the result has exactly one row per dataset sample.
  torch::Tensor gather_for_metrics(const torch::Tensor& tensor);
  /// `from_process`'s tensor, on every process (the others' values are
  /// only used for the shape).
  torch::Tensor broadcast(
      const torch::Tensor& tensor, int64_t from_process = 0);
  /// Pads `tensor` along `dim` with `pad_index` to the largest size any
  /// process has, so that gather() can concatenate it (at the end, or at
  /// the start with pad_first).
  torch::Tensor pad_across_processes(
      const torch::Tensor& tensor,
      int64_t dim = 0,
      double pad_index = 0,
      bool pad_first = false);
  /// This process's contiguous share of `items` (the first len % N
  /// processes get one more); with apply_padding every share has the same
  /// length, repeating the last item.
  template <typename T>
  std::vector<T> split_between_processes(
      const std::vector<T>& items, bool apply_padding = false) const {
    const auto [begin, end, padded] =
        share_of(static_cast<int64_t>(items.size()));
    std::vector<T> share(items.begin() + begin, items.begin() + end);
    if (apply_padding && !items.empty()) {
      while (static_cast<int64_t>(share.size()) < padded) {
        share.push_back(items.back());
      }
    }
    return share;
  }
  /// RAII: the main process runs the scope first, the others wait for it
  /// and then run theirs (downloads, caches). local_main_process_first():
  /// each machine's local main process goes first (a cache on each
  /// machine's own disk), as accelerate's.
  class [[nodiscard]] MainProcessFirst {
   public:
    ~MainProcessFirst() noexcept(false);
    MainProcessFirst(const MainProcessFirst&) = delete;
    MainProcessFirst& operator=(const MainProcessFirst&) = delete;

   private:
    friend class Accelerator;
    MainProcessFirst(Accelerator& accelerator, bool first);
    Accelerator& accelerator_;
    bool first_;
  };
  MainProcessFirst main_process_first();
  MainProcessFirst local_main_process_first();
  /// Early stop across processes: any process sets the trigger, and
  /// check_trigger() (a collective) is then true on every process, once.
  void set_trigger();
  bool check_trigger();
  /// The process group of a distributed run, else nullptr.
  dist::ProcessGroup* process_group() const;
  /// Prints the arguments, separated by spaces, as one line on stdout, on
  /// each machine's main process (accelerate's print: once per node).
  template <typename... Args>
  void print(const Args&... args) const {
    if (!is_local_main_process()) {
      return;
    }
    std::ostringstream line;
    const char* separator = "";
    ((line << separator << args, separator = " "), ...);
    print_line(line.str());
  }

 private:
  /// A stop signal reached a step boundary (handle_signals): saves where
  /// save_on_preemption says, says what it did, exits with 128 + signal.
  [[noreturn]] void preempt(int signal);
  PreparedOptimizer prepare_optimizer(torch::optim::Optimizer& optimizer);
  PreparedScheduler prepare_scheduler(optim::LRScheduler& scheduler);
  std::shared_ptr<torch::nn::Module> prepare_module(
      std::shared_ptr<torch::nn::Module> module);
  void print_line(const std::string& line) const;
  [[noreturn]] void throw_unsized_dataset() const;
  /// Refuses what a stream cannot do: ShardedSamplerOptions other than the
  /// defaults, and DataLoaderOptions' workers or drop_last.
  void check_stream_sampler(const data::ShardedSamplerOptions& sampler) const;
  void check_stream_loader(const torch::data::DataLoaderOptions& options) const;
  /// count(flag): how many processes passed 1 (an all-reduce).
  std::function<int64_t(int64_t)> process_counter() const;
  template <typename Stream>
  auto prepare_stream(
      Stream stream,
      const torch::data::DataLoaderOptions& options,
      data::StreamSharding sharding) {
    check_stream_loader(options);
    auto loader = std::make_unique<data::StreamLoader<Stream>>(
        std::move(stream),
        data::StreamLoaderOptions()
            .batch_size(options.batch_size())
            .num_processes(num_processes())
            .process_index(process_index())
            .sharding(sharding),
        process_counter());
    return PreparedDataLoader<data::StreamLoader<Stream>>(
        std::move(loader), state_);
  }
  [[noreturn]] void throw_unsharded_loader() const;
  /// [begin, end) of this process's share of n items, and the largest share.
  std::tuple<int64_t, int64_t, int64_t> share_of(int64_t n) const;
  [[noreturn]] static void throw_negative_skip(int64_t n);
  // gather_object and broadcast_object_list: bytes through the process
  // group (lengths first, then the padded bytes).
  std::vector<std::vector<char>> gather_bytes(const std::vector<char>& bytes);
  std::vector<char> broadcast_bytes(
      const std::vector<char>& bytes, int64_t from_process);
  static std::vector<char> to_pickle(const c10::IValue& value);
  static c10::IValue from_pickle(const std::vector<char>& bytes);
  void backward_unhinted(
      const torch::Tensor& loss, bool retain_graph, bool create_graph);
  /// A UsageError unless `model` was prepared by this Accelerator.
  void check_prepared(const PreparedModelBase& model) const;
  template <typename F>
  static bool run_if(bool condition, F&& fn) {
    if (condition) {
      std::forward<F>(fn)();
    }
    return condition;
  }
  void register_checkpoint_object(
      std::function<StateDict()> save,
      std::function<void(const StateDict&)> load);

  std::shared_ptr<detail::AcceleratorState> state_;
};

/// accelerate's set_seed(seed, device_specific, deterministic): seeds
/// torch's generators with `seed`, plus the process index (RANK, as the
/// launcher set it) with device_specific, so that processes draw different
/// numbers (dropout, augmentation); deterministic also makes LibTorch use
/// deterministic algorithms (torch.use_deterministic_algorithms). The
/// one-argument set_seed is in ampkit/utils/random.h.
void set_seed(uint64_t seed, bool device_specific, bool deterministic = false);

namespace detail {
template <typename T>
struct is_unique_ptr : std::false_type {};
template <typename T>
struct is_unique_ptr<std::unique_ptr<T>> : std::true_type {};
template <typename T>
struct is_shared_ptr : std::false_type {};
template <typename T>
struct is_shared_ptr<std::shared_ptr<T>> : std::true_type {};
template <typename T>
inline constexpr bool always_false = false;
}  // namespace detail

template <typename T>
auto Accelerator::prepare(T&& object) {
  using U = std::decay_t<T>;
  if constexpr (std::is_base_of_v<torch::optim::Optimizer, U>) {
    static_assert(
        std::is_lvalue_reference_v<T>,
        "Accelerator::prepare takes the optimizer by reference: pass a named "
        "optimizer that outlives the training loop.");
    return prepare_optimizer(object);
  } else if constexpr (std::is_base_of_v<optim::LRScheduler, U>) {
    static_assert(
        std::is_lvalue_reference_v<T>,
        "Accelerator::prepare takes the scheduler by reference: pass a named "
        "scheduler that outlives the training loop.");
    return prepare_scheduler(object);
  } else if constexpr (std::is_base_of_v<torch::nn::Module, U>) {
    static_assert(
        detail::always_false<U>,
        "Accelerator::prepare takes a module through its holder (the "
        "TORCH_MODULE class) or a std::shared_ptr, not the Impl object.");
  } else if constexpr (detail::is_unique_ptr<U>::value) {
    if (num_processes() > 1) {
      throw_unsharded_loader();
    }
    return PreparedDataLoader<typename U::element_type>(
        std::move(object), state_);
  } else if constexpr (
      std::is_base_of_v<torch::detail::ModuleHolderIndicator, U> ||
      detail::is_shared_ptr<U>::value) {
    U model = object;
    prepare_module(detail::module_ptr(model));
    return PreparedModel<U>(std::move(model), state_);
  } else {
    static_assert(
        detail::always_false<U>,
        "Accelerator::prepare takes a model (a TORCH_MODULE holder or "
        "std::shared_ptr to an nn::Module), a torch::optim::Optimizer, an "
        "ampkit::optim::LRScheduler or a data loader (the std::unique_ptr "
        "from torch::data::make_data_loader).");
  }
}

}  // namespace ampkit
