// Accelerator::save_state / load_state / save_model / load_model: what goes
// into a checkpoint and in which order the processes write it. The file
// format and crash safety are the checkpoint layer's.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "accelerator/accelerate_format.h"
#include "accelerator/state.h"
#include "ampkit/accelerator/accelerator.h"
#include "ampkit/checkpoint/checkpoint_dir.h"
#include "ampkit/checkpoint/model_io.h"
#include "ampkit/utils/random.h"
#include "ampkit/utils/warnings.h"
#include "utils/components.h"

namespace ampkit {
namespace {

namespace fs = std::filesystem;
namespace ck = checkpoint;
constexpr const char* kStateFile = "accelerator_state.json";
// Written by the main process into its partial folder while it saves: a
// process that reads back the same token shares its filesystem.
constexpr const char* kOwnerFile = ".ampkit_writer";

// accelerate's names: model.safetensors, model_1.safetensors, ...
using detail::indexed;

// What process `rank` saves of object i itself: optimizer_rank1.bin,
// optimizer_1_rank0.bin (a sharded optimizer's shard), model_rank0.safetensors
// (FSDP's SHARDED_STATE_DICT), ...
std::string per_process_file(
    const char* stem, size_t i, int64_t rank, const char* ext) {
  return indexed(stem, i, "_rank" + std::to_string(rank) + ext);
}
std::string shard_file(size_t i, int64_t rank) {
  return per_process_file("optimizer", i, rank, ".bin");
}
std::string model_shard_file(size_t i, int64_t rank) {
  return per_process_file("model", i, rank, ".safetensors");
}

// `dir` must have `name`: one process's shard file of `what`, which a resume
// on `processes` processes reads from each of the m.world_size processes
// that saved it.
void need_file(
    const ck::Manifest& m,
    const std::string& dir,
    const std::string& name,
    const std::string& what,
    int64_t processes) {
  if (m.find(name) != nullptr) {
    return;
  }
  throw IoError(
      component::kAccelerator,
      dir + " lacks " + name + ": resuming " + what + " on " +
          std::to_string(processes) + " processes needs the shards of all " +
          std::to_string(m.world_size) +
          " processes that saved it. On machines that share no filesystem, "
          "copy every machine's shard files into one checkpoint folder" +
          (processes != m.world_size
               ? ", or resume on " + std::to_string(m.world_size) +
                     " processes."
               : std::string(".")));
}

std::string rng_file(int64_t rank) {
  return "random_states_" + std::to_string(rank) + ".bin";
}

template <typename F>
std::string archive_bytes(F&& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

template <typename F>
void read_archive(
    const std::string& bytes,
    const std::string& origin,
    const c10::Device& device,
    F&& use) {
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  try {
    archive.load_from(in, device);
  } catch (const c10::Error& e) {
    throw IoError(
        component::kAccelerator,
        origin + " is not a readable archive: " + e.what_without_backtrace());
  }
  use(archive);
}

// A StateDict as torch.save's pickle of a dict (Python reads it with
// torch.load).
std::string encode_state(const StateDict& state) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [k, v] : state) {
    dict.insert(k, v);
  }
  const auto bytes = torch::pickle_save(dict);
  return std::string(bytes.begin(), bytes.end());
}

StateDict decode_state(const std::string& bytes, const std::string& origin) {
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    throw IoError(
        component::kAccelerator,
        origin + " is not a readable state: " + e.what_without_backtrace());
  }
  if (!value.isGenericDict()) {
    throw IoError(
        component::kAccelerator, origin + " does not hold a state dict.");
  }
  StateDict state;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      throw IoError(
          component::kAccelerator, origin + " has a key that is not a string.");
    }
    state[entry.key().toStringRef()] = entry.value();
  }
  return state;
}

std::string encode_rng(const RngState& rng) {
  ck::NamedTensors tensors{{"cpu", rng.cpu}};
  for (size_t i = 0; i < rng.cuda.size(); ++i) {
    tensors.emplace_back("cuda_" + std::to_string(i), rng.cuda[i]);
  }
  return ck::encode_safetensors(tensors);
}

RngState decode_rng(const std::string& bytes, const std::string& origin) {
  RngState rng;
  for (auto& [name, t] : ck::decode_safetensors(bytes, origin).tensors) {
    if (name == "cpu") {
      rng.cpu = t;
    } else if (name.rfind("cuda_", 0) == 0) {
      rng.cuda.push_back(t);
    }
  }
  if (!rng.cpu.defined()) {
    throw IoError(
        component::kAccelerator, origin + " has no CPU generator state.");
  }
  return rng;
}

// The generator states a process resumes with: its own saved ones, or for
// a process that did not exist when the checkpoint was saved (resumed on
// more processes) a seed derived from process 0's: the seed its CPU
// generator was last seeded with, plus this process's index, as
// accelerate's set_seed(seed, device_specific=True) seeds each process.
struct ResumedRng {
  std::optional<RngState> saved;
  uint64_t seed = 0;

  void apply() const {
    if (saved) {
      set_rng_state(*saved);
    } else {
      set_seed(seed);
    }
  }
};

