// FSDP: flat, sharded units driven by an autograd Function (see fsdp.h).
#include "ampkit/distributed/fsdp.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StorageImpl.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "amp/compat.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/error.h"
#include "ampkit/utils/random.h"
#include "ampkit/utils/warnings.h"
#include "utils/components.h"
#include "utils/optimizer_state.h"
#include "utils/strings.h"

namespace ampkit::dist {

namespace {

/// One of PyTorch's enum members: its name, its number, ampkit's value.
/// Where a value has several names the first is the one ampkit writes.
template <typename E>
struct Member {
  const char* name;
  const char* number;
  E value;
};

constexpr Member<ShardingStrategy> kStrategies[] = {
    {"FULL_SHARD", "1", ShardingStrategy::full_shard},
    {"SHARD_GRAD_OP", "2", ShardingStrategy::shard_grad_op},
    {"NO_SHARD", "3", ShardingStrategy::no_shard},
    {"HYBRID_SHARD", "4", ShardingStrategy::hybrid_shard},
    {"HYBRID_SHARD_ZERO2", "5", ShardingStrategy::hybrid_shard_zero2},
    {"_HYBRID_SHARD_ZERO2", "5", ShardingStrategy::hybrid_shard_zero2}};
constexpr Member<BackwardPrefetch> kPrefetches[] = {
    {"BACKWARD_PRE", "1", BackwardPrefetch::backward_pre},
    {"BACKWARD_POST", "2", BackwardPrefetch::backward_post},
    {"NO_PREFETCH", "3", BackwardPrefetch::none}};
constexpr Member<StateDictType> kStateDictTypes[] = {
    {"FULL_STATE_DICT", "1", StateDictType::full_state_dict},
    {"SHARDED_STATE_DICT", "3", StateDictType::sharded_state_dict}};

/// `value` as one of `members`, by name or by number.
template <typename E, size_t N>
std::optional<E> by_name_or_number(
    const std::string& value, const Member<E> (&members)[N]) {
  for (const auto& m : members) {
    if (value == m.name || value == m.number) {
      return m.value;
    }
  }
  return std::nullopt;
}

template <typename E, size_t N>
std::string name_of(E value, const Member<E> (&members)[N]) {
  for (const auto& m : members) {
    if (m.value == value) {
      return m.name;
    }
  }
  return "?";
}

}  // namespace

ShardingStrategy parse_sharding_strategy(const std::string& value) {
  if (const auto s = by_name_or_number(value, kStrategies)) {
    return *s;
  }
  throw InvalidArgument(
      component::kDistributed,
      "fsdp_sharding_strategy: expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
      "HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or accelerate's 1 to 5), got '" +
          value + "'.");
}

std::string to_string(ShardingStrategy strategy) {
  return name_of(strategy, kStrategies);
}

BackwardPrefetch parse_backward_prefetch(const std::string& value) {
  if (const auto b = by_name_or_number(value, kPrefetches)) {
    return *b;
  }
  throw InvalidArgument(
      component::kDistributed,
      "fsdp_backward_prefetch: expected BACKWARD_PRE, BACKWARD_POST or "
      "NO_PREFETCH (or accelerate's 1, 2, 3), got '" +
          value + "'.");
}

std::string to_string(BackwardPrefetch prefetch) {
  return name_of(prefetch, kPrefetches);
}

StateDictType parse_state_dict_type(const std::string& value) {
  if (const auto t = by_name_or_number(value, kStateDictTypes)) {
    return *t;
  }
  if (value == "LOCAL_STATE_DICT" || value == "2") {
    throw Unsupported(
        component::kDistributed,
        "fsdp_state_dict_type LOCAL_STATE_DICT (deprecated in PyTorch) is not "
        "built in ampkit. Use SHARDED_STATE_DICT (each process saves its own "
        "shards) or FULL_STATE_DICT (the whole model in one file).");
  }
  throw InvalidArgument(
      component::kDistributed,
      "fsdp_state_dict_type: expected FULL_STATE_DICT or SHARDED_STATE_DICT "
      "(or PyTorch's 1, 3), got '" +
          value + "'.");
}

std::string to_string(StateDictType type) {
  return name_of(type, kStateDictTypes);
}

namespace detail {

/// One flat buffer: parameters of one unit that share a dtype, whether
/// they train, and (after take_over) an optimizer param group.
struct FlatParam {
  std::vector<std::string> names;     // full names in the model
  std::vector<torch::Tensor> params;  // the model's own tensors
  std::vector<int64_t> offsets;
  std::vector<int64_t> numels;
  std::vector<std::vector<int64_t>> shapes;
  int64_t total = 0;       // elements, unpadded
  int64_t shard_size = 0;  // elements per process
  torch::Tensor shard;     // leaf, what the optimizer steps
  torch::Tensor full;      // gathered; its memory is released when freed
  torch::Tensor empty;     // what the parameters hold when freed
  // The full gradients of accumulation micro-steps that do not
  // synchronise, summed locally until the one that does (as DDP's no_sync
  // sums them in .grad); undefined otherwise.
  torch::Tensor pending;
  bool gathered = false;
  // A prefetch's all-gather into `full`, not yet waited for.
  PendingCollective inflight;
  // A synchronising backward's reduce-scatter of this buffer's gradients
  // into `reduced` (this process's part), not yet added into the shard's
  // gradient (Impl::finish_reduces).
  PendingCollective reducing;
  torch::Tensor reduced;
  // The dtype `full` is gathered in for computing (MixedPrecision's
  // param_dtype; the shard's own without it).
  c10::ScalarType compute_dtype = c10::ScalarType::Float;
  /// Parameter i's part of a flat tensor laid out as this buffer, in the
  /// parameter's shape.
  torch::Tensor piece(const torch::Tensor& flat, size_t i) const {
    return flat.narrow(0, offsets[i], numels[i]).view(shapes[i]);
  }
};

struct FsdpUnit {
  FullyShardedModel::Impl* owner = nullptr;
  std::string name;  // module path, "" for the root
  const torch::nn::Module* module = nullptr;
  std::vector<FlatParam> flats;
  bool entered = false;   // through fsdp_forward since before_forward
  int64_t forwards = 0;   // with gradients, since the last after_backward
  int64_t backwards = 0;  // since the last after_backward
  bool trainable() const {
    for (const auto& f : flats) {
      if (f.shard.requires_grad()) {
        return true;
      }
    }
    return false;
  }
};

}  // namespace detail

using detail::FlatParam;
using detail::FsdpUnit;

struct FullyShardedModel::Impl {
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<ProcessGroup> global;  // every process
  // The processes a unit is sharded across (HYBRID_SHARD: this machine's;
  // nullptr when that is this process alone), and under HYBRID_SHARD the
  // processes elsewhere that hold the same shard (nullptr otherwise).
  std::shared_ptr<ProcessGroup> group;
  std::shared_ptr<ProcessGroup> replicas;
  FsdpOptions options;
  int64_t rank = 0;                              // in `group`
  int64_t world = 1;                             // `group`'s size
  std::vector<std::shared_ptr<FsdpUnit>> units;  // root first
  std::vector<torch::Tensor> shards;
  int64_t gathered_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  bool summoned = false;  // gather_all until release_all: nothing freed
  bool sync = true;       // the current micro-step's backward reduces
  // The units the forward with gradients since before_forward entered, in
  // order, and those of the forward before it (what prefetch follows).
  std::vector<FsdpUnit*> order_now;
  std::vector<FsdpUnit*> order;
  // Backward's place in order_now: units run backward in reverse.
  size_t backward_cursor = 0;
  std::vector<torch::Tensor> optimizer_params;  // take_over's, in order

