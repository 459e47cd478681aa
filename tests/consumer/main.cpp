// Uses ampkit as an installed package: one bf16 autocast step with a
// GradScaler; exits non-zero when anything is off.
#include <ampkit/ampkit.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <iostream>

int main() {
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), 0.1);
  ampkit::GradScaler scaler(ampkit::GradScalerOptions().init_scale(1024));
  torch::Tensor loss;
  {
    ampkit::Autocast guard(torch::kCPU, ampkit::parse_precision("bf16"));
    loss = model(torch::ones({3, 4})).to(torch::kFloat).sum();
  }
  scaler.scale(loss).backward();
  const bool stepped = scaler.step(opt).has_value();
  scaler.update();
  std::cout << "ampkit " << AMPKIT_VERSION << " consumer: stepped=" << stepped
            << " scale=" << scaler.get_scale() << '\n';
  return stepped && scaler.get_scale() == 1024.0 ? 0 : 1;
}