template <typename File, typename Path>
ResumedRng resumed_rng(
    const ck::Manifest& m,
    const std::string& dir,
    int64_t rank,
    const File& file,
    const Path& path) {
  ResumedRng out;
  if (m.find(rng_file(rank)) != nullptr) {
    out.saved = decode_rng(file(rng_file(rank)), path(rng_file(rank)));
    return out;
  }
  if (rank < m.world_size) {
    throw IoError(
        component::kAccelerator,
        dir + " lacks " + rng_file(rank) + ", the generator state of process " +
            std::to_string(rank) + " of the " + std::to_string(m.world_size) +
            " that saved it. Restore the file from a copy of the checkpoint.");
  }
  const RngState first = decode_rng(file(rng_file(0)), path(rng_file(0)));
  auto generator = at::make_generator<at::CPUGeneratorImpl>();
  generator.set_state(first.cpu);
  out.seed = generator.current_seed() + static_cast<uint64_t>(rank);
  return out;
}

// How many files of one kind a checkpoint has: model.safetensors,
// model_1.safetensors, ...
size_t count_indexed(
    const ck::Manifest& m, const std::string& stem, const std::string& ext) {
  size_t n = 0;
  // Whole, or one file per process (sharded optimizers, FSDP's sharded
  // models).
  while (m.find(indexed(stem, n, ext)) != nullptr ||
         m.find(indexed(stem, n, "_rank0" + ext)) != nullptr) {
    ++n;
  }
  return n;
}

// Whether each process saves its own file of this optimizer (ZeRO's and
// FSDP's shards).
bool per_process(const detail::PreparedOptimizerEntry& entry) {
  return entry.sharded != nullptr || entry.fsdp != nullptr;
}

// The manifest's record of an FSDP optimizer: stage 3, over this many
// processes (one shard file each).
ck::Manifest::Partition fsdp_partition(int64_t processes) {
  ck::Manifest::Partition p;
  p.zero_stage = 3;
  for (int64_t r = 0; r <= processes; ++r) {
    p.boundaries.push_back(r);
  }
  return p;
}

// Whether model i is saved as each process's shards (FSDP with
// SHARDED_STATE_DICT) rather than whole.
bool saves_shards(const detail::AcceleratorState& st, size_t i) {
  return st.models[i].fsdp && st.models[i].fsdp->options().state_dict_type() ==
                                  dist::StateDictType::sharded_state_dict;
}

// This process's file of model i under SHARDED_STATE_DICT: its shard of
// each flat buffer, with their layout in the safetensors metadata, and the
// module's buffers (running statistics and the like) whole, by name.
std::string encode_local_shards(const detail::AcceleratorState& st, size_t i) {
  auto saved = st.models[i].fsdp->local_shards();
  for (const auto& b : st.models[i].module->named_buffers()) {
    saved.tensors.emplace_back(b.key(), b.value());
  }
  saved.layout["format"] = "pt";
  return ck::encode_safetensors(saved.tensors, saved.layout);
}

// The files process `rank` writes itself, each handed to `visit(name,
// bytes)` (`bytes()` encodes this process's): its generator state and its
// shards (FSDP models saved SHARDED_STATE_DICT, sharded optimizers).
template <typename Visit>
void per_process_files(
    const detail::AcceleratorState& st,
    int64_t rank,
    const std::string& rng,
    Visit&& visit) {
  visit(rng_file(rank), [&] { return rng; });
  for (size_t i = 0; i < st.models.size(); ++i) {
    if (saves_shards(st, i)) {
      visit(model_shard_file(i, rank), [&] {
        return encode_local_shards(st, i);
      });
    }
  }
  for (size_t i = 0; i < st.optimizers.size(); ++i) {
    if (per_process(st.optimizers[i])) {
      visit(shard_file(i, rank), [&] {
        return archive_bytes(
            [&](auto& a) { st.optimizers[i].optimizer->save(a); });
      });
    }
  }
}

// Model i's weights for saving (FULL_STATE_DICT). Under FSDP they are
// gathered buffer by buffer into temporaries, never the whole model at
// once; every process takes part, and those that write keep the values.
ck::NamedTensors state_for_saving(
    detail::AcceleratorState& st, size_t i, bool keep) {
  dist::FullyShardedModel* fsdp = st.models[i].fsdp.get();
  if (fsdp == nullptr) {
    return keep ? ck::model_state(*st.models[i].module) : ck::NamedTensors{};
  }
  ck::NamedTensors out;
  for (auto& [name, value] : st.collective(
           "FSDP gathering the weights to save",
           [&] { return fsdp->full_parameters(keep); })) {
    out.emplace_back(name, value);
  }
  if (keep) {
    for (const auto& b : st.models[i].module->named_buffers()) {
      out.emplace_back(b.key(), b.value());
    }
  }
  return out;
}

// Model i's weights as read and checked before anything changes: whole
// without FSDP; under FSDP this process's shard of every flat buffer, and
// the module's buffers by name.
struct ModelLoad {
  ck::NamedTensors tensors;  // FSDP: the buffers only
  std::vector<torch::Tensor> shards;
  std::string origin;
};

// From whole weights (FULL_STATE_DICT, save_model's files): under FSDP each
// process cuts its shards parameter by parameter, gathering nothing.
ModelLoad whole_model_load(
    const detail::AcceleratorState& st,
    size_t i,
    ck::NamedTensors state,
    std::string origin) {
  ModelLoad out;
  out.origin = std::move(origin);
  const dist::FullyShardedModel* fsdp = st.models[i].fsdp.get();
  if (fsdp == nullptr) {
    ck::check_model_state(*st.models[i].module, state, out.origin);
    out.tensors = std::move(state);
    return out;
  }
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, shape] : fsdp->parameter_shapes()) {
    shapes[name] = std::move(shape);
  }
  ck::check_model_state(*st.models[i].module, state, out.origin, shapes);
  out.shards = fsdp->shards_from_full(state);
  for (auto& [name, t] : state) {
    if (shapes.count(name) == 0) {
      out.tensors.emplace_back(name, std::move(t));
    }
  }
  return out;
}

