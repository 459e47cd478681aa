// Resolving AcceleratorOptions: explicit > environment > config > default,
// then the device, "auto" and the precision checks against the hardware.
#include "ampkit/accelerator/options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "accelerator/auto_precision.h"
#include "ampkit/error.h"
#include "ampkit/track/tracker.h"

#include "utils/components.h"
#include "utils/strings.h"

using ampkit::detail::lower;
using ampkit::detail::upper;

namespace ampkit {

namespace {

template <typename T>
struct Picked {
  T value;
  std::string source;
};

// The first of `names` that is set, with its name.
std::optional<std::pair<std::string, std::string>> first_set(
    const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = env(name)) {
      return std::make_pair(std::string(name), *value);
    }
  }
  return std::nullopt;
}

Precision env_precision(const std::string& name, const std::string& value) {
  try {
    return parse_precision(value);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(
        component::kAccelerator,
        "environment variable " + name + " must be a mixed_precision, got '" +
            value +
            "'. Valid values: no, fp16, bf16, auto; unset it or fix "
            "the launcher's --mixed_precision.");
  }
}

int64_t env_integer(const std::string& name, const std::string& value) {
  const auto parsed = detail::parse_int(value);
  if (!parsed) {
    throw InvalidArgument(
        component::kAccelerator,
        "environment variable " + name + " must be an integer, got '" + value +
            "'. Set it to a whole number such as 4, or unset it.");
  }
  return *parsed;
}

double env_double(const std::string& name, const std::string& value) {
  const auto parsed = detail::parse_double(value);
  if (!parsed) {
    throw InvalidArgument(
        component::kAccelerator,
        "environment variable " + name + " must be a number, got '" + value +
            "'. Set it to a value such as 1.0, or unset it.");
  }
  return *parsed;
}

bool env_bool(const std::string& name, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    return true;
  }
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) {
    return false;
  }
  throw InvalidArgument(
      component::kAccelerator,
      "environment variable " + name + " must be a boolean, got '" + value +
          "'. Valid values: 1, 0, true, false, yes, no.");
}

std::string env_source(const std::string& name) {
  return "env " + name;
}

// The one precedence rule: explicit > the first of the environment
// variables that is set (parsed by `parse`) > the config file > fallback.
template <typename T, typename Parse>
Picked<T> pick(
    const std::optional<T>& explicit_value,
    const EnvLookup& env,
    std::initializer_list<const char*> env_names,
    Parse parse,
    const std::optional<T>& config_value,
    const std::string& config_origin,
    T fallback) {
  if (explicit_value) {
    return {*explicit_value, "explicit"};
  }
  if (auto e = first_set(env, env_names)) {
    return {parse(e->first, e->second), env_source(e->first)};
  }
  if (config_value) {
    return {*config_value, config_origin};
  }
  return {fallback, "default"};
}

Picked<Precision> pick_precision(
    const AcceleratorOptions& options, const EnvLookup& env) {
  return pick(
      options.mixed_precision(),
      env,
      {kEnvMixedPrecision, kEnvAccelerateMixedPrecision},
      env_precision,
      options.config().mixed_precision,
      options.config().origin,
      Precision::no);
}

Picked<int64_t> pick_accumulation(
    const AcceleratorOptions& options, const EnvLookup& env) {
  const Picked<int64_t> picked = pick(
      options.gradient_accumulation_steps(),
      env,
      {kEnvGradientAccumulationSteps, kEnvAccelerateGradientAccumulationSteps},
      env_integer,
      options.config().gradient_accumulation_steps,
      options.config().origin,
      int64_t{1});
  if (picked.value < 1) {
    throw InvalidArgument(
        component::kAccelerator,
        "gradient_accumulation_steps must be >= 1, got " +
            std::to_string(picked.value) + " (" + picked.source +
            "). Use 1 for no accumulation.");
  }
  return picked;
}

Picked<bool> pick_cpu(const AcceleratorOptions& options, const EnvLookup& env) {
  return pick(
      options.cpu(),
      env,
      {kEnvUseCpu, kEnvAccelerateUseCpu},
      env_bool,
      options.config().use_cpu,
      options.config().origin,
      false);
}

