// The items of a checkpoint folder (checkpoint_items.h): each kind of
// object's files, how they are checked against this run and how they set
// its state.
#include "accelerator/checkpoint_items.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <sstream>

#include "accelerator/accelerate_format.h"
#include "accelerator/state.h"
#include "ampkit/accelerator/accelerator.h"
#include "ampkit/checkpoint/model_io.h"
#include "ampkit/utils/random.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::detail {
namespace {

namespace fs = std::filesystem;
namespace ck = checkpoint;
constexpr const char* kCountersFile = "accelerator_state.json";

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

StateDict read_state(const CheckpointReader& in, const std::string& name) {
  return decode_state(in.read(name), in.path(name));
}

// How many files of one kind a checkpoint has: model.safetensors,
// model_1.safetensors, ... whole, or one file per process (sharded
// optimizers, FSDP's sharded models).
size_t count_indexed(
    const ck::Manifest& m, const std::string& stem, const std::string& ext) {
  size_t n = 0;
  while (m.find(indexed(stem, n, ext)) != nullptr ||
         m.find(indexed(stem, n, "_rank0" + ext)) != nullptr) {
    ++n;
  }
  return n;
}

void check_count(
    const CheckpointReader& in,
    const std::string& what,
    const std::string& stem,
    const std::string& ext,
    size_t prepared) {
  const size_t saved = count_indexed(in.manifest, stem, ext);
  if (saved != prepared) {
    throw InvalidArgument(
        component::kAccelerator,
        str(in.dir,
            " holds ",
            saved,
            " ",
            what,
            " (",
            stem,
            "*",
            ext,
            "), but this Accelerator has ",
            prepared,
            ". Prepare (or register) the same objects, in the same order, as "
            "the run that saved it."));
  }
}

// Each model whole (model.safetensors), or under FSDP's SHARDED_STATE_DICT
// as each process's shards (model_rank0.safetensors, ...).
class ModelsItem final : public CheckpointItem {
 public:
  void gather(AcceleratorState& st, bool writer) override {
    // FSDP: the whole model's weights (FULL_STATE_DICT), gathered buffer
    // by buffer for the writers.
    for (auto& model : st.models) {
      weights_.push_back(
          st.strategy->saves_model_shards(model)
              ? ck::NamedTensors{}
              : st.strategy->full_model_state(st, model, writer));
    }
  }
  void process_files(
      const AcceleratorState& st,
      int64_t rank,
      const FileVisitor& visit) const override {
    for (size_t i = 0; i < st.models.size(); ++i) {
      if (st.strategy->saves_model_shards(st.models[i])) {
        visit(model_shard_file(i, rank), [&] {
          return st.strategy->encode_model_shards(st.models[i]);
        });
      }
    }
  }
  void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const override {
    for (size_t i = 0; i < st.models.size(); ++i) {
      if (!st.strategy->saves_model_shards(st.models[i])) {
        visit(indexed("model", i, ".safetensors"), [&] {
          return ck::encode_safetensors(weights_[i], {{"format", "pt"}});
        });
      }
    }
  }
  void check(
      const AcceleratorState& st, const CheckpointReader& in) const override {
    check_count(in, "models", "model", ".safetensors", st.models.size());
  }
  std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const override {
    auto loads = std::make_shared<std::vector<ModelLoad>>();
    for (size_t i = 0; i < st.models.size(); ++i) {
      loads->push_back(read_one(st, in, i));
    }
    return [&st, loads] {
      for (size_t i = 0; i < st.models.size(); ++i) {
        st.strategy->apply_model_load(st.models[i], (*loads)[i]);
      }
    };
  }