  bool sharded() const {
    return options.strategy() != ShardingStrategy::no_shard;
  }
  int64_t parts() const {
    return sharded() ? world : 1;
  }
  /// A flat buffer of `params` holding `values` (full, the same on every
  /// process), sharded.
  FlatParam make_flat(
      const std::vector<std::string>& names,
      const std::vector<torch::Tensor>& params,
      const std::vector<torch::Tensor>& values);
  void gather(FsdpUnit& u);
  void gather(FlatParam& f);
  /// Every process's `part` of f (the shard, or its gradient) gathered
  /// into a temporary flat tensor of `part`'s dtype (no gather when
  /// nothing is sharded).
  torch::Tensor gathered_copy(const FlatParam& f, const torch::Tensor& part);
  /// Allocates f.full and issues the all-gather of the shards into it
  /// (waited for by gather).
  void start_gather(FlatParam& f);
  /// Issues the gathers of the unit `step` places from `at` in
  /// `order_now` (prefetch), where there is one.
  void prefetch(size_t at, int step);
  void release(FsdpUnit& u);
  void release(FlatParam& f);
  /// Reduce-scatters `grads` (one per parameter of f, undefined for none)
  /// into f's shard gradient.
  /// The reduce-scatter is issued and runs while backward goes on; it is
  /// finished by finish_reduces.
  void reduce(FlatParam& f, const std::vector<torch::Tensor>& grads);
  void reduce(FsdpUnit& u);  // from the parameters' .grad()
  /// Waits for the reduce-scatters issued so far (in their order) and adds
  /// each part into its shard's gradient; called before the next unit's
  /// are issued, so that one unit's full gradients at most are in flight.
  void finish_reduces();
  std::vector<FlatParam*> reducing;
  void collect_shards();
  /// HYBRID_SHARD: `group` becomes this machine's processes, `replicas`
  /// the processes with this one's local rank on every machine.
  void split_hybrid();
};

void FullyShardedModel::Impl::split_hybrid() {
  const DistEnv& env = global->env();
  const int64_t per = env.local_world_size;
  const std::string why =
      "HYBRID_SHARD shards within a machine and replicates across machines";
  if (per <= 0 || env.world_size % per != 0) {
    throw InvalidArgument(
        component::kDistributed,
        why +
            ", so it needs the processes per machine (LOCAL_WORLD_SIZE, "
            "which ampkit launch and torchrun set) to divide the " +
            std::to_string(env.world_size) + " processes; it is " +
            std::to_string(per) + ".");
  }
  if (env.rank % per != env.local_rank) {
    throw InvalidArgument(
        component::kDistributed,
        why +
            ", so it needs the ranks numbered machine by machine (as "
            "ampkit launch and torchrun number them): rank " +
            std::to_string(env.rank) + " has LOCAL_RANK " +
            std::to_string(env.local_rank) + " of " + std::to_string(per) +
            ".");
  }
  if (per == env.world_size) {
    return;  // one machine: FULL_SHARD
  }
  const int64_t machine = env.rank / per;
  std::vector<int64_t> here, peers;
  for (int64_t k = 0; k < per; ++k) {
    here.push_back(machine * per + k);
  }
  for (int64_t m = 0; m < env.world_size / per; ++m) {
    peers.push_back(m * per + env.local_rank);
  }
  // Every process makes its machine's group first, then its replicas'.
  group = per > 1
              ? global->subgroup("fsdp_shard_" + std::to_string(machine), here)
              : nullptr;
  replicas = global->subgroup(
      "fsdp_replicate_" + std::to_string(env.local_rank), peers);
}

namespace {

// Which module each live unit is, for fsdp_forward.
std::mutex registry_mutex;
std::unordered_map<const torch::nn::Module*, std::weak_ptr<FsdpUnit>>&
registry() {
  static std::unordered_map<const torch::nn::Module*, std::weak_ptr<FsdpUnit>>
      map;
  return map;
}

// "BlockImpl" and "ns::BlockImpl" match "Block" (TORCH_MODULE's holder
// name), as accelerate matches class names.
bool type_matches(std::string type, const std::vector<std::string>& names) {
  const auto colon = type.rfind("::");
  if (colon != std::string::npos) {
    type = type.substr(colon + 2);
  }
  std::string bare = type;
  if (bare.size() > 4 && bare.compare(bare.size() - 4, 4, "Impl") == 0) {
    bare = bare.substr(0, bare.size() - 4);
  }
  return std::find(names.begin(), names.end(), type) != names.end() ||
         std::find(names.begin(), names.end(), bare) != names.end();
}

void set_storage(torch::Tensor& t, bool allocate) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (allocate) {
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    s->set_data_ptr(s->allocator()->allocate(bytes));
    s->set_nbytes(bytes);
  } else {
    s->set_data_ptr(at::DataPtr(nullptr, t.device()));
    s->set_nbytes(0);
  }
}

// A flat buffer of `numel` elements that holds no memory until a gather
// allocates it (set_storage).
torch::Tensor freed_buffer(int64_t numel, const torch::TensorOptions& options) {
  torch::Tensor t = torch::empty({numel}, options);
  set_storage(t, false);
  return t;
}

// One call of a unit, kept by its autograd node.
struct UnitCall : torch::CustomClassHolder {
  std::shared_ptr<FsdpUnit> unit;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> forward;
  std::vector<torch::Tensor> inputs;  // detached, requiring grad as given
  torch::Tensor output;               // with the unit's graph (no recompute)
  // Activation checkpointing: what the recompute must see again (the
  // random state, and the CPU's and CUDA's autocast settings).
  std::optional<RngState> rng;
  std::vector<AutocastOptions> autocast;
};

// The autocast settings in force on `device`, as an Autocast guard takes
// them.
AutocastOptions autocast_in_force(c10::DeviceType device) {
  return AutocastOptions(device, ampkit::detail::autocast_get_dtype(device))
      .enabled(ampkit::detail::autocast_is_enabled(device))
      .cache_enabled(at::autocast::is_autocast_cache_enabled());
}

// For a scope: the generators in state `use`, then back as they were (also
// when the scope throws). The state put back was read from the generators
// a moment before, so setting it cannot fail.
class RngScope {
 public:
  explicit RngScope(const RngState& use) : saved_(get_rng_state()) {
    set_rng_state(use);
  }
  ~RngScope() {
    try {
      set_rng_state(saved_);
    } catch (...) {
    }
  }
  RngScope(const RngScope&) = delete;
  RngScope& operator=(const RngScope&) = delete;