std::string format_double(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// How the start-up table and the logged config show a plain option.
std::string setting_text(const std::string& value) {
  return value.empty() ? "\"\"" : value;
}
std::string setting_text(bool value) {
  return value ? "true" : "false";
}
std::string setting_text(int64_t value) {
  return std::to_string(value);
}
std::string setting_text(double value) {
  return format_double(value);
}
std::string setting_text(Precision value) {
  return to_string(value);
}
std::string setting_text(std::chrono::milliseconds value) {
  const int64_t ms = value.count();
  if (ms % 60000 == 0) {
    return std::to_string(ms / 60000) + " min";
  }
  if (ms % 1000 == 0) {
    return std::to_string(ms / 1000) + " s";
  }
  return std::to_string(ms) + " ms";
}

}  // namespace

// accelerate launch's FSDP variables (ACCELERATE_USE_FSDP, FSDP_*, as its
// FullyShardedDataParallelPlugin reads them): what ampkit builds is taken,
// the rest refused by name.
std::optional<dist::FsdpOptions> env_fsdp(const EnvLookup& env) {
  const auto use = env("ACCELERATE_USE_FSDP");
  if (!use || !env_bool("ACCELERATE_USE_FSDP", *use)) {
    return std::nullopt;
  }
  dist::FsdpOptions o;
  auto refuse = [](const std::string& name,
                   const std::string& value,
                   const std::string& why) {
    throw Unsupported(
        component::kAccelerator,
        "environment variable " + name + "=" + value +
            " (fsdp_config): " + why);
  };
  if (auto v = env("FSDP_SHARDING_STRATEGY")) {
    o.strategy(dist::parse_sharding_strategy(upper(*v)));
  }
  const std::string policy =
      upper(env("FSDP_AUTO_WRAP_POLICY").value_or("NO_WRAP"));
  if (policy == "TRANSFORMER_BASED_WRAP") {
    std::vector<std::string> types;
    for (const std::string& name :
         detail::split(env("FSDP_TRANSFORMER_CLS_TO_WRAP").value_or(""), ',')) {
      if (!name.empty()) {
        types.push_back(name);
      }
    }
    if (types.empty()) {
      throw InvalidArgument(
          component::kAccelerator,
          "FSDP_AUTO_WRAP_POLICY=TRANSFORMER_BASED_WRAP needs "
          "fsdp_transformer_layer_cls_to_wrap (FSDP_TRANSFORMER_CLS_TO_WRAP): "
          "the type of the model's repeated blocks, for example Block. A C++ "
          "model has no _no_split_modules to take it from.");
    }
    o.wrap_types(types);
  } else if (policy == "SIZE_BASED_WRAP") {
    const std::string n = env("FSDP_MIN_NUM_PARAMS").value_or("0");
    o.min_num_params(env_integer("FSDP_MIN_NUM_PARAMS", n));
    if (o.min_num_params() <= 0) {
      throw InvalidArgument(
          component::kAccelerator,
          "FSDP_AUTO_WRAP_POLICY=SIZE_BASED_WRAP needs fsdp_min_num_params "
          "(FSDP_MIN_NUM_PARAMS) above 0, got " +
              n + ".");
    }
  } else if (policy != "NO_WRAP") {
    throw InvalidArgument(
        component::kAccelerator,
        "environment variable FSDP_AUTO_WRAP_POLICY must be "
        "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, got '" +
            policy + "'.");
  }
  if (auto v = env("FSDP_ACTIVATION_CHECKPOINTING")) {
    o.activation_checkpointing(env_bool("FSDP_ACTIVATION_CHECKPOINTING", *v));
  }
  if (auto v = env("FSDP_BACKWARD_PREFETCH")) {
    o.backward_prefetch(dist::parse_backward_prefetch(upper(*v)));
  }
  if (auto v = env("FSDP_FORWARD_PREFETCH")) {
    o.forward_prefetch(env_bool("FSDP_FORWARD_PREFETCH", *v));
  }
  if (auto v = env("FSDP_STATE_DICT_TYPE")) {
    o.state_dict_type(dist::parse_state_dict_type(upper(*v)));
  }
  // What ampkit does not build, each with the one value it accepts (a
  // boolean's "false" also stands for unset) and the reason.
  struct Only {
    const char* name;
    const char* value;
    const char* why;
  };
  static const Only kOnly[] = {
      {"FSDP_OFFLOAD_PARAMS",
       "false",
       "offloading parameters to the CPU is not built in ampkit. Set "
       "fsdp_offload_params: false."},
      {"FSDP_VERSION",
       "1",
       "ampkit's FSDP follows FSDP1's units and flat parameters. Set "
       "fsdp_version: 1."},
  };
  for (const Only& only : kOnly) {
    const auto v = env(only.name);
    if (!v) {
      continue;
    }
    const bool ok = std::string(only.value) == "false"
                        ? !env_bool(only.name, *v)
                        : upper(*v) == only.value;
    if (!ok) {
      refuse(only.name, *v, only.why);
    }
  }
  // FSDP_USE_ORIG_PARAMS, FSDP_SYNC_MODULE_STATES and
  // FSDP_CPU_RAM_EFFICIENT_LOADING: the parameters keep their names and
  // shapes for saving, and every process starts from process 0's values,
  // whichever they say.
  return o;
}

