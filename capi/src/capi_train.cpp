// Accelerator, models, optimizers, schedulers, data, training and collectives.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "bigmodel/plan.hpp"
#include "checkpoint/save_model.hpp"
#include "formats/safetensors.hpp"
#include "models/hf/families.hpp"
#include "models/hf/pretrained.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "util/errors.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;
using acc::capi::optional_handle;

namespace {

const at::Tensor& tensor_of(const acc_tensor* t, const char* what) { return need(t, what)->t; }

acc_tensor* new_tensor(at::Tensor t) { return new acc_tensor{std::move(t)}; }

acc_model* new_model(std::unique_ptr<acc::core::Model> m) {
  auto slot = std::make_shared<acc::core::PreparedModel>();
  slot->model = std::move(m);
  // The tree is fixed from here on: the borrowed names are made once, never under a const handle.
  std::vector<std::string> names;
  for (auto& [n, t] : slot->model->state()) names.push_back(n);
  return new acc_model{std::move(slot), std::move(names)};
}

}  // namespace

extern "C" {

/* ------------------------------------------------------------------ accelerator */

acc_status acc_accelerator_create(const char* config_json, acc_accelerator** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    auto impl = acc::core::Accelerator::create(config_json);
    *out = new acc_accelerator{std::move(impl)};
  });
}

void acc_accelerator_destroy(acc_accelerator* acc) noexcept { acc::capi::destroy_handle(acc, __func__); }

#define ACC_GETTER(name, type, expr)                                     \
  acc_status name(const acc_accelerator* acc, type* out) noexcept {      \
    if (out) *out = {};                                                  \
    return guarded(__func__, [&] {                                       \
      const acc::core::Accelerator& a = *need(acc, "accelerator")->impl; \
      *need(out, "out") = (expr);                                        \
    });                                                                  \
  }
ACC_GETTER(acc_process_index, int32_t, a.state().rank)
ACC_GETTER(acc_local_process_index, int32_t, a.state().local_rank)
ACC_GETTER(acc_num_processes, int32_t, a.state().world_size)
ACC_GETTER(acc_is_main_process, int32_t, a.state().rank == 0 ? 1 : 0)
ACC_GETTER(acc_device, const char*, a.device_name().c_str())
ACC_GETTER(acc_distributed_type, const char*, a.distributed_type().c_str())
ACC_GETTER(acc_config_json, const char*, a.config_json().c_str())
#undef ACC_GETTER

/* ------------------------------------------------------------------ models */

acc_status acc_model_create(const char* spec_json, acc_model** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new_model(acc::core::make_builtin_model(spec_json));
  });
}

acc_status acc_model_load_torchscript(const char* path, const char* options_json, acc_model** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new_model(acc::core::load_torchscript_model(need(path, "path"), options_json));
  });
}

acc_status acc_model_from_pretrained(const char* dir, const char* options_json, acc_model** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new_model(acc::core::hf::from_pretrained(need(dir, "dir"), options_json));
  });
}

acc_status acc_set_grad_enabled(int32_t enabled, int32_t* previous) noexcept {
  if (previous) *previous = 0;
  return guarded(__func__, [&] {
    if (previous) *previous = c10::GradMode::is_enabled() ? 1 : 0;
    c10::GradMode::set_enabled(enabled != 0);
  });
}

acc_status acc_model_module_sizes(acc_model* model, const char* dtype, const char** out_json) noexcept {
  if (out_json) *out_json = nullptr;
  return guarded(__func__, [&] {
    need(out_json, "out_json");
    HandleLock lock(need(model, "model")->busy, "the model");
    model->last_json = acc::core::bigmodel::module_sizes_json(*model->slot->model, dtype ? dtype : "");
    *out_json = model->last_json.c_str();
  });
}

acc_status acc_infer_auto_device_map(acc_model* model, const char* options_json, const char** out_json) noexcept {
  if (out_json) *out_json = nullptr;
  return guarded(__func__, [&] {
    need(out_json, "out_json");
    HandleLock lock(need(model, "model")->busy, "the model");
    model->last_json = acc::core::bigmodel::plan_device_map(*model->slot->model, options_json);
    *out_json = model->last_json.c_str();
  });
}

acc_status acc_model_from_config(const char* config_json, const char* options_json, acc_model** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new_model(acc::core::hf::from_config(need(config_json, "config_json"), options_json));
  });
}