 private:
  RngState saved_;
};

struct UnitFunction : torch::autograd::Function<UnitFunction> {
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx,
      c10::intrusive_ptr<UnitCall> call,
      const torch::Tensor& /*shard: puts the node in every graph*/,
      at::TensorList inputs) {
    FsdpUnit& u = *call->unit;
    auto& m = *u.owner;
    m.gather(u);
    if (m.options.forward_prefetch()) {
      m.prefetch(m.order_now.size() - 1, +1);
    }
    for (const auto& x : inputs) {
      torch::Tensor d = x.detach();
      if (x.requires_grad()) {
        d.requires_grad_(true);
      }
      call->inputs.push_back(d);
    }
    torch::Tensor out;
    if (m.options.activation_checkpointing()) {
      call->rng = get_rng_state();
      call->autocast = {
          autocast_in_force(c10::DeviceType::CPU),
          autocast_in_force(c10::DeviceType::CUDA)};
      out = call->forward(call->inputs);  // no graph: recomputed in backward
    } else {
      torch::AutoGradMode grad(true);
      call->output = call->forward(call->inputs);
      out = call->output.detach();
    }
    if (m.options.strategy() == ShardingStrategy::full_shard ||
        m.options.strategy() == ShardingStrategy::hybrid_shard) {
      m.release(u);
    }
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    return {out};
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad_outputs) {
    auto call = c10::static_intrusive_pointer_cast<UnitCall>(
        ctx->saved_data["call"].toCapsule());
    FsdpUnit& u = *call->unit;
    auto& m = *u.owner;
    // Units run backward in the reverse of their forward order; the unit
    // before this one in the forward comes next.
    size_t at = m.backward_cursor;
    while (at > 0 && m.order_now[at - 1] != &u) {
      --at;
    }
    const bool placed = at > 0;
    if (placed) {
      m.backward_cursor = --at;
    }
    m.gather(u);
    const auto prefetch = m.options.backward_prefetch();
    if (placed && prefetch == BackwardPrefetch::backward_pre) {
      m.prefetch(at, -1);
    }
    torch::Tensor out = call->output;
    if (call->rng) {
      // Recompute with the random and autocast state of the first run.
      RngScope rng(*call->rng);
      Autocast cpu(call->autocast[0]);
      Autocast cuda(call->autocast[1]);
      torch::AutoGradMode grad(true);
      out = call->forward(call->inputs);
    }
    std::vector<torch::Tensor> wrt;
    std::vector<size_t> input_slot;
    for (size_t i = 0; i < call->inputs.size(); ++i) {
      if (call->inputs[i].requires_grad()) {
        wrt.push_back(call->inputs[i]);
        input_slot.push_back(i);
      }
    }
    // Each flat buffer's parameters that train, in order.
    for (const auto& f : u.flats) {
      if (f.shard.requires_grad()) {
        wrt.insert(wrt.end(), f.params.begin(), f.params.end());
      }
    }
    std::vector<torch::Tensor> grads;
    if (out.requires_grad() && !wrt.empty()) {
      torch::Tensor g =
          grad_outputs[0].defined() ? grad_outputs[0] : torch::zeros_like(out);
      grads = torch::autograd::grad(
          {out},
          wrt,
          {g},
          /*retain_graph=*/false,
          /*create_graph=*/false,
          /*allow_unused=*/true);
    } else {
      grads.resize(wrt.size());
    }
    if (placed && prefetch == BackwardPrefetch::backward_post) {
      m.prefetch(at, -1);
    }
    m.finish_reduces();  // the unit before this one's
    {
      torch::NoGradGuard no_grad;
      size_t next = input_slot.size();
      for (auto& f : u.flats) {
        if (!f.shard.requires_grad()) {
          continue;
        }
        std::vector<torch::Tensor> flat_grads(
            grads.begin() + static_cast<std::ptrdiff_t>(next),
            grads.begin() +
                static_cast<std::ptrdiff_t>(next + f.params.size()));
        next += f.params.size();
        m.reduce(f, flat_grads);
      }
    }
    if (m.sharded()) {
      m.release(u);
    }
    ++u.backwards;
    torch::autograd::variable_list result(2 + call->inputs.size());
    for (size_t k = 0; k < input_slot.size(); ++k) {
      result[2 + input_slot[k]] = grads[k];
    }
    call->output = torch::Tensor();
    call->inputs.clear();
    return result;
  }
};

}  // namespace

FlatParam FullyShardedModel::Impl::make_flat(
    const std::vector<std::string>& names,
    const std::vector<torch::Tensor>& params,
    const std::vector<torch::Tensor>& values) {
  FlatParam f;
  f.names = names;
  f.params = params;
  for (const auto& v : values) {
    f.offsets.push_back(f.total);
    f.numels.push_back(v.numel());
    f.shapes.push_back(v.sizes().vec());
    f.total += v.numel();
  }
  const auto options = values.front().options().requires_grad(false);
  f.shard_size = (f.total + parts() - 1) / parts();
  const int64_t padded = f.shard_size * parts();
  torch::Tensor flat = torch::zeros({padded}, options);
  for (size_t i = 0; i < params.size(); ++i) {
    flat.narrow(0, f.offsets[i], f.numels[i]).copy_(values[i].reshape({-1}));
  }
  const int64_t begin = sharded() ? rank * f.shard_size : 0;
  f.shard = flat.narrow(0, begin, f.shard_size).clone();
  f.shard.set_requires_grad(params.front().requires_grad());
  f.compute_dtype = options.dtype().toScalarType();
  if (this->options.param_dtype() && c10::isFloatingType(f.compute_dtype)) {
    f.compute_dtype = *this->options.param_dtype();
  }
  f.empty = torch::empty({0}, options.dtype(f.compute_dtype));
  if (sharded()) {
    f.full = freed_buffer(padded, options.dtype(f.compute_dtype));
    for (auto& p : f.params) {
      p.set_data(f.empty);
    }
  } else {
    // Nothing sharded: the parameters are views of the shard itself.
    f.full = f.shard.detach();
    for (size_t i = 0; i < f.params.size(); ++i) {
      f.params[i].set_data(f.piece(f.full, i));
    }
    f.gathered = true;
  }
  return f;
}

torch::Tensor FullyShardedModel::Impl::gathered_copy(
    const FlatParam& f, const torch::Tensor& part) {
  if (!sharded() || world == 1) {
    return part.detach();
  }
  torch::Tensor full = torch::empty({f.shard_size * world}, part.options());
  group->all_gather_into(full, part.detach());
  return full;
}

void FullyShardedModel::Impl::start_gather(FlatParam& f) {
  if (f.gathered) {
    return;
  }
  torch::NoGradGuard no_grad;
  set_storage(f.full, true);
  // In the compute dtype (MixedPrecision) the cast comes first, so the
  // gather moves the smaller values.
  torch::Tensor mine = f.shard.detach();
  if (mine.scalar_type() != f.full.scalar_type()) {
    mine = mine.to(f.full.scalar_type());
  }
  if (world == 1) {
    f.full.copy_(mine);
  } else {
    f.inflight = group->all_gather_into_async(f.full, mine);
  }
  for (size_t i = 0; i < f.params.size(); ++i) {
    f.params[i].set_data(f.piece(f.full, i));
  }
  f.gathered = true;
  gathered_bytes += f.full.numel() * f.full.element_size();
  peak_gathered_bytes = std::max(peak_gathered_bytes, gathered_bytes);
}

void FullyShardedModel::Impl::gather(FlatParam& f) {
  start_gather(f);
  f.inflight.wait();
}