 private:
  // This process's part of model i: cut from the whole weights, or from
  // the saved shards (its own file when saved with this layout).
  static ModelLoad read_one(
      AcceleratorState& st, const CheckpointReader& in, size_t i) {
    const std::string name = indexed("model", i, ".safetensors");
    if (in.has(name)) {
      return st.strategy->model_load_from_full(
          st.models[i],
          ck::decode_safetensors(in.read(name), in.path(name)).tensors,
          in.path(name));
    }
    if (!st.strategy->loads_model_shards()) {
      throw InvalidArgument(
          component::kAccelerator,
          str(in.dir,
              " holds model ",
              i,
              " as FSDP shards (SHARDED_STATE_DICT, ",
              model_shard_file(i, 0),
              " ...), but this run does not shard it. Resume it with FSDP, "
              "on any number of processes."));
    }
    // A process the saving run did not have takes the buffers from
    // process 0's file.
    const int64_t buffers_from =
        in.process_index < in.manifest.world_size ? in.process_index : 0;
    return st.strategy->model_load_from_shards(
        st.models[i],
        in.manifest.world_size,
        buffers_from,
        in.path(model_shard_file(i, buffers_from)),
        [&](int64_t q) {
          const std::string shard = model_shard_file(i, q);
          in.need(shard, str("FSDP model ", i));
          return ck::decode_safetensors(in.read(shard), in.path(shard));
        });
  }

  std::vector<ck::NamedTensors> weights_;
};

// Each optimizer whole (optimizer.bin), or sharded by its strategy
// (optimizer_rank0.bin, ...; ZeRO, FSDP), re-split when resumed on
// another number of processes.
class OptimizersItem final : public CheckpointItem {
 public:
  void process_files(
      const AcceleratorState& st,
      int64_t rank,
      const FileVisitor& visit) const override {
    for (size_t i = 0; i < st.optimizers.size(); ++i) {
      if (sharded(st, i)) {
        visit(shard_file(i, rank), [&] { return encode(st, i); });
      }
    }
  }
  void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const override {
    for (size_t i = 0; i < st.optimizers.size(); ++i) {
      if (!sharded(st, i)) {
        visit(indexed("optimizer", i, ".bin"), [&] { return encode(st, i); });
      }
    }
  }
  void describe(
      const AcceleratorState& st, ck::Manifest& manifest) const override {
    bool any_sharded = false;
    for (const auto& optimizer : st.optimizers) {
      manifest.optimizer_partitions.push_back(
          st.strategy->optimizer_partition(st, optimizer));
      any_sharded =
          any_sharded || manifest.optimizer_partitions.back().zero_stage > 0;
    }
    if (!any_sharded) {
      manifest.optimizer_partitions.clear();
    }
  }
  void check(
      const AcceleratorState& st, const CheckpointReader& in) const override {
    check_count(in, "optimizers", "optimizer", ".bin", st.optimizers.size());
  }
  std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const override {
    struct Saved {
      std::vector<std::string> names;
      std::vector<std::string> bytes;
      bool resplit = false;
      ck::Manifest::Partition partition;  // as saved, to re-split
    };
    auto saved = std::make_shared<std::vector<Saved>>();
    for (size_t i = 0; i < st.optimizers.size(); ++i) {
      Saved& one = saved->emplace_back();
      one.resplit = resplits(st, in, i);
      if (one.resplit) {
        one.partition = in.manifest.optimizer_partitions[i];
        const auto& boundaries = one.partition.boundaries;
        for (size_t q = 0; q + 1 < boundaries.size(); ++q) {
          one.names.push_back(shard_file(i, static_cast<int64_t>(q)));
          in.need(
              one.names.back(),
              str("optimizer ", i, " (", st.strategy->describe(st), ")"));
        }
      } else {
        one.names.push_back(
            sharded(st, i) ? shard_file(i, in.process_index)
                           : indexed("optimizer", i, ".bin"));
      }
      for (const auto& name : one.names) {
        one.bytes.push_back(in.read(name));
      }
    }
    const c10::Device device = detail::device(st);
    return [&st, saved, device, in] {
      for (size_t i = 0; i < st.optimizers.size(); ++i) {
        const Saved& one = (*saved)[i];
        auto load = [&](size_t k) {
          const std::string path = in.path(one.names[k]);
          read_archive(one.bytes[k], path, device, [&](auto& a) {
            try {
              st.optimizers[i].optimizer->load(a);
            } catch (const c10::Error& e) {
              throw InvalidArgument(
                  component::kAccelerator,
                  str(path,
                      " does not fit the prepared optimizer ",
                      i,
                      ": ",
                      e.what_without_backtrace(),
                      ". Use the optimizer type and parameters it was saved "
                      "with."));
            }
          });
        };
        // Saved by another process count (one process included: one shard
        // file, still another partition): re-split.
        if (!one.resplit) {
          load(0);
        } else {
          st.strategy->load_repartitioned(
              st, st.optimizers[i], one.partition, [&](int64_t q) {
                load(static_cast<size_t>(q));
              });
        }
      }
    };
  }

