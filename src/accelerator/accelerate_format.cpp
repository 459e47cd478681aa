// load_state of a folder written by Python accelerate's save_state
// (accelerate/checkpointing.py, save_accelerator_state): model.safetensors
// (or pytorch_model.bin), optimizer.bin, scheduler.bin, scaler.pt and
// random_states_<rank>.pkl, the last four written by torch.save.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <tuple>

#include "accelerator/accelerate_format.h"
#include "accelerator/state.h"
#include "ampkit/checkpoint/model_io.h"
#include "ampkit/checkpoint/safetensors.h"
#include "ampkit/error.h"
#include "ampkit/optim/fused.h"
#include "ampkit/utils/random.h"
#include "ampkit/utils/warnings.h"
#include "checkpoint/torch_pickle.h"
#include "optim/compat.h"
#include "utils/components.h"

namespace ampkit::detail {
namespace {

namespace ck = ampkit::checkpoint;
namespace fs = std::filesystem;
using ck::PyRef;
using ck::PyValue;

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw InvalidArgument(component::kAccelerator, path + ": " + why);
}

PyRef need(const PyRef& dict, const std::string& key, const std::string& path) {
  PyRef v =
      dict && dict->kind == PyValue::Kind::dict ? dict->get(key) : nullptr;
  if (!v) {
    refuse(path, "has no \"" + key + "\" where accelerate writes one.");
  }
  return v;
}

double number(
    const PyRef& v, const std::string& what, const std::string& path) {
  switch (v->kind) {
    case PyValue::Kind::floating:
      return v->floating;
    case PyValue::Kind::integer:
      return static_cast<double>(v->integer);
    case PyValue::Kind::boolean:
      return v->boolean ? 1.0 : 0.0;
    case PyValue::Kind::tensor:
      if (v->tensor.numel() == 1) {
        return v->tensor.item<double>();
      }
      break;
    default:
      break;
  }
  refuse(path, what + " is a " + v->type_name() + ", not a number.");
}

bool flag(const PyRef& group, const std::string& key) {
  PyRef v = group->get(key);
  return v && v->kind == PyValue::Kind::boolean && v->boolean;
}

// A saved moment for parameter `p`: its shape, dtype and device.
at::Tensor like(
    const PyRef& state,
    const std::string& key,
    const at::Tensor& p,
    const std::string& path) {
  PyRef v = need(state, key, path);
  if (v->kind != PyValue::Kind::tensor || v->tensor.numel() != p.numel()) {
    refuse(
        path,
        "\"" + key + "\" holds " +
            (v->kind == PyValue::Kind::tensor
                 ? std::to_string(v->tensor.numel()) + " values"
                 : "a " + v->type_name()) +
            " for a parameter of " + std::to_string(p.numel()) + ".");
  }
  return v->tensor.reshape(p.sizes()).to(p.options()).clone();
}

// The optimizers whose state torch.optim and LibTorch share (one of the
// three is set); any other is refused.
std::tuple<torch::optim::AdamW*, torch::optim::Adam*, torch::optim::SGD*>
kind_of(torch::optim::Optimizer& opt, const std::string& path) {
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(&opt);
  auto* adam = dynamic_cast<torch::optim::Adam*>(&opt);
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&opt);
  if (!adamw && !adam && !sgd) {
    refuse(
        path,
        "accelerate's optimizer.bin is torch.optim's state_dict, which ampkit "
        "reads and writes for LibTorch's Adam, AdamW and SGD; the prepared "
        "optimizer is none of them. Use ampkit's own checkpoint format "
        "for it.");
  }
  return {adamw, adam, sgd};
}

using StateKey = decltype(state_key(std::declval<const at::Tensor&>()));

// An optimizer.bin read and checked, not yet applied: each group's options
// and each parameter's state.
struct OptimizerLoad {
  torch::optim::Optimizer* optimizer = nullptr;
  // Each assigns a group's new options over its own, in place (the group's
  // options object stays the one every holder of it sees).
  std::vector<std::function<void()>> options;
  std::vector<
      std::pair<StateKey, std::unique_ptr<torch::optim::OptimizerParamState>>>
      states;
};

