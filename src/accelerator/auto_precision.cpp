// mixed_precision "auto" decided on the user's model: a generic probe
// (a convolution and a linear layer) said bf16 is 1.5x as fast on a CPU
// with AVX512-BF16, and a transformer then trained 1.5-2x slower in it.
// So the candidates are timed on the prepared model and its first batch.
#include "accelerator/auto_precision.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>

#include "accelerator/state.h"
#include "amp/probe_cache.h"
#include "ampkit/utils/random.h"
#include "utils/components.h"

namespace ampkit::detail {
namespace {

constexpr const char* kCacheName = "auto_precision.json";

std::mutex g_override_mutex;
std::optional<AutoProbeOverride> g_override;

std::optional<AutoProbeOverride> current_override() {
  std::lock_guard<std::mutex> lock(g_override_mutex);
  return g_override;
}

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << ' ' << t.scalar_type();
  return out.str();
}

// One training step's forward and backward in `precision`; seconds.
double timed_step(
    Precision precision,
    c10::DeviceType device,
    torch::nn::Module& module,
    const std::function<std::vector<torch::Tensor>()>& forward) {
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor loss;
  {
    Autocast guard(device, precision);
    for (const auto& out : forward()) {
      if (out.is_floating_point()) {
        const auto part = out.to(torch::kFloat).sum();
        loss = loss.defined() ? loss + part : part;
      }
    }
  }
  if (loss.defined() && loss.requires_grad()) {
    loss.backward();
  }
  if (device == c10::DeviceType::CUDA) {
    torch::cuda::synchronize();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (auto& p : module.parameters()) {
    p.mutable_grad().reset();
  }
  return seconds;
}

struct Measured {
  Precision fastest = Precision::no;
  double ratio = 1;  // fp32 time / the chosen precision's time
  std::string detail;
};

// Times each candidate and puts everything the forward and backward touch
// back as it was: gradients, buffers (BatchNorm's running statistics) and
// the random generators (dropout).
Measured measure(
    const std::vector<Precision>& candidates,
    c10::DeviceType device,
    torch::nn::Module& module,
    const std::function<std::vector<torch::Tensor>()>& forward) {
  const auto injected = current_override();
  std::vector<torch::Tensor> grads;
  for (const auto& p : module.parameters()) {
    grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  }
  std::vector<torch::Tensor> buffers;
  for (const auto& b : module.buffers()) {
    buffers.push_back(b.clone());
  }
  const RngState rng = get_rng_state();

  std::vector<double> seconds;
  for (const Precision p : candidates) {
    std::vector<double> times;
    timed_step(p, device, module, forward);  // warm-up (kernels, caches)
    for (int i = 0; i < kAutoRepetitions; ++i) {
      times.push_back(timed_step(p, device, module, forward));
    }
    seconds.push_back(
        injected && injected->seconds ? injected->seconds(p) : median(times));
  }

  {
    torch::NoGradGuard no_grad;
    auto params = module.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad() = grads[i];
    }
    auto now = module.buffers();
    for (size_t i = 0; i < now.size(); ++i) {
      now[i].copy_(buffers[i]);
    }
  }
  set_rng_state(rng);

  Measured m;
  double fp32 = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i] == Precision::no) {
      fp32 = seconds[i];
    }
  }
  double best = fp32;
  std::ostringstream detail;
  for (size_t i = 0; i < candidates.size(); ++i) {
    detail << (i > 0 ? ", " : "") << to_string(candidates[i]) << ' '
           << seconds[i] * 1000 << " ms";
    // Another precision must beat fp32 by the margin to be taken.
    if (candidates[i] != Precision::no && seconds[i] * kAutoMargin <= fp32 &&
        seconds[i] < best) {
      best = seconds[i];
      m.fastest = candidates[i];
    }
  }
  m.ratio = best > 0 ? fp32 / best : 1;
  m.detail = detail.str();
  return m;
}

int64_t code_of(Precision p) {
  return static_cast<int64_t>(p);
}

}  // namespace

void set_auto_probe_override(std::optional<AutoProbeOverride> override) {
  std::lock_guard<std::mutex> lock(g_override_mutex);
  g_override = std::move(override);
}