namespace {

// Where each resolved setting came from, as the start-up table shows it.
struct Sources {
  std::string device;
  std::string precision_value;
  std::string precision;
  std::string accumulation;
  std::string scaling;
  std::string log_with;
  std::string debug;
  std::string zero;
  std::string fsdp;
  std::string clipping;
};

// --cpu, else the current CUDA device when there is one (a launched
// process's GPU is its local rank's: resolve_distributed).
void resolve_device(
    const AcceleratorOptions& options,
    const EnvLookup& env,
    const Capabilities& caps,
    ResolvedAcceleratorOptions& r,
    Sources& s) {
  const Picked<bool> cpu = pick_cpu(options, env);
  r.cpu = cpu.value;
  if (!r.cpu && caps.cuda_available) {
    r.device = c10::Device(
        c10::DeviceType::CUDA,
        static_cast<c10::DeviceIndex>(caps.current_cuda_device));
  }
  s.device =
      r.cpu ? "cpu (" + cpu.source + ")"
            : (caps.cuda_available ? "CUDA is available" : "no CUDA device");
}

// mixed_precision, "auto" decided now or timed on the model, checked
// against the device.
void resolve_precision(
    const AcceleratorOptions& options,
    const EnvLookup& env,
    const Capabilities& caps,
    ResolvedAcceleratorOptions& r,
    Sources& s) {
  const Picked<Precision> precision = pick_precision(options, env);
  r.requested_precision = precision.value;
  r.mixed_precision = precision.value;
  s.precision_value = to_string(precision.value);
  s.precision = precision.source;
  // On a GPU with bf16 (compute capability >= 8.0) fp32 and bf16 are both
  // plausible (a small model can be slower in bf16, as on a CPU), so both
  // are timed on the model. fp16 (older GPUs) needs loss scaling from the
  // start, so it is decided without a measurement.
  std::vector<Precision> gpu_candidates;
  if (r.device.is_cuda()) {
    for (const auto& gpu : caps.cuda_devices) {
      if (gpu.index == r.device.index() && gpu.bf16()) {
        gpu_candidates = {Precision::no, Precision::bf16};
      }
    }
  }
  const std::vector<Precision> candidates =
      precision.value == Precision::automatic
          ? detail::auto_candidates(
                r.device.is_cpu(), caps.cpu.native_bf16(), gpu_candidates)
          : std::vector<Precision>{};
  if (candidates.size() > 1) {
    // More than one could be fastest: timed on the user's model at its
    // first forward (accelerator/auto_precision.cpp), fp32 until then.
    r.mixed_precision = Precision::no;
    r.auto_candidates = candidates;
    std::string names;
    for (const Precision p : candidates) {
      names += (names.empty() ? "" : ", ") + to_string(p);
    }
    r.auto_precision_reason =
        "decided at the model's first forward (" + names + " timed on it)";
    s.precision_value = "auto -> measured on the model";
    s.precision += "; " + r.auto_precision_reason;
  } else if (precision.value == Precision::automatic) {
    const PrecisionChoice choice = auto_precision(r.device.type(), caps);
    r.mixed_precision = choice.precision;
    r.auto_precision_reason = choice.reason;
    s.precision_value = "auto -> " + to_string(choice.precision);
    s.precision += "; " + choice.reason;
  }
  if (r.mixed_precision != Precision::no) {
    if (auto reason = autocast_unsupported_reason(
            r.device.type(), to_dtype(r.mixed_precision), caps)) {
      throw Unsupported(
          component::kAccelerator,
          "mixed_precision " + to_string(r.mixed_precision) + " (" +
              precision.source + ") cannot run on " + r.device.str() + ": " +
              *reason);
    }
  }
}

// The GradScaler: on for fp16 unless told otherwise.
void resolve_loss_scaling(
    const AcceleratorOptions& options,
    ResolvedAcceleratorOptions& r,
    Sources& s) {
  r.grad_scaler = options.grad_scaler();
  s.scaling = "default (on for fp16 only)";
  bool scaling = r.mixed_precision == Precision::fp16;
  if (options.loss_scaling()) {
    scaling = *options.loss_scaling();
    s.scaling = "explicit";
  }
  if (scaling && !r.grad_scaler.enabled()) {
    scaling = false;
    s.scaling = "explicit (grad_scaler.enabled false)";
  }
  r.loss_scaling = scaling;
  if (r.mixed_precision == Precision::fp16 && !r.loss_scaling) {
    r.warnings.push_back(
        "mixed_precision fp16 without loss scaling: gradients below fp16's "
        "smallest value (6e-8) become zero. Leave loss_scaling unset to use "
        "the GradScaler.");
  }
}

// The plain options, the trackers and how often they log.
void resolve_tracking(
    const AcceleratorOptions& options,
    const EnvLookup& env,
    ResolvedAcceleratorOptions& r,
    Sources& s) {
  r.seed = options.seed();
  r.project_dir = options.project_dir().value_or(".");
#define AMPKIT_COPY_OPTION(type, name, default_value) r.name = options.name();
  AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS(AMPKIT_COPY_OPTION)
#undef AMPKIT_COPY_OPTION
  // No launcher sets log_with, so no environment variable takes part.
  const Picked<std::string> log_with = pick(
      options.log_with(),
      env,
      {},
      [](const std::string&, const std::string& value) { return value; },
      options.config().log_with,
      options.config().origin,
      std::string());
  r.log_with = track::parse_log_with(log_with.value);
  s.log_with = log_with.source;
  for (const auto& tracker : options.trackers()) {
    if (!tracker) {
      throw InvalidArgument(
          component::kAccelerator,
          "trackers holds a null tracker. Pass "
          "std::make_shared<YourTracker>(...) for each.");
    }
  }
  r.trackers = options.trackers();
  r.profile_options = options.profile_options();
  if (r.log_every_n_steps < 1) {
    throw InvalidArgument(
        component::kAccelerator,
        "log_every_n_steps must be >= 1, got " +
            std::to_string(r.log_every_n_steps) + ". Use 1 to log every step.");
  }
}

// The launcher's variables, each process's GPU, and DDP's settings.
void resolve_distributed(
    const AcceleratorOptions& options,
    const EnvLookup& env,
    const Capabilities& caps,
    ResolvedAcceleratorOptions& r,
    Sources& s) {
  r.dist = dist::detect_env(env);
  if (r.dist.distributed() && r.device.is_cuda()) {
    // One GPU per process on each machine, by local rank.
    if (r.dist.local_rank >= static_cast<int64_t>(caps.cuda_devices.size()) &&
        !caps.cuda_devices.empty()) {
      throw InvalidArgument(
          component::kAccelerator,
          "LOCAL_RANK " + std::to_string(r.dist.local_rank) +
              " has no GPU: "
              "this machine has " +
              std::to_string(caps.cuda_devices.size()) +
              ". Start at most one process per GPU (ampkit launch "
              "--num_processes), or pass --cpu.");
    }
    r.device = c10::Device(
        c10::DeviceType::CUDA,
        static_cast<c10::DeviceIndex>(r.dist.local_rank));
  }
  if (r.device.is_cuda()) {
    for (const auto& d : caps.cuda_devices) {
      if (d.index == r.device.index()) {
        r.gpu_pci_bus_id = d.pci_bus_id;
      }
    }
  }
  if (r.timeout.count() <= 0) {
    throw InvalidArgument(
        component::kAccelerator,
        "timeout must be positive, got " + std::to_string(r.timeout.count()) +
            " ms. Pass e.g. std::chrono::minutes(30).");
  }
  const Picked<bool> debug = pick(
      options.debug(),
      env,
      {kEnvDebug, kEnvAccelerateDebug},
      env_bool,
      std::optional<bool>(),
      "",
      false);
  r.debug = debug.value;
  s.debug = debug.source;
  if (!(r.bucket_cap_mb > 0)) {
    throw InvalidArgument(
        component::kAccelerator,
        "bucket_cap_mb must be positive, got " +
            format_double(r.bucket_cap_mb) + ". DDP's default is 25.");
  }
  if (r.gradient_compression == Precision::automatic) {
    throw InvalidArgument(
        component::kAccelerator,
        "gradient_compression must be no, bf16 or fp16, got auto.");
  }
}

// FSDP's settings: explicit, else accelerate's ACCELERATE_USE_FSDP and
// FSDP_* variables, else the config file's fsdp_config.
std::optional<dist::FsdpOptions> pick_fsdp(
    const AcceleratorOptions& options, const EnvLookup& env, Sources& s) {
  std::optional<dist::FsdpOptions> fsdp = options.fsdp();
  s.fsdp = fsdp ? "explicit" : "default";
  if (!fsdp) {
    fsdp = env_fsdp(env);
    if (fsdp) {
      s.fsdp = "env ACCELERATE_USE_FSDP";
    }
  }
  if (!fsdp && !options.config().fsdp_env.empty()) {
    // The config's fsdp_config, read as accelerate launch would pass it.
    const auto& pairs = options.config().fsdp_env;
    fsdp = env_fsdp([&pairs](const std::string& name) {
      for (const auto& [key, value] : pairs) {
        if (key == name) {
          return std::optional<std::string>(value);
        }
      }
      return std::optional<std::string>();
    });
    s.fsdp = options.config().origin;
  }
  return fsdp;
}

// ZeRO's stage and FSDP, which exclude each other (stage 3 is FSDP's
// FULL_SHARD) and DDP's synchronizer options.
void resolve_sharding(
    const AcceleratorOptions& options,
    const EnvLookup& env,
    ResolvedAcceleratorOptions& r,
    Sources& s) {
  const Picked<int64_t> zero = pick(
      options.zero_stage(),
      env,
      {kEnvZeroStage, kEnvAccelerateZeroStage},
      env_integer,
      options.config().zero_stage,
      options.config().origin,
      int64_t{0});
  r.zero_stage = zero.value;
  s.zero = zero.source;
  if (r.zero_stage < 0 || r.zero_stage > 3) {
    throw InvalidArgument(
        component::kAccelerator,
        "zero_stage must be 0, 1, 2 or 3, got " + std::to_string(r.zero_stage) +
            " (" + zero.source + ").");
  }
  r.fsdp = pick_fsdp(options, env, s);
  if (r.zero_stage == 3) {
    // DeepSpeed's stage 3 is FSDP's FULL_SHARD.
    if (r.fsdp && r.fsdp->strategy() != dist::ShardingStrategy::full_shard) {
      throw InvalidArgument(
          component::kAccelerator,
          "zero_stage 3 (" + zero.source +
              ") is FULL_SHARD, but FSDP is "
              "set to " +
              dist::to_string(r.fsdp->strategy()) + " (" + s.fsdp +
              "). Choose one.");
    }
    if (!r.fsdp) {
      r.fsdp = dist::FsdpOptions();
      s.fsdp = "zero_stage 3 (" + zero.source + ")";
    }
    r.zero_stage = 0;
  } else if (r.zero_stage > 0 && r.fsdp) {
    throw InvalidArgument(
        component::kAccelerator,
        "zero_stage " + std::to_string(r.zero_stage) + " (" + zero.source +
            ") and FSDP (" + s.fsdp +
            ") both shard the optimizer; choose one (FSDP's SHARD_GRAD_OP is "
            "zero_stage 2 with FSDP's units).");
  }
  if (r.fsdp && (r.find_unused_parameters || r.static_graph ||
                 r.gradient_compression != Precision::no)) {
    throw InvalidArgument(
        component::kAccelerator,
        std::string("FSDP with ") +
            (r.find_unused_parameters ? "find_unused_parameters"
             : r.static_graph         ? "static_graph"
                                      : "gradient_compression") +
            " is not supported: these are options of DDP's synchronizer, "
            "which FSDP replaces (a unit's gradients are reduce-scattered "
            "in full precision when its backward ends). Leave it at its "
            "default under FSDP.");
  }
}

void resolve_clipping(
    const AcceleratorOptions& options,
    const EnvLookup& env,
    ResolvedAcceleratorOptions& r,
    Sources& s) {
  const Picked<double> clipping = pick(
      options.gradient_clipping(),
      env,
      {kEnvGradientClipping, kEnvAccelerateGradientClipping},
      env_double,
      options.config().gradient_clipping,
      options.config().origin,
      0.0);
  r.gradient_clipping = clipping.value;
  s.clipping = clipping.source;
  if (!(r.gradient_clipping >= 0) || std::isinf(r.gradient_clipping)) {
    throw InvalidArgument(
        component::kAccelerator,
        "gradient_clipping must be a finite norm >= 0 (0: no clipping), got " +
            format_double(r.gradient_clipping) + " (" + clipping.source +
            "). DeepSpeed configs often use 1.0.");
  }
}

// Combinations the synchronizer cannot train right, refused on every
// LibTorch version.
void check_synchronizer_options(const ResolvedAcceleratorOptions& r) {
  if (r.zero_stage > 0 && (r.find_unused_parameters || r.static_graph)) {
    // static_graph allows parameters without a gradient, as
    // find_unused_parameters does.
    const std::string option =
        r.find_unused_parameters ? "find_unused_parameters" : "static_graph";
    throw InvalidArgument(
        component::kAccelerator,
        "zero_stage " + std::to_string(r.zero_stage) + " with " + option +
            " is not supported: a shard steps as "
            "one tensor, so a parameter without a gradient would still move "
            "with its optimizer's momentum. Use zero_stage 0 for this "
            "model, or make every parameter take part in the loss.");
  }
  if (r.static_graph && r.gradient_accumulation_steps > 1) {
    // LibTorch 2.x's Reducer counts a backward without synchronisation as
    // its first static iteration, and the ranks then drift apart (1.13
    // trains right): refused on every version rather than wrong on some.
    throw InvalidArgument(
        component::kAccelerator,
        "static_graph with gradient_accumulation_steps " +
            std::to_string(r.gradient_accumulation_steps) +
            " is not supported: the DDP Reducer's first static iteration "
            "must synchronise, and accumulation micro-steps do not. Use "
            "static_graph(false) (the default) with accumulation, or "
            "gradient_accumulation_steps 1.");
  }
}

void check_checkpointing(const ResolvedAcceleratorOptions& r) {
  if (r.total_limit < 0) {
    throw InvalidArgument(
        component::kAccelerator,
        "total_limit must be >= 0 (0 keeps every checkpoint), got " +
            std::to_string(r.total_limit) + ".");
  }
}

// The fsdp row: the sharding strategy, how units are chosen, and what is
// on.
std::string fsdp_summary(const dist::FsdpOptions& fsdp) {
  std::string text = dist::to_string(fsdp.strategy());
  if (!fsdp.wrap_types().empty()) {
    text += ", units by type";
    for (const auto& t : fsdp.wrap_types()) {
      text += " " + t;
    }
  } else if (fsdp.min_num_params() > 0) {
    text += ", units by size >= " + std::to_string(fsdp.min_num_params());
  } else {
    text += ", one unit";
  }
  if (fsdp.activation_checkpointing()) {
    text += ", activation checkpointing";
  }
  if (fsdp.forward_prefetch()) {
    text += ", forward prefetch";
  }
  if (fsdp.backward_prefetch() != dist::BackwardPrefetch::none) {
    text += ", " + dist::to_string(fsdp.backward_prefetch());
  }
  return text;
}

// The start-up table's rows, in the order it has always shown them.
void add_rows(
    const AcceleratorOptions& options,
    const Capabilities& caps,
    const Sources& s,
    ResolvedAcceleratorOptions& r) {
  auto add = [&r](std::string name, std::string value, std::string source) {
    r.rows.push_back({std::move(name), std::move(value), std::move(source)});
  };
  add("mixed_precision", s.precision_value, s.precision);
  add("gradient_accumulation_steps",
      std::to_string(r.gradient_accumulation_steps),
      s.accumulation);
  add("device", r.device.str(), s.device);
  add("loss_scaling",
      r.loss_scaling
          ? "on (init_scale " + format_double(r.grad_scaler.init_scale()) +
                ", growth_interval " +
                std::to_string(r.grad_scaler.growth_interval()) + ")"
          : "off",
      s.scaling);
  std::string trackers;
  for (const auto& t : r.log_with) {
    trackers += (trackers.empty() ? "" : ",") + t;
  }
  for (const auto& t : r.trackers) {
    trackers += (trackers.empty() ? "" : ",") + t->name();
  }
  add("log_with",
      trackers.empty() ? "none" : trackers,
      r.log_with.empty() && !r.trackers.empty() ? std::string("explicit")
                                                : s.log_with);
  add("seed",
      r.seed ? std::to_string(*r.seed) : "unset",
      r.seed ? "explicit" : "default");
  add("project_dir",
      r.project_dir,
      options.project_dir() ? "explicit" : "default");
  add("processes",
      r.dist.distributed() ? "rank " + std::to_string(r.dist.rank) + " of " +
                                 std::to_string(r.dist.world_size) +
                                 (r.dist.single_node() ? " (one machine)"
                                                       : " (several machines)")
                           : "1",
      r.dist.distributed()
          ? std::string("env (") + dist::to_string(r.dist.launcher) + ")"
          : "default");
  add("debug", r.debug ? "true" : "false", s.debug);
  add("zero_stage",
      std::to_string(r.zero_stage) +
          (r.zero_stage == 1   ? " (optimizer state sharded)"
           : r.zero_stage == 2 ? " (optimizer state and gradients sharded)"
                               : " (DDP: nothing sharded)"),
      s.zero);
  if (r.fsdp) {
    add("fsdp", fsdp_summary(*r.fsdp), s.fsdp);
  }
  add("gradient_clipping",
      r.gradient_clipping > 0 ? format_double(r.gradient_clipping) : "off",
      s.clipping);
#define AMPKIT_OPTION_ROW(type, name, default_value) \
  add(#name,                                         \
      setting_text(r.name),                          \
      r.name == type(default_value) ? "default" : "explicit");
  AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS(AMPKIT_OPTION_ROW)
#undef AMPKIT_OPTION_ROW
  add("libtorch",
      std::to_string(caps.torch_major) + "." + std::to_string(caps.torch_minor),
      "running");
}

}  // namespace