acc_status acc_generate(acc_model* model, const acc_tensor* input_ids, const acc_tensor* attention_mask,
                        const char* options_json, acc_generate_token_fn on_tokens, void* user_data,
                        acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    HandleLock lock(need(model, "model")->busy, "the model");
    acc::core::Model& m = model->slot->tensors(__func__);
    acc::core::hf::TokenCallback callback;
    if (on_tokens)
      callback = [&](const at::Tensor& tokens) {
        at::Tensor t = tokens.contiguous();
        return on_tokens(user_data, t.data_ptr<int64_t>(), t.numel()) == 0;
      };
    *out = new_tensor(acc::core::hf::generate(m, tensor_of(input_ids, "input_ids"),
                                              attention_mask ? need(attention_mask, "attention_mask")->t : at::Tensor(),
                                              options_json, callback));
  });
}

void acc_model_destroy(acc_model* model) noexcept { acc::capi::destroy_handle(model, __func__); }

acc_status acc_model_forward(acc_model* model, const acc_tensor* input, const acc_tensor* targets,
                             acc_tensor** out_output, acc_tensor** out_loss) noexcept {
  if (out_output) *out_output = nullptr;
  if (out_loss) *out_loss = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    if (out_loss && !targets) throw std::invalid_argument("out_loss needs targets");
    const acc::core::Model& m = *model->slot->model;
    acc::core::TensorDict batch{{m.input_name(), tensor_of(input, "input")}};
    if (optional_handle(targets, "targets")) batch.set(m.target_name(), targets->t);
    acc::core::TensorDict r = model->slot->forward(batch);
    // (A pipelined inference's forward outputs nothing on the processes before the last.)
    std::unique_ptr<acc_tensor> output(out_output && !r.items().empty() ? new_tensor(r.items().front().second)
                                                                        : nullptr);
    if (out_loss) *out_loss = new_tensor(r.at("loss"));
    if (out_output) *out_output = output.release();
  });
}

acc_status acc_model_set_training(acc_model* model, int32_t training) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    model->slot->model->train(training != 0);
  });
}

acc_status acc_model_set_requires_grad(acc_model* model, const char* pattern, int32_t requires_grad,
                                       int64_t* out_matched) noexcept {
  if (out_matched) *out_matched = 0;
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    const int64_t n = model->slot->set_requires_grad(need(pattern, "pattern"), requires_grad != 0);
    if (out_matched) *out_matched = n;
  });
}

acc_status acc_model_num_parameters(const acc_model* model, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(model, "model")->slot->model->num_parameters(); });
}

acc_status acc_model_state_size(const acc_model* model, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__,
                 [&] { *need(out, "out") = static_cast<int64_t>(need(model, "model")->slot->model->state().size()); });
}

acc_status acc_model_state_get(const acc_model* model, int64_t index, const char** out_name,
                               acc_tensor** out_value) noexcept {
  if (out_name) *out_name = nullptr;
  if (out_value) *out_value = nullptr;
  return guarded(__func__, [&] {
    const auto& names = need(model, "model")->state_names;
    if (index < 0 || index >= static_cast<int64_t>(names.size()))
      throw std::out_of_range("index " + std::to_string(index) + " outside [0, " + std::to_string(names.size()) + ")");
    const std::string& name = names[static_cast<size_t>(index)];
    if (out_value) *out_value = new_tensor(acc::core::state_tensor(*model->slot, name).to(at::kCPU, false, true));
    if (out_name) *out_name = name.c_str();
  });
}

acc_status acc_model_save_safetensors(const acc_model* model, const char* path) noexcept {
  return guarded(__func__, [&] { acc::core::save_state_file(*need(model, "model")->slot, need(path, "path")); });
}

acc_status acc_model_load_safetensors(acc_model* model, const char* path) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    acc::core::load_state_file(*model->slot, need(path, "path"));
  });
}

/* The three functions above as programs built against libacc 1.0-1.2 call them (symbol version ACC_1.0): local
 * calls that refuse a model whose parameters are sharded (ZeRO-3 / FSDP) with ACC_ERR_INVALID_STATE, where 1.3
 * made them collectives that gather. A 1.1 program that called acc_model_state_get on the main process and fell
 * back to acc_save_model on that answer keeps working; a program built against this header binds the
 * gathering versions (ACC_1.4, capi/acc.map). Not named acc_*: only their aliases are exported. */
__attribute__((visibility("default"), symver("acc_model_state_get@ACC_1.0"))) acc_status
compat_model_state_get_1_0(const acc_model* model, int64_t index, const char** out_name,
                           acc_tensor** out_value) noexcept {
  if (out_name) *out_name = nullptr;
  if (out_value) *out_value = nullptr;
  return guarded("acc_model_state_get", [&] {
    auto state = need(model, "model")->slot->tensors("acc_model_state_get").state();
    if (index < 0 || index >= static_cast<int64_t>(state.size()))
      throw std::out_of_range("index " + std::to_string(index) + " outside [0, " + std::to_string(state.size()) + ")");
    if (out_value) *out_value = new_tensor(state[static_cast<size_t>(index)].second.detach().to(at::kCPU, false, true));
    if (out_name) *out_name = model->state_names[static_cast<size_t>(index)].c_str();
  });
}

