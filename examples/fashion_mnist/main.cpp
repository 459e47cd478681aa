// The ampkit demo: a small CNN trained on Fashion-MNIST under Autocast with a
// GradScaler, printing progress and test accuracy.
#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

namespace {

// [B, 1, 28, 28] -> [B, 10]: two conv/pool stages and a linear head.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module(
            "conv1",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module(
            "conv2",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(32 * 7 * 7, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);  // [B, 16, 14, 14]
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);  // [B, 32, 7, 7]
    return fc(x.flatten(1));                          // [B, 10]
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

struct Args {
  int epochs = 2;
  int64_t batch_size = 64;
  double lr = 1e-3;
  std::string mixed_precision;  // "" = fp16 on CUDA, bf16 on CPU
  bool cpu = false;
  int threads = 0;          // 0 = every core
  int64_t limit_train = 0;  // 0 = all 60000
  int64_t limit_test = 0;   // 0 = all 10000
  int log_every = 100;
  double min_accuracy = 0;  // exit 1 below this (for CI)
  std::string data_dir = ampkit::data::kFashionMnistDir;
  uint64_t seed = 42;
};

// Accepts both --snake_case and --kebab-case, as accelerate's flags do.
std::string flags(const std::string& kebab) {
  std::string snake = kebab;
  std::replace(snake.begin(), snake.end(), '-', '_');
  return snake == kebab ? "--" + kebab : "--" + kebab + ",--" + snake;
}

double accuracy(
    Net& model,
    const ampkit::data::FashionMnist& data,
    torch::Device device,
    ampkit::Precision precision) {
  torch::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0;
  const int64_t n = data.images.size(0);
  for (int64_t i = 0; i < n; i += 1000) {
    auto x = data.images.slice(0, i, i + 1000).to(device);
    auto y = data.labels.slice(0, i, i + 1000).to(device);
    ampkit::Autocast guard(device.type(), precision);
    correct += model(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  model->train();
  return double(correct) / double(n);
}

int run(const Args& args) {
  torch::manual_seed(args.seed);
  const bool cuda = !args.cpu && torch::cuda::is_available();
  const torch::Device device(cuda ? torch::kCUDA : torch::kCPU);
  const int threads =
      args.threads > 0
          ? args.threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);

  const auto caps = ampkit::Capabilities::current();
  const ampkit::Precision precision = ampkit::parse_precision(
      args.mixed_precision.empty() ? (cuda ? "fp16" : "bf16")
                                   : args.mixed_precision);
  std::cout << "ampkit " << AMPKIT_VERSION << " on LibTorch " << TORCH_VERSION
            << ", device " << device << ", " << threads << " threads\n"
            << ampkit::describe(caps) << "\n"
            << "mixed precision: " << ampkit::to_string(precision) << '\n';
  // Refuse what this machine cannot run before loading any data.
  if (precision != ampkit::Precision::no) {
    ampkit::check_autocast_supported(
        device.type(), ampkit::to_dtype(precision), caps);
  }
  if (!cuda && precision == ampkit::Precision::bf16 &&
      !caps.cpu.native_bf16()) {
    std::cout << "note: this CPU has no native bf16 (AVX512-BF16/AMX); bf16 "
                 "autocast runs 15-20x slower than fp32 here. Pass "
                 "--mixed-precision no for speed.\n";
  }

  auto train = ampkit::data::load_fashion_mnist(true, args.data_dir);
  auto test = ampkit::data::load_fashion_mnist(false, args.data_dir);
  if (args.limit_train > 0) {
    train.images = train.images.slice(0, 0, args.limit_train);
    train.labels = train.labels.slice(0, 0, args.limit_train);
  }
  if (args.limit_test > 0) {
    test.images = test.images.slice(0, 0, args.limit_test);
    test.labels = test.labels.slice(0, 0, args.limit_test);
  }

  Net model;
  model->to(device);
  torch::optim::Adam opt(model->parameters(), args.lr);
  // Loss scaling is what fp16 needs; bf16 has fp32's range and runs without.
  ampkit::GradScaler scaler(ampkit::GradScalerOptions().enabled(
      precision == ampkit::Precision::fp16));

  const int64_t n = train.images.size(0);
  const int64_t steps_per_epoch = (n + args.batch_size - 1) / args.batch_size;
  int64_t skipped = 0;
  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    auto order = torch::randperm(n);
    auto start = std::chrono::steady_clock::now();
    double running = 0;
    int64_t since_log = 0;
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      auto idx =
          order.slice(0, step * args.batch_size, (step + 1) * args.batch_size);
      auto x = train.images.index_select(0, idx).to(device);  // [B, 1, 28, 28]
      auto y = train.labels.index_select(0, idx).to(device);  // [B]
      opt.zero_grad();
      torch::Tensor loss;
      {
        ampkit::Autocast guard(device.type(), precision);
        auto logits = model(x);
        loss = torch::cross_entropy_loss(logits.to(torch::kFloat), y);
      }
      scaler.scale(loss).backward();
      if (!scaler.step(opt).has_value()) {
        ++skipped;
      }
      scaler.update();
      running += loss.item<double>();
      ++since_log;
      if ((step + 1) % args.log_every == 0 || step + 1 == steps_per_epoch) {
        const double secs = std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - start)
                                .count();
        // The loss scale only exists with fp16; bf16 and fp32 print none.
        char scale[64] = "";
        if (scaler.is_enabled()) {
          std::snprintf(
              scale,
              sizeof(scale),
              " scale %g skipped %lld",
              scaler.get_scale(),
              static_cast<long long>(skipped));
        }
        std::printf(
            "epoch %d step %lld/%lld loss %.4f%s samples/s %.0f\n",
            epoch,
            static_cast<long long>(step + 1),
            static_cast<long long>(steps_per_epoch),
            running / since_log,
            scale,
            double((step + 1) * args.batch_size) / secs);
        std::fflush(stdout);
        running = 0;
        since_log = 0;
      }
    }
    const double acc = accuracy(model, test, device, precision);
    std::printf(
        "epoch %d test accuracy %.4f (%lld images)\n",
        epoch,
        acc,
        static_cast<long long>(test.images.size(0)));
    if (epoch == args.epochs && acc < args.min_accuracy) {
      std::fprintf(
          stderr,
          "test accuracy %.4f is below --min-accuracy %.4f\n",
          acc,
          args.min_accuracy);
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{
      "Train a small CNN on Fashion-MNIST with ampkit's Autocast and "
      "GradScaler."};
  app.add_option(flags("epochs"), args.epochs, "passes over the training set")
      ->check(CLI::PositiveNumber);
  app.add_option(flags("batch-size"), args.batch_size, "images per step")
      ->check(CLI::PositiveNumber);
  app.add_option(flags("lr"), args.lr, "Adam learning rate");
  app.add_option(
      flags("mixed-precision"),
      args.mixed_precision,
      "no, fp16 or bf16 (default: fp16 on CUDA, bf16 on CPU)");
  app.add_flag(flags("cpu"), args.cpu, "train on the CPU even with a GPU");
  app.add_option(
      flags("threads"), args.threads, "intra-op threads (default: every core)");
  app.add_option(
      flags("limit-train"),
      args.limit_train,
      "use only the first N training images");
  app.add_option(
      flags("limit-test"), args.limit_test, "use only the first N test images");
  app.add_option(flags("log-every"), args.log_every, "steps between lines")
      ->check(CLI::PositiveNumber);
  app.add_option(
      flags("min-accuracy"),
      args.min_accuracy,
      "exit 1 when the final test accuracy is below this");
  app.add_option(
      flags("data-dir"),
      args.data_dir,
      "folder with the Fashion-MNIST IDX .gz files");
  app.add_option(flags("seed"), args.seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "fashion_mnist: " << e.what() << '\n';
    return 2;
  }
}
