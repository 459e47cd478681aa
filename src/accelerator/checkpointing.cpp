// Accelerator::save_state / load_state / save_model / load_model: what goes
// into a checkpoint and in which order the processes write it. The file
// format and crash safety are the checkpoint layer's.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "accelerator/accelerate_format.h"
#include "accelerator/checkpoint_items.h"
#include "accelerator/state.h"
#include "ampkit/accelerator/accelerator.h"
#include "ampkit/checkpoint/checkpoint_dir.h"
#include "ampkit/checkpoint/model_io.h"
#include "ampkit/utils/warnings.h"
#include "utils/components.h"

namespace ampkit {
namespace {

namespace fs = std::filesystem;
namespace ck = checkpoint;
// Written by the main process into its partial folder while it saves: a
// process that reads back the same token shares its filesystem.
constexpr const char* kOwnerFile = ".ampkit_writer";

using detail::indexed;

size_t prepared_index(
    const detail::AcceleratorState& st, const PreparedModelBase& model) {
  size_t i = 0;
  while (i < st.models.size() && st.models[i].module != model.module_ptr()) {
    ++i;
  }
  return i;
}

std::string checkpoints_dir(const detail::AcceleratorState& st) {
  return (fs::path(st.options.project_dir) / "checkpoints").string();
}

}  // namespace

namespace {
// A hook run before save_state (save) or load_state; returns its handle.
size_t add_state_hook(
    detail::AcceleratorState& st, bool save, Accelerator::StateHook hook) {
  st.checkpoints.state_hooks.push_back(
      {st.checkpoints.next_hook_handle, save, std::move(hook)});
  return st.checkpoints.next_hook_handle++;
}
}  // namespace

size_t Accelerator::register_save_state_pre_hook(StateHook hook) {
  return add_state_hook(*state_, /*save=*/true, std::move(hook));
}

size_t Accelerator::register_load_state_pre_hook(StateHook hook) {
  return add_state_hook(*state_, /*save=*/false, std::move(hook));
}

void Accelerator::remove_state_hook(size_t handle) {
  auto& hooks = state_->checkpoints.state_hooks;
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
  for (const auto& entry : checkpoints.state_hooks) {
    if (entry.save == save) {
      entry.hook(modules(), dir);
    }
  }
}
}  // namespace detail

void Accelerator::register_checkpoint_object(
    std::function<StateDict()> save,
    std::function<void(const StateDict&)> load) {
  state_->checkpoints.registered.push_back({std::move(save), std::move(load)});
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

// Which writer holds each process's files (returned, by process): the main
// process's, or, on a machine that does not see the main process's folder
// (no shared filesystem), that machine's local main process, which writes
// a whole copy into its own folder as accelerate's save_on_each_node does.
// Opens `writer` on the processes that write. A collective.
std::vector<int64_t> agree_on_writers(
    Accelerator& acc,
    const detail::AcceleratorState& st,
    const std::string& target,
    std::optional<ck::CheckpointWriter>& writer) {
  const bool main = acc.is_main_process();
  const int64_t rank = acc.process_index();
  if (main) {
    writer.emplace(target);
  }
  std::vector<int64_t> holder(static_cast<size_t>(acc.num_processes()), 0);
  if (acc.num_processes() > 1) {
    const auto device = detail::device(st);
    std::random_device entropy;
    const int64_t drawn = (static_cast<int64_t>(entropy()) << 31) ^
                          static_cast<int64_t>(entropy());
    const int64_t token =
        acc.broadcast(
               torch::tensor(
                   {drawn}, torch::dtype(torch::kLong).device(device)),
               0)
            .to(torch::kCPU)
            .item<int64_t>();
    if (main) {
      ck::write_file(target, kOwnerFile, std::to_string(token));
    }
    acc.wait_for_everyone();  // the main process's partial folder exists
    bool sees = main;
    if (!main) {
      std::ifstream in(fs::path(ck::partial_dir(target)) / kOwnerFile);
      std::string seen;
      sees = static_cast<bool>(in >> seen) && seen == std::to_string(token);
    }
    // Each machine follows what its local main process saw, so that the
    // processes of one machine never split between two writers.
    const int64_t local_main = rank - acc.local_process_index();
    const torch::Tensor all =
        acc.gather(torch::tensor(
                       {sees ? int64_t{1} : int64_t{0}, local_main},
                       torch::dtype(torch::kLong).device(device)))
            .to(torch::kCPU);
    auto seen_by = [&](int64_t r) {
      return all[2 * all[2 * r + 1].item<int64_t>()].item<int64_t>() != 0;
    };
    for (int64_t r = 0; r < acc.num_processes(); ++r) {
      holder[static_cast<size_t>(r)] =
          seen_by(r) ? 0 : all[2 * r + 1].item<int64_t>();
    }
    const int64_t mine = holder[static_cast<size_t>(rank)];
    if (!main && mine == rank) {
      writer.emplace(target);  // this machine's own folder
    }
    acc.wait_for_everyone();  // every machine's partial folder exists
    // Every process must see its writer's partial folder; one that does
    // not fails every process, not only itself (the others would wait).
    const bool lost = !writer && !fs::is_directory(ck::partial_dir(target));
    const int64_t lost_count = count_of(acc, st, lost);
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
    acc.wait_for_everyone();
  }
  return holder;
}

}  // namespace