void FullyShardedModel::Impl::prefetch(size_t at, int step) {
  // The forward before this one ran the same units in the same order up
  // to here: the next unit is the one it ran next.
  const auto next = static_cast<std::ptrdiff_t>(at) + step;
  const auto& seen = step > 0 ? order : order_now;
  if (next < 0 || next >= static_cast<std::ptrdiff_t>(seen.size()) ||
      (step > 0 && (at >= order.size() || order[at] != order_now[at]))) {
    return;
  }
  for (auto& f : seen[static_cast<size_t>(next)]->flats) {
    start_gather(f);
  }
}

void FullyShardedModel::Impl::gather(FsdpUnit& u) {
  for (auto& f : u.flats) {
    gather(f);
  }
}

void FullyShardedModel::Impl::release(FlatParam& f) {
  if (!f.gathered || !sharded() || summoned) {
    return;
  }
  f.inflight.wait();  // its memory is the gather's target
  torch::NoGradGuard no_grad;
  for (auto& p : f.params) {
    p.set_data(f.empty);
  }
  set_storage(f.full, false);
  f.gathered = false;
  gathered_bytes -= f.full.numel() * f.full.element_size();
}

void FullyShardedModel::Impl::release(FsdpUnit& u) {
  for (auto& f : u.flats) {
    release(f);
  }
}

void FullyShardedModel::Impl::reduce(
    FlatParam& f, const std::vector<torch::Tensor>& grads) {
  torch::Tensor flat =
      torch::zeros({f.shard_size * parts()}, f.shard.options());
  for (size_t i = 0; i < f.params.size(); ++i) {
    if (grads[i].defined()) {
      flat.narrow(0, f.offsets[i], f.numels[i]).copy_(grads[i].reshape({-1}));
    }
  }
  if (f.pending.defined()) {
    // Earlier micro-steps first, as .grad accumulates.
    flat = f.pending.add_(flat);
    f.pending = torch::Tensor();
  }
  if (!sync) {
    f.pending = flat;
    return;
  }
  const auto own = flat.scalar_type();
  const auto wire = options.reduce_dtype().value_or(own);
  if (wire != own) {
    flat = flat.to(wire);  // MixedPrecision's reduce_dtype
  }
  const int64_t processes = world * (replicas ? replicas->size() : 1);
  if (processes > 1) {
    // DDP's order (c10d's Reducer): multiply by 1 / the process count,
    // then sum.
    flat.mul_(1.0 / static_cast<double>(processes));
  }
  f.reduced = flat;
  if (world > 1 && !sharded()) {
    group->all_reduce(flat, ReduceOp::sum);
  } else if (world > 1) {
    std::vector<int64_t> bounds;
    for (int64_t r = 0; r <= world; ++r) {
      bounds.push_back(r * f.shard_size);
    }
    f.reduced = torch::empty({f.shard_size}, flat.options());
    f.reducing = group->reduce_scatter_async(f.reduced, flat, bounds);
  }
  reducing.push_back(&f);
}

void FullyShardedModel::Impl::finish_reduces() {
  torch::NoGradGuard no_grad;
  auto issued = std::move(reducing);
  reducing.clear();
  for (FlatParam* f : issued) {
    f->reducing.wait();
    torch::Tensor part = std::move(f->reduced);
    f->reduced = torch::Tensor();
    if (replicas) {
      // HYBRID_SHARD: the machine's sum, then the sum across machines.
      replicas->all_reduce(part, ReduceOp::sum);
    }
    if (part.scalar_type() != f->shard.scalar_type()) {
      part = part.to(f->shard.scalar_type());
    }
    torch::Tensor& g = f->shard.mutable_grad();
    if (g.defined()) {
      g.add_(part);
    } else {
      g = part;
    }
  }
}

void FullyShardedModel::Impl::reduce(FsdpUnit& u) {
  finish_reduces();
  torch::NoGradGuard no_grad;
  for (auto& f : u.flats) {
    if (!f.shard.requires_grad()) {
      continue;
    }
    std::vector<torch::Tensor> grads;
    for (auto& p : f.params) {
      grads.push_back(p.grad());
    }
    reduce(f, grads);
    for (auto& p : f.params) {
      p.mutable_grad() = torch::Tensor();
    }
  }
}

void FullyShardedModel::Impl::collect_shards() {
  shards.clear();
  for (const auto& u : units) {
    for (const auto& f : u->flats) {
      shards.push_back(f.shard);
    }
  }
}

std::shared_ptr<FsdpUnit> detail::fsdp_unit_of(
    const torch::nn::Module& module) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& map = registry();
  auto it = map.find(&module);
  if (it == map.end()) {
    return nullptr;
  }
  return it->second.lock();
}

torch::Tensor detail::fsdp_run(
    const std::shared_ptr<FsdpUnit>& unit,
    std::vector<torch::Tensor> inputs,
    std::function<torch::Tensor(const std::vector<torch::Tensor>&)> forward) {
  FsdpUnit& u = *unit;
  auto& m = *u.owner;
  u.entered = true;
  if (!torch::GradMode::is_enabled()) {
    m.gather(u);
    torch::Tensor out = forward(inputs);
    m.release(u);
    return out;
  }
  ++u.forwards;
  m.order_now.push_back(&u);
  m.backward_cursor = m.order_now.size();
  auto call = c10::make_intrusive<UnitCall>();
  call->unit = unit;
  call->forward = std::move(forward);
  // A shard that trains puts the node in the graph even when no input
  // requires a gradient (the first unit after the data).
  torch::Tensor anchor;
  for (const auto& f : u.flats) {
    if (f.shard.requires_grad()) {
      anchor = f.shard;
      break;
    }
  }
  auto outputs = UnitFunction::apply(call, anchor, at::TensorList(inputs));
  return outputs[0];
}

