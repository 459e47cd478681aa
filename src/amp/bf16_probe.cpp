// The CPU bf16 training probe behind `auto` and `ampkit doctor`: whether
// bf16 autocast trains faster than fp32 on this machine, measured on the
// ops a small CNN/MLP step runs, and cached per machine.
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "amp/probe_cache.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/amp/capability.h"
#include "ampkit/utils/env.h"
#include "ampkit/utils/random.h"

namespace ampkit {

namespace {

constexpr const char* kCacheName = "cpu_bf16_probe.json";

// What the measurement depends on: the CPU, LibTorch and the threads.
std::string cache_key() {
  return detail::cpu_model() + " | LibTorch " + TORCH_VERSION + " | " +
         std::to_string(at::get_num_threads()) + " threads";
}

// One training-shaped iteration: a 3x3 convolution (32 -> 64 channels on
// 14x14, the demo CNN's second) and a linear layer (3136 -> 128), forward
// and backward. Returns milliseconds.
double one_iteration(
    const std::vector<torch::Tensor>& t, bool bf16, torch::Tensor& sink) {
  const auto start = std::chrono::steady_clock::now();
  {
    Autocast guard(
        c10::DeviceType::CPU, bf16 ? Precision::bf16 : Precision::no);
    auto y = torch::conv2d(t[0], t[1], {}, 1, 1);
    auto z = torch::linear(t[2], t[3]);
    auto loss = y.to(torch::kFloat).mean() + z.to(torch::kFloat).mean();
    loss.backward();
  }
  sink = t[1].grad().sum() + t[3].grad().sum();
  t[1].mutable_grad().reset();
  t[3].mutable_grad().reset();
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

namespace detail {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return cpu_capability().vendor;
}

std::string probe_cache_file(const std::string& name) {
  return (std::filesystem::path(cache_home()) / "ampkit" / name).string();
}

nlohmann::json read_probe_cache(const std::string& name) {
  std::ifstream in(probe_cache_file(name));
  if (!in) {
    return nlohmann::json::object();
  }
  auto cache = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return cache.is_object() ? cache : nlohmann::json::object();
}

void write_probe_cache(const std::string& name, const nlohmann::json& cache) {
  const std::filesystem::path file = probe_cache_file(name);
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const std::filesystem::path tmp =
      file.string() + ".tmp" + std::to_string(::getpid());
  std::ofstream(tmp) << cache.dump(2) << '\n';
  std::filesystem::rename(tmp, file, ec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace detail

using detail::median;

CpuBf16Measurement measure_cpu_bf16_training() {
  CpuBf16Measurement m;
  m.cache_file = detail::probe_cache_file(kCacheName);
  const std::string key = cache_key();
  nlohmann::json cache = detail::read_probe_cache(kCacheName);
  const auto found = cache.find(key);
  if (found != cache.end() && found->is_object() &&
      found->value("fp32_ms", 0.0) > 0 && found->value("bf16_ms", 0.0) > 0) {
    m.fp32_ms = (*found)["fp32_ms"].get<double>();
    m.bf16_ms = (*found)["bf16_ms"].get<double>();
    m.speedup = m.fp32_ms / m.bf16_ms;
    m.cached = true;
    return m;
  }
  // The probe's random inputs leave the program's generators as they were.
  const RngState rng = get_rng_state();
  torch::manual_seed(0);
  const std::vector<torch::Tensor> t = {
      torch::randn({32, 32, 14, 14}),
      torch::randn({64, 32, 3, 3}).requires_grad_(),
      torch::randn({64, 3136}),
      torch::randn({128, 3136}).requires_grad_()};
  torch::Tensor sink;
  one_iteration(t, false, sink);  // warm-up: oneDNN builds its kernels
  one_iteration(t, true, sink);
  std::vector<double> fp32;
  std::vector<double> bf16;
  for (int i = 0; i < 5; ++i) {
    fp32.push_back(one_iteration(t, false, sink));
    bf16.push_back(one_iteration(t, true, sink));
  }
  set_rng_state(rng);
  m.fp32_ms = median(fp32);
  m.bf16_ms = median(bf16);
  m.speedup = m.fp32_ms / m.bf16_ms;
  cache[key] = {{"fp32_ms", m.fp32_ms}, {"bf16_ms", m.bf16_ms}};
  detail::write_probe_cache(kCacheName, cache);
  return m;
}

Capabilities with_cpu_bf16_measurement(Capabilities caps) {
  if (caps.cpu.native_bf16() && !caps.cpu_bf16_training_speedup) {
    caps.cpu_bf16_training_speedup = measure_cpu_bf16_training().speedup;
  }
  return caps;
}

}  // namespace ampkit