template <typename Options>
std::function<void()> assign_later(
    torch::optim::OptimizerOptions& target,
    const torch::optim::OptimizerOptions& value) {
  return [&to = static_cast<Options&>(target),
          from = static_cast<const Options&>(value)] { to = from; };
}

// optimizer.bin: torch.optim's state_dict, {"state": {index: {...}},
// "param_groups": [{..., "params": [index...]}]}, for LibTorch's Adam,
// AdamW or SGD (the optimizers whose state both have). Nothing changes
// until apply_optimizer.
OptimizerLoad read_optimizer(
    torch::optim::Optimizer& opt, const PyRef& sd, const std::string& path) {
  const auto kind = kind_of(opt, path);
  auto* adamw = std::get<0>(kind);
  auto* adam = std::get<1>(kind);  // else SGD
  const PyRef groups = need(sd, "param_groups", path);
  const PyRef states = need(sd, "state", path);
  auto& ours = opt.param_groups();
  if (groups->items.size() != ours.size()) {
    refuse(
        path,
        "has " + std::to_string(groups->items.size()) +
            " param groups, the prepared optimizer " +
            std::to_string(ours.size()) +
            ". Build the optimizer with the groups it was saved with.");
  }
  OptimizerLoad load;
  load.optimizer = &opt;
  auto& made = load.states;
  for (size_t g = 0; g < ours.size(); ++g) {
    const PyRef group = groups->items[g];
    const PyRef params = need(group, "params", path);
    auto& ps = ours[g].params();
    if (params->items.size() != ps.size()) {
      refuse(
          path,
          "param group " + std::to_string(g) + " has " +
              std::to_string(params->items.size()) +
              " parameters, the prepared optimizer's " +
              std::to_string(ps.size()) +
              ". Build the optimizer over the model it was saved with.");
    }
    for (size_t k = 0; k < ps.size(); ++k) {
      const at::Tensor& p = ps[k];
      const PyRef state = states->get(params->items[k]->integer);
      if (!state) {
        continue;  // never stepped
      }
      if (adam || adamw) {
        const bool amsgrad = flag(group, "amsgrad");
        auto fill = [&](auto s) {
          s->step(static_cast<int64_t>(
              number(need(state, "step", path), "\"step\"", path)));
          s->exp_avg(like(state, "exp_avg", p, path));
          s->exp_avg_sq(like(state, "exp_avg_sq", p, path));
          if (amsgrad) {
            s->max_exp_avg_sq(like(state, "max_exp_avg_sq", p, path));
          }
          return s;
        };
        if (adamw) {
          made.emplace_back(
              state_key(p),
              fill(std::make_unique<torch::optim::AdamWParamState>()));
        } else {
          made.emplace_back(
              state_key(p),
              fill(std::make_unique<torch::optim::AdamParamState>()));
        }
      } else {
        PyRef buffer = state->get("momentum_buffer");
        if (buffer && buffer->kind == PyValue::Kind::tensor) {
          auto s = std::make_unique<torch::optim::SGDParamState>();
          s->momentum_buffer(like(state, "momentum_buffer", p, path));
          made.emplace_back(state_key(p), std::move(s));
        }
      }
    }
  }
  for (size_t g = 0; g < ours.size(); ++g) {
    const PyRef group = groups->items[g];
    const auto copy = ours[g].options().clone();
    auto& o = *copy;
    o.set_lr(number(need(group, "lr", path), "\"lr\"", path));
    auto n = [&](const char* key) {
      return number(
          need(group, key, path), std::string("\"") + key + "\"", path);
    };
    auto betas = [&] {
      const PyRef b = need(group, "betas", path);
      if (b->items.size() != 2) {
        refuse(path, "\"betas\" is not a pair.");
      }
      return std::make_tuple(
          number(b->items[0], "beta1", path),
          number(b->items[1], "beta2", path));
    };
    if (adamw) {
      auto& a = static_cast<torch::optim::AdamWOptions&>(o);
      a.betas(betas()).eps(n("eps")).weight_decay(n("weight_decay"));
      a.amsgrad(flag(group, "amsgrad"));
      load.options.push_back(
          assign_later<torch::optim::AdamWOptions>(ours[g].options(), o));
    } else if (adam) {
      auto& a = static_cast<torch::optim::AdamOptions&>(o);
      a.betas(betas()).eps(n("eps")).weight_decay(n("weight_decay"));
      a.amsgrad(flag(group, "amsgrad"));
      load.options.push_back(
          assign_later<torch::optim::AdamOptions>(ours[g].options(), o));
    } else {
      auto& s = static_cast<torch::optim::SGDOptions&>(o);
      s.momentum(n("momentum"))
          .dampening(n("dampening"))
          .weight_decay(n("weight_decay"))
          .nesterov(flag(group, "nesterov"));
      load.options.push_back(
          assign_later<torch::optim::SGDOptions>(ours[g].options(), o));
    }
  }
  return load;
}