void apply_model_load(detail::AcceleratorState& st, size_t i, ModelLoad& load) {
  if (!st.models[i].fsdp) {
    ck::load_model_state(*st.models[i].module, load.tensors, load.origin);
    return;
  }
  st.models[i].fsdp->load_shards(load.shards);
  torch::NoGradGuard no_grad;
  for (auto& b : st.models[i].module->named_buffers()) {
    for (const auto& [name, t] : load.tensors) {
      if (name == b.key()) {
        b.value().copy_(t);
      }
    }
  }
}

size_t prepared_index(
    const detail::AcceleratorState& st, const PreparedModelBase& model) {
  size_t i = 0;
  while (i < st.models.size() && st.models[i].module != model.module_ptr()) {
    ++i;
  }
  return i;
}

// Optimizer i was saved as it is prepared now: whole, or sharded by the
// same stage. Sharded at other boundaries (another process count) it is
// re-split; returns whether it must be.
bool check_partition(
    const ck::Manifest& m,
    const std::string& dir,
    size_t i,
    const detail::PreparedOptimizerEntry& entry,
    int64_t processes) {
  const ck::Manifest::Partition saved = i < m.optimizer_partitions.size()
                                            ? m.optimizer_partitions[i]
                                            : ck::Manifest::Partition();
  const int64_t stage = entry.sharded ? entry.sharded->stage()
                        : entry.fsdp  ? 3
                                      : 0;
  if (saved.zero_stage == stage && entry.fsdp) {
    // Saved by another number of processes: the shards are joined and
    // split again (FullyShardedModel::load_resharded).
    return saved.boundaries != fsdp_partition(processes).boundaries;
  }
  if (saved.zero_stage == stage) {
    return entry.sharded && saved.boundaries != entry.sharded->boundaries();
  }
  throw InvalidArgument(
      component::kAccelerator,
      dir + " holds optimizer " + std::to_string(i) +
          (saved.zero_stage > 0
               ? " sharded by zero_stage " + std::to_string(saved.zero_stage)
               : std::string(" whole (zero_stage 0)")) +
          ", but this run prepares it " +
          (stage > 0 ? "sharded by zero_stage " + std::to_string(stage)
                     : std::string("whole (zero_stage 0)")) +
          ". Resume with the zero_stage it was saved with.");
}

void check_count(
    const ck::Manifest& m,
    const std::string& dir,
    const std::string& what,
    const std::string& stem,
    const std::string& ext,
    size_t prepared) {
  const size_t saved = count_indexed(m, stem, ext);
  if (saved != prepared) {
    throw InvalidArgument(
        component::kAccelerator,
        dir + " holds " + std::to_string(saved) + " " + what + " (" + stem +
            "*" + ext + "), but this Accelerator has " +
            std::to_string(prepared) +
            ". Prepare (or register) the same objects, in the same order, as "
            "the run that saved it.");
  }
}

std::string checkpoints_dir(const detail::AcceleratorState& st) {
  return (fs::path(st.options.project_dir) / "checkpoints").string();
}

}  // namespace

namespace {
// A hook run before save_state (save) or load_state; returns its handle.
size_t add_state_hook(
    detail::AcceleratorState& st, bool save, Accelerator::StateHook hook) {
  st.state_hooks.push_back({st.next_hook_handle, save, std::move(hook)});
  return st.next_hook_handle++;
}
}  // namespace

size_t Accelerator::register_save_state_pre_hook(StateHook hook) {
  return add_state_hook(*state_, /*save=*/true, std::move(hook));
}

size_t Accelerator::register_load_state_pre_hook(StateHook hook) {
  return add_state_hook(*state_, /*save=*/false, std::move(hook));
}

void Accelerator::remove_state_hook(size_t handle) {
  auto& hooks = state_->state_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (it->handle == handle) {
      hooks.erase(it);
      return;
    }
  }
  throw InvalidArgument(
      component::kAccelerator,
      "remove_state_hook got handle " + std::to_string(handle) +
          ", which no registered hook has (removed already?). Pass what "
          "register_save_state_pre_hook or register_load_state_pre_hook "
          "returned.");
}

namespace detail {
void AcceleratorState::run_state_hooks(
    bool save, const std::string& dir) const {
  for (const auto& entry : state_hooks) {
    if (entry.save == save) {
      entry.hook(modules(), dir);
    }
  }
}
}  // namespace detail

void Accelerator::register_checkpoint_object(
    std::function<StateDict()> save,
    std::function<void(const StateDict&)> load) {
  state_->registered.push_back({std::move(save), std::move(load)});
}

namespace {

// What the processes agree on while saving and resuming (the next
// checkpoint number, how many failed a check, the range of checkpoints):
// each process's int64 values combined by `op`, on every process. A
// collective.
std::vector<int64_t> agree(
    Accelerator& accelerator,
    const detail::AcceleratorState& st,
    const std::vector<int64_t>& values,
    ReduceOp op) {
  const torch::Tensor combined =
      accelerator
          .reduce(
              torch::tensor(
                  values,
                  torch::dtype(torch::kLong).device(detail::device(st))),
              op)
          .to(torch::kCPU)
          .contiguous();
  const int64_t* data = combined.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + combined.numel());
}

// How many processes say `yes` (a collective).
int64_t count_of(
    Accelerator& accelerator, const detail::AcceleratorState& st, bool yes) {
  return agree(accelerator, st, {yes ? 1 : 0}, ReduceOp::sum)[0];
}

