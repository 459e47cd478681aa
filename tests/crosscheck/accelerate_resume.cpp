// The C++ side of accelerate_checkpoint.sh: the by_feature examples' MLP
// (their Net, as accelerate_checkpoint.py builds it) with LibTorch's AdamW
// and the same schedule.
//   accelerate_resume resume FOLDER OUT.safetensors [HIDDEN]
//     load_state of the folder accelerate's save_state wrote, steps 20..39
//     on the same batches, the weights into OUT (HIDDEN other than 128
//     builds another model, which load_state must refuse);
//   accelerate_resume save FOLDER OUT.safetensors
//     steps 0..19, save_state(FOLDER, SaveFormat::accelerate), steps
//     20..39, the weights into OUT (what Python's continuation must equal).
#include <torch/torch.h>

#include <iostream>

#include "ampkit/ampkit.h"

namespace {

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t hidden)
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

int run(
    const std::string& mode,
    const std::string& folder,
    const std::string& out,
    int64_t hidden) {
  ampkit::Accelerator accelerator(
      ampkit::AcceleratorOptions().cpu(true).quiet(true));
  torch::manual_seed(0);
  Net net(hidden);
  torch::optim::AdamW adamw(
      net->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  ampkit::optim::LinearWithWarmup schedule(adamw, 5, 40);
  auto [model, optimizer, scheduler] =
      accelerator.prepare(net, adamw, schedule);
  int64_t first = 0;
  if (mode == "resume") {
    accelerator.load_state(folder);
    first = 20;
  }
  for (int64_t step = first; step < 40; ++step) {
    if (mode == "save" && step == 20) {
      accelerator.save_state(folder, ampkit::SaveFormat::accelerate);
    }
    auto i = torch::arange(8 * 784, torch::kFloat) + 8.0 * 784 * step;
    auto x = torch::sin(0.001 * i).reshape({8, 784});
    auto y = torch::remainder(torch::arange(8) * 3 + step, 10);
    accelerator.backward(torch::cross_entropy_loss(model(x), y));
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  }
  ampkit::checkpoint::save_safetensors(
      out, ampkit::checkpoint::model_state(*net));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if ((mode != "resume" && mode != "save") || argc < 4) {
    std::cerr << "usage: accelerate_resume resume|save FOLDER OUT.safetensors "
                 "[HIDDEN]\n";
    return 2;
  }
  torch::set_num_threads(1);
  try {
    return run(mode, argv[2], argv[3], argc > 4 ? std::stoll(argv[4]) : 128);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