__attribute__((visibility("default"), symver("acc_model_save_safetensors@ACC_1.0"))) acc_status
compat_model_save_safetensors_1_0(const acc_model* model, const char* path) noexcept {
  return guarded("acc_model_save_safetensors", [&] {
    acc::core::save_safetensors(need(model, "model")->slot->tensors("acc_model_save_safetensors").state(),
                                need(path, "path"), {{"format", "pt"}});
  });
}

__attribute__((visibility("default"), symver("acc_model_load_safetensors@ACC_1.0"))) acc_status
compat_model_load_safetensors_1_0(acc_model* model, const char* path) noexcept {
  return guarded("acc_model_load_safetensors", [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    model->slot->tensors("acc_model_load_safetensors")
        .load_state_dict(acc::core::load_safetensors(need(path, "path")), path);
  });
}

/* ------------------------------------------------------------------ optimizers, schedulers */

acc_status acc_optimizer_create(acc_model* model, const char* options_json, acc_optimizer** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    auto slot = std::make_shared<acc::core::PreparedOptimizer>();
    slot->model = need(model, "model")->slot;
    slot->opt = acc::core::make_optimizer(*model->slot->model, options_json);
    *out = new acc_optimizer{std::move(slot)};
  });
}

void acc_optimizer_destroy(acc_optimizer* opt) noexcept { acc::capi::destroy_handle(opt, __func__); }

acc_status acc_optimizer_step(acc_optimizer* opt) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(opt, "optimizer")->busy, "the optimizer");
    opt->slot->step();
  });
}

acc_status acc_optimizer_zero_grad(acc_optimizer* opt) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(opt, "optimizer")->busy, "the optimizer");
    opt->slot->zero_grad();
  });
}

acc_status acc_optimizer_lr(const acc_optimizer* opt, double* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(opt, "optimizer")->slot->opt->lr(); });
}

acc_status acc_scheduler_create(acc_optimizer* opt, const char* options_json, acc_scheduler** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    auto slot = std::make_shared<acc::core::PreparedScheduler>();
    slot->opt = need(opt, "optimizer")->slot;
    slot->schedule.emplace(options_json);
    slot->apply();  // LambdaLR sets lr = base_lr * factor(0) at construction
    *out = new acc_scheduler{std::move(slot)};
  });
}

void acc_scheduler_destroy(acc_scheduler* sched) noexcept { acc::capi::destroy_handle(sched, __func__); }

acc_status acc_scheduler_step(acc_scheduler* sched) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(sched, "scheduler")->busy, "the scheduler");
    sched->slot->step();
  });
}

acc_status acc_scheduler_last_lr(const acc_scheduler* sched, double* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(sched, "scheduler")->slot->opt->opt->lr(); });
}

/* ------------------------------------------------------------------ data */

acc_status acc_dataset_from_tensors(const acc_tensor* inputs, const acc_tensor* targets, acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new acc_dataset{acc::core::make_tensor_dataset(tensor_of(inputs, "inputs"),
                                                          targets ? need(targets, "targets")->t : at::Tensor())};
  });
}

acc_status acc_dataset_from_token_file(const char* path, const char* options_json, acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new acc_dataset{acc::core::make_token_file_dataset(need(path, "path"), options_json)};
  });
}

acc_status acc_dataset_from_callback(int64_t length, acc_dataset_get_fn get, void* user_data,
                                     void (*free_user_data)(void*), acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  // The user data is released exactly once: with the dataset, or right here if creation fails.
  std::shared_ptr<acc::capi::UserData> ud(new acc::capi::UserData{user_data, free_user_data});
  return guarded(__func__, [&] {
    need(out, "out");
    need(get, "get");
    auto fetch = [get, ud](int64_t i) {
      acc_tensor* in = nullptr;
      acc_tensor* tg = nullptr;
      acc_status st = get(ud->data, i, &in, &tg);
      std::unique_ptr<acc_tensor, void (*)(acc_tensor*)> in_owned(in, acc_tensor_destroy),
          tg_owned(tg != in ? tg : nullptr, acc_tensor_destroy);  // one handle as both: freed once
      if (st != ACC_OK)
        throw acc::core::CallbackError("dataset callback returned " + std::to_string(st) + " for index " +
                                       std::to_string(i));
      if (!in) throw acc::core::CallbackError("dataset callback set no input for index " + std::to_string(i));
      if (!in->live.ok() || (tg && !tg->live.ok()))
        throw acc::core::CallbackError("dataset callback gave a tensor that is not a live handle for index " +
                                       std::to_string(i));
      return acc::core::pair_sample(in->t, tg ? tg->t : at::Tensor());
    };
    *out = new acc_dataset{acc::core::make_callback_dataset(length, fetch)};
  });
}