// The settings that shape training must be the ones the checkpoint was
// saved with: another accumulation would run a half window with the wrong
// loss scale, another precision or ZeRO stage a different run. Checked
// before anything is loaded; a checkpoint without a setting (older) is not
// refused for it.
void check_resumed_settings(
    const detail::AcceleratorState& st,
    const nlohmann::json& saved,
    const std::string& dir) {
  auto differs =
      [&](const char* key, const std::string& now, const std::string& option) {
        if (!saved.contains(key)) {
          return;
        }
        const auto& value = saved.at(key);
        const std::string then =
            value.is_string() ? value.get<std::string>() : value.dump();
        if (then != now) {
          throw InvalidArgument(
              component::kAccelerator,
              dir + " was saved with " + key + " " + then + ", this run has " +
                  now + ". Resume with the same setting (" + option + "(" +
                  then + "), the flag --" + key + " " + then +
                  "), or start a new run without resuming.");
        }
      };
  differs(
      "gradient_accumulation_steps",
      std::to_string(st.options.gradient_accumulation_steps),
      "gradient_accumulation_steps");
  differs(
      "mixed_precision",
      to_string(st.options.mixed_precision),
      "mixed_precision");
  differs("zero_stage", std::to_string(st.options.zero_stage), "zero_stage");
}

// A schedule's length (num_training_steps) comes back from the checkpoint,
// so a run resumed with a longer --max-steps would follow the old, shorter
// schedule (a cosine's learning rate climbing back from 0). Refused, unless
// reset_schedule asks the new length to continue from the saved step.
void keep_or_refuse_schedule_length(
    const optim::LRScheduler& scheduler,
    StateDict& saved,
    bool reset_schedule,
    const std::string& file) {
  const StateDict now = scheduler.state_dict();
  const auto then_it = saved.find("num_training_steps");
  const auto now_it = now.find("num_training_steps");
  if (then_it == saved.end() || now_it == now.end() ||
      !then_it->second.isInt() || !now_it->second.isInt() ||
      then_it->second.toInt() == now_it->second.toInt()) {
    return;
  }
  if (reset_schedule) {
    then_it->second = now_it->second;  // the new length, from the saved step
    return;
  }
  throw InvalidArgument(
      component::kAccelerator,
      file + ": the " + scheduler.name() + " schedule was saved for " +
          std::to_string(then_it->second.toInt()) +
          " training steps, this run's is for " +
          std::to_string(now_it->second.toInt()) +
          "; resuming would follow the saved one. Resume with the same "
          "length (the same --max-steps/--epochs), or reset_schedule(true) "
          "(the flag --reset-schedule) to continue the new schedule from the "
          "saved step.");
}

}  // namespace

