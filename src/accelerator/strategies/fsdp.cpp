// FSDP (every sharding strategy dist::FullyShardedModel has): each model
// sharded into units whose parameters are gathered around their forward
// and backward and whose gradients are reduce-scattered into the shards;
// each optimizer steps its model's shards. Also in one process.
#include <iostream>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "accelerator/state.h"
#include "accelerator/strategies/strategy.h"
#include "ampkit/checkpoint/model_io.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::detail {
namespace {

class FsdpStrategy : public Strategy {
 public:
  void setup_module(AcceleratorState& st, ModelEntry& model) override {
    // Under mixed precision, as accelerate's FSDP plugin does (MixedPrecision
    // with param_dtype and reduce_dtype the low precision): units are
    // gathered and their gradients reduced in bf16/fp16, the shards stay
    // fp32.
    dist::FsdpOptions fsdp = *st.options.fsdp;
    std::string reduce_note;
    if (st.autocast && st.autocast->enabled() && !fsdp.param_dtype() &&
        fsdp.strategy() != dist::ShardingStrategy::no_shard) {
      const auto low = st.autocast->dtype();
      fsdp.param_dtype(low);
      if (!fsdp.reduce_dtype() && st.process.group &&
          !st.process.group->can_sum(low)) {
        // Gloo in LibTorch 1.13 has no bf16 sum: the gradients are
        // reduced in fp32 (gathers still move bf16, as bytes).
        reduce_note =
            std::string(", reduced in Float (") + st.process.group->backend() +
            " in this LibTorch cannot sum " + c10::toString(low) + ")";
      } else if (!fsdp.reduce_dtype()) {
        fsdp.reduce_dtype(low);
      }
    }
    model.fsdp = st.collective("FSDP sharding of the model", [&] {
      return std::make_shared<dist::FullyShardedModel>(
          model.module, st.process.group, fsdp);
    });
    if (st.process.process_index == 0 && !st.options.quiet) {
      const auto names = model.fsdp->unit_names();
      std::cerr << "ampkit: FSDP "
                << dist::to_string(st.options.fsdp->strategy()) << ", "
                << names.size() - 1 << " unit(s) and the root"
                << (fsdp.param_dtype() ? std::string(", gathered in ") +
                                             c10::toString(*fsdp.param_dtype())
                                       : std::string())
                << (fsdp.reduce_dtype()
                        ? std::string(", reduced in ") +
                              c10::toString(*fsdp.reduce_dtype())
                        : std::string())
                << reduce_note
                << (st.options.fsdp->activation_checkpointing()
                        ? ", activation checkpointing"
                        : "")
                << "\n";
    }
  }

  void setup_optimizer(
      AcceleratorState& st, PreparedOptimizerEntry& entry) override {
    auto& optimizer = *entry.optimizer;
    for (auto& model : st.models) {
      if (!model.fsdp || optimizer.param_groups().empty() ||
          optimizer.param_groups()[0].params().empty()) {
        continue;
      }
      const void* first =
          optimizer.param_groups()[0].params()[0].unsafeGetTensorImpl();
      for (const auto& p : model.module->parameters()) {
        if (p.unsafeGetTensorImpl() == first) {
          model.fsdp->take_over(optimizer);
          entry.fsdp = model.fsdp.get();
          break;
        }
      }
    }
    if (!entry.fsdp) {
      throw UsageError(
          component::kAccelerator,
          "under FSDP an optimizer must step the parameters of a prepared "
          "model; this one holds none. Prepare the model first, and build "
          "the optimizer from model->parameters() before preparing it.");
    }
    agree_on_found_inf(st);
  }

  void before_forward(AcceleratorState& st, ModelEntry& model) override {
    if (model.fsdp) {
      st.collective("FSDP parameter all-gather", [&] {
        model.fsdp->before_forward(st.gradient.synchronising());
      });
    }
  }

  void after_forward(
      AcceleratorState&,
      ModelEntry& model,
      const std::vector<at::Tensor>&) override {
    if (model.fsdp && !torch::GradMode::is_enabled()) {
      model.fsdp->after_forward_without_grad();  // no backward will free them
    }
  }

  void after_backward(AcceleratorState& st) override {
    for (auto& model : st.models) {
      if (model.fsdp) {
        st.collective("FSDP gradient reduce-scatter", [&] {
          model.fsdp->after_backward();
        });
      }
    }
  }

  void gather_full_params(AcceleratorState& st) override {
    for (auto& model : st.models) {
      if (model.fsdp) {
        st.collective("FSDP summon_full_params (all-gather)", [&] {
          model.fsdp->gather_all();
        });
      }
    }
  }