FullyShardedModel::FullyShardedModel(
    std::shared_ptr<torch::nn::Module> model,
    std::shared_ptr<ProcessGroup> group,
    FsdpOptions options)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.model = std::move(model);
  im.global = group;
  im.group = std::move(group);
  im.options = std::move(options);
  const auto& o = im.options;
  if (o.param_dtype() && o.strategy() == ShardingStrategy::no_shard) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: param_dtype " + std::string(c10::toString(*o.param_dtype())) +
            " with NO_SHARD: under NO_SHARD the parameters are the shards "
            "the optimizer steps, so they keep their dtype. Leave "
            "param_dtype unset (autocast computes in the low precision), or "
            "shard.");
  }
  if ((o.strategy() == ShardingStrategy::hybrid_shard ||
       o.strategy() == ShardingStrategy::hybrid_shard_zero2) &&
      im.global && im.global->size() > 1) {
    im.split_hybrid();
  }
  if (im.group) {
    im.rank = im.group->rank();
    im.world = im.group->size();
  }
  if (o.reduce_dtype() && im.global && !im.global->can_sum(*o.reduce_dtype())) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: reduce_dtype " + std::string(c10::toString(*o.reduce_dtype())) +
            ": the " + im.global->backend() +
            " backend of this LibTorch cannot sum it (Gloo has bf16 from "
            "LibTorch 2). Leave reduce_dtype unset to reduce in the shards' "
            "dtype.");
  }
  if (!o.wrap_types().empty() && o.min_num_params() > 0) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: wrap by type (fsdp_transformer_layer_cls_to_wrap) and by size "
        "(fsdp_min_num_params) are both set; choose one auto-wrap policy.");
  }

  // Units: the modules the policy picks (never nested: a module inside a
  // unit is part of it), then the root with what is left.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>
      picked;
  if (!o.wrap_types().empty()) {
    std::function<void(const std::string&, torch::nn::Module&)> walk =
        [&](const std::string& path, torch::nn::Module& mod) {
          for (const auto& child : mod.named_children()) {
            const std::string sub =
                path.empty() ? child.key() : path + "." + child.key();
            if (type_matches(child.value()->name(), o.wrap_types())) {
              picked.emplace_back(sub, child.value());
            } else {
              walk(sub, *child.value());
            }
          }
        };
    walk("", *im.model);
    if (picked.empty()) {
      throw InvalidArgument(
          component::kDistributed,
          "FSDP: no module of the model is of a type to wrap (" +
              ampkit::detail::join(o.wrap_types(), ", ") +
              "; fsdp_transformer_layer_cls_to_wrap). Name the type of the "
              "model's repeated blocks, as TORCH_MODULE names it (Block for "
              "BlockImpl).");
    }
  } else if (o.min_num_params() > 0) {
    // accelerate's size_based_auto_wrap_policy: deepest first, a module
    // whose parameters not yet in a unit reach the threshold is one.
    std::function<int64_t(
        const std::string&, const std::shared_ptr<torch::nn::Module>&, bool)>
        walk = [&](const std::string& path,
                   const std::shared_ptr<torch::nn::Module>& mod,
                   bool root) -> int64_t {
      int64_t left = 0;
      for (const auto& p : mod->parameters(/*recurse=*/false)) {
        left += p.numel();
      }
      for (const auto& child : mod->named_children()) {
        const std::string sub =
            path.empty() ? child.key() : path + "." + child.key();
        left += walk(sub, child.value(), false);
      }
      if (!root && left >= o.min_num_params()) {
        // A unit inside would nest: only leaf-most picks are kept.
        bool has_unit_below = false;
        for (const auto& p : picked) {
          if (p.first.rfind(path + ".", 0) == 0) {
            has_unit_below = true;
          }
        }
        if (!has_unit_below) {
          picked.emplace_back(path, mod);
          return 0;
        }
      }
      return left;
    };
    walk("", im.model, true);
  }

  // Parameter names (deduplicated by tensor, as named_parameters does).
  std::unordered_map<const void*, std::string> name_of;
  for (const auto& item : im.model->named_parameters()) {
    name_of.emplace(item.value().unsafeGetTensorImpl(), item.key());
  }
  // Parameters shared between a unit and anything outside it cannot be in
  // two flat buffers.
  std::unordered_map<const void*, std::string> owner_unit;
  for (const auto& [path, mod] : picked) {
    for (const auto& p : mod->parameters()) {
      owner_unit.emplace(p.unsafeGetTensorImpl(), path);
    }
  }
  for (const auto& item : im.model->named_modules()) {
    const std::string& path = item.key();
    bool inside = false;
    for (const auto& pk : picked) {
      if (path == pk.first || path.rfind(pk.first + ".", 0) == 0) {
        inside = true;
      }
    }
    if (inside) {
      continue;
    }
    for (const auto& p : item.value()->parameters(/*recurse=*/false)) {
      auto it = owner_unit.find(p.unsafeGetTensorImpl());
      if (it != owner_unit.end()) {
        throw UsageError(
            component::kDistributed,
            "FSDP: parameter " + name_of[p.unsafeGetTensorImpl()] +
                " is used by unit '" + it->second +
                "' and outside it. A shared (tied) parameter must live in "
                "one unit: wrap the modules that share it together, or "
                "leave them to the root.");
      }
    }
  }
  // Each unit's parameters, in the model's order, split into flat buffers
  // by dtype and by whether they train.
  std::vector<std::pair<std::string, torch::nn::Module*>> unit_list{
      {"", nullptr}};
  for (const auto& [path, mod] : picked) {
    unit_list.emplace_back(path, mod.get());
  }
  std::unordered_map<std::string, size_t> unit_index;
  for (size_t k = 0; k < unit_list.size(); ++k) {
    unit_index[unit_list[k].first] = k;
  }
  using Key = std::pair<c10::ScalarType, bool>;
  std::vector<std::vector<std::pair<Key, std::vector<torch::Tensor>>>> split(
      unit_list.size());
  for (const auto& item : im.model->named_parameters()) {
    const auto& p = item.value();
    auto owner = owner_unit.find(p.unsafeGetTensorImpl());
    const size_t k = owner == owner_unit.end() ? 0 : unit_index[owner->second];
    const Key key{p.scalar_type(), p.requires_grad()};
    auto& groups = split[k];
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return g.first == key;
    });
    if (it == groups.end()) {
      groups.emplace_back(key, std::vector<torch::Tensor>{});
      it = groups.end() - 1;
    }
    it->second.push_back(p);
  }

  // Flatten, start from process 0's values, keep this process's shard.
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < unit_list.size(); ++k) {
    auto u = std::make_shared<FsdpUnit>();
    u->owner = &im;
    u->name = unit_list[k].first;
    u->module = unit_list[k].second;
    for (auto& [key, params] : split[k]) {
      std::vector<std::string> names;
      std::vector<torch::Tensor> values;
      int64_t total = 0;
      for (const auto& p : params) {
        names.push_back(name_of[p.unsafeGetTensorImpl()]);
        total += p.numel();
      }
      // One broadcast of the unit's values from process 0.
      torch::Tensor flat =
          torch::empty({total}, params.front().options().requires_grad(false));
      int64_t offset = 0;
      for (const auto& p : params) {
        flat.narrow(0, offset, p.numel()).copy_(p.detach().reshape({-1}));
        values.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
      }
      if (im.global && im.global->size() > 1) {
        im.global->broadcast(flat, 0);
      }
      u->flats.push_back(im.make_flat(names, params, values));
    }
    im.units.push_back(u);
  }
  im.collect_shards();
  if (im.global && im.global->size() > 1) {
    auto buffers = im.model->buffers();
    if (!buffers.empty()) {
      im.global->broadcast_coalesced(buffers, 0);
    }
  }
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (size_t i = 1; i < im.units.size(); ++i) {
    registry()[im.units[i]->module] = im.units[i];
  }
}

FullyShardedModel::~FullyShardedModel() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (size_t i = 1; i < impl_->units.size(); ++i) {
    registry().erase(impl_->units[i]->module);
  }
}