std::string Accelerator::save_state(const std::optional<std::string>& dir) {
  auto& st = *state_;
  std::string target;
  int64_t iteration = -1;
  if (dir) {
    target = *dir;
  } else if (st.options.automatic_checkpoint_naming) {
    if (st.checkpoint_iteration < 0) {
      const auto existing = ck::list_checkpoints(checkpoints_dir(st));
      st.checkpoint_iteration =
          existing.empty() ? 0 : existing.back().first + 1;
      if (num_processes() > 1) {
        // Machines with folders of their own agree on the next number.
        st.checkpoint_iteration =
            agree(*this, st, {st.checkpoint_iteration}, ReduceOp::max)[0];
      }
    }
    iteration = st.checkpoint_iteration;
    target = (fs::path(checkpoints_dir(st)) /
              ("checkpoint_" + std::to_string(iteration)))
                 .string();
  } else {
    throw UsageError(
        component::kAccelerator,
        "save_state() needs a folder, or automatic_checkpoint_naming(true) to "
        "write project_dir/checkpoints/checkpoint_N. Call "
        "save_state(\"DIR\").");
  }
  if (st.stream_loaders > 0 && !st.stream_position_told) {
    st.stream_position_told = true;
    warn(
        component::kAccelerator,
        "save_state does not save where the " +
            std::to_string(st.stream_loaders) +
            " prepared stream(s) are: a stream has no positions to go back "
            "to. After load_state a stream goes on from wherever it stands "
            "(a new one from its start); skip what was read in the stream "
            "itself (a ChunkDataset's save()/load(), or an offset of your "
            "own) to resume exactly.");
  }
  // The scale update that is due would run at the next backward; running it
  // now stores the scale that step will use (and the pending update is not
  // lost or applied twice on resume).
  if (st.scaler_update_pending) {
    st.update_scaler();
  }
  const bool main = is_main_process();
  const int64_t rank = process_index();
  std::optional<ck::CheckpointWriter> writer;
  if (main) {
    writer.emplace(target);
  }
  // Which writer holds each process's files: the main process's, or, on a
  // machine that does not see the main process's folder (no shared
  // filesystem), that machine's local main process writes a whole copy
  // into its own folder, as accelerate's save_on_each_node does.
  std::vector<int64_t> holder(static_cast<size_t>(num_processes()), 0);
  if (num_processes() > 1) {
    const auto device = detail::device(st);
    std::random_device entropy;
    const int64_t drawn = (static_cast<int64_t>(entropy()) << 31) ^
                          static_cast<int64_t>(entropy());
    const int64_t token =
        broadcast(
            torch::tensor({drawn}, torch::dtype(torch::kLong).device(device)),
            0)
            .to(torch::kCPU)
            .item<int64_t>();
    if (main) {
      ck::write_file(target, kOwnerFile, std::to_string(token));
    }
    wait_for_everyone();  // the main process's partial folder exists
    bool sees = main;
    if (!main) {
      std::ifstream in(fs::path(ck::partial_dir(target)) / kOwnerFile);
      std::string seen;
      sees = static_cast<bool>(in >> seen) && seen == std::to_string(token);
    }
    // Each machine follows what its local main process saw, so that the
    // processes of one machine never split between two writers.
    const int64_t local_main = rank - local_process_index();
    const torch::Tensor all =
        gather(torch::tensor(
                   {sees ? int64_t{1} : int64_t{0}, local_main},
                   torch::dtype(torch::kLong).device(device)))
            .to(torch::kCPU);
    auto seen_by = [&](int64_t r) {
      return all[2 * all[2 * r + 1].item<int64_t>()].item<int64_t>() != 0;
    };
    for (int64_t r = 0; r < num_processes(); ++r) {
      holder[static_cast<size_t>(r)] =
          seen_by(r) ? 0 : all[2 * r + 1].item<int64_t>();
    }
    const int64_t mine = holder[static_cast<size_t>(rank)];
    if (!main && mine == rank) {
      writer.emplace(target);  // this machine's own folder
    }
    wait_for_everyone();  // every machine's partial folder exists
    // Every process must see its writer's partial folder; one that does
    // not fails every process, not only itself (the others would wait).
    const bool lost = !writer && !fs::is_directory(ck::partial_dir(target));
    const int64_t lost_count = count_of(*this, st, lost);
    if (lost_count > 0) {
      throw IoError(
          component::kAccelerator,
          std::to_string(lost_count) + " process(es)" +
              (lost ? " (this one included)" : std::string()) +
              " cannot see the partial checkpoint folder " +
              ck::partial_dir(target) +
              " that their machine's writer (process " + std::to_string(mine) +
              " here) created. Processes on one machine must see the same "
              "output folder; nothing was saved.");
    }
  } else {
    wait_for_everyone();
  }
  st.run_state_hooks(/*save=*/true, ck::partial_dir(target));
  // FSDP: the whole model's weights are saved (FULL_STATE_DICT),
  // gathered buffer by buffer for the writers.
  std::vector<ck::NamedTensors> weights;
  for (size_t i = 0; i < st.models.size(); ++i) {
    weights.push_back(
        saves_shards(st, i) ? ck::NamedTensors{}
                            : state_for_saving(st, i, writer.has_value()));
  }
  const std::string rng = encode_rng(get_rng_state());
  if (writer) {
    per_process_files(st, rank, rng, [&](const std::string& name, auto bytes) {
      writer->write(name, bytes());
    });
    for (size_t i = 0; i < st.models.size(); ++i) {
      if (!saves_shards(st, i)) {
        writer->write(
            indexed("model", i, ".safetensors"),
            ck::encode_safetensors(weights[i], {{"format", "pt"}}));
      }
    }
    for (size_t i = 0; i < st.optimizers.size(); ++i) {
      if (!per_process(st.optimizers[i])) {
        writer->write(
            indexed("optimizer", i, ".bin"), archive_bytes([&](auto& a) {
              st.optimizers[i].optimizer->save(a);
            }));
      }
    }
    for (size_t i = 0; i < st.schedulers.size(); ++i) {
      writer->write(
          indexed("scheduler", i, ".bin"),
          encode_state(st.schedulers[i]->state_dict()));
    }
    if (st.scaler) {
      writer->write("scaler.pt", encode_state(st.scaler->state_dict()));
    }
    nlohmann::ordered_json loaders = nlohmann::ordered_json::array();
    for (size_t i = 0; i < st.loaders.size(); ++i) {
      const auto& position = *st.loaders[i];
      writer->write(indexed("sampler", i, ".bin"), archive_bytes([&](auto& a) {
                      position.sampler.save_position(a, position.consumed);
                    }));
      loaders.push_back(
          {{"epoch", position.sampler.epoch()},
           {"batches_consumed", position.consumed}});
    }
    for (size_t i = 0; i < st.registered.size(); ++i) {
      writer->write(
          "custom_checkpoint_" + std::to_string(i) + ".bin",
          encode_state(st.registered[i].save()));
    }
    nlohmann::ordered_json state;
    state["optimizer_steps"] = st.optimizer_steps;
    state["skipped_steps"] = st.skipped_step_count();
    state["micro_step"] = st.micro_step;
    state["num_processes"] = st.num_processes;
    state["mixed_precision"] = to_string(st.options.mixed_precision);
    state["gradient_accumulation_steps"] =
        st.options.gradient_accumulation_steps;
    state["zero_stage"] = st.options.zero_stage;
    state["loaders"] = loaders;
    writer->write(kStateFile, state.dump(2) + "\n");
  } else {
    per_process_files(st, rank, rng, [&](const std::string& name, auto bytes) {
      ck::write_file(target, name, bytes());
    });
  }
  wait_for_everyone();  // every rank's files are on disk
  if (writer) {
    // The files of the processes this writer holds (its machine's, or with
    // a shared filesystem everyone's).
    std::vector<int64_t> held;
    for (int64_t r = 0; r < num_processes(); ++r) {
      if (r != rank && holder[static_cast<size_t>(r)] == (main ? 0 : rank)) {
        held.push_back(r);
      }
    }
    ck::Manifest manifest;
    for (const int64_t r : held) {
      per_process_files(st, r, rng, [&](const std::string& name, auto) {
        writer->record(name);
      });
    }
    for (size_t i = 0; i < st.optimizers.size(); ++i) {
      const auto& sharded = st.optimizers[i].sharded;
      manifest.optimizer_partitions.push_back(
          sharded
              ? ck::Manifest::Partition{sharded->stage(), sharded->boundaries()}
          : st.optimizers[i].fsdp ? fsdp_partition(num_processes())
                                  : ck::Manifest::Partition{});
    }
    bool any_sharded = false;
    for (const auto& p : manifest.optimizer_partitions) {
      any_sharded = any_sharded || p.zero_stage > 0;
    }
    if (!any_sharded) {
      manifest.optimizer_partitions.clear();
    }
    manifest.world_size = num_processes();
    manifest.step = st.optimizer_steps;
    std::error_code ec;
    fs::remove(fs::path(ck::partial_dir(target)) / kOwnerFile, ec);
    writer->commit(manifest);
    if (iteration >= 0) {
      ck::enforce_total_limit(checkpoints_dir(st), st.options.total_limit);
    }
  }
  wait_for_everyone();  // the checkpoint is complete for everyone
  if (iteration >= 0) {
    st.checkpoint_iteration = iteration + 1;
  }
  return target;
}

