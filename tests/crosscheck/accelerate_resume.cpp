// The C++ side of accelerate_checkpoint.sh: the MLP of
// accelerate_checkpoint.py with LibTorch's AdamW and the same schedule.
//   accelerate_resume resume FOLDER OUT.safetensors [HIDDEN]
//     load_state of the folder accelerate's save_state wrote, steps 20..39
//     on the same batches, the weights into OUT (HIDDEN other than 16
//     builds another model, which load_state must refuse);
//   accelerate_resume save FOLDER OUT.safetensors
//     steps 0..19, save_state(FOLDER, SaveFormat::accelerate), steps
//     20..39, the weights into OUT (what Python's continuation must equal).
#include <torch/torch.h>

#include <iostream>

#include "ampkit/ampkit.h"

namespace {

int run(
    const std::string& mode,
    const std::string& folder,
    const std::string& out,
    int64_t hidden) {
  ampkit::Accelerator accelerator(
      ampkit::AcceleratorOptions().cpu(true).quiet(true));
  torch::manual_seed(0);
  torch::nn::Sequential net(
      torch::nn::Linear(4, hidden),
      torch::nn::ReLU(),
      torch::nn::Linear(hidden, 2));
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
    auto i = torch::arange(32, torch::kFloat) + 32.0 * step;
    auto x = torch::sin(0.1 * i).reshape({8, 4});
    auto y = torch::cos(0.07 * i).reshape({8, 4}).slice(1, 0, 2);
    accelerator.backward(torch::mse_loss(model(x), y));
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
    return run(mode, argv[2], argv[3], argc > 4 ? std::stoll(argv[4]) : 16);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