void apply_optimizer(OptimizerLoad load) {
  auto& opt = *load.optimizer;
  for (const auto& assign : load.options) {
    assign();
  }
  opt.state().clear();
  for (auto& [key, state] : load.states) {
    opt.state()[key] = std::move(state);
  }
}

// A torch.save'd state_dict (scheduler.bin, scaler.pt) as ampkit's
// StateDict of the same keys: the keys `ours` has take the saved values,
// the others (ampkit's own, as "scheduler") keep ours.
StateDict as_state_dict(
    const PyRef& sd, const StateDict& ours, const std::string& path) {
  if (sd->kind != PyValue::Kind::dict) {
    refuse(path, "is a " + sd->type_name() + ", not a state_dict.");
  }
  StateDict out = ours;
  for (auto& [key, value] : out) {
    const PyRef v = sd->get(key);
    if (!v) {
      continue;
    }
    switch (v->kind) {
      case PyValue::Kind::integer:
        value = v->integer;
        break;
      case PyValue::Kind::floating:
        value = v->floating;
        break;
      case PyValue::Kind::boolean:
        value = v->boolean;
        break;
      case PyValue::Kind::tensor:
        value = v->tensor.numel() == 1 ? c10::IValue(v->tensor.item<double>())
                                       : c10::IValue(v->tensor);
        break;
      case PyValue::Kind::list:
      case PyValue::Kind::tuple: {
        std::vector<double> numbers;
        for (const auto& item : v->items) {
          numbers.push_back(number(item, "\"" + key + "\"", path));
        }
        value = numbers;
        break;
      }
      default:
        break;  // None and the rest: ours stays
    }
  }
  return out;
}