std::string Accelerator::save_state(const std::optional<std::string>& dir) {
  auto& st = *state_;
  std::string target;
  int64_t iteration = -1;
  if (dir) {
    target = *dir;
  } else if (st.options.automatic_checkpoint_naming) {
    if (st.checkpoints.checkpoint_iteration < 0) {
      const auto existing = ck::list_checkpoints(checkpoints_dir(st));
      st.checkpoints.checkpoint_iteration =
          existing.empty() ? 0 : existing.back().first + 1;
      if (num_processes() > 1) {
        // Machines with folders of their own agree on the next number.
        st.checkpoints.checkpoint_iteration = agree(
            *this, st, {st.checkpoints.checkpoint_iteration}, ReduceOp::max)[0];
      }
    }
    iteration = st.checkpoints.checkpoint_iteration;
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
  if (st.checkpoints.stream_loaders > 0 &&
      !st.checkpoints.stream_position_told) {
    st.checkpoints.stream_position_told = true;
    warn(
        component::kAccelerator,
        "save_state does not save where the " +
            std::to_string(st.checkpoints.stream_loaders) +
            " prepared stream(s) are: a stream has no positions to go back "
            "to. After load_state a stream goes on from wherever it stands "
            "(a new one from its start); skip what was read in the stream "
            "itself (a ChunkDataset's save()/load(), or an offset of your "
            "own) to resume exactly.");
  }
  // The scale update that is due would run at the next backward; running it
  // now stores the scale that step will use (and the pending update is not
  // lost or applied twice on resume).
  if (st.gradient.scaler_update_pending) {
    st.update_scaler();
  }
  const bool main = is_main_process();
  const int64_t rank = process_index();
  std::optional<ck::CheckpointWriter> writer;
  const std::vector<int64_t> holder =
      agree_on_writers(*this, st, target, writer);
  st.run_state_hooks(/*save=*/true, ck::partial_dir(target));
  const auto items = detail::checkpoint_items();
  for (const auto& item : items) {
    item->gather(st, writer.has_value());
  }
  // Each process's own files, into its writer's partial folder.
  const detail::FileVisitor write =
      [&](const std::string& name, const std::function<std::string()>& bytes) {
        if (writer) {
          writer->write(name, bytes());
        } else {
          ck::write_file(target, name, bytes());
        }
      };
  for (const auto& item : items) {
    item->process_files(st, rank, write);
  }
  if (writer) {
    for (const auto& item : items) {
      item->shared_files(st, write);
    }
  }
  wait_for_everyone();  // every rank's files are on disk
  if (writer) {
    // The files of the processes this writer holds (its machine's, or with
    // a shared filesystem everyone's).
    const detail::FileVisitor record =
        [&](const std::string& name, const std::function<std::string()>&) {
          writer->record(name);
        };
    for (int64_t r = 0; r < num_processes(); ++r) {
      if (r != rank && holder[static_cast<size_t>(r)] == (main ? 0 : rank)) {
        for (const auto& item : items) {
          item->process_files(st, r, record);
        }
      }
    }
    ck::Manifest manifest;
    for (const auto& item : items) {
      item->describe(st, manifest);
    }
    manifest.world_size = num_processes();
    manifest.step = st.tracking.optimizer_steps;
    std::error_code ec;
    fs::remove(fs::path(ck::partial_dir(target)) / kOwnerFile, ec);
    writer->commit(manifest);
    if (iteration >= 0) {
      ck::enforce_total_limit(checkpoints_dir(st), st.options.total_limit);
    }
  }
  wait_for_everyone();  // the checkpoint is complete for everyone
  if (iteration >= 0) {
    st.checkpoints.checkpoint_iteration = iteration + 1;
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
      st, process_index(), is_main_process(), st.gradient.micro_step, dir);
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
  const detail::CheckpointReader in{
      m, target, process_index(), num_processes()};
  const auto items = detail::checkpoint_items();
  for (const auto& item : items) {
    item->check(st, in);
  }
  std::vector<std::function<void()>> apply;
  for (const auto& item : items) {
    apply.push_back(item->read(st, in));
  }
  for (const auto& set : apply) {
    if (set) {
      set();
    }
  }
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
  // Resuming checkpoint_N: the next automatic save is checkpoint_N+1.
  for (const auto& [n, p] : ck::list_checkpoints(checkpoints_dir(st))) {
    std::error_code ec;
    if (fs::equivalent(p, target, ec)) {
      st.checkpoints.checkpoint_iteration = n + 1;
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
    const auto weights =
        st.strategy->full_model_state(st, st.models[i], is_main_process());
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
  detail::ModelLoad load = st.strategy->model_load_from_full(
      st.models[i], std::move(files.state), std::move(files.origin));
  st.strategy->apply_model_load(st.models[i], load);
}

}  // namespace ampkit