 private:
  // Whether each process saves its own file of optimizer i (ZeRO's and
  // FSDP's shards).
  static bool sharded(const AcceleratorState& st, size_t i) {
    return st.strategy->optimizer_partition(st, st.optimizers[i]).zero_stage >
           0;
  }
  static std::string encode(const AcceleratorState& st, size_t i) {
    return archive_bytes([&](auto& a) { st.optimizers[i].optimizer->save(a); });
  }
  // Optimizer i was saved as it is prepared now: whole, or sharded by the
  // same stage. Sharded at other boundaries (another process count) it is
  // re-split; returns whether it must be.
  static bool resplits(
      const AcceleratorState& st, const CheckpointReader& in, size_t i) {
    const auto& partitions = in.manifest.optimizer_partitions;
    const ck::Manifest::Partition saved =
        i < partitions.size() ? partitions[i] : ck::Manifest::Partition();
    const ck::Manifest::Partition now =
        st.strategy->optimizer_partition(st, st.optimizers[i]);
    if (saved.zero_stage == now.zero_stage) {
      return saved.boundaries != now.boundaries;
    }
    auto layout = [](int64_t stage) {
      return stage > 0 ? str("sharded by zero_stage ", stage)
                       : std::string("whole (zero_stage 0)");
    };
    throw InvalidArgument(
        component::kAccelerator,
        str(in.dir,
            " holds optimizer ",
            i,
            " ",
            layout(saved.zero_stage),
            ", but this run prepares it ",
            layout(now.zero_stage),
            ". Resume with the zero_stage it was saved with."));
  }
};

// Where each prepared data loader stands in its epoch (sampler.bin, ...).
class LoadersItem final : public CheckpointItem {
 public:
  void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const override {
    for (size_t i = 0; i < st.checkpoints.loaders.size(); ++i) {
      const auto& position = *st.checkpoints.loaders[i];
      visit(indexed("sampler", i, ".bin"), [&] {
        return archive_bytes([&](auto& a) {
          position.sampler.save_position(a, position.consumed);
        });
      });
    }
  }
  void check(
      const AcceleratorState& st, const CheckpointReader& in) const override {
    check_count(
        in,
        "data loader positions",
        "sampler",
        ".bin",
        st.checkpoints.loaders.size());
  }
  std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const override {
    auto bytes = std::make_shared<std::vector<std::string>>();
    for (size_t i = 0; i < st.checkpoints.loaders.size(); ++i) {
      bytes->push_back(in.read(indexed("sampler", i, ".bin")));
    }
    return [&st, bytes, in] {
      for (size_t i = 0; i < st.checkpoints.loaders.size(); ++i) {
        const std::string path = in.path(indexed("sampler", i, ".bin"));
        read_archive((*bytes)[i], path, torch::kCPU, [&](auto& a) {
          st.checkpoints.loaders[i]->sampler.load(a);
        });
      }
    };
  }
};

// The GradScaler's scale and growth tracker (scaler.pt), with loss scaling.
class ScalerItem final : public CheckpointItem {
 public:
  void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const override {
    if (st.scaler) {
      visit("scaler.pt", [&] { return encode_state(st.scaler->state_dict()); });
    }
  }
  void check(
      const AcceleratorState& st, const CheckpointReader& in) const override {
    const bool has_scaler = in.has("scaler.pt");
    if (has_scaler == st.scaler.has_value()) {
      return;
    }
    throw InvalidArgument(
        component::kAccelerator,
        in.dir +
            (has_scaler
                 ? " has a GradScaler state, but this run has no loss scaling"
                 : " has no GradScaler state, but this run scales the loss") +
            ". Resume with the mixed_precision / loss_scaling it was saved "
            "with.");
  }
  std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const override {
    if (!st.scaler) {
      return {};
    }
    return [&st, saved = read_state(in, "scaler.pt")] {
      st.scaler->load_state_dict(saved);
    };
  }
};

// Objects registered with register_checkpoint_object
// (custom_checkpoint_0.bin, ...).
class RegisteredItem final : public CheckpointItem {
 public:
  void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const override {
    for (size_t i = 0; i < st.checkpoints.registered.size(); ++i) {
      visit(file(i), [&] {
        return encode_state(st.checkpoints.registered[i].save());
      });
    }
  }
  std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const override {
    auto saved = std::make_shared<std::vector<StateDict>>();
    for (size_t i = 0; i < st.checkpoints.registered.size(); ++i) {
      if (!in.has(file(i))) {
        throw InvalidArgument(
            component::kAccelerator,
            str(in.dir,
                " has no ",
                file(i),
                ", but ",
                st.checkpoints.registered.size(),
                " objects are registered for checkpointing. Register the "
                "same objects as the run that saved it."));
      }
      saved->push_back(read_state(in, file(i)));
    }
    return [&st, saved] {
      for (size_t i = 0; i < st.checkpoints.registered.size(); ++i) {
        st.checkpoints.registered[i].load((*saved)[i]);
      }
    };
  }