// torch.optim's state_dict of `opt` (Adam, AdamW or SGD): the state by
// parameter index, the groups with torch's keys. `initial_lr`, when known
// (one scheduler), is what LambdaLR and its kin put into each group.
PyRef optimizer_state(
    torch::optim::Optimizer& opt,
    const std::vector<double>& initial_lr,
    const std::string& path) {
  const auto kind = kind_of(opt, path);
  auto* adamw = std::get<0>(kind);
  auto* adam = std::get<1>(kind);  // else SGD
  optim::sync_fused_step_counts(opt);
  std::vector<PyRef> states, groups;
  int64_t index = 0;
  for (size_t g = 0; g < opt.param_groups().size(); ++g) {
    auto& group = opt.param_groups()[g];
    std::vector<PyRef> params;
    for (const auto& p : group.params()) {
      params.push_back(ck::py_int(index));
      auto found = opt.state().find(state_key(p));
      if (found != opt.state().end()) {
        std::vector<PyRef> kv;
        auto add = [&](const char* key, PyRef v) {
          kv.push_back(ck::py_str(key));
          kv.push_back(std::move(v));
        };
        auto moments = [&](const auto* s) {
          if (s == nullptr) {
            refuse(path, "a parameter's state is not its optimizer's kind.");
          }
          // torch.optim keeps the step as a float tensor (1.12 and later).
          add("step",
              ck::py_tensor(torch::tensor(static_cast<float>(s->step()))));
          add("exp_avg", ck::py_tensor(s->exp_avg()));
          add("exp_avg_sq", ck::py_tensor(s->exp_avg_sq()));
          if (s->max_exp_avg_sq().defined()) {
            add("max_exp_avg_sq", ck::py_tensor(s->max_exp_avg_sq()));
          }
        };
        if (adamw) {
          moments(dynamic_cast<const torch::optim::AdamWParamState*>(
              found->second.get()));
        } else if (adam) {
          moments(dynamic_cast<const torch::optim::AdamParamState*>(
              found->second.get()));
        } else {
          auto& s = static_cast<torch::optim::SGDParamState&>(*found->second);
          add("momentum_buffer",
              s.momentum_buffer().defined() ? ck::py_tensor(s.momentum_buffer())
                                            : ck::py_none());
        }
        states.push_back(ck::py_int(index));
        states.push_back(ck::py_dict(std::move(kv)));
      }
      ++index;
    }
    std::vector<PyRef> kv;
    auto add = [&](const char* key, PyRef v) {
      kv.push_back(ck::py_str(key));
      kv.push_back(std::move(v));
    };
    const auto& o = group.options();
    add("lr", ck::py_float(o.get_lr()));
    if (adam || adamw) {
      const auto betas =
          adamw ? static_cast<const torch::optim::AdamWOptions&>(o).betas()
                : static_cast<const torch::optim::AdamOptions&>(o).betas();
      add("betas",
          ck::py_tuple(
              {ck::py_float(std::get<0>(betas)),
               ck::py_float(std::get<1>(betas))}));
      if (adamw) {
        const auto& a = static_cast<const torch::optim::AdamWOptions&>(o);
        add("eps", ck::py_float(a.eps()));
        add("weight_decay", ck::py_float(a.weight_decay()));
        add("amsgrad", ck::py_bool(a.amsgrad()));
      } else {
        const auto& a = static_cast<const torch::optim::AdamOptions&>(o);
        add("eps", ck::py_float(a.eps()));
        add("weight_decay", ck::py_float(a.weight_decay()));
        add("amsgrad", ck::py_bool(a.amsgrad()));
      }
      add("foreach", ck::py_none());
      add("capturable", ck::py_bool(false));
      add("differentiable", ck::py_bool(false));
      add("fused", ck::py_none());
    } else {
      const auto& a = static_cast<const torch::optim::SGDOptions&>(o);
      add("momentum", ck::py_float(a.momentum()));
      add("dampening", ck::py_float(a.dampening()));
      add("weight_decay", ck::py_float(a.weight_decay()));
      add("nesterov", ck::py_bool(a.nesterov()));
      add("foreach", ck::py_none());
      add("differentiable", ck::py_bool(false));
    }
    add("maximize", ck::py_bool(false));
    if (g < initial_lr.size()) {
      add("initial_lr", ck::py_float(initial_lr[g]));
    }
    add("params", ck::py_list(std::move(params)));
    groups.push_back(ck::py_dict(std::move(kv)));
  }
  return ck::py_dict(
      {ck::py_str("state"),
       ck::py_dict(std::move(states)),
       ck::py_str("param_groups"),
       ck::py_list(std::move(groups))});
}

// An ampkit state_dict as torch.save'd Python values (numbers, lists of
// numbers, strings), without the keys in `skip`.
PyRef python_state(
    const StateDict& sd, const std::vector<std::string>& skip = {}) {
  std::vector<PyRef> kv;
  for (const auto& [key, value] : sd) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) {
      continue;
    }
    PyRef v;
    if (value.isInt()) {
      v = ck::py_int(value.toInt());
    } else if (value.isDouble()) {
      v = ck::py_float(value.toDouble());
    } else if (value.isBool()) {
      v = ck::py_bool(value.toBool());
    } else if (value.isString()) {
      v = ck::py_str(value.toStringRef());
    } else if (value.isDoubleList()) {
      std::vector<PyRef> items;
      for (double d : value.toDoubleVector()) {
        items.push_back(ck::py_float(d));
      }
      v = ck::py_list(std::move(items));
    } else if (value.isIntList()) {
      std::vector<PyRef> items;
      for (int64_t i : value.toIntVector()) {
        items.push_back(ck::py_int(i));
      }
      v = ck::py_list(std::move(items));
    } else if (value.isTensor()) {
      v = ck::py_tensor(value.toTensor());
    } else if (value.isNone()) {
      v = ck::py_none();
    } else {
      continue;  // nothing Python would read
    }
    kv.push_back(ck::py_str(key));
    kv.push_back(v);
  }
  return ck::py_dict(std::move(kv));
}

