// The MLP the distributed benchmarks train: 6 layers of width x width with
// ReLU, so that the gradients and optimizer state are large next to the
// activations.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace ampkit::bench {

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t width) {
    for (int i = 0; i < 6; ++i) {
      layers.push_back(register_module(
          "fc" + std::to_string(i), torch::nn::Linear(width, width)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : layers) {
      x = torch::relu(l(x));
    }
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Mlp);

}  // namespace ampkit::bench
