// The C++ API (acc/torch.hpp): handles over the core, as the C ABI's are; no behaviour of its own.
#include "acc/torch.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <exception>

#include "bigmodel/plan.hpp"
#include "checkpoint/adapter.hpp"
#include "checkpoint/save_model.hpp"
#include "checkpoint/state.hpp"
#include "data/from_files/files_dataset.hpp"
#include "formats/hf_weights.hpp"
#include "formats/safetensors.hpp"
#include "models/hf/families.hpp"
#include "models/hf/generate_text.hpp"
#include "models/hf/pretrained.hpp"
#include "text/chat_template.hpp"
#include "text/options.hpp"
#include "train/accelerator.hpp"
#include "train/optim.hpp"
#include "acc/config.hpp"
#include "acc/files.hpp"
#include "acc/json.hpp"
#include "util/errors.hpp"

namespace acc {

const torch::Tensor& Batch::at(const std::string& name) const {
  for (const auto& [n, t] : items_)
    if (n == name) return t;
  std::string keys;
  for (const auto& [n, t] : items_) keys += (keys.empty() ? "" : ", ") + n;
  throw std::invalid_argument("the batch has no tensor '" + name + "' (it has: " + keys + ")");
}

bool Batch::contains(const std::string& name) const {
  for (const auto& [n, t] : items_)
    if (n == name) return true;
  return false;
}

namespace {

template <class T>
T& need(const std::shared_ptr<T>& p, const char* what) {
  if (!p) throw core::StateError(std::string(what) + " is empty (default-constructed or moved from)");
  return *p;
}

// A user's module under the core's module-tree interface.
std::shared_ptr<core::Model> as_model(std::shared_ptr<torch::nn::Module> m) {
  return std::make_shared<core::NnModel>(std::move(m));
}

}  // namespace

torch::nn::Module& Model::module() const {
  return *std::static_pointer_cast<core::NnModel>(need(slot, "the model").model)->module();
}

std::vector<std::string> Model::parameter_names() const {
  std::vector<std::string> names;
  for (const auto& [n, p] : need(slot, "the model").model->named_parameters()) names.push_back(n);
  return names;
}

Model::ForwardGuard::ForwardGuard(Model& model)
    : scope_(std::make_unique<core::ForwardScope>(need(model.slot, "the model"))) {}

Model::ForwardGuard::~ForwardGuard() = default;

torch::Tensor Model::to_fp32(const torch::Tensor& t) { return core::output_to_fp32(t); }

void Optimizer::step() { need(slot, "the optimizer").step(); }
void Optimizer::zero_grad() { need(slot, "the optimizer").zero_grad(); }
bool Optimizer::step_was_skipped() const { return need(slot, "the optimizer").step_was_skipped; }
double Optimizer::lr() const { return need(slot, "the optimizer").opt->lr(); }

void Scheduler::step() { need(slot, "the scheduler").step(); }

namespace {
core::TensorDict to_core(const Batch& b) {
  core::TensorDict d;
  for (const auto& [name, t] : b.items()) d.set(name, t);
  return d;
}
}  // namespace

DataLoader::DataLoader(const Batch& columns, const std::string& options_json)
    : impl(std::make_shared<core::DataLoader>(core::make_tensor_dataset(to_core(columns)),
                                              core::LoaderOptions::parse(options_json.c_str()))) {}

DataLoader::DataLoader(int64_t size, std::function<Batch(int64_t)> get, const std::string& options_json) {
  if (!get) throw std::invalid_argument("the sample function is empty");
  auto ds = core::make_callback_dataset(size, [get = std::move(get)](int64_t i) {
    core::TensorDict s = to_core(get(i));
    if (s.empty()) throw std::invalid_argument("the sample function gave no tensor for index " + std::to_string(i));
    return s;
  });
  impl = std::make_shared<core::DataLoader>(std::move(ds), core::LoaderOptions::parse(options_json.c_str()));
}

DataLoader DataLoader::from_files(const std::string& path, const Tokenizer& tokenizer,
                                  const std::string& dataset_options_json, const std::string& options_json) {
  if (!tokenizer.impl) throw std::invalid_argument("DataLoader::from_files: the tokenizer is empty");
  std::optional<json::Document> doc;
  if (!dataset_options_json.empty()) doc.emplace(dataset_options_json, "dataset options");
  auto root = doc ? std::optional<json::Value>(doc->root()) : std::nullopt;
  data::PipelineOptions o = data::parse_pipeline_options(root ? &*root : nullptr, "dataset options");
  if (!path.empty()) {
    if (!o.files.empty())
      throw config::Error("dataset options: 'files' is given and so is path '" + path + "': name the files once");
    o.files = {path};
  }
  return DataLoader(std::make_shared<core::DataLoader>(core::make_files_dataset(*tokenizer.impl, o),
                                                       core::LoaderOptions::parse(options_json.c_str())));
}

DataLoader DataLoader::from_config(const Accelerator& accelerator, const Tokenizer& tokenizer,
                                   const std::string& options_json) {
  if (!tokenizer.impl) throw std::invalid_argument("DataLoader::from_config: the tokenizer is empty");
  const data::PipelineOptions o = data::pipeline_options_from_config(accelerator.impl()->config());
  return DataLoader(std::make_shared<core::DataLoader>(core::make_files_dataset(*tokenizer.impl, o),
                                                       core::LoaderOptions::parse(options_json.c_str())));
}

DataLoader::DataLoader(torch::Tensor inputs, torch::Tensor targets, const std::string& options_json)
    : impl(std::make_shared<core::DataLoader>(core::make_tensor_dataset(std::move(inputs), std::move(targets)),
                                              core::LoaderOptions::parse(options_json.c_str()))) {}

DataLoader::DataLoader(int64_t size, std::function<std::pair<torch::Tensor, torch::Tensor>(int64_t)> get,
                       const std::string& options_json) {
  if (!get) throw std::invalid_argument("the sample function is empty");
  auto ds = core::make_callback_dataset(size, [get = std::move(get)](int64_t i) {
    auto [input, target] = get(i);
    if (!input.defined())
      throw std::invalid_argument("the sample function gave no input for index " + std::to_string(i));
    return core::pair_sample(input, target);
  });
  impl = std::make_shared<core::DataLoader>(std::move(ds), core::LoaderOptions::parse(options_json.c_str()));
}

std::optional<Batch> DataLoader::next() {
  core::Sample s;
  if (!need(impl, "the data loader").next(s)) return std::nullopt;
  return Batch(s.items());
}

int64_t DataLoader::length() const { return need(impl, "the data loader").length(); }
void DataLoader::set_epoch(int64_t epoch) { need(impl, "the data loader").set_epoch(epoch); }
bool DataLoader::end_of_epoch() const { return need(impl, "the data loader").end_of_dataloader(); }

Accelerator::Accelerator(const std::string& config_json) : impl_(core::Accelerator::create(config_json.c_str())) {}

int Accelerator::process_index() const { return impl_->state().rank; }
int Accelerator::local_process_index() const { return impl_->state().local_rank; }
int Accelerator::num_processes() const { return impl_->state().world_size; }
bool Accelerator::is_main_process() const { return impl_->state().rank == 0; }
bool Accelerator::is_local_main_process() const { return impl_->state().local_rank == 0; }
bool Accelerator::is_last_process() const { return impl_->state().rank == impl_->state().world_size - 1; }
torch::Device Accelerator::device() const { return impl_->device(); }
std::string Accelerator::distributed_type() const { return impl_->distributed_type(); }
std::string Accelerator::config_json() const { return impl_->config_json(); }

Model Accelerator::prepare(std::shared_ptr<torch::nn::Module> module) {
  if (!module) throw std::invalid_argument("prepare: the module is null");
  auto slot = std::make_shared<core::PreparedModel>();
  slot->model = as_model(std::move(module));
  impl_->prepare(slot, nullptr, nullptr, nullptr);
  Model m;
  m.slot = std::move(slot);
  return m;
}

Model Accelerator::prepare(const HfModel& model) {
  need(model.slot, "the model");
  impl_->prepare(model.slot, nullptr, nullptr, nullptr);
  Model m;
  m.slot = model.slot;
  return m;
}

namespace {
HfModel hf_model(std::unique_ptr<core::Model> model) {
  HfModel m;
  m.slot = std::make_shared<core::PreparedModel>();
  m.slot->model = std::move(model);
  return m;
}
}  // namespace

HfModel HfModel::from_pretrained(const std::string& dir, const std::string& options_json) {
  return hf_model(core::hf::from_pretrained(dir, options_json.c_str()));
}

HfModel HfModel::from_config(const std::string& config_json, const std::string& options_json) {
  return hf_model(core::hf::from_config(config_json, options_json.c_str()));
}

torch::nn::Module& HfModel::module() const {
  return *std::static_pointer_cast<core::NnModel>(need(slot, "the model").model)->module();
}

Batch HfModel::operator()(const Batch& batch) const {
  core::TensorDict in;
  for (const auto& [name, t] : batch.items()) in.set(name, t);
  core::TensorDict out = need(slot, "the model").forward(in);
  return Batch(out.items());
}

torch::Tensor HfModel::generate(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                const std::string& options_json,
                                const std::function<bool(const torch::Tensor&)>& on_tokens) const {
  return core::hf::generate(need(slot, "the model").tensors("generate"), input_ids, attention_mask,
                            options_json.c_str(), on_tokens);
}

std::string HfModel::generate_text(const Tokenizer& tokenizer, const std::string& prompt,
                                   const std::string& options_json,
                                   const std::function<bool(std::string_view)>& on_text) const {
  return core::hf::generate_text(need(slot, "the model").tensors("generate_text"),
                                 need(tokenizer.impl, "the tokenizer"), prompt, options_json.c_str(), on_text);
}

namespace {
std::optional<json::Document> text_options(const std::string& options_json, const char* what) {
  if (options_json.empty()) return std::nullopt;
  json::Document d(options_json, what);
  if (!d.root().is_object()) throw config::Error(std::string(what) + ": expected a JSON object");
  return d;
}
std::optional<json::Value> root_of(const std::optional<json::Document>& d) {
  return d ? std::optional<json::Value>(d->root()) : std::nullopt;
}
// Rows of equal length as an int64 tensor [rows, T].
torch::Tensor stacked(const std::vector<const std::vector<int64_t>*>& rows, const char* field) {
  const size_t n = rows.size(), len = n ? rows[0]->size() : 0;
  torch::Tensor t = torch::empty({static_cast<int64_t>(n), static_cast<int64_t>(len)}, torch::kLong);
  for (size_t i = 0; i < n; ++i) {
    if (rows[i]->size() != len)
      throw std::invalid_argument(std::string("Tokenizer::encode: row ") + std::to_string(i) + "'s " + field + " has " +
                                  std::to_string(rows[i]->size()) + " tokens, row 0's " + std::to_string(len) +
                                  ": encode with \"padding\" (or use encode_ids)");
    std::copy(rows[i]->begin(), rows[i]->end(), t[i].data_ptr<int64_t>());
  }
  return t;
}
}  // namespace

Tokenizer Tokenizer::from_pretrained(const std::string& dir) {
  return Tokenizer{text::Tokenizer::from_pretrained(dir)};
}

Tokenizer Tokenizer::train_bpe(const std::vector<std::string>& texts, const std::string& options_json) {
  auto d = text_options(options_json, "tokenizer training options");
  auto root = root_of(d);
  std::vector<std::string_view> v(texts.begin(), texts.end());
  return Tokenizer{text::train_bpe(v, text::parse_train_options(root ? &*root : nullptr))};
}

std::vector<std::vector<int64_t>> Tokenizer::encode_ids(const std::vector<std::string>& texts,
                                                        const std::string& options_json) const {
  auto d = text_options(options_json, "encode options");
  auto root = root_of(d);
  std::vector<std::string_view> v(texts.begin(), texts.end());
  std::vector<std::vector<int64_t>> out;
  for (auto& e : need(impl, "the tokenizer")
                     .encode_batch(v, nullptr, text::parse_encode_options(root ? &*root : nullptr, "encode options")))
    out.push_back(std::move(e.ids));
  return out;
}

Batch Tokenizer::encode(const std::vector<std::string>& texts, const std::string& options_json) const {
  auto d = text_options(options_json, "encode options");
  auto root = root_of(d);
  std::vector<std::string_view> v(texts.begin(), texts.end());
  auto rows = need(impl, "the tokenizer")
                  .encode_batch(v, nullptr, text::parse_encode_options(root ? &*root : nullptr, "encode options"));
  std::vector<const std::vector<int64_t>*> ids, mask, types;
  for (const auto& r : rows) ids.push_back(&r.ids), mask.push_back(&r.attention_mask), types.push_back(&r.type_ids);
  return Batch({{"input_ids", stacked(ids, "input_ids")},
                {"attention_mask", stacked(mask, "attention_mask")},
                {"token_type_ids", stacked(types, "token_type_ids")}});
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return need(impl, "the tokenizer").decode(ids, skip_special_tokens);
}

std::string Tokenizer::apply_chat_template(const std::string& messages_json, const std::string& options_json) const {
  auto d = text_options(options_json, "chat template options");
  auto root = root_of(d);
  text::parse_chat_encode_options(root ? &*root : nullptr);  // unknown keys refused here too
  return text::render_chat(need(impl, "the tokenizer"), messages_json,
                           text::parse_chat_options(root ? &*root : nullptr))
      .text;
}

Batch Tokenizer::encode_chat(const std::string& messages_json, const std::string& options_json) const {
  auto d = text_options(options_json, "chat template options");
  auto root = root_of(d);
  auto c = text::encode_chat(need(impl, "the tokenizer"), messages_json,
                             text::parse_chat_options(root ? &*root : nullptr),
                             text::parse_chat_encode_options(root ? &*root : nullptr));
  return Batch({{"input_ids", stacked({&c.encoding.ids}, "input_ids")},
                {"attention_mask", stacked({&c.encoding.attention_mask}, "attention_mask")},
                {"assistant_masks", stacked({&c.assistant_masks}, "assistant_masks")}});
}

std::optional<int64_t> Tokenizer::token_to_id(const std::string& token) const {
  return need(impl, "the tokenizer").token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  return need(impl, "the tokenizer").id_to_token(id);
}

std::string Tokenizer::info() const { return text::info_json(need(impl, "the tokenizer")); }

void Tokenizer::set_special_token(const std::string& name, const std::optional<std::string>& token) {
  need(impl, "the tokenizer").set_special_token(name, token);
}

void Tokenizer::save_pretrained(const std::string& dir) const {
  config::make_directories(dir);
  need(impl, "the tokenizer").save_pretrained(dir);
}

void HfModel::save_pretrained(const std::string& dir, const std::string& max_shard_size) const {
  core::save_pretrained(need(slot, "the model"), dir, max_shard_size);
}

std::string HfModel::module_sizes(const std::string& dtype) const {
  return core::bigmodel::module_sizes_json(*need(slot, "the model").model, dtype);
}

std::string HfModel::infer_auto_device_map(const std::string& options_json) const {
  return core::bigmodel::plan_device_map(*need(slot, "the model").model, options_json.c_str());
}

Optimizer Accelerator::prepare(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  if (!optimizer) throw std::invalid_argument("prepare: the optimizer is null");
  auto slot = std::make_shared<core::PreparedOptimizer>();
  slot->opt = std::make_unique<core::Optimizer>(std::move(optimizer));
  impl_->prepare(nullptr, slot, nullptr, nullptr);
  Optimizer o;
  o.slot = std::move(slot);
  return o;
}

Scheduler Accelerator::prepare(std::shared_ptr<torch::optim::LRScheduler> scheduler, const Optimizer& optimizer) {
  if (!scheduler) throw std::invalid_argument("prepare: the scheduler is null");
  auto slot = std::make_shared<core::PreparedScheduler>();
  slot->opt = optimizer.slot;
  slot->user = std::move(scheduler);
  need(slot->opt, "the scheduler's optimizer");
  impl_->prepare(nullptr, nullptr, slot, nullptr);
  Scheduler s;
  s.slot = std::move(slot);
  return s;
}

DataLoader Accelerator::prepare(DataLoader loader) {
  need(loader.impl, "the data loader");
  impl_->prepare(nullptr, nullptr, nullptr, loader.impl);
  return loader;
}

void Accelerator::backward(const torch::Tensor& loss) { impl_->backward(loss); }

Accelerator::AccumulateScope::AccumulateScope(Accelerator& accelerator, Model& model)
    : acc_(accelerator.impl_), model_(model.slot) {
  acc_->accumulate_begin(model_);
}

Accelerator::AccumulateScope::~AccumulateScope() {
  try {
    acc_->accumulate_end(model_);
  } catch (...) {  // a destructor must not throw; begin succeeded, so end cannot fail
  }
}

bool Accelerator::sync_gradients() const { return impl_->gradient_state().sync_gradients; }

Accelerator::ProfileScope::ProfileScope(Accelerator& accelerator, const std::string& profile_kwargs_json)
    : acc_(accelerator.impl_), exceptions_(std::uncaught_exceptions()) {
  acc_->profile_begin(profile_kwargs_json.c_str());
}

Accelerator::ProfileScope::~ProfileScope() {
  if (ended_) return;
  try {
    if (std::uncaught_exceptions() > exceptions_)
      acc_->profile_cancel();  // no trace and no barrier: the other processes may not be here
    else acc_->profile_end();
  } catch (...) {  // a destructor must not throw
  }
}

void Accelerator::ProfileScope::step() { acc_->profile_step(); }

std::string Accelerator::ProfileScope::end() {
  ended_ = true;
  return acc_->profile_end();
}

double Accelerator::clip_grad_norm(Model& model, double max_norm, double norm_type) {
  return impl_->clip_grad_norm(need(model.slot, "the model"), max_norm, norm_type);
}

void Accelerator::clip_grad_value(Model& model, double clip_value) {
  impl_->clip_grad_value(need(model.slot, "the model"), clip_value);
}

torch::Tensor Accelerator::gather(const torch::Tensor& t) { return impl_->gather(t); }
torch::Tensor Accelerator::gather_for_metrics(const torch::Tensor& t) { return impl_->gather_for_metrics(t); }

torch::Tensor Accelerator::reduce(const torch::Tensor& t, Reduce op) {
  core::ReduceOp r = op == Reduce::Sum    ? core::ReduceOp::Sum
                     : op == Reduce::Mean ? core::ReduceOp::Mean
                                          : core::ReduceOp::Max;
  return impl_->reduce(t, r);
}

torch::Tensor Accelerator::broadcast(const torch::Tensor& t, int from_process) {
  return impl_->broadcast(t, from_process);
}

torch::Tensor Accelerator::pad_across_processes(const torch::Tensor& t, int64_t dim, double pad_index, bool pad_first) {
  return impl_->pad_across_processes(t, dim, pad_index, pad_first);
}

std::pair<int64_t, int64_t> Accelerator::split_between_processes(int64_t n) const {
  auto s = impl_->split_between_processes(n, false);
  return {s.start, s.count};
}

torch::Tensor Accelerator::split_between_processes(const torch::Tensor& t, bool apply_padding) const {
  return impl_->split_tensor_between_processes(t, apply_padding);
}

void Accelerator::wait_for_everyone() { impl_->wait_for_everyone(); }

std::vector<std::string> Accelerator::gather_object(const std::vector<std::string>& items) {
  return impl_->gather_object(items, false);
}
std::vector<std::string> Accelerator::gather_object_for_metrics(const std::vector<std::string>& items) {
  return impl_->gather_object(items, true);
}
std::vector<std::string> Accelerator::broadcast_object(const std::vector<std::string>& items, int from_process) {
  return impl_->broadcast_object(items, from_process);
}

void Accelerator::main_process_first(const std::function<void()>& fn, bool local) {
  impl_->main_process_first(local, /*entering=*/true);
  fn();
  impl_->main_process_first(local, /*entering=*/false);
}

void Accelerator::set_trigger() { impl_->set_trigger(); }
bool Accelerator::check_trigger() { return impl_->check_trigger(); }

void Accelerator::print(const std::string& text) const { impl_->print(text); }

void Accelerator::init_trackers(const std::string& project_name, const std::string& config_json,
                                const std::string& init_kwargs_json) {
  impl_->init_trackers(project_name, config_json, init_kwargs_json);
}

void Accelerator::log(const std::vector<std::pair<std::string, double>>& values, std::optional<int64_t> step) {
  tracking::Values v;
  v.reserve(values.size());
  for (const auto& [name, x] : values) {
    if (name.empty()) throw std::invalid_argument("log: an empty name");
    v.emplace_back(name, tracking::Value::of(x));
  }
  impl_->log(v, step);
}

void Accelerator::log_json(const std::string& values_json, std::optional<int64_t> step) {
  impl_->log(tracking::parse_values(values_json), step);
}

void Accelerator::end_training() { impl_->end_training(); }

void Accelerator::save_state(const std::string& dir) { acc::core::save_state(*impl_, dir); }
void Accelerator::load_state(const std::string& dir) { acc::core::load_state(*impl_, dir); }
void Accelerator::save_model(const Model& model, const std::string& dir, const std::string& max_shard_size) {
  if (!model.slot) throw std::invalid_argument("save_model: the model is empty");
  core::save_model(*model.slot, dir, max_shard_size);
}
void Accelerator::register_for_checkpointing(std::function<std::string()> save,
                                             std::function<void(const std::string&)> load) {
  impl_->register_for_checkpointing({std::move(save), std::move(load)});
}

void Accelerator::set_seed(uint64_t seed, bool device_specific, bool deterministic) const {
  impl_->set_seed(seed, device_specific, deterministic);
}

void save_safetensors(const torch::nn::Module& module, const std::string& path) {
  core::NamedTensors state;
  for (const auto& p : module.named_parameters(true)) state.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) state.emplace_back(b.key(), b.value());
  core::save_safetensors(state, path, {{"format", "pt"}});
}

