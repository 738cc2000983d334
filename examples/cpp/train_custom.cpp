// Trains a module defined right here (not a libacc built-in) through the C++ API, with its own
// torch::optim::AdamW and StepLR: the same program on one process or many under `acc launch`.
//
//   acc launch --num_processes 2 build/examples/train_custom --steps 40 --out out/custom  (writes out/custom/model.safetensors)
//
// With split_batches every optimizer step sees the same 16 samples however many processes share them,
// so the trained parameters match a one-process run (tests/mp checks max |diff| <= 1e-6).
#include <acc/torch.hpp>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adamw.h>
#include <torch/optim/schedulers/step_lr.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 32));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})));
    fc2 = register_module("fc2", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::gelu(norm(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};

int main(int argc, char** argv) {
  int steps = 40, accum = 1;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--accum")) accum = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: train_custom [--steps N] [--accum K] [--out DIR]\n");
      return 2;
    }
  }
  try {
    acc::Accelerator accelerator(R"({"seed": 42, "dataloader_config": {"split_batches": true},
                                     "gradient_accumulation_steps": )" +
                                 std::to_string(accum) + "}");
    // 64 samples of y = sum(sin(3x)) over a fixed grid, the same on every process.
    auto x = torch::sin(torch::arange(256, torch::kFloat).reshape({64, 4}) * 0.37);
    auto y = torch::sin(3 * x).sum(1, /*keepdim=*/true);

    auto net = std::make_shared<Net>();
    auto adamw = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(0.01));
    auto step_lr = std::make_shared<torch::optim::StepLR>(*adamw, /*step_size=*/15, /*gamma=*/0.5);

    auto model = accelerator.prepare(net);
    auto optimizer = accelerator.prepare(adamw);
    auto scheduler = accelerator.prepare(step_lr, optimizer);
    auto loader = accelerator.prepare(acc::DataLoader(x, y, R"({"batch_size": 16, "shuffle": true, "seed": 7})"));

    for (int step = 0; step < steps;) {
      auto batch = loader.next();
      if (!batch) continue;  // a new epoch
      auto scope = accelerator.accumulate(model);
      auto loss = torch::mse_loss(model(batch->at("input")), batch->at("targets"));
      accelerator.backward(loss);
      // Clip the whole accumulated gradient, once per optimizer step (as in Accelerate's examples).
      if (accelerator.sync_gradients()) accelerator.clip_grad_norm(model, 1.0);
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      ++step;
      if (step % 10 == 0 || step == steps) {
        auto mean = accelerator.reduce(loss.detach(), acc::Accelerator::Reduce::Mean);
        accelerator.print("step " + std::to_string(step) + " loss " + std::to_string(mean.item<double>()) + " lr " +
                          std::to_string(optimizer.lr()));
      }
    }
    // Every process calls save_model (under ZeRO-3 it gathers the shards); the main process writes.
    if (!out.empty()) accelerator.save_model(model, out);
  } catch (const std::exception& e) {
    std::cerr << "train_custom: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