std::vector<Precision> auto_candidates(
    bool cpu, bool native_cpu_bf16, std::vector<Precision> gpu_candidates) {
  if (const auto injected = current_override()) {
    return injected->candidates;
  }
  if (cpu) {
    // Without native bf16 a CPU runs bf16 15-20x slower: fp32, unmeasured.
    return native_cpu_bf16
               ? std::vector<Precision>{Precision::no, Precision::bf16}
               : std::vector<Precision>{Precision::no};
  }
  return gpu_candidates;
}

std::string auto_cache_key(
    const torch::nn::Module& module, const std::vector<torch::Tensor>& inputs) {
  std::ostringstream key;
  key << "params";
  for (const auto& p : module.parameters()) {
    key << " [" << shape_text(p) << ']';
  }
  key << " | inputs";
  for (const auto& t : inputs) {
    key << " [" << shape_text(t) << ']';
  }
  key << " | " << cpu_model() << " | LibTorch " << TORCH_VERSION << " | "
      << at::get_num_threads() << " threads";
  return key.str();
}

bool auto_precision_pending(const AcceleratorState& state) {
  return state.options.auto_candidates.size() > 1;
}

void decide_auto_precision(
    AcceleratorState& st,
    torch::nn::Module& module,
    const std::function<std::vector<torch::Tensor>()>& forward,
    const std::vector<torch::Tensor>& inputs) {
  auto& r = st.options;
  const std::vector<Precision> candidates = r.auto_candidates;
  r.auto_candidates.clear();  // decided once, whatever happens below
  const std::string key = auto_cache_key(module, inputs);
  Measured m;
  bool cached = false;
  if (st.process.process_index == 0) {
    // Injected timings are never cached, nor read from the cache.
    const auto override = current_override();
    const bool injected = override && override->seconds;
    nlohmann::json cache = read_probe_cache(kCacheName);
    const auto found = cache.find(key);
    if (!injected && found != cache.end() && found->is_object() &&
        found->contains("precision") && found->contains("ratio")) {
      m.fastest = parse_precision((*found)["precision"].get<std::string>());
      m.ratio = (*found)["ratio"].get<double>();
      m.detail = (*found).value("detail", std::string());
      cached = true;
    } else {
      m = measure(candidates, r.device.type(), module, forward);
      if (!injected) {
        cache[key] = {
            {"precision", to_string(m.fastest)},
            {"ratio", m.ratio},
            {"detail", m.detail}};
        write_probe_cache(kCacheName, cache);
      }
    }
  }
  if (st.process.group) {
    // Every process trains in what rank 0 chose.
    auto t = torch::tensor(
        {static_cast<double>(code_of(m.fastest)), m.ratio}, torch::kDouble);
    st.collective("broadcast", [&] { st.process.group->broadcast(t, 0); });
    m.fastest =
        static_cast<Precision>(static_cast<int64_t>(t[0].item<double>()));
    m.ratio = t[1].item<double>();
  }
  r.mixed_precision = m.fastest;
  if (m.fastest != Precision::no) {
    st.autocast.emplace(AutocastOptions(r.device.type(), to_dtype(m.fastest))
                            .cache_enabled(r.autocast_cache_enabled));
  }
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.2f", m.ratio);
  char margin[32];
  std::snprintf(margin, sizeof(margin), "%.1f", kAutoMargin);
  r.auto_precision_reason =
      m.fastest == Precision::no
          ? std::string(
                "this model's forward and backward ran no faster "
                "than fp32 in ") +
                (candidates.size() > 1 ? to_string(candidates[1]) : "") +
                " by " + margin + "x (measured on its first batch" +
                (cached ? ", cached" : "") + ": " + m.detail + ")"
          : "this model's forward and backward ran " + std::string(ratio) +
                "x as fast as fp32 (measured on its first batch" +
                (cached ? ", cached" : "") + ": " + m.detail + ")";
  for (auto& row : r.rows) {
    if (row.name == "mixed_precision") {
      row.value = "auto -> " + to_string(m.fastest);
      row.source = "measured on the model: " + r.auto_precision_reason;
    }
  }
  if (st.process.process_index == 0 && !r.quiet) {
    std::cerr << "ampkit: mixed_precision auto chose " << to_string(m.fastest)
              << ": " << r.auto_precision_reason << '\n'
              << std::flush;
  }
}

}  // namespace ampkit::detail