void acc_dataset_destroy(acc_dataset* ds) noexcept { acc::capi::destroy_handle(ds, __func__); }

acc_status acc_dataset_length(const acc_dataset* ds, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(ds, "dataset")->ds->size(); });
}

acc_status acc_dataloader_create(acc_dataset* ds, const char* options_json, acc_dataloader** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    auto dl =
        std::make_shared<acc::core::DataLoader>(need(ds, "dataset")->ds, acc::core::LoaderOptions::parse(options_json));
    *out = new acc_dataloader{std::move(dl)};
  });
}

void acc_dataloader_destroy(acc_dataloader* dl) noexcept { acc::capi::destroy_handle(dl, __func__); }

acc_status acc_dataloader_next(acc_dataloader* dl, acc_tensor** out_input, acc_tensor** out_target,
                               int32_t* has_batch) noexcept {
  if (out_input) *out_input = nullptr;
  if (out_target) *out_target = nullptr;
  if (has_batch) *has_batch = 0;
  return guarded(__func__, [&] {
    HandleLock lock(need(dl, "dataloader")->busy, "the dataloader");
    need(out_input, "out_input");
    need(has_batch, "has_batch");
    acc::core::Sample s;
    if (!dl->dl->next(s)) return;
    auto [input, target] = acc::core::as_pair(s);
    std::unique_ptr<acc_tensor> in(new_tensor(input));
    if (out_target && target.defined()) *out_target = new_tensor(target);
    *out_input = in.release();
    *has_batch = 1;
  });
}

acc_status acc_dataloader_length(const acc_dataloader* dl, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(dl, "dataloader")->dl->length(); });
}

acc_status acc_dataloader_set_epoch(acc_dataloader* dl, int64_t epoch) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(dl, "dataloader")->busy, "the dataloader");
    dl->dl->set_epoch(epoch);
  });
}

acc_status acc_dataloader_end_of_epoch(const acc_dataloader* dl, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(dl, "dataloader")->dl->end_of_dataloader() ? 1 : 0; });
}

/* ------------------------------------------------------------------ training, collectives */

acc_status acc_prepare(acc_accelerator* acc, acc_model* model, acc_optimizer* opt, acc_scheduler* sched,
                       acc_dataloader* dl) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    std::optional<HandleLock> lm, lo, ls, ld;
    if (optional_handle(model, "model")) lm.emplace(model->busy, "the model");
    if (optional_handle(opt, "optimizer")) lo.emplace(opt->busy, "the optimizer");
    if (optional_handle(sched, "scheduler")) ls.emplace(sched->busy, "the scheduler");
    if (optional_handle(dl, "dataloader")) ld.emplace(dl->busy, "the dataloader");
    if (!model && !opt && !sched && !dl) throw std::invalid_argument("nothing to prepare: every object is NULL");
    acc->impl->prepare(model ? model->slot : nullptr, opt ? opt->slot : nullptr, sched ? sched->slot : nullptr,
                       dl ? dl->dl : nullptr);
  });
}

acc_status acc_prepare_pippy(acc_accelerator* acc, acc_model* model, const char* options_json) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    HandleLock lm(need(model, "model")->busy, "the model");
    acc->impl->prepare_pippy(model->slot,
                             acc::core::PippyOptions::from_json(options_json ? options_json : std::string()));
  });
}

acc_status acc_backward(acc_accelerator* acc, const acc_tensor* loss) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->backward(tensor_of(loss, "loss"));
  });
}

acc_status acc_gather(acc_accelerator* acc, const acc_tensor* t, acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    *out = new_tensor(acc->impl->gather(tensor_of(t, "tensor")));
  });
}

acc_status acc_gather_for_metrics(acc_accelerator* acc, const acc_tensor* t, acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    *out = new_tensor(acc->impl->gather_for_metrics(tensor_of(t, "tensor")));
  });
}

acc_status acc_reduce(acc_accelerator* acc, const acc_tensor* t, acc_reduce_op op, acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    acc::core::ReduceOp r;
    switch (op) {
      case ACC_REDUCE_SUM: r = acc::core::ReduceOp::Sum; break;
      case ACC_REDUCE_MEAN: r = acc::core::ReduceOp::Mean; break;
      case ACC_REDUCE_MAX: r = acc::core::ReduceOp::Max; break;
      default: throw std::invalid_argument("op " + std::to_string(op) + " is not ACC_REDUCE_SUM, _MEAN or _MAX");
    }
    *out = new_tensor(acc->impl->reduce(tensor_of(t, "tensor"), r));
  });
}

acc_status acc_wait_for_everyone(acc_accelerator* acc) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->wait_for_everyone();
  });
}

}  // extern "C"