  void release_full_params(AcceleratorState& st) override {
    for (auto& model : st.models) {
      if (model.fsdp) {
        model.fsdp->release_all(/*keep_values=*/true);
      }
    }
  }

  // Every shard's gradient (the model's own parameters hold none); the
  // shards among `parameters` (an optimizer's) are these.
  std::optional<ShardedGradients> sharded_gradients(
      AcceleratorState& st,
      const std::vector<at::Tensor>& parameters) override {
    std::optional<ShardedGradients> out;
    std::unordered_set<const void*> fsdp_shards;
    for (const auto& model : st.models) {
      if (!model.fsdp) {
        continue;
      }
      if (!out) {
        out.emplace();
      }
      for (const auto& shard : model.fsdp->shards()) {
        fsdp_shards.insert(shard.unsafeGetTensorImpl());
        if (shard.grad().defined()) {
          out->shards.push_back(shard.grad());
        }
      }
    }
    if (out) {
      for (const auto& p : parameters) {
        if (fsdp_shards.count(p.unsafeGetTensorImpl()) == 0 &&
            p.grad().defined()) {
          out->replicated.push_back(p.grad());
        }
      }
    }
    return out;
  }

  // DDP's norm to the bit. Each parameter's norm from its full gradient
  // (gathered flat buffer by flat buffer), in the order DDP takes them:
  // `parameters` as given, where an FSDP optimizer's shards stand for the
  // parameters that optimizer held.
  at::Tensor sharded_norm(
      AcceleratorState& st,
      const std::vector<at::Tensor>& parameters,
      const ShardedGradients&,
      double norm_type) override {
    std::unordered_map<const void*, torch::Tensor> norms;
    std::unordered_map<const void*, dist::FullyShardedModel*> owner;
    for (auto& model : st.models) {
      auto& fsdp = model.fsdp;
      if (!fsdp) {
        continue;
      }
      st.collective("clip_grad_norm_ (FSDP gradient norms)", [&] {
        fsdp->for_each_full_gradient(
            [&](const torch::Tensor& p, const torch::Tensor& g) {
              norms[p.unsafeGetTensorImpl()] = gradient_norm(g, norm_type);
            });
      });
      for (const auto& shard : fsdp->shards()) {
        owner[shard.unsafeGetTensorImpl()] = fsdp.get();
      }
    }
    std::vector<torch::Tensor> ordered;
    std::unordered_set<const dist::FullyShardedModel*> expanded;
    auto add = [&](const torch::Tensor& p) {
      auto it = norms.find(p.unsafeGetTensorImpl());
      if (it != norms.end()) {
        ordered.push_back(it->second);
      } else if (p.grad().defined()) {
        ordered.push_back(gradient_norm(p.grad(), norm_type));
      }
    };
    for (const auto& p : parameters) {
      auto it = owner.find(p.unsafeGetTensorImpl());
      if (it == owner.end()) {
        add(p);
      } else if (expanded.insert(it->second).second) {
        for (const auto& q : it->second->optimizer_parameters()) {
          add(q);
        }
      }
    }
    return combine_norms(std::move(ordered), norm_type, st.options.device);
  }

  std::vector<std::string> units_not_entered(
      const ModelEntry& model) const override {
    return model.fsdp ? model.fsdp->units_not_entered()
                      : std::vector<std::string>();
  }

  std::string describe(const AcceleratorState&) const override {
    return "FSDP";
  }

  bool saves_model_shards(const ModelEntry& model) const override {
    return model.fsdp && model.fsdp->options().state_dict_type() ==
                             dist::StateDictType::sharded_state_dict;
  }

  // SHARDED_STATE_DICT: this process's shard of each flat buffer, with
  // their layout in the safetensors metadata, and the module's buffers
  // (running statistics and the like) whole, by name.
  std::string encode_model_shards(const ModelEntry& model) const override {
    auto saved = model.fsdp->local_shards();
    for (const auto& b : model.module->named_buffers()) {
      saved.tensors.emplace_back(b.key(), b.value());
    }
    saved.layout["format"] = "pt";
    return checkpoint::encode_safetensors(saved.tensors, saved.layout);
  }

  // FULL_STATE_DICT: gathered buffer by buffer into temporaries, never the
  // whole model at once; every process takes part, those that write keep
  // the values.
  checkpoint::NamedTensors full_model_state(
      AcceleratorState& st, ModelEntry& model, bool keep) override {
    checkpoint::NamedTensors out;
    for (auto& [name, value] : st.collective(
             "FSDP gathering the weights to save",
             [&] { return model.fsdp->full_parameters(keep); })) {
      out.emplace_back(name, value);
    }
    if (keep) {
      for (const auto& b : model.module->named_buffers()) {
        out.emplace_back(b.key(), b.value());
      }
    }
    return out;
  }