void save_model(const torch::nn::Module& module, const std::string& dir, const std::string& max_shard_size) {
  core::NamedTensors state;
  for (const auto& p : module.named_parameters(true)) state.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) state.emplace_back(b.key(), b.value());
  core::write_model_files(state, dir, core::parse_shard_size(max_shard_size));
}

int64_t set_requires_grad(torch::nn::Module& module, const std::string& pattern, bool requires_grad) {
  return core::NnModel(module.shared_from_this()).set_requires_grad(pattern, requires_grad);
}

int64_t set_requires_grad(HfModel& model, const std::string& pattern, bool requires_grad) {
  return need(model.slot, "the model").set_requires_grad(pattern, requires_grad);
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& module, const std::string& options_json) {
  return core::make_optimizer(core::NnModel(module.shared_from_this()), options_json.c_str())->shared_impl();
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const HfModel& model, const std::string& options_json) {
  return core::make_optimizer(*need(model.slot, "the model").model, options_json.c_str())->shared_impl();
}

/* ------------------------------------------------------------------ LoRA adapters */

namespace {

// acc::Linear's side of the core's adapter interface (models/lora.hpp).
struct LinearHost final : core::lora::Host {
  explicit LinearHost(LinearImpl* layer) : layer(layer) {}
  torch::nn::Module& host_module() override { return *layer; }
  at::Tensor host_weight() override { return layer->weight; }
  LinearImpl* layer;
};

// The layers that take adapters in a C++ user's tree: the core's, and acc::Linear.
core::lora::Host* cxx_host_of(torch::nn::Module& m) {
  if (auto* l = dynamic_cast<LinearImpl*>(&m)) return l->lora.get();
  return core::lora::default_host_of(m);
}

// A user's module as a model slot of its own, not prepared.
core::PreparedModel slot_of(torch::nn::Module& module) {
  std::shared_ptr<torch::nn::Module> owner;
  try {
    owner = module.shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    throw std::invalid_argument("the module is not held by a std::shared_ptr (make it with std::make_shared or a "
                                "module holder): LoRA keeps the module tree it adapts");
  }
  core::PreparedModel slot;
  slot.model = as_model(std::move(owner));
  return slot;
}

const char* null_if_empty(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }

}  // namespace

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias)
    : torch::nn::Module("Linear"), in_features(in), out_features(out) {
  if (in <= 0 || out <= 0)
    throw std::invalid_argument("acc::Linear(" + std::to_string(in) + ", " + std::to_string(out) +
                                "): the sizes must be positive");
  weight = register_parameter("weight", torch::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}));
  lora = std::make_shared<LinearHost>(this);
  reset_parameters();
}

