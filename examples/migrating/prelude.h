// What the C++ snippets of MIGRATING.md, README.md and docs/ may use without
// declaring it: ampkit, LibTorch, a small model and Fashion-MNIST. Each
// snippet is compiled as the body of its own function, all of them in one
// file (extract_snippets.cmake).
#pragma once

#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace migrating {

// The model the snippets train: [B, 1, 28, 28] -> [B, 10].
struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

using ampkit::data::FashionMnistBatchDataset;

}  // namespace migrating