  // Each process cuts its shards parameter by parameter, gathering
  // nothing.
  ModelLoad model_load_from_full(
      const ModelEntry& model,
      checkpoint::NamedTensors state,
      std::string origin) const override {
    ModelLoad out;
    out.origin = std::move(origin);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (auto& [name, shape] : model.fsdp->parameter_shapes()) {
      shapes[name] = std::move(shape);
    }
    checkpoint::check_model_state(*model.module, state, out.origin, shapes);
    out.shards = model.fsdp->shards_from_full(state);
    for (auto& [name, t] : state) {
      if (shapes.count(name) == 0) {
        out.tensors.emplace_back(name, std::move(t));
      }
    }
    return out;
  }

  bool loads_model_shards() const override {
    return true;
  }

  // The module's buffers come from process `buffers_from`'s file, which is
  // read in any case.
  ModelLoad model_load_from_shards(
      const ModelEntry& model,
      int64_t saved_processes,
      int64_t buffers_from,
      std::string origin,
      const std::function<checkpoint::Safetensors(int64_t)>& read)
      const override {
    ModelLoad load;
    load.origin = std::move(origin);
    load.shards =
        model.fsdp->shards_from_saved(saved_processes, [&](int64_t q) {
          auto saved = read(q);
          if (q == buffers_from) {
            load.tensors = saved_buffers(model, saved.tensors, load.origin);
          }
          return dist::FullyShardedModel::SavedShards{
              std::move(saved.tensors), std::move(saved.metadata)};
        });
    return load;
  }

  void apply_model_load(ModelEntry& model, ModelLoad& load) override {
    model.fsdp->load_shards(load.shards);
    torch::NoGradGuard no_grad;
    for (auto& b : model.module->named_buffers()) {
      for (const auto& [name, t] : load.tensors) {
        if (name == b.key()) {
          b.value().copy_(t);
        }
      }
    }
  }

  // One shard file per process.
  checkpoint::Manifest::Partition optimizer_partition(
      const AcceleratorState& st,
      const PreparedOptimizerEntry&) const override {
    checkpoint::Manifest::Partition p;
    p.zero_stage = 3;
    for (int64_t r = 0; r <= st.process.num_processes; ++r) {
      p.boundaries.push_back(r);
    }
    return p;
  }

  void load_repartitioned(
      AcceleratorState&,
      PreparedOptimizerEntry& entry,
      const checkpoint::Manifest::Partition& saved,
      const std::function<void(int64_t)>& load) override {
    entry.fsdp->load_resharded(
        *entry.optimizer,
        static_cast<int64_t>(saved.boundaries.size()) - 1,
        load);
  }

  void check_accelerate_format(
      const AcceleratorState& st, bool saving) const override {
    if (saving && !st.optimizers.empty()) {
      throw UsageError(
          component::kAccelerator,
          "save_state(dir, SaveFormat::accelerate) writes whole optimizer "
          "states, and the prepared optimizers step FSDP's shards. Save in "
          "ampkit's format (the default); save_model writes the whole "
          "model's weights for Python.");
    }
    if (!saving && !st.models.empty()) {
      throw UsageError(
          component::kAccelerator,
          "load_state of accelerate's folder under FSDP: its optimizer "
          "state is whole, and the prepared optimizers step FSDP's shards. "
          "Load the weights with load_model (it takes model.safetensors), "
          "or resume the folder without FSDP.");
    }
  }

 private:
  // The module's buffers, each in its shape, from one process's file.
  static checkpoint::NamedTensors saved_buffers(
      const ModelEntry& model,
      const checkpoint::NamedTensors& saved,
      const std::string& origin) {
    checkpoint::NamedTensors out;
    for (const auto& b : model.module->named_buffers()) {
      bool found = false;
      for (const auto& [key, t] : saved) {
        if (key == b.key() && t.sizes() == b.value().sizes()) {
          out.emplace_back(key, t);
          found = true;
        }
      }
      if (!found) {
        throw InvalidArgument(
            component::kAccelerator,
            str(origin,
                " lacks buffer '",
                b.key(),
                "' in its shape; nothing was loaded. Resume with the model "
                "it was saved from."));
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_fsdp_strategy() {
  return std::make_unique<FsdpStrategy>();
}

}  // namespace ampkit::detail
