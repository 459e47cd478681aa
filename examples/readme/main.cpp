// The quick tour's Accelerator example, compiled and run in CI so that the
// two cannot drift apart (a test checks that docs/quick-tour.md quotes this
// file between the markers). A linear classifier on random data, in a few
// steps.
#include <ampkit/ampkit.h>
#include <torch/torch.h>

#include <iostream>

// [readme-begin]
struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(784, 10))) {}
  torch::Tensor forward(torch::Tensor x) {  // [B, 784] -> [B, 10]
    return fc(x);
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

int main() {
  // Unset options come from the launcher's environment
  // (AMPKIT_MIXED_PRECISION, ...), then the config file, then defaults.
  ampkit::Accelerator accelerator(ampkit::AcceleratorOptions()
                                      .mixed_precision("auto")
                                      .gradient_accumulation_steps(2)
                                      .seed(0));
  auto dataset =
      torch::data::datasets::TensorDataset(torch::randn({256, 784}))
          .map(torch::data::transforms::Stack<torch::data::TensorExample>());
  auto data_loader =
      torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
          std::move(dataset), torch::data::DataLoaderOptions(32));
  const auto labels_of = [](const torch::Tensor& x) {  // a learnable target
    return x.slice(1, 0, 10).argmax(1);
  };

  Net net;
  torch::optim::AdamW adamw(net->parameters(), 1e-2);
  ampkit::optim::LinearWithWarmup schedule(adamw, 2, 32);
  // Model first: its parameters move to accelerator.device() in place.
  auto [model, optimizer, scheduler, loader] =
      accelerator.prepare(net, adamw, schedule, std::move(data_loader));

  for (int epoch = 0; epoch < 4; ++epoch) {
    for (auto& batch : loader) {  // batches arrive on the device
      auto scope = accelerator.accumulate(model);
      // model(x) runs under autocast and returns fp32 logits.
      auto loss =
          torch::cross_entropy_loss(model(batch.data), labels_of(batch.data));
      accelerator.backward(loss);  // / accumulation steps, scaled for fp16
      if (accelerator.sync_gradients()) {
        accelerator.clip_grad_norm_(net->parameters(), 1.0);
      }
      optimizer.step();  // only every 2nd micro-batch; skipped on inf/NaN
      scheduler.step();  // only when the optimizer really stepped
      optimizer.zero_grad();
    }
    accelerator.print("epoch", epoch, "lr", scheduler.get_last_lr()[0]);
  }
}
// [readme-end]