// random_states_<rank>.pkl: torch's generator states as accelerate writes
// them. C++ has no Python or NumPy generator: their entries are valid
// MT19937 states seeded from torch's initial seed, so that accelerate's
// load_state (which sets them first) accepts the file.
PyRef random_states(int64_t step) {
  const RngState rng = get_rng_state();
  std::vector<PyRef> key;
  uint32_t x = static_cast<uint32_t>(
      at::detail::getDefaultCPUGenerator().current_seed());
  for (int i = 0; i < 624; ++i) {  // init_genrand
    key.push_back(ck::py_int(x));
    x = 1812433253u * (x ^ (x >> 30)) + static_cast<uint32_t>(i + 1);
  }
  std::vector<PyRef> python = key;
  python.push_back(ck::py_int(624));
  std::vector<PyRef> cuda;
  for (const auto& t : rng.cuda) {
    cuda.push_back(ck::py_tensor(t));
  }
  return ck::py_dict(
      {ck::py_str("step"),
       ck::py_int(step),
       ck::py_str("random_state"),
       ck::py_tuple({ck::py_int(3), ck::py_tuple(python), ck::py_none()}),
       ck::py_str("numpy_random_seed"),
       ck::py_tuple(
           {ck::py_str("MT19937"),
            ck::py_list(key),
            ck::py_int(624),
            ck::py_int(0),
            ck::py_float(0.0)}),
       ck::py_str("torch_manual_seed"),
       ck::py_tensor(rng.cpu),
       ck::py_str("torch_cuda_manual_seed"),
       ck::py_list(std::move(cuda))});
}

}  // namespace

std::string indexed(const std::string& stem, size_t i, const std::string& ext) {
  return i == 0 ? stem + ext : stem + "_" + std::to_string(i) + ext;
}

void save_accelerate_state(
    AcceleratorState& st,
    int64_t rank,
    bool main_process,
    int64_t step,
    const std::string& dir) {
  auto path = [&](const std::string& name) {
    return (fs::path(dir) / name).string();
  };
  st.strategy->check_accelerate_format(st, /*saving=*/true);
  fs::create_directories(dir);
  if (main_process) {
    std::vector<double> initial_lr;
    if (st.checkpoints.schedulers.size() == 1) {
      const auto sd = st.checkpoints.schedulers[0]->state_dict();
      auto it = sd.find("base_lrs");
      if (it != sd.end() && it->second.isDoubleList()) {
        initial_lr = it->second.toDoubleVector();
      }
    }
    for (size_t i = 0; i < st.models.size(); ++i) {
      ck::save_safetensors(
          path(indexed("model", i, ".safetensors")),
          ck::model_state(*st.models[i].module),
          {{"format", "pt"}});
    }
    for (size_t i = 0; i < st.optimizers.size(); ++i) {
      const std::string name = path(indexed("optimizer", i, ".bin"));
      ck::save_torch_file(
          name, optimizer_state(*st.optimizers[i].optimizer, initial_lr, name));
    }
    for (size_t i = 0; i < st.checkpoints.schedulers.size(); ++i) {
      // A LambdaLR's load_state_dict pops lr_lambdas: one None per group
      // (the lambdas themselves are code, rebuilt by the Python program).
      const StateDict sd = st.checkpoints.schedulers[i]->state_dict();
      auto state = python_state(sd, {"scheduler"});
      std::vector<PyRef> lambdas;
      const auto base = sd.find("base_lrs");
      const size_t groups = base != sd.end() && base->second.isDoubleList()
                                ? base->second.toDoubleVector().size()
                                : 1;
      for (size_t g = 0; g < groups; ++g) {
        lambdas.push_back(ck::py_none());
      }
      state->items.push_back(ck::py_str("lr_lambdas"));
      state->items.push_back(ck::py_list(std::move(lambdas)));
      state->items.push_back(ck::py_str("verbose"));
      state->items.push_back(ck::py_bool(false));
      state->items.push_back(ck::py_str("_get_lr_called_within_step"));
      state->items.push_back(ck::py_bool(false));
      ck::save_torch_file(path(indexed("scheduler", i, ".bin")), state);
    }
    if (st.scaler) {
      ck::save_torch_file(
          path("scaler.pt"), python_state(st.scaler->state_dict()));
    }
  }
  ck::save_torch_file(
      path("random_states_" + std::to_string(rank) + ".pkl"),
      random_states(step));
}