std::string Accelerator::save_state(const std::string& dir, SaveFormat format) {
  if (format == SaveFormat::ampkit) {
    return save_state(std::optional<std::string>(dir));
  }
  auto& st = *state_;
  st.run_state_hooks(/*save=*/true, dir);
  detail::save_accelerate_state(
      st, process_index(), is_main_process(), st.micro_step, dir);
  wait_for_everyone();
  return dir;
}

std::string Accelerator::load_state(const std::optional<std::string>& dir) {
  auto& st = *state_;
  std::string target;
  if (dir) {
    target = *dir;
  } else {
    auto latest = latest_checkpoint(checkpoints_dir(st));
    if (!latest) {
      throw IoError(
          component::kAccelerator,
          "load_state() found no complete checkpoint under " +
              checkpoints_dir(st) +
              ". Pass the folder save_state wrote, or save one first.");
    }
    target = *latest;
  }
  st.run_state_hooks(/*save=*/false, target);
  if (detail::is_accelerate_folder(target)) {
    detail::load_accelerate_state(st, process_index(), target);
    return target;
  }
  // Each file is read once, its size and CRC checked against the manifest
  // as it is read, and all of them before anything is changed.
  const ck::Manifest m = ck::read_manifest(target);
  check_count(m, target, "models", "model", ".safetensors", st.models.size());
  check_count(
      m, target, "optimizers", "optimizer", ".bin", st.optimizers.size());
  check_count(
      m, target, "schedulers", "scheduler", ".bin", st.schedulers.size());
  check_count(
      m, target, "data loader positions", "sampler", ".bin", st.loaders.size());
  const bool has_scaler = m.find("scaler.pt") != nullptr;
  if (has_scaler != st.scaler.has_value()) {
    throw InvalidArgument(
        component::kAccelerator,
        target +
            (has_scaler
                 ? " has a GradScaler state, but this run has no loss scaling"
                 : " has no GradScaler state, but this run scales the loss") +
            ". Resume with the mixed_precision / loss_scaling it was saved "
            "with.");
  }
  auto file = [&](const std::string& name) {
    return ck::read_checkpoint_file(target, m, name);
  };
  auto path = [&](const std::string& name) {
    return (fs::path(target) / name).string();
  };
  const c10::Device device = detail::device(st);

  // Read and check everything before changing anything.
  // Each model whole, or (FSDP's SHARDED_STATE_DICT) as the processes'
  // shards: this process's own file when it was saved with this layout.
  std::vector<ModelLoad> models;
  for (size_t i = 0; i < st.models.size(); ++i) {
    const std::string name = indexed("model", i, ".safetensors");
    if (m.find(name) != nullptr) {
      models.push_back(whole_model_load(
          st,
          i,
          ck::decode_safetensors(file(name), path(name)).tensors,
          path(name)));
      continue;
    }
    if (!st.models[i].fsdp) {
      throw InvalidArgument(
          component::kAccelerator,
          target + " holds model " + std::to_string(i) +
              " as FSDP shards (SHARDED_STATE_DICT, " + model_shard_file(i, 0) +
              " ...), but this run does not shard it. Resume it with FSDP, "
              "on any number of processes.");
    }
    // The module's buffers come from this process's file (a process the
    // saving run did not have: process 0's), which is read in any case.
    const int64_t buffers_from =
        process_index() < m.world_size ? process_index() : 0;
    ModelLoad& load = models.emplace_back();
    load.origin = path(model_shard_file(i, buffers_from));
    load.shards =
        st.models[i].fsdp->shards_from_saved(m.world_size, [&](int64_t q) {
          const std::string shard = model_shard_file(i, q);
          need_file(
              m,
              target,
              shard,
              "FSDP model " + std::to_string(i),
              num_processes());
          auto saved = ck::decode_safetensors(file(shard), path(shard));
          if (q == buffers_from) {
            load.tensors.clear();
            for (const auto& b : st.models[i].module->named_buffers()) {
              for (const auto& [key, t] : saved.tensors) {
                if (key == b.key() && t.sizes() == b.value().sizes()) {
                  load.tensors.emplace_back(key, t);
                }
              }
              if (load.tensors.empty() ||
                  load.tensors.back().first != b.key()) {
                throw InvalidArgument(
                    component::kAccelerator,
                    load.origin + " lacks buffer '" + b.key() + "' of model " +
                        std::to_string(i) +
                        " in its shape; nothing was loaded. Resume with the "
                        "model it was saved from.");
              }
            }
          }
          return dist::FullyShardedModel::SavedShards{
              std::move(saved.tensors), std::move(saved.metadata)};
        });
  }
  // Each optimizer's files: its own, or for a sharded optimizer saved by
  // another number of processes every saved shard, to re-split.
  std::vector<std::vector<std::string>> optimizer_files;
  std::vector<std::vector<std::string>> optimizers;
  std::vector<bool> resplit;
  for (size_t i = 0; i < st.optimizers.size(); ++i) {
    auto& names = optimizer_files.emplace_back();
    resplit.push_back(
        check_partition(m, target, i, st.optimizers[i], num_processes()));
    if (resplit.back()) {
      const auto& saved = m.optimizer_partitions[i].boundaries;
      for (size_t q = 0; q + 1 < saved.size(); ++q) {
        names.push_back(shard_file(i, static_cast<int64_t>(q)));
        need_file(
            m,
            target,
            names.back(),
            "optimizer " + std::to_string(i) +
                (st.optimizers[i].fsdp != nullptr
                     ? std::string(" (FSDP)")
                     : " (zero_stage " + std::to_string(st.options.zero_stage) +
                           ")"),
            num_processes());
      }
    } else {
      names.push_back(
          per_process(st.optimizers[i]) ? shard_file(i, process_index())
                                        : indexed("optimizer", i, ".bin"));
    }
    auto& bytes = optimizers.emplace_back();
    for (const auto& name : names) {
      bytes.push_back(file(name));
    }
  }
  std::vector<std::string> samplers;
  for (size_t i = 0; i < st.loaders.size(); ++i) {
    samplers.push_back(file(indexed("sampler", i, ".bin")));
  }
  std::vector<StateDict> schedulers;
  for (size_t i = 0; i < st.schedulers.size(); ++i) {
    const std::string name = indexed("scheduler", i, ".bin");
    schedulers.push_back(decode_state(file(name), path(name)));
  }
  std::optional<StateDict> scaler;
  if (has_scaler) {
    scaler = decode_state(file("scaler.pt"), path("scaler.pt"));
  }
  std::vector<StateDict> registered;
  for (size_t i = 0; i < st.registered.size(); ++i) {
    const std::string name = "custom_checkpoint_" + std::to_string(i) + ".bin";
    if (m.find(name) == nullptr) {
      throw InvalidArgument(
          component::kAccelerator,
          target + " has no " + name + ", but " +
              std::to_string(st.registered.size()) +
              " objects are registered for checkpointing. Register the same "
              "objects as the run that saved it.");
    }
    registered.push_back(decode_state(file(name), path(name)));
  }
  const ResumedRng rng = resumed_rng(m, target, process_index(), file, path);
  nlohmann::json counters;
  try {
    counters = nlohmann::json::parse(file(kStateFile));
    counters.at("optimizer_steps").get<int64_t>();
    counters.at("skipped_steps").get<int64_t>();
    counters.at("micro_step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(
        component::kAccelerator,
        path(kStateFile) + " is malformed: " + e.what());
  }
  check_resumed_settings(st, counters, target);
  for (size_t i = 0; i < st.schedulers.size(); ++i) {
    keep_or_refuse_schedule_length(
        *st.schedulers[i],
        schedulers[i],
        st.options.reset_schedule,
        path(indexed("scheduler", i, ".bin")));
  }

  for (size_t i = 0; i < st.models.size(); ++i) {
    apply_model_load(st, i, models[i]);
  }
  for (size_t i = 0; i < st.optimizers.size(); ++i) {
    auto load = [&](size_t k) {
      const std::string& name = optimizer_files[i][k];
      read_archive(optimizers[i][k], path(name), device, [&](auto& a) {
        try {
          st.optimizers[i].optimizer->load(a);
        } catch (const c10::Error& e) {
          throw InvalidArgument(
              component::kAccelerator,
              path(name) + " does not fit the prepared optimizer " +
                  std::to_string(i) + ": " + e.what_without_backtrace() +
                  ". Use the optimizer type and parameters it was saved "
                  "with.");
        }
      });
    };
    // Saved by another process count (one process included: one shard
    // file, still another partition): re-split.
    if (!resplit[i]) {
      load(0);
    } else if (st.optimizers[i].fsdp != nullptr) {
      st.optimizers[i].fsdp->load_resharded(
          *st.optimizers[i].optimizer,
          static_cast<int64_t>(m.optimizer_partitions[i].boundaries.size()) - 1,
          [&](int64_t q) { load(static_cast<size_t>(q)); });
    } else {
      st.optimizers[i].sharded->load_resplit(
          m.optimizer_partitions[i].boundaries,
          [&](int64_t q) { load(static_cast<size_t>(q)); });
    }
  }
  for (size_t i = 0; i < st.schedulers.size(); ++i) {
    st.schedulers[i]->load_state_dict(schedulers[i]);
  }
  if (scaler) {
    st.scaler->load_state_dict(*scaler);
  }
  for (size_t i = 0; i < st.loaders.size(); ++i) {
    const std::string name = indexed("sampler", i, ".bin");
    read_archive(samplers[i], path(name), torch::kCPU, [&](auto& a) {
      st.loaders[i]->sampler.load(a);
    });
  }
  for (size_t i = 0; i < st.registered.size(); ++i) {
    st.registered[i].load(registered[i]);
  }
  rng.apply();
  if (m.world_size != num_processes() && is_main_process()) {
    warn(
        component::kAccelerator,
        target + " was saved by " + std::to_string(m.world_size) +
            " processes and resumes on " + std::to_string(num_processes()) +
            ": each data loader continues its epoch at the first sample not "
            "yet seen, sharded optimizer states are re-split exactly" +
            (num_processes() > m.world_size
                 ? ", and processes " + std::to_string(m.world_size) + " to " +
                       std::to_string(num_processes() - 1) +
                       ", which have no saved generator state, are seeded "
                       "with process 0's seed plus their index"
                 : std::string()) +
            ".");
  }
  st.optimizer_steps = counters["optimizer_steps"].get<int64_t>();
  st.skipped_steps = counters["skipped_steps"].get<int64_t>();
  st.skipped_pending = torch::Tensor();
  st.micro_step = counters["micro_step"].get<int64_t>();
  st.scaler_update_pending = false;
  // Resuming checkpoint_N: the next automatic save is checkpoint_N+1.
  for (const auto& [n, p] : ck::list_checkpoints(checkpoints_dir(st))) {
    std::error_code ec;
    if (fs::equivalent(p, target, ec)) {
      st.checkpoint_iteration = n + 1;
    }
  }
  return target;
}