LinearImpl::~LinearImpl() = default;

void LinearImpl::reset_parameters() {
  c10::NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));  // torch::nn::Linear's, for W and b
  weight.uniform_(-bound, bound);
  if (bias.defined()) bias.uniform_(-bound, bound);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return lora->with_lora(x, at::linear(x, weight, bias)); }

void add_lora(torch::nn::Module& module, const std::string& lora_config_json) {
  core::PreparedModel slot = slot_of(module);
  core::add_lora(slot, lora_config_json.c_str(), cxx_host_of);
}

void add_lora(HfModel& model, const std::string& lora_config_json) {
  core::add_lora(need(model.slot, "the model"), lora_config_json.c_str(), cxx_host_of);
}

void load_adapter(torch::nn::Module& module, const std::string& dir, const std::string& options_json) {
  core::PreparedModel slot = slot_of(module);
  core::load_adapter(slot, dir, null_if_empty(options_json), cxx_host_of);
}

void load_adapter(HfModel& model, const std::string& dir, const std::string& options_json) {
  core::load_adapter(need(model.slot, "the model"), dir, null_if_empty(options_json), cxx_host_of);
}

void save_adapter(torch::nn::Module& module, const std::string& dir) {
  core::PreparedModel slot = slot_of(module);
  core::save_adapter(slot, dir, cxx_host_of);
}

void save_adapter(const HfModel& model, const std::string& dir) {
  core::save_adapter(need(model.slot, "the model"), dir, cxx_host_of);
}

void save_adapter(const Model& model, const std::string& dir) {
  core::save_adapter(need(model.slot, "the model"), dir, cxx_host_of);
}

void merge_adapter(torch::nn::Module& module) {
  core::PreparedModel slot = slot_of(module);
  core::merge_adapter(slot, cxx_host_of);
}

void merge_adapter(HfModel& model) { core::merge_adapter(need(model.slot, "the model"), cxx_host_of); }

}  // namespace acc