bool is_accelerate_folder(const std::string& dir) {
  return !fs::exists(fs::path(dir) / "manifest.json") &&
         (fs::exists(fs::path(dir) / "model.safetensors") ||
          fs::exists(fs::path(dir) / "pytorch_model.bin")) &&
         fs::exists(fs::path(dir) / "random_states_0.pkl");
}

namespace {

// Model i of accelerate's folder: model_i.safetensors, or torch.save's
// pytorch_model_i.bin.
ck::NamedTensors read_accelerate_model(const std::string& dir, size_t i) {
  auto path = [&](const std::string& name) {
    return (fs::path(dir) / name).string();
  };
  const std::string safe = path(indexed("model", i, ".safetensors"));
  if (fs::exists(safe)) {
    return ck::load_safetensors(safe).tensors;
  }
  const std::string bin = path(indexed("pytorch_model", i, ".bin"));
  if (!fs::exists(bin)) {
    throw IoError(
        component::kAccelerator,
        dir + " has neither " + indexed("model", i, ".safetensors") + " nor " +
            indexed("pytorch_model", i, ".bin") + " for model " +
            std::to_string(i) + ": prepare the models it was saved with.");
  }
  const PyRef sd = ck::load_torch_file(bin);
  if (sd->kind != PyValue::Kind::dict) {
    refuse(bin, "is a " + sd->type_name() + ", not a state_dict.");
  }
  ck::NamedTensors named;
  for (size_t k = 0; k + 1 < sd->items.size(); k += 2) {
    if (sd->items[k]->kind == PyValue::Kind::string &&
        sd->items[k + 1]->kind == PyValue::Kind::tensor) {
      named.emplace_back(sd->items[k]->text, sd->items[k + 1]->tensor);
    }
  }
  return named;
}

// This process's torch random states in accelerate's folder
// (random_states_N.pkl), checked against this build's; empty when it has
// none.
std::optional<RngState> read_accelerate_rng(const std::string& rng_name) {
  if (!fs::exists(rng_name)) {
    return std::nullopt;
  }
  std::optional<RngState> rng;
  const PyRef states = ck::load_torch_file(rng_name);
  const PyRef cpu = need(states, "torch_manual_seed", rng_name);
  if (cpu->kind == PyValue::Kind::tensor) {
    rng = get_rng_state();
    // Checked here, before anything is loaded: set_rng_state would refuse
    // another state only after the weights had changed.
    if (cpu->tensor.scalar_type() != at::kByte ||
        cpu->tensor.numel() != rng->cpu.numel()) {
      refuse(
          rng_name,
          "\"torch_manual_seed\" is " + std::to_string(cpu->tensor.numel()) +
              " " + c10::toString(cpu->tensor.scalar_type()) +
              " values, not the " + std::to_string(rng->cpu.numel()) +
              " bytes of torch.get_rng_state().");
    }
    rng->cpu = cpu->tensor.contiguous();
    const PyRef cuda = states->get("torch_cuda_manual_seed");
    if (cuda && cuda->items.size() == rng->cuda.size()) {
      for (size_t d = 0; d < rng->cuda.size(); ++d) {
        const PyRef t = cuda->items[d];
        if (t->kind != PyValue::Kind::tensor ||
            t->tensor.scalar_type() != at::kByte ||
            t->tensor.numel() != rng->cuda[d].numel()) {
          refuse(
              rng_name,
              "\"torch_cuda_manual_seed\" holds a " + t->type_name() +
                  " for device " + std::to_string(d) +
                  ", not the bytes of torch.cuda.get_rng_state().");
        }
        rng->cuda[d] = t->tensor.contiguous();
      }
    }
  }
  return rng;
}

}  // namespace