std::optional<std::string> Accelerator::latest_checkpoint(
    const std::string& checkpoints_dir) {
  if (num_processes() == 1) {
    return ck::latest_checkpoint(checkpoints_dir);
  }
  // A process whose checkpoints are all damaged fails every process, not
  // only itself (the others would wait in the next collective).
  std::optional<std::string> mine;
  std::optional<IoError> damaged;
  try {
    mine = ck::latest_checkpoint(checkpoints_dir);
  } catch (const IoError& e) {
    damaged = e;
  }
  const int64_t damaged_count = count_of(*this, *state_, damaged.has_value());
  if (damaged) {
    throw *damaged;
  }
  if (damaged_count > 0) {
    throw IoError(
        component::kAccelerator,
        std::to_string(damaged_count) +
            " other process(es) found no intact checkpoint under their " +
            checkpoints_dir +
            " (their error says which); nothing was "
            "resumed.");
  }
  int64_t n = -1;
  const auto found = ck::list_checkpoints(checkpoints_dir);
  for (const auto& [number, path] : found) {
    std::error_code ec;
    if (mine && fs::equivalent(path, *mine, ec)) {
      n = number;
    }
  }
  const auto range = agree(*this, *state_, {-n, n}, ReduceOp::max);
  const int64_t lowest = -range[0];
  const int64_t highest = range[1];
  if (highest < 0) {
    return std::nullopt;
  }
  const std::string newest = "checkpoint_" + std::to_string(highest);
  if (lowest < 0) {
    throw IoError(
        component::kAccelerator,
        "some processes find no intact checkpoint under " + checkpoints_dir +
            " (this one " + (n < 0 ? "included" : "not") +
            "), while others have " + newest +
            ". On machines that share no filesystem each machine resumes "
            "from its own folder: copy the checkpoint folder there, or start "
            "fresh on purpose (the examples' --resume-from-checkpoint "
            "none).");
  }
  std::optional<std::string> chosen;
  if (lowest == n) {
    chosen = mine;
  } else {
    for (const auto& [number, path] : found) {
      if (number == lowest) {
        try {
          ck::verify_checkpoint(path);
          chosen = path;
        } catch (const IoError& e) {
          warn(component::kAccelerator, e.what(), /*main_process_only=*/false);
        }
      }
    }
  }
  const int64_t missing = count_of(*this, *state_, !chosen.has_value());
  if (missing > 0) {
    throw IoError(
        component::kAccelerator,
        "checkpoint_" + std::to_string(lowest) +
            ", the newest one every "
            "process has under " +
            checkpoints_dir + ", is not intact on " + std::to_string(missing) +
            " process(es)" +
            (chosen ? std::string() : std::string(" (this one included)")) +
            ". Restore it from a copy, or start fresh on purpose (the "
            "examples' --resume-from-checkpoint none).");
  }
  if (lowest < highest && is_local_main_process()) {
    warn(
        component::kAccelerator,
        "resuming from checkpoint_" + std::to_string(lowest) +
            ", the newest checkpoint every process has complete; " + newest +
            " is complete on some machines only (a save cut short).",
        /*main_process_only=*/false);
  }
  return chosen;
}

void Accelerator::save_model(
    const PreparedModelBase& model,
    const std::string& dir,
    const std::string& max_shard_size) {
  auto& st = *state_;
  const size_t i = prepared_index(st, model);
  if (i == st.models.size()) {
    // Not prepared here: saved as it is.
    if (is_main_process()) {
      ck::save_model(*model.module_ptr(), dir, max_shard_size);
    }
  } else {
    // FSDP: gathered buffer by buffer, kept by the main process.
    const auto weights = state_for_saving(st, i, is_main_process());
    if (is_main_process()) {
      ck::save_model_state(weights, dir, max_shard_size);
    }
  }
  wait_for_everyone();
}

void Accelerator::load_model(
    const PreparedModelBase& model, const std::string& dir) {
  auto& st = *state_;
  const size_t i = prepared_index(st, model);
  if (i == st.models.size()) {
    ck::load_model(*model.module_ptr(), dir);  // not prepared here
    return;
  }
  // Under FSDP each process cuts its shards from the whole weights.
  auto files = ck::read_model(dir);
  ModelLoad load =
      whole_model_load(st, i, std::move(files.state), std::move(files.origin));
  apply_model_load(st, i, load);
}

}  // namespace ampkit