 private:
  static std::string file(size_t i) {
    return "custom_checkpoint_" + std::to_string(i) + ".bin";
  }
};

std::string encode_rng(const RngState& rng) {
  ck::NamedTensors tensors{{"cpu", rng.cpu}};
  for (size_t i = 0; i < rng.cuda.size(); ++i) {
    tensors.emplace_back("cuda_" + std::to_string(i), rng.cuda[i]);
  }
  return ck::encode_safetensors(tensors);
}

RngState decode_rng(const CheckpointReader& in, const std::string& name) {
  RngState rng;
  for (auto& [key, t] :
       ck::decode_safetensors(in.read(name), in.path(name)).tensors) {
    if (key == "cpu") {
      rng.cpu = t;
    } else if (key.rfind("cuda_", 0) == 0) {
      rng.cuda.push_back(t);
    }
  }
  if (!rng.cpu.defined()) {
    throw IoError(
        component::kAccelerator,
        in.path(name) + " has no CPU generator state.");
  }
  return rng;
}

// Each process's generator states (random_states_0.bin, ...).
class GeneratorsItem final : public CheckpointItem {
 public:
  void gather(AcceleratorState&, bool) override {
    mine_ = encode_rng(get_rng_state());
  }
  void process_files(
      const AcceleratorState&,
      int64_t rank,
      const FileVisitor& visit) const override {
    visit(rng_file(rank), [&] { return mine_; });
  }
  // A process resumes with its own saved states or, one the saving run did
  // not have (resumed on more processes), with a seed derived from process
  // 0's: the seed its CPU generator was last seeded with plus this
  // process's index, as accelerate's set_seed(seed, device_specific=True)
  // seeds each process.
  std::function<void()> read(
      AcceleratorState&, const CheckpointReader& in) const override {
    const int64_t rank = in.process_index;
    if (in.has(rng_file(rank))) {
      return [saved = decode_rng(in, rng_file(rank))] { set_rng_state(saved); };
    }
    if (rank < in.manifest.world_size) {
      throw IoError(
          component::kAccelerator,
          str(in.dir,
              " lacks ",
              rng_file(rank),
              ", the generator state of process ",
              rank,
              " of the ",
              in.manifest.world_size,
              " that saved it. Restore the file from a copy of the "
              "checkpoint."));
    }
    const RngState first = decode_rng(in, rng_file(0));
    auto generator = at::make_generator<at::CPUGeneratorImpl>();
    generator.set_state(first.cpu);
    return [seed = generator.current_seed() + static_cast<uint64_t>(rank)] {
      set_seed(seed);
    };
  }