void load_accelerate_state(
    AcceleratorState& st, int64_t rank, const std::string& dir) {
  auto path = [&](const std::string& name) {
    return (fs::path(dir) / name).string();
  };
  st.strategy->check_accelerate_format(st, /*saving=*/false);
  // Read and check everything before changing anything.
  std::vector<ck::NamedTensors> models;
  for (size_t i = 0; i < st.models.size(); ++i) {
    models.push_back(read_accelerate_model(dir, i));
  }
  auto count_of = [&](const std::string& stem, const std::string& ext) {
    size_t n = 0;
    while (fs::exists(path(indexed(stem, n, ext)))) {
      ++n;
    }
    return n;
  };
  auto check_count = [&](const std::string& what,
                         const std::string& stem,
                         const std::string& ext,
                         size_t ours) {
    const size_t saved = count_of(stem, ext);
    if (saved != ours) {
      throw InvalidArgument(
          component::kAccelerator,
          dir + " (accelerate's save_state) has " + std::to_string(saved) +
              " " + what + ", this run prepared " + std::to_string(ours) +
              ". Prepare the same objects as the run that saved it.");
    }
  };
  // The weights against the models first: a folder of another model is
  // refused naming the tensor that differs, before its optimizer is read.
  for (size_t i = 0; i < st.models.size(); ++i) {
    ck::check_model_state(
        *st.models[i].module,
        models[i],
        path(indexed("model", i, ".safetensors")));
  }
  check_count("optimizers", "optimizer", ".bin", st.optimizers.size());
  check_count(
      "schedulers", "scheduler", ".bin", st.checkpoints.schedulers.size());
  std::vector<OptimizerLoad> optimizers;
  for (size_t i = 0; i < st.optimizers.size(); ++i) {
    const std::string name = path(indexed("optimizer", i, ".bin"));
    optimizers.push_back(read_optimizer(
        *st.optimizers[i].optimizer, ck::load_torch_file(name), name));
  }
  std::vector<StateDict> scheduler_states;
  for (size_t i = 0; i < st.checkpoints.schedulers.size(); ++i) {
    const std::string name = path(indexed("scheduler", i, ".bin"));
    scheduler_states.push_back(as_state_dict(
        ck::load_torch_file(name),
        st.checkpoints.schedulers[i]->state_dict(),
        name));
  }
  std::optional<StateDict> scaler;
  if (fs::exists(path("scaler.pt")) && st.scaler) {
    scaler = as_state_dict(
        ck::load_torch_file(path("scaler.pt")),
        st.scaler->state_dict(),
        path("scaler.pt"));
  } else if (fs::exists(path("scaler.pt")) != st.scaler.has_value()) {
    throw InvalidArgument(
        component::kAccelerator,
        dir +
            (st.scaler
                 ? " has no GradScaler state, but this run scales the loss"
                 : " has a GradScaler state, but this run has no loss "
                   "scaling") +
            ". Resume with the mixed_precision it was saved with.");
  }
  const std::string rng_name =
      path("random_states_" + std::to_string(rank) + ".pkl");
  const std::optional<RngState> rng = read_accelerate_rng(rng_name);

  for (size_t i = 0; i < st.models.size(); ++i) {
    ck::load_model_state(
        *st.models[i].module,
        models[i],
        path(indexed("model", i, ".safetensors")));
  }
  for (auto& optimizer : optimizers) {
    apply_optimizer(std::move(optimizer));
  }
  for (size_t i = 0; i < st.checkpoints.schedulers.size(); ++i) {
    st.checkpoints.schedulers[i]->load_state_dict(scheduler_states[i]);
  }
  if (scaler) {
    st.scaler->load_state_dict(*scaler);
  }
  if (rng) {
    set_rng_state(*rng);
  }
  warn(
      component::kAccelerator,
      "loaded " + dir +
          " as accelerate's save_state folder: weights, optimizer, scheduler" +
          (scaler ? ", GradScaler" : "") +
          (rng ? " and torch's random states" : "") +
          ". Python's and NumPy's random states in it are ignored (C++ has "
          "neither), and so are data loader positions: the loaders start "
          "their epoch from the beginning, as accelerate's do without "
          "skip_first_batches.");
}

}  // namespace ampkit::detail
