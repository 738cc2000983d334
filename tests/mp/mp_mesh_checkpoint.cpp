// One rank of the cross-mesh checkpoint test (tests/mp/mp_test.py case_mesh_checkpoint), started by `acc launch` with
// the layout in the launch config (parallelism_config, FSDP2, fsdp_state_dict_type). The Llama fixture (GQA) trains
// with AdamW on a shuffled loader whose per-process batch keeps the global batch at 4 sequences whatever the mesh,
// until its step counter (a registered object) reaches STEPS; LOAD ("-": none) is loaded first, SAVE ("-": none)
// saved after the last step. Rank 0 prints "LOSS step value" for every step it ran (the mean over the processes: the
// global batch's loss, tensor-parallel peers holding the same one). OUT ("-": none): save_pretrained's directory, with
// libacc_outputs.safetensors beside the weights (a fixed input's ids, attention mask and the model's logits: what
// tests/hf/check_saved.py compares transformers' logits with). Rank 0 also prints "SAMPLES step i j ..." (the
// dataset indices the step's global batch took, gathered over the data-parallel ranks). MP_GLOBAL_BATCH sets the
// global batch (4); MP_MODEL=gpt2 trains the GPT-2 fixture instead (c_attn packs q, k, v; the head is tied to the
// embedding), in eval mode so that its dropout stays out of the comparison. Under pipeline parallelism OUT holds the
// weights alone.
//   mp_mesh_checkpoint FIXTURES_DIR STEPS LOAD SAVE OUT
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "checkpoint/save_model.hpp"
#include "checkpoint/state.hpp"
#include "data/dataset.hpp"
#include "formats/safetensors.hpp"
#include "models/hf/pretrained.hpp"
#include "models/model.hpp"
#include "runtime/mesh.hpp"
#include "train/accelerator.hpp"
#include "train/optim.hpp"

using namespace acc::core;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: mp_mesh_checkpoint FIXTURES_DIR STEPS LOAD SAVE OUT\n");
    return 2;
  }
  const std::string fixtures = argv[1], load = argv[3], save = argv[4], out = argv[5];
  const int64_t steps = std::atoll(argv[2]);
  try {
    auto acc = Accelerator::create(R"({"seed": 5})");  // the layout from the launch config
    const int rank = acc->state().rank, world = acc->state().world_size;
    const int dp = acc->mesh() ? acc->mesh()->size("dp") : 1;
    const int64_t global_batch = std::getenv("MP_GLOBAL_BATCH") ? std::atoll(std::getenv("MP_GLOBAL_BATCH")) : 4;
    if (global_batch % dp != 0) throw std::invalid_argument("the data-parallel size must divide the global batch");

    // 48 sequences of 8 tokens of the fixture's 96: 12 global steps an epoch.
    const int64_t n = 48, t = 8;
    at::Tensor ids = at::empty({n, t}, at::kLong);
    auto a = ids.accessor<int64_t, 2>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < t; ++j) a[i][j] = (i * 7 + j * 3 + i / 5 + (i * j) % 11) % 96;
    auto ds = make_tensor_dataset(TensorDict{{"input_ids", ids}, {"labels", ids.clone()}, {"index", at::arange(n)}});
    LoaderOptions lo;
    lo.batch_size = global_batch / dp;
    lo.shuffle = true;
    lo.seed = 3;
    auto loader = std::make_shared<DataLoader>(ds, lo);

    auto slot = std::make_shared<PreparedModel>();
    const std::string family = std::getenv("MP_MODEL") ? std::getenv("MP_MODEL") : "llama";
    slot->model = std::shared_ptr<Model>(hf::from_pretrained(fixtures + "/" + family + "/model", nullptr));
    auto opt = std::make_shared<PreparedOptimizer>();
    opt->model = slot;
    opt->opt = std::make_unique<Optimizer>(slot->model->trainable_parameters(),
                                           R"({"type": "adamw", "lr": 0.001, "weight_decay": 0.01})");
    acc->prepare(slot, opt, nullptr, loader);
    int64_t step = 0;  // the registered object: where the run is
    acc->register_for_checkpointing({[&] { return std::to_string(step); },
                                     [&](const std::string& s) { step = std::stoll(s); }});
    if (load != "-") load_state(*acc, load);

    slot->model->train(family != "gpt2");
    while (step < steps) {
      Sample batch;
      if (!loader->next(batch)) continue;  // the end of an epoch: the next call starts the next
      const at::Tensor taken = acc->gather_for_metrics(batch.at("index"));
      if (rank == 0) {
        std::printf("SAMPLES %lld", static_cast<long long>(step));
        for (int64_t i = 0; i < taken.numel(); ++i)
          std::printf(" %lld", static_cast<long long>(taken[i].item<int64_t>()));
        std::printf("\n");
      }
      at::Tensor loss =
          slot->forward(TensorDict{{"input_ids", batch.at("input_ids")}, {"labels", batch.at("labels")}}).at("loss");
      acc->backward(loss);
      opt->step();
      opt->zero_grad();
      const double mean = acc->reduce(loss.detach(), ReduceOp::Sum).item<double>() / world;
      if (rank == 0) std::printf("LOSS %lld %.9g\n", static_cast<long long>(step), mean);
      ++step;
    }
    if (save != "-") save_state(*acc, save);
    if (out != "-") save_pretrained(*slot, out, "");
    // A pipeline's forward is a training or evaluation step, which returns the loss alone: no logits to write.
    if (out != "-" && !(acc->mesh() && acc->mesh()->size("pp") > 1)) {
      at::Tensor x = ids.narrow(0, 0, 2).clone();
      at::Tensor mask = at::ones_like(x);
      slot->model->train(false);
      at::Tensor logits;
      {
        c10::NoGradGuard no_grad;
        logits = slot->forward(TensorDict{{"input_ids", x}, {"attention_mask", mask}}).at("logits").contiguous();
      }
      if (rank == 0)
        save_safetensors({{"input_ids", x}, {"attention_mask", mask}, {"logits", logits}},
                         out + "/libacc_outputs.safetensors");
      acc->wait_for_everyone();
    }
    std::printf("rank %d: %lld steps\n", rank, static_cast<long long>(step));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mp_mesh_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