ResolvedAcceleratorOptions resolve_options(
    const AcceleratorOptions& options,
    const EnvLookup& env,
    const Capabilities& caps) {
  ResolvedAcceleratorOptions r;
  Sources s;
  // In this order: the precision is checked on the device, loss scaling
  // follows the precision, a launched process's GPU is its local rank's,
  // and the synchronizer's checks see the sharding and the accumulation.
  resolve_device(options, env, caps, r, s);
  resolve_precision(options, env, caps, r, s);
  const Picked<int64_t> accumulation = pick_accumulation(options, env);
  r.gradient_accumulation_steps = accumulation.value;
  s.accumulation = accumulation.source;
  resolve_loss_scaling(options, r, s);
  resolve_tracking(options, env, r, s);
  resolve_distributed(options, env, caps, r, s);
  resolve_sharding(options, env, r, s);
  resolve_clipping(options, env, r, s);
  check_synchronizer_options(r);
  check_checkpointing(r);
  add_rows(options, caps, s, r);
  return r;
}

std::string ResolvedAcceleratorOptions::table() const {
  size_t name_width = std::string("setting").size();
  size_t value_width = std::string("value").size();
  for (const auto& row : rows) {
    name_width = std::max(name_width, row.name.size());
    value_width = std::max(value_width, row.value.size());
  }
  std::ostringstream out;
  auto line =
      [&](const std::string& a, const std::string& b, const std::string& c) {
        out << "  " << a << std::string(name_width - a.size() + 2, ' ') << b
            << std::string(value_width - b.size() + 2, ' ') << c << '\n';
      };
  line("setting", "value", "source");
  for (const auto& row : rows) {
    line(row.name, row.value, row.source);
  }
  return out.str();
}

}  // namespace ampkit