void FullyShardedModel::take_over(torch::optim::Optimizer& optimizer) {
  auto& im = *impl_;
  if (!optimizer.state().empty()) {
    throw UsageError(
        component::kDistributed,
        "FSDP: the optimizer has state already (it stepped); prepare it "
        "before its first step, so that its state is made for the shards.");
  }
  // Each parameter's group.
  std::unordered_map<const void*, size_t> group_of;
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      im.optimizer_params.push_back(p);
      if (!group_of.emplace(p.unsafeGetTensorImpl(), g).second) {
        throw UsageError(
            component::kDistributed,
            "FSDP: a parameter appears twice in the optimizer's "
            "param_groups; list each once.");
      }
    }
  }
  std::unordered_set<const void*> ours;
  for (const auto& u : im.units) {
    for (const auto& f : u->flats) {
      for (const auto& p : f.params) {
        ours.insert(p.unsafeGetTensorImpl());
      }
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      if (ours.count(p.unsafeGetTensorImpl()) == 0) {
        throw UsageError(
            component::kDistributed,
            "FSDP: param_groups[" + std::to_string(g) +
                "] holds a tensor that is not a parameter of the sharded "
                "model. Build the optimizer from the model's parameters, "
                "then prepare both.");
      }
    }
  }
  // Flat buffers whose parameters are in several groups are split by
  // group, from their full values (gathered once, here, before training).
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> shards_of(groups.size());
  for (auto& u : im.units) {
    std::vector<FlatParam> flats;
    for (auto& f : u->flats) {
      constexpr size_t kNone = static_cast<size_t>(-1);
      std::vector<size_t> gi;
      for (const auto& p : f.params) {
        auto it = group_of.find(p.unsafeGetTensorImpl());
        gi.push_back(it == group_of.end() ? kNone : it->second);
      }
      std::vector<size_t> order;  // the groups in the order met
      for (size_t g : gi) {
        if (std::find(order.begin(), order.end(), g) == order.end()) {
          order.push_back(g);
        }
      }
      if (order.size() == 1) {
        if (order[0] != kNone) {
          shards_of[order[0]].push_back(f.shard);
        }
        flats.push_back(std::move(f));
        continue;
      }
      // The full values in the shards' own dtype (under MixedPrecision a
      // gathered unit holds the compute dtype's).
      const torch::Tensor full = im.gathered_copy(f, f.shard);
      std::vector<torch::Tensor> values;
      for (size_t i = 0; i < f.params.size(); ++i) {
        values.push_back(f.piece(full, i).clone());
      }
      for (size_t g : order) {
        std::vector<std::string> names;
        std::vector<torch::Tensor> params, vals;
        for (size_t i = 0; i < f.params.size(); ++i) {
          if (gi[i] == g) {
            names.push_back(f.names[i]);
            params.push_back(f.params[i]);
            vals.push_back(values[i]);
          }
        }
        flats.push_back(im.make_flat(names, params, vals));
        if (g != kNone) {
          shards_of[g].push_back(flats.back().shard);
        }
      }
    }
    u->flats = std::move(flats);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].params() = shards_of[g];
  }
  im.collect_shards();
}

void FullyShardedModel::before_forward(bool sync) {
  auto& im = *impl_;
  im.sync = sync;
  for (auto& u : im.units) {
    u->entered = false;
  }
  if (!im.order_now.empty()) {
    im.order = std::move(im.order_now);
    im.order_now.clear();
  }
  im.backward_cursor = 0;
  im.gather(*im.units[0]);
}

std::vector<std::string> FullyShardedModel::units_not_entered() const {
  std::vector<std::string> out;
  for (size_t k = 1; k < impl_->units.size(); ++k) {
    const auto& u = *impl_->units[k];
    if (!u.entered) {
      out.push_back(u.name + " (" + u.module->name() + ")");
    }
  }
  return out;
}

void FullyShardedModel::after_forward_without_grad() {
  auto& im = *impl_;
  im.release(*im.units[0]);
}

void FullyShardedModel::after_backward() {
  auto& im = *impl_;
  FsdpUnit& root = *im.units[0];
  // A unit gathered ahead (prefetch) whose backward did not come.
  for (size_t k = 1; k < im.units.size(); ++k) {
    im.release(*im.units[k]);
  }
  if (!im.sync) {
    // An accumulation micro-step: the root's gradients stay in .grad (the
    // next backward adds to them), so its parameters stay gathered.
    return;
  }
  im.reduce(root);
  im.finish_reduces();
  im.release(root);
  std::string missing;
  for (size_t k = 1; k < im.units.size(); ++k) {
    auto& u = *im.units[k];
    if (u.trainable() && u.backwards < u.forwards) {
      missing += (missing.empty() ? "" : ", ") + u.name;
    }
    u.forwards = 0;
    u.backwards = 0;
  }
  if (!missing.empty()) {
    // Not an error: an evaluation forward without NoGradGuard leaves the
    // same trace. The units keep their shards' gradients as they were.
    warn(
        component::kDistributed,
        "FSDP: unit(s) " + missing +
            " ran a forward with gradients whose backward did not run by "
            "the end of this backward, so those gradients were not reduced: "
            "a unit's output must lead to the loss (evaluate under "
            "torch::NoGradGuard).");
  }
}

const std::vector<torch::Tensor>& FullyShardedModel::shards() const {
  return impl_->shards;
}

std::vector<std::string> FullyShardedModel::unit_names() const {
  std::vector<std::string> out;
  for (const auto& u : impl_->units) {
    out.push_back(u->name);
  }
  return out;
}

int64_t FullyShardedModel::held_bytes() const {
  int64_t bytes = 0;
  for (const auto& u : impl_->units) {
    for (const auto& f : u->flats) {
      bytes += f.shard.numel() * f.shard.element_size();
      if (f.shard.grad().defined()) {
        bytes += f.shard.grad().numel() * f.shard.grad().element_size();
      }
      if (f.gathered && impl_->sharded()) {
        bytes += f.full.numel() * f.full.element_size();
      }
      if (f.pending.defined()) {
        bytes += f.pending.numel() * f.pending.element_size();
      }
    }
  }
  return bytes;
}

int64_t FullyShardedModel::take_peak_gathered_bytes() {
  const int64_t peak = impl_->peak_gathered_bytes;
  impl_->peak_gathered_bytes = impl_->gathered_bytes;
  return peak;
}

void FullyShardedModel::for_each_full_gradient(
    const std::function<void(const torch::Tensor&, const torch::Tensor&)>& fn) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      const torch::Tensor& g = f.shard.grad();
      if (!f.shard.requires_grad() || !g.defined()) {
        continue;
      }
      const torch::Tensor full = im.gathered_copy(f, g);
      for (size_t i = 0; i < f.params.size(); ++i) {
        fn(f.params[i], f.piece(full, i));
      }
    }
  }
}

const std::vector<torch::Tensor>& FullyShardedModel::optimizer_parameters()
    const {
  return impl_->optimizer_params;
}

void FullyShardedModel::gather_all() {
  auto& im = *impl_;
  // Full precision (the shards' dtype), also under MixedPrecision: the
  // compute buffer is made again in that dtype while nothing uses it.
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      const auto own = f.shard.scalar_type();
      if (f.full.scalar_type() == own || !im.sharded()) {
        continue;
      }
      if (f.gathered) {
        throw UsageError(
            component::kDistributed,
            "FSDP: summon_full_params while unit '" + u->name +
                "' is gathered in its compute dtype (param_dtype " +
                std::string(c10::toString(f.full.scalar_type())) +
                ") for a backward still to come. Gather the full "
                "parameters before the forward or after the backward.");
      }
      f.full = freed_buffer(f.full.numel(), f.shard.options().dtype(own));
    }
  }
  for (auto& u : im.units) {
    im.gather(*u);
  }
  im.summoned = true;
}