 private:
  std::string mine_;
};

// The settings that shape training must be the ones the checkpoint was
// saved with: another accumulation would run a half window with the wrong
// loss scale, another precision or ZeRO stage a different run. A
// checkpoint without a setting (older) is not refused for it.
void check_resumed_settings(
    const AcceleratorState& st,
    const nlohmann::json& saved,
    const std::string& dir) {
  auto differs = [&](const char* key, const std::string& now) {
    if (!saved.contains(key)) {
      return;
    }
    const auto& value = saved.at(key);
    const std::string then =
        value.is_string() ? value.get<std::string>() : value.dump();
    if (then != now) {
      throw InvalidArgument(
          component::kAccelerator,
          str(dir,
              " was saved with ",
              key,
              " ",
              then,
              ", this run has ",
              now,
              ". Resume with the same setting (",
              key,
              "(",
              then,
              "), the flag --",
              key,
              " ",
              then,
              "), or start a new run without resuming."));
    }
  };
  differs(
      "gradient_accumulation_steps",
      std::to_string(st.options.gradient_accumulation_steps));
  differs("mixed_precision", to_string(st.options.mixed_precision));
  differs("zero_stage", std::to_string(st.options.zero_stage));
}

// The step counters, the micro-step within the accumulation window and
// the settings that shape training (accelerator_state.json).
class CountersItem final : public CheckpointItem {
 public:
  void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const override {
    visit(kCountersFile, [&] {
      nlohmann::ordered_json loaders = nlohmann::ordered_json::array();
      for (const auto& position : st.checkpoints.loaders) {
        loaders.push_back(
            {{"epoch", position->sampler.epoch()},
             {"batches_consumed", position->consumed}});
      }
      nlohmann::ordered_json state;
      state["optimizer_steps"] = st.tracking.optimizer_steps;
      state["skipped_steps"] = skipped_;
      state["micro_step"] = st.gradient.micro_step;
      state["num_processes"] = st.process.num_processes;
      state["mixed_precision"] = to_string(st.options.mixed_precision);
      state["gradient_accumulation_steps"] =
          st.options.gradient_accumulation_steps;
      state["zero_stage"] = st.options.zero_stage;
      state["loaders"] = loaders;
      return state.dump(2) + "\n";
    });
  }
  void gather(AcceleratorState& st, bool writer) override {
    if (writer) {
      skipped_ = st.skipped_step_count();
    }
  }
  std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const override {
    int64_t optimizer_steps = 0;
    int64_t skipped_steps = 0;
    int64_t micro_step = 0;
    nlohmann::json counters;
    try {
      counters = nlohmann::json::parse(in.read(kCountersFile));
      optimizer_steps = counters.at("optimizer_steps").get<int64_t>();
      skipped_steps = counters.at("skipped_steps").get<int64_t>();
      micro_step = counters.at("micro_step").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw IoError(
          component::kAccelerator,
          in.path(kCountersFile) + " is malformed: " + e.what());
    }
    check_resumed_settings(st, counters, in.dir);
    return [&st, optimizer_steps, skipped_steps, micro_step] {
      st.tracking.optimizer_steps = optimizer_steps;
      st.tracking.skipped_steps = skipped_steps;
      st.tracking.skipped_pending = torch::Tensor();
      st.gradient.micro_step = micro_step;
      st.gradient.scaler_update_pending = false;
    };
  }

