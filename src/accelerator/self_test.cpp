// `ampkit test`: one precision at a time, a single-process reference run and
// an N-process run of the same training, both started by dist::launch, and a
// comparison of their final weights.
#include "ampkit/accelerator/self_test.h"

#include <torch/torch.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/amp/capability.h"
#include "ampkit/distributed/launcher.h"
#include "ampkit/error.h"
#include "utils/test_hooks.h"

namespace ampkit {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 12;
constexpr int64_t kAccumulation = 2;
constexpr int64_t kBatchPerProcess = 4;

struct RegressionImpl : torch::nn::Module {
  RegressionImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(torch::relu(fc1(x)));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Regression);

// Micro-batch m of the global stream: the same on every process.
std::pair<torch::Tensor, torch::Tensor> global_batch(int64_t m, int64_t size) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4242 + m);
  auto x = torch::randn({size, 8}, gen);
  return {x, x.sum(1, true).sin()};
}

std::string precision_name(Precision p) {
  return p == Precision::no ? std::string("fp32") : to_string(p);
}

std::string format(double v) {
  std::ostringstream s;
  s << std::setprecision(2) << v;
  return s.str();
}

// Where the test suite asks for it (utils/test_hooks.h), a rank trains on
// perturbed inputs, so the distributed weights must differ from the
// reference: the check has to notice.
bool skew_requested(int64_t rank) {
  auto hook = detail::test_hooks().perturb_self_test_rank;
  return hook != nullptr && hook(rank);
}