std::vector<std::pair<std::string, torch::Tensor>>
FullyShardedModel::full_parameters(bool keep) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  std::unordered_map<std::string, torch::Tensor> values;
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      // One buffer at a time, in the shards' own dtype, into a temporary:
      // the units' gathered state is left as it is.
      const torch::Tensor full = im.gathered_copy(f, f.shard);
      if (!keep) {
        continue;
      }
      for (size_t i = 0; i < f.params.size(); ++i) {
        values[f.names[i]] = f.piece(full, i).clone();
      }
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (keep) {
    for (const auto& item : im.model->named_parameters()) {
      out.emplace_back(item.key(), values.at(item.key()));
    }
  }
  return out;
}

void FullyShardedModel::release_all(bool keep_values) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  im.summoned = false;
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      if (keep_values && f.gathered && im.sharded()) {
        const int64_t begin = im.rank * f.shard_size;
        f.shard.detach().copy_(f.full.narrow(0, begin, f.shard_size));
      }
      im.release(f);
      if (im.sharded() && f.full.scalar_type() != f.compute_dtype) {
        f.full = freed_buffer(
            f.full.numel(), f.shard.options().dtype(f.compute_dtype));
      }
    }
  }
}

void FullyShardedModel::load_resharded(
    torch::optim::Optimizer& optimizer,
    int64_t saved_processes,
    const std::function<void(int64_t)>& load) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  // Each shard the optimizer steps, with its buffer's length.
  std::unordered_map<const void*, const FlatParam*> flat_of;
  for (const auto& u : im.units) {
    for (const auto& f : u->flats) {
      flat_of[f.shard.unsafeGetTensorImpl()] = &f;
    }
  }
  auto& groups = optimizer.param_groups();
  std::vector<std::vector<torch::Tensor>> mine;
  for (auto& group : groups) {
    mine.push_back(group.params());
  }
  // Per shard: each tensor field's saved parts in process order, the
  // other fields, and a state to copy the type from.
  struct Found {
    std::map<std::string, std::vector<torch::Tensor>> parts;
    std::map<std::string, c10::IValue> values;
    std::unique_ptr<torch::optim::OptimizerParamState> like;
  };
  std::vector<std::vector<Found>> found(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    found[g].resize(mine[g].size());
  }
  auto restore = [&] {
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g].params() = mine[g];
    }
    optimizer.state().clear();
  };
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: the optimizer state saved by " +
            std::to_string(saved_processes) + " processes " + what +
            ". Resume with the model, optimizer and param groups it was "
            "saved with.");
  };
  try {
    for (int64_t q = 0; q < saved_processes; ++q) {
      // Stand-ins for the saved shards: the files key state by position.
      std::vector<std::vector<torch::Tensor>> slots(groups.size());
      for (size_t g = 0; g < groups.size(); ++g) {
        for (const auto& p : mine[g]) {
          slots[g].push_back(torch::empty({0}, p.options()));
        }
        groups[g].params() = slots[g];
      }
      optimizer.state().clear();
      load(q);
      for (size_t g = 0; g < groups.size(); ++g) {
        for (size_t k = 0; k < slots[g].size(); ++k) {
          auto it =
              optimizer.state().find(ampkit::detail::state_key(slots[g][k]));
          if (it == optimizer.state().end()) {
            continue;
          }
          Found& to = found[g][k];
          for (auto& [key, value] : ampkit::detail::state_fields(*it->second)) {
            if (value.isTensor()) {
              to.parts[key].push_back(value.toTensor().reshape({-1}));
              continue;
            }
            auto [known, fresh] = to.values.emplace(key, value);
            if (!fresh && !ampkit::detail::same_field(known->second, value)) {
              fail(
                  "disagrees on '" + key + "' of param_groups[" +
                  std::to_string(g) + "][" + std::to_string(k) +
                  "] between processes");
            }
          }
          if (!to.like) {
            to.like = it->second->clone();
          }
        }
      }
    }
    restore();
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t k = 0; k < mine[g].size(); ++k) {
        Found& from = found[g][k];
        if (!from.like) {
          continue;  // no state saved (the parameter never stepped)
        }
        const auto at = flat_of.find(mine[g][k].unsafeGetTensorImpl());
        if (at == flat_of.end()) {
          fail("is for tensors this model does not shard");
        }
        const FlatParam& f = *at->second;
        std::map<std::string, c10::IValue> fields = from.values;
        for (auto& [key, parts] : from.parts) {
          // In process order the parts cover the buffer: FULL_SHARD's
          // process q holds part q; HYBRID_SHARD's first machine holds
          // every part; NO_SHARD's process 0 holds the whole.
          std::vector<torch::Tensor> cover;
          int64_t covered = 0;
          for (const auto& part : parts) {
            if (covered >= f.total) {
              break;
            }
            cover.push_back(part);
            covered += part.numel();
          }
          if (covered < f.total) {
            fail(
                "holds " + std::to_string(covered) + " elements of '" + key +
                "' for a buffer of " + std::to_string(f.total) + " (" +
                ampkit::detail::join(f.names, ", ") + ")");
          }
          torch::Tensor full = torch::zeros(
              {f.shard_size * im.parts()}, cover.front().options());
          full.narrow(0, 0, f.total)
              .copy_(torch::cat(cover).narrow(0, 0, f.total));
          const int64_t begin = im.sharded() ? im.rank * f.shard_size : 0;
          fields[key] = full.narrow(0, begin, f.shard_size).clone();
        }
        optimizer.state()[ampkit::detail::state_key(mine[g][k])] =
            ampkit::detail::state_with_fields(*from.like, fields);
      }
    }
  } catch (...) {
    restore();
    throw;
  }
}

namespace {

// A flat buffer's name in sharded files: its unit's module path ("" is the
// root) and its index there (one buffer per param group and dtype).
std::string buffer_name(const FsdpUnit& u, size_t k) {
  return (u.name.empty() ? std::string("(root)") : u.name) + "#" +
         std::to_string(k);
}

// What must agree for a saved buffer to load: its length and parameters.
std::string buffer_layout(const FlatParam& f) {
  return std::to_string(f.total) + " " + ampkit::detail::join(f.names, ",");
}

constexpr const char* kPartKey = "fsdp_part";
constexpr const char* kPartsKey = "fsdp_parts";

}  // namespace

FullyShardedModel::SavedShards FullyShardedModel::local_shards() const {
  const auto& im = *impl_;
  SavedShards out;
  for (const auto& u : im.units) {
    for (size_t k = 0; k < u->flats.size(); ++k) {
      const FlatParam& f = u->flats[k];
      const std::string name = buffer_name(*u, k);
      out.tensors.emplace_back(name, f.shard.detach());
      out.layout[name] = buffer_layout(f);
    }
  }
  out.layout[kPartKey] = std::to_string(im.sharded() ? im.rank : 0);
  out.layout[kPartsKey] = std::to_string(im.parts());
  return out;
}