 private:
  int64_t skipped_ = 0;
};

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
      str(file,
          ": the ",
          scheduler.name(),
          " schedule was saved for ",
          then_it->second.toInt(),
          " training steps, this run's is for ",
          now_it->second.toInt(),
          "; resuming would follow the saved one. Resume with the same "
          "length (the same --max-steps/--epochs), or reset_schedule(true) "
          "(the flag --reset-schedule) to continue the new schedule from the "
          "saved step."));
}

// Each prepared LR scheduler (scheduler.bin, ...). After the counters: a
// run saved with other settings is refused for those first.
class SchedulersItem final : public CheckpointItem {
 public:
  void shared_files(
      const AcceleratorState& st, const FileVisitor& visit) const override {
    for (size_t i = 0; i < st.checkpoints.schedulers.size(); ++i) {
      visit(file(i), [&] {
        return encode_state(st.checkpoints.schedulers[i]->state_dict());
      });
    }
  }
  void check(
      const AcceleratorState& st, const CheckpointReader& in) const override {
    check_count(
        in,
        "schedulers",
        "scheduler",
        ".bin",
        st.checkpoints.schedulers.size());
  }
  std::function<void()> read(
      AcceleratorState& st, const CheckpointReader& in) const override {
    auto saved = std::make_shared<std::vector<StateDict>>();
    for (size_t i = 0; i < st.checkpoints.schedulers.size(); ++i) {
      saved->push_back(read_state(in, file(i)));
      keep_or_refuse_schedule_length(
          *st.checkpoints.schedulers[i],
          saved->back(),
          st.options.reset_schedule,
          in.path(file(i)));
    }
    return [&st, saved] {
      for (size_t i = 0; i < st.checkpoints.schedulers.size(); ++i) {
        st.checkpoints.schedulers[i]->load_state_dict((*saved)[i]);
      }
    };
  }

 private:
  static std::string file(size_t i) {
    return indexed("scheduler", i, ".bin");
  }
};

}  // namespace

bool CheckpointReader::has(const std::string& name) const {
  return manifest.find(name) != nullptr;
}

std::string CheckpointReader::read(const std::string& name) const {
  return ck::read_checkpoint_file(dir, manifest, name);
}

std::string CheckpointReader::path(const std::string& name) const {
  return (fs::path(dir) / name).string();
}

void CheckpointReader::need(
    const std::string& name, const std::string& what) const {
  if (has(name)) {
    return;
  }
  throw IoError(
      component::kAccelerator,
      str(dir,
          " lacks ",
          name,
          ": resuming ",
          what,
          " on ",
          num_processes,
          " processes needs the shards of all ",
          manifest.world_size,
          " processes that saved it. On machines that share no filesystem, "
          "copy every machine's shard files into one checkpoint folder",
          num_processes != manifest.world_size
              ? str(", or resume on ", manifest.world_size, " processes.")
              : std::string(".")));
}

void CheckpointItem::gather(AcceleratorState&, bool) {}
void CheckpointItem::process_files(
    const AcceleratorState&, int64_t, const FileVisitor&) const {}
void CheckpointItem::shared_files(
    const AcceleratorState&, const FileVisitor&) const {}
void CheckpointItem::describe(const AcceleratorState&, ck::Manifest&) const {}
void CheckpointItem::check(
    const AcceleratorState&, const CheckpointReader&) const {}

std::vector<std::unique_ptr<CheckpointItem>> checkpoint_items() {
  std::vector<std::unique_ptr<CheckpointItem>> items;
  items.push_back(std::make_unique<ModelsItem>());
  items.push_back(std::make_unique<OptimizersItem>());
  items.push_back(std::make_unique<LoadersItem>());
  items.push_back(std::make_unique<ScalerItem>());
  items.push_back(std::make_unique<RegisteredItem>());
  items.push_back(std::make_unique<GeneratorsItem>());
  items.push_back(std::make_unique<CountersItem>());
  items.push_back(std::make_unique<SchedulersItem>());
  return items;
}

}  // namespace ampkit::detail