// The mkdtemp'd folder for the reference weights and results.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (fs::temp_directory_path() / "ampkit-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw IoError(
          "ampkit test",
          "cannot create a temporary folder under " +
              fs::temp_directory_path().string() +
              ". Set TMPDIR to a writable folder.");
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const {
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace

std::vector<SelfTestCase> self_test_cases() {
  const auto caps = Capabilities::current();
  std::vector<SelfTestCase> cases;
  for (Precision p : {Precision::no, Precision::bf16, Precision::fp16}) {
    SelfTestCase c;
    c.precision = p;
    c.tolerance = self_test_tolerance(p);
    if (p != Precision::no) {
      const auto dtype = p == Precision::bf16 ? torch::kBFloat16 : torch::kHalf;
      if (auto reason = autocast_unsupported_reason(torch::kCPU, dtype, caps)) {
        c.skipped = *reason;
      }
    }
    cases.push_back(c);
  }
  return cases;
}

double self_test_tolerance(Precision precision) {
  switch (precision) {
    case Precision::bf16:
      return 2e-2;
    case Precision::fp16:
      return 5e-3;
    default:
      return 1e-6;
  }
}

int run_self_test_worker(
    Precision precision,
    const std::string& dir,
    int64_t global_batch_size,
    std::ostream& err) {
  // The device is the launcher's: AMPKIT_USE_CPU for a check on the CPU,
  // else cuda:LOCAL_RANK (and NCCL).
  Accelerator accelerator(AcceleratorOptions()
                              .quiet(true)
                              .mixed_precision(precision)
                              .gradient_accumulation_steps(kAccumulation)
                              .timeout(std::chrono::seconds(60)));
  const int64_t world = accelerator.num_processes();
  const int64_t rank = accelerator.process_index();
  if (global_batch_size <= 0 || global_batch_size % world != 0) {
    throw InvalidArgument(
        "ampkit test",
        "the global batch must split evenly over the " + std::to_string(world) +
            " processes, got " + std::to_string(global_batch_size) + ".");
  }
  // Rank 0's initial weights are the ones that count (prepare() broadcasts
  // them); the other ranks start elsewhere on purpose.
  torch::manual_seed(rank == 0 ? 7 : 1000 + rank);
  Regression net;
  torch::optim::SGD sgd(
      net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const int64_t local = global_batch_size / world;
  const bool skew = skew_requested(rank);
  for (int64_t m = 0; m < kSteps * kAccumulation; ++m) {
    auto [x, y] = global_batch(m, global_batch_size);
    x = x.narrow(0, rank * local, local);
    y = y.narrow(0, rank * local, local);
    if (skew) {
      x = x + 0.5;
    }
    auto scope = accelerator.accumulate(model);
    accelerator.backward(torch::mse_loss(model(x), y));
    optimizer.step();
    optimizer.zero_grad();
  }
  std::vector<torch::Tensor> params;
  for (const auto& p : net->parameters()) {
    params.push_back(p.detach().to(torch::kCPU).clone());
  }
  const std::string name = to_string(precision);
  const fs::path reference = fs::path(dir) / ("reference-" + name + ".pt");
  if (world == 1) {
    torch::save(params, reference.string());
    return 0;
  }
  // Every process must hold the same weights after the same steps.
  for (const auto& p : params) {
    auto all =
        accelerator.gather(p.unsqueeze(0).to(accelerator.device())).cpu();
    for (int64_t r = 1; r < world; ++r) {
      if (!all[r].equal(all[0])) {
        err << "ampkit test: the weights of rank " << r
            << " differ from rank 0's after training\n";
        return 1;
      }
    }
  }
  int code = 0;
  if (accelerator.is_main_process()) {
    std::vector<torch::Tensor> expected;
    torch::load(expected, reference.string());
    double diff = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      diff =
          std::max(diff, (params[i] - expected[i]).abs().max().item<double>());
    }
    std::ofstream(fs::path(dir) / ("result-" + name + ".txt"))
        << std::setprecision(17) << diff << '\n';
    code =
        std::isfinite(diff) && diff <= self_test_tolerance(precision) ? 0 : 1;
    if (code != 0) {
      err << "ampkit test: " << precision_name(precision) << " weights of "
          << world << " processes differ from one process's by up to " << diff
          << '\n';
    }
  }
  accelerator.wait_for_everyone();
  return code;
}

int run_self_test(
    const SelfTestOptions& options, std::ostream& out, std::ostream& err) {
  if (options.num_processes < 2) {
    throw InvalidArgument(
        "ampkit test",
        "the check needs at least 2 processes, got --num_processes " +
            std::to_string(options.num_processes) + ".");
  }
  if (options.worker_command.empty()) {
    throw InvalidArgument("ampkit test", "no worker command to launch.");
  }
  TempDir dir;
  const int64_t global = kBatchPerProcess * options.num_processes;
  // NCCL needs a GPU per process: with fewer the check runs on the CPU.
  const int64_t gpus =
      options.cpu ? 0 : static_cast<int64_t>(torch::cuda::device_count());
  const bool on_gpus = gpus >= options.num_processes;
  if (gpus > 0 && !on_gpus) {
    out << "ampkit test: " << gpus << " GPU(s) for " << options.num_processes
        << " processes (NCCL takes one GPU per process): the check runs on "
           "the CPU.\n";
  }
  out << "ampkit test: " << options.num_processes
      << (on_gpus ? " processes over NCCL, one GPU each,"
                  : " processes over Gloo")
      << " against 1 process, " << kSteps << " steps of a global batch of "
      << global << " (accumulation " << kAccumulation
      << "), SGD with momentum\n";
  std::vector<SelfTestCase> cases = self_test_cases();
  std::string ran, failed;
  for (auto& c : cases) {
    const std::string name = precision_name(c.precision);
    if (!c.skipped.empty()) {
      out << "  " << name << ": skipped: " << c.skipped << '\n';
      continue;
    }
    dist::LaunchOptions launch;
    launch.command = options.worker_command;
    launch.command.push_back(to_string(c.precision));
    launch.command.push_back(dir.path());
    launch.command.push_back(std::to_string(global));
    launch.quiet = true;
    launch.cpu = !on_gpus;
    launch.grace = std::chrono::milliseconds(2000);
    // A correctness check, not a speed one: N processes on fewer cores.
    launch.oversubscribe = true;
    std::ostringstream reference_log, group_log;
    launch.num_processes = 1;
    int code = dist::launch(launch, reference_log, reference_log);
    if (code == 0) {
      launch.num_processes = options.num_processes;
      code = dist::launch(launch, group_log, group_log);
    }
    std::ifstream result(
        fs::path(dir.path()) / ("result-" + to_string(c.precision) + ".txt"));
    const bool measured = static_cast<bool>(result >> c.max_difference);
    if (code == 0 && measured) {
      out << "  " << name << ": max |difference| " << format(c.max_difference)
          << " (tolerance " << format(c.tolerance) << "): ok\n";
      ran += (ran.empty() ? "" : ", ") + name;
      continue;
    }
    if (measured) {
      c.failure = "the weights differ from one process's by up to " +
                  format(c.max_difference) + ", more than the tolerance " +
                  format(c.tolerance);
    } else {
      c.failure = "a worker failed (exit code " + std::to_string(code) + ")";
    }
    out << "  " << name << ": FAILED: " << c.failure << '\n';
    err << reference_log.str() << group_log.str();
    failed += (failed.empty() ? "" : ", ") + name;
  }
  if (!failed.empty()) {
    out << "ampkit test: FAILED in " << failed
        << ": distributed training does not reproduce one process here. The "
           "workers' output is above; `ampkit env` shows this machine's "
           "setup.\n";
    return 1;
  }
  out << "ampkit test: ok: " << options.num_processes
      << " processes trained the same weights as one process in " << ran
      << ".\n";
  return 0;
}

}  // namespace ampkit