std::vector<torch::Tensor> FullyShardedModel::shards_from_saved(
    int64_t saved_processes,
    const std::function<SavedShards(int64_t)>& read) const {
  const auto& im = *impl_;
  torch::NoGradGuard no_grad;
  const int64_t global_rank = im.global ? im.global->rank() : 0;
  const int64_t global_size = im.global ? im.global->size() : 1;
  const int64_t my_part = im.sharded() ? im.rank : 0;
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: the sharded weights saved by " +
            std::to_string(saved_processes) + " processes " + what +
            ". Resume with the model, wrap policy and param groups they "
            "were saved with.");
  };
  auto number = [&](const SavedShards& saved, const char* key, int64_t q) {
    const auto it = saved.layout.find(key);
    const auto value = it == saved.layout.end() ? std::nullopt
                                                : ampkit::detail::parse_int(
                                                      it->second, 0, INT64_MAX);
    if (!value) {
      fail(
          "have no valid '" + std::string(key) + "' in process " +
          std::to_string(q) + "'s file");
    }
    return *value;
  };
  // Every saved part of each buffer, by its index among the saved parts:
  // this process's own file when it was saved with this layout, else
  // every process's (replicas under HYBRID_SHARD hold the same part).
  std::vector<SavedShards> files;
  int64_t saved_parts = 0;
  if (saved_processes == global_size) {
    files.push_back(read(global_rank));
    if (number(files[0], kPartsKey, global_rank) != im.parts() ||
        number(files[0], kPartKey, global_rank) != my_part) {
      files.clear();
    }
  }
  if (files.empty()) {
    for (int64_t q = 0; q < saved_processes; ++q) {
      files.push_back(read(q));
    }
  }
  saved_parts = number(files[0], kPartsKey, 0);
  std::vector<torch::Tensor> loaded;
  for (auto& u : im.units) {
    for (size_t k = 0; k < u->flats.size(); ++k) {
      FlatParam& f = u->flats[k];
      const std::string name = buffer_name(*u, k);
      std::vector<torch::Tensor> parts(static_cast<size_t>(saved_parts));
      for (size_t q = 0; q < files.size(); ++q) {
        const auto& saved = files[q];
        const auto layout = saved.layout.find(name);
        if (layout == saved.layout.end()) {
          fail(
              "have no buffer '" + name + "' (" +
              ampkit::detail::join(f.names, ", ") + ")");
        }
        if (layout->second != buffer_layout(f)) {
          fail(
              "hold buffer '" + name + "' as '" + layout->second +
              "' (length, parameters), this model as '" + buffer_layout(f) +
              "'");
        }
        const int64_t part = number(saved, kPartKey, static_cast<int64_t>(q));
        if (number(saved, kPartsKey, static_cast<int64_t>(q)) != saved_parts ||
            part >= saved_parts) {
          fail("disagree on how many parts the buffers were split into");
        }
        for (const auto& [key, value] : saved.tensors) {
          if (key == name) {
            parts[static_cast<size_t>(part)] = value.reshape({-1});
          }
        }
      }
      torch::Tensor shard;
      if (files.size() == 1 && saved_parts == im.parts()) {
        shard = parts[static_cast<size_t>(my_part)];
        if (!shard.defined() || shard.numel() != f.shard_size) {
          fail("hold another shard length for buffer '" + name + "'");
        }
      } else {
        for (size_t p = 0; p < parts.size(); ++p) {
          if (!parts[p].defined()) {
            fail(
                "lack part " + std::to_string(p) + " of " +
                std::to_string(saved_parts) + " of buffer '" + name + "'");
          }
        }
        const torch::Tensor joined = torch::cat(parts);
        if (joined.numel() < f.total) {
          fail("hold too few elements of buffer '" + name + "'");
        }
        torch::Tensor full =
            torch::zeros({f.shard_size * im.parts()}, f.shard.options());
        full.narrow(0, 0, f.total).copy_(joined.narrow(0, 0, f.total));
        shard = full.narrow(0, my_part * f.shard_size, f.shard_size);
      }
      loaded.push_back(shard);
    }
  }
  return loaded;
}

std::vector<torch::Tensor> FullyShardedModel::shards_from_full(
    const std::vector<std::pair<std::string, torch::Tensor>>& parameters)
    const {
  const auto& im = *impl_;
  torch::NoGradGuard no_grad;
  std::unordered_map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, value] : parameters) {
    by_name[name] = &value;
  }
  const int64_t my_part = im.sharded() ? im.rank : 0;
  std::vector<torch::Tensor> shards;
  for (const auto& u : im.units) {
    for (const FlatParam& f : u->flats) {
      // Only the elements of this process's range are copied, parameter
      // by parameter; the padding past the last parameter stays zero.
      const int64_t lo = my_part * f.shard_size;
      const int64_t hi = std::min(lo + f.shard_size, f.total);
      torch::Tensor shard = torch::zeros({f.shard_size}, f.shard.options());
      for (size_t i = 0; i < f.names.size(); ++i) {
        const auto it = by_name.find(f.names[i]);
        if (it == by_name.end() ||
            it->second->sizes() != c10::IntArrayRef(f.shapes[i])) {
          throw InvalidArgument(
              component::kDistributed,
              "FSDP: the whole weights to load " +
                  std::string(
                      it == by_name.end()
                          ? "have no '" + f.names[i] + "'"
                          : "hold '" + f.names[i] + "' in another shape") +
                  "; nothing was loaded. Load weights saved from this "
                  "model.");
        }
        const int64_t begin = std::max(lo, f.offsets[i]);
        const int64_t end = std::min(hi, f.offsets[i] + f.numels[i]);
        if (end > begin) {
          shard.narrow(0, begin - lo, end - begin)
              .copy_(it->second->reshape({-1}).narrow(
                  0, begin - f.offsets[i], end - begin));
        }
      }
      shards.push_back(shard);
    }
  }
  return shards;
}

std::vector<std::pair<std::string, std::vector<int64_t>>>
FullyShardedModel::parameter_shapes() const {
  const auto& im = *impl_;
  std::unordered_map<std::string, std::vector<int64_t>> shapes;
  for (const auto& u : im.units) {
    for (const FlatParam& f : u->flats) {
      for (size_t i = 0; i < f.names.size(); ++i) {
        shapes[f.names[i]] = f.shapes[i];
      }
    }
  }
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& item : im.model->named_parameters()) {
    out.emplace_back(item.key(), shapes.at(item.key()));
  }
  return out;
}

void FullyShardedModel::load_shards(const std::vector<torch::Tensor>& shards) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  size_t n = 0;
  for (auto& u : im.units) {
    n += u->flats.size();
  }
  if (shards.size() != n) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP load_shards: got " + std::to_string(shards.size()) +
            " shards for " + std::to_string(n) +
            " flat buffers. Pass what shards_from_saved or shards_from_full "
            "of this model returned.");
  }
  size_t k = 0;
  for (auto& u : im.units) {
    for (FlatParam& f : u->flats) {
      if (shards[k++].numel() != f.shard_size) {
        throw InvalidArgument(
            component::kDistributed,
            "FSDP load_shards: shard " + std::to_string(k - 1) + " holds " +
                std::to_string(shards[k - 1].numel()) + " elements, not " +
                std::to_string(f.shard_size) +
                ". Pass what shards_from_saved or shards_from_full of this "
                "model returned.");
      }
    }
  }
  // Everything checked: the gathered copies are dropped (the next forward
  // gathers the loaded shards), and the shards take the values.
  k = 0;
  for (auto& u : im.units) {
    for (FlatParam& f : u->flats) {
      im.release(f);
      f.shard.detach().copy_(shards[k++]);
    }
  }
}

const FsdpOptions& FullyShardedModel::options() const {
  return impl_->options;
}

}  // namespace ampkit::dist
