// Pipeline-parallel training (pipeline.hpp): the stage layout, the model cut to this rank's stages, and a step
// that runs the schedule's actions with point-to-point exchanges between neighbouring stages.
#include "parallel/pipeline.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/nn/module.h>

#include "parallel/split_backward.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace acc::core::pp {

// Named, not anonymous: the core is compiled in unity units (pipeline_schedule.cpp has a str of its own).
namespace pipeline_impl {

std::string decimal(int64_t v) { return std::to_string(v); }

std::invalid_argument refused(const std::string& why) { return std::invalid_argument("pipeline parallelism: " + why); }

// What a message between stages carries; its tag is (sending stage, micro-batch, kind).
enum Kind { Header = 0, Activation = 1, Gradient = 2, Kinds = 3 };
constexpr int64_t kMaxDims = 6;

}  // namespace pipeline_impl

using pipeline_impl::Activation;
using pipeline_impl::decimal;
using pipeline_impl::Gradient;
using pipeline_impl::Header;
using pipeline_impl::Kind;
using pipeline_impl::Kinds;
using pipeline_impl::kMaxDims;
using pipeline_impl::refused;

std::vector<StageLayers> balanced_stages(int64_t num_blocks, int num_stages, int input_weight, int output_weight) {
  if (num_stages < 1) throw refused("Number of stages must be at least 1");
  if (num_stages == 1) return {{true, true, 0, num_blocks}};
  const int64_t effective = num_blocks + input_weight + output_weight;
  if (num_stages > effective)
    throw refused("Number of stages (" + decimal(num_stages) + ") cannot be greater than effective layers (" +
                  decimal(effective) + ")");
  const int64_t per = effective / num_stages, extra = effective % num_stages;
  if (input_weight > per)
    throw refused("input_weight (" + decimal(input_weight) + ") exceeds minimum layers per stage (" + decimal(per) +
                  ").");
  if (output_weight > per)
    throw refused("output_weight (" + decimal(output_weight) + ") exceeds minimum layers per stage (" + decimal(per) +
                  ").");
  std::vector<StageLayers> out;
  int64_t next = 0;
  for (int s = 0; s < num_stages; ++s) {
    const bool first = s == 0, last = s == num_stages - 1;
    // Each stage's share of the effective layers, the embeddings' and the head's weights taken off its blocks.
    const int64_t blocks = per + (s < extra ? 1 : 0) - (first ? input_weight : 0) - (last ? output_weight : 0);
    out.push_back({first, last, next, next + blocks});
    next += blocks;
  }
  return out;
}

std::vector<StageLayers> stages_at(int64_t num_blocks, const std::vector<int64_t>& split_points) {
  std::vector<StageLayers> out;
  int64_t begin = 0;
  for (size_t k = 0; k < split_points.size(); ++k) {
    const int64_t p = split_points[k];
    // A middle stage needs a block; the first and the last may hold only the embeddings or the head.
    if (p < begin + (k == 0 ? 0 : 1) || p > num_blocks || (k + 1 < split_points.size() && p == num_blocks))
      throw refused("split point " + decimal(p) + " (number " + decimal(static_cast<int64_t>(k)) +
                    ") must be a block index after the previous split point and at most the " + decimal(num_blocks) +
                    " blocks, leaving every middle stage a block");
    out.push_back({k == 0, false, begin, p});
    begin = p;
  }
  out.push_back({split_points.empty(), true, begin, num_blocks});
  return out;
}

// This rank's stage: its layers and, per micro-batch, the input received (a leaf whose gradient goes back) and the
// output kept for backward; under zero bubble, what the weight gradient needs once the input gradient has gone.
struct Pipeline::Local {
  int stage = 0;
  StageLayers layers;
  std::vector<at::Tensor> inputs, outputs;
  std::vector<at::Tensor> output_grads;     // the first stage's: its whole backward waits for the weight gradient
  std::vector<DeferredWeights> weights;     // the other stages'
  void resize(size_t microbatches) {
    inputs.resize(microbatches), outputs.resize(microbatches);
    output_grads.resize(microbatches), weights.resize(microbatches);
  }
};

// The point-to-point messages of one step. Sends are posted at once (isend) and waited on at the end. Every schedule
// runs a stage's forwards in micro-batch order and every micro-batch has the same rows, so an activation's dtype and
// shape travel once a step, in a header before micro-batch 0's. Where messages are matched by tag (Gloo), receives are
// posted ahead: a stage's next activations once their shape is known (at most `ahead` micro-batches beyond the one
// being received), and in training each activation's gradient when the activation is sent. Gloo then copies a message
// in as it arrives, instead of when the action needing it asks (bench/pipeline.py measures the difference). NCCL
// matches messages by their order, which posting ahead would change: there a receive is posted when the action
// needing it runs. Messages to this rank itself (pp_size 1) are handed over in memory. Receives still posted when a
// step fails are dropped with the exchange (Gloo unbinds their buffers).
class Pipeline::Exchange {
 public:
  struct Settings {
    int microbatches;
    bool training;    // gradients come back
    bool post_ahead;  // the backend matches messages by tag
    int ahead;        // activations posted beyond the one being received
  };
  Exchange(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, const Settings& s)
      : pg_(std::move(pg)), rank_(rank), s_(s) {}

  // Before any action runs: micro-batch 0's header from stage `stage` (on rank `from`).
  void expect_activations(int from, int stage) {
    if (s_.post_ahead && from != rank_) post(at::empty({kMaxDims + 2}, at::kLong), from, stage, 0, Header);
  }

  void send_activation(const at::Tensor& t, int to, int stage, int mb) {
    if (to == rank_) return keep_local(t, stage, mb, Activation);
    auto [shape, fresh] = sent_shapes_.emplace(stage, t.sizes().vec());
    if (!fresh && shape->second != t.sizes().vec())
      throw refused("stage " + decimal(stage) + "'s output for micro-batch " + decimal(mb) +
                    " has another shape than " +
                    "for micro-batch 0: every micro-batch's activations must have the same shape");
    if (mb == 0) send(header(t), to, stage, mb, Header);
    send(t, to, stage, mb, Activation);
    if (s_.training && s_.post_ahead) post(at::empty_like(t), to, stage + 1, mb, Gradient);
  }
  at::Tensor recv_activation(int from, int stage, int mb, c10::Device device) {
    if (from == rank_) return take_local(stage, mb, Activation);
    if (mb == 0) {
      const at::Tensor h = take(at::empty({kMaxDims + 2}, at::kLong), from, stage, mb, Header);
      std::vector<int64_t> sizes(static_cast<size_t>(h[1].item<int64_t>()));
      for (size_t d = 0; d < sizes.size(); ++d) sizes[d] = h[static_cast<int64_t>(d) + 2].item<int64_t>();
      received_[stage] =
          at::empty(sizes, at::TensorOptions(device).dtype(static_cast<at::ScalarType>(h[0].item<int64_t>())));
    }
    const at::Tensor& like = received_.at(stage);
    if (s_.post_ahead)
      for (int i = std::max(mb + 1, posted_up_to_[stage] + 1); i <= std::min(mb + s_.ahead, s_.microbatches - 1); ++i)
        post(at::empty_like(like), from, stage, i, Activation), posted_up_to_[stage] = i;
    return take(at::empty_like(like), from, stage, mb, Activation);
  }
  // `stage`: the sending stage.
  void send_gradient(const at::Tensor& g, int to, int stage, int mb) {
    if (to == rank_) return keep_local(g, stage, mb, Gradient);
    send(g, to, stage, mb, Gradient);
  }
  at::Tensor recv_gradient(const at::Tensor& like, int from, int stage, int mb) {
    if (from == rank_) return take_local(stage, mb, Gradient);
    return take(at::empty_like(like), from, stage, mb, Gradient);
  }
  void finish() {
    for (auto& w : sends_) w->wait();
    sends_.clear();
    keep_.clear();
  }

 private:
  int tag(int stage, int mb, Kind k) const { return (stage * s_.microbatches + mb) * Kinds + k; }
  static at::Tensor header(const at::Tensor& t) {
    if (t.dim() > kMaxDims) throw refused("a stage's output has " + decimal(t.dim()) + " dimensions; at most 6 pass");
    at::Tensor h = at::full({kMaxDims + 2}, -1, at::kLong);
    h[0] = static_cast<int64_t>(t.scalar_type());
    h[1] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) h[d + 2] = t.size(d);
    return h;
  }
  void send(const at::Tensor& t, int to, int stage, int mb, Kind k) {
    std::vector<at::Tensor> v{t.contiguous()};
    sends_.push_back(pg_->send(v, to, tag(stage, mb, k)));
    keep_.push_back(v[0]);
  }
  void post(at::Tensor buffer, int from, int stage, int mb, Kind k) {
    std::vector<at::Tensor> v{buffer};
    posted_[tag(stage, mb, k)] = {pg_->recv(v, from, tag(stage, mb, k)), buffer};
  }
  // The message posted ahead, or `buffer` received now.
  at::Tensor take(at::Tensor buffer, int from, int stage, int mb, Kind k) {
    auto it = posted_.find(tag(stage, mb, k));
    if (it == posted_.end()) post(std::move(buffer), from, stage, mb, k), it = posted_.find(tag(stage, mb, k));
    auto [work, t] = std::move(it->second);
    posted_.erase(it);
    work->wait();
    return t;
  }
  void keep_local(const at::Tensor& t, int stage, int mb, Kind k) { local_[tag(stage, mb, k)] = t.contiguous(); }
  at::Tensor take_local(int stage, int mb, Kind k) {
    auto it = local_.find(tag(stage, mb, k));
    if (it == local_.end()) throw std::logic_error("pipeline: no message from stage " + decimal(stage));
    at::Tensor t = it->second;
    local_.erase(it);
    return t;
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  int rank_;
  Settings s_;
  std::vector<c10::intrusive_ptr<c10d::Work>> sends_;
  std::vector<at::Tensor> keep_;  // what the sends read, alive until they are done
  std::map<int, std::pair<c10::intrusive_ptr<c10d::Work>, at::Tensor>> posted_;  // by tag: receives and their buffers
  std::map<int, std::vector<int64_t>> sent_shapes_;  // by sending stage
  std::map<int, at::Tensor> received_;  // by sending stage: a tensor of its activations' shape and dtype
  std::map<int, int> posted_up_to_;  // by sending stage: the last micro-batch whose activation is posted
  std::map<int, at::Tensor> local_;
};

namespace pipeline_impl {

std::string model_name(const Model& model) {
  const auto* nn = dynamic_cast<const NnModel*>(&model);
  return nn ? nn->module()->name() : "this model";
}

}  // namespace pipeline_impl

using pipeline_impl::model_name;

std::vector<int64_t> split_point_indices(const Model& model, const std::vector<std::string>& points) {
  const auto* stages = dynamic_cast<const PipelineStages*>(&model);
  if (!stages && !points.empty())
    throw std::invalid_argument(model_name(model) + " has no blocks to split at (libacc cuts the built-in GPT, GPT-2, "
                                                    "Llama, Mistral, Qwen2 and Mixtral)");
  std::vector<int64_t> out;
  for (const std::string& p : points) {
    if (p.find_first_not_of("0123456789") == std::string::npos) {
      out.push_back(std::stoll(p));
      continue;
    }
    const int64_t blocks = stages->num_blocks();
    int64_t found = -1;
    for (int64_t i = 0; i < blocks && found < 0; ++i)
      if (stages->block_module(i) == p) found = i;
    // The first of the last part (the final norm): a last stage without blocks.
    if (found < 0 && p == stages->last_modules().front()) found = blocks;
    std::string block;  // the block `p` is inside of
    for (int64_t i = 0; i < blocks && block.empty(); ++i)
      if (p.rfind(stages->block_module(i) + ".", 0) == 0) block = stages->block_module(i);
    const std::vector<std::string> first = stages->first_modules();
    if (found < 0 && std::find(first.begin(), first.end(), p) != first.end())
      throw std::invalid_argument("split point '" + p +
                                  "' begins a stage with the embeddings, leaving the stage before " +
                                  "it empty (Accelerate's \"auto\" does that where the embedding outweighs a process's "
                                  "share; give the split points)");
    if (found < 0 && !block.empty())
      throw std::invalid_argument(
          "split point '" + p + "' is inside the block " + block +
          ": libacc's stages begin at a block (keep the blocks whole: no_split_module_classes)");
    if (found < 0)
      throw std::invalid_argument("split point '" + p + "' names no block of " + model_name(model) +
                                  " (its blocks are " + stages->block_module(0) + " ... " +
                                  stages->block_module(blocks - 1) + ", then " + stages->last_modules().front() + ")");
    out.push_back(found);
  }
  return out;
}

Pipeline::Pipeline(Model& model, std::shared_ptr<Comm> group, const Options& options)
    : model_(model),
      stages_(dynamic_cast<PipelineStages*>(&model)),
      group_(std::move(group)),
      schedule_(parse_schedule(options.schedule)),
      rank_(group_->rank()),
      pp_(group_->size()),
      per_rank_(options.stages_per_rank),
      microbatches_(options.microbatches) {
  if (!stages_ || !dynamic_cast<NnModel*>(&model))
    throw refused(model_name(model) +
                  " cannot be cut into pipeline stages (libacc cuts the built-in GPT, GPT-2, Llama, Mistral, Qwen2 "
                  "and Mixtral)");
  build_layout(options);
  keep_local_modules();
  const NamedTensors kept = model_.named_parameters();
  if (!kept.empty()) device_ = kept.front().second.device();
  for (int s : local_stages()) {
    auto l = std::make_shared<Local>();
    l->stage = s;
    l->layers = layout_[static_cast<size_t>(s)];
    locals_.push_back(l);
  }
}

void Pipeline::build_layout(const Options& o) {
  const int64_t blocks = stages_->num_blocks();
  const int iw = o.first_stage_less_layers, ow = o.last_stage_less_layers;
  const bool single = !multi_stage(schedule_);
  if (o.layers_per_stage > 0) {
    // torchtitan's _get_pipeline_metadata: the stage count from the layers per stage.
    const int64_t stages = (blocks + iw + ow + o.layers_per_stage - 1) / o.layers_per_stage;
    if (stages % pp_ != 0)
      throw refused("Number of virtual stages (" + decimal(stages) + ") must be divisible by pipeline parallel size (" +
                    decimal(pp_) + ") (" + decimal(blocks) + " layers, layers_per_stage " +
                    decimal(o.layers_per_stage) + ")");
    per_rank_ = static_cast<int>(stages / pp_);
    if (single && per_rank_ != 1)
      throw refused("Single stage schedule requires exactly 1 stage per rank, but got " + decimal(per_rank_) +
                    " stages per rank (layers_per_stage " + decimal(o.layers_per_stage) + ")");
    if (!single && per_rank_ < 2)
      throw refused("Multi-stage schedule requires at least 2 stages per rank, but got " + decimal(per_rank_) +
                    " stage per rank (layers_per_stage " + decimal(o.layers_per_stage) + ")");
  }
  check_schedule(schedule_, rank_, pp_, per_rank_, microbatches_);
  const int stages = pp_ * per_rank_;
  if (o.split_points.empty()) {
    layout_ = balanced_stages(blocks, stages, iw, ow);
    return;
  }
  if (static_cast<int>(o.split_points.size()) != stages - 1)
    throw refused(decimal(static_cast<int64_t>(o.split_points.size())) + " split points make " +
                  decimal(static_cast<int64_t>(o.split_points.size()) + 1) + " stages; pp_size " + decimal(pp_) +
                  " x " + decimal(per_rank_) + " stages per rank needs " + decimal(stages));
  layout_ = stages_at(blocks, o.split_points);
}

std::vector<int> Pipeline::local_stages() const {
  std::vector<int> out;
  for (int v = 0; v < per_rank_; ++v) out.push_back(v * pp_ + rank_);  // torch's "loop" style
  return out;
}

std::vector<std::string> Pipeline::stage_modules(int s) const {
  const StageLayers& l = layout_.at(static_cast<size_t>(s));
  std::vector<std::string> out;
  auto add = [&](const std::string& m) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  if (l.first)
    for (const auto& m : stages_->first_modules()) add(m);
  for (int64_t b = l.begin; b < l.end; ++b) add(stages_->block_module(b));
  if (l.last)
    for (const auto& m : stages_->last_modules()) add(m);
  return out;
}

Pipeline::Local& Pipeline::local(int stage) { return *locals_.at(static_cast<size_t>(stage / pp_)); }

void Pipeline::keep_local_modules() {
  std::set<std::string> keep, all;
  for (int s : local_stages())
    for (const auto& m : stage_modules(s)) keep.insert(m);
  for (int s = 0; s < static_cast<int>(layout_.size()); ++s)
    for (const auto& m : stage_modules(s)) all.insert(m);
  auto named = dynamic_cast<NnModel&>(model_).module()->named_modules("", true);
  c10::NoGradGuard no_grad;
  for (const auto& m : all) {
    if (keep.count(m)) continue;
    const auto* found = named.find(m);
    const size_t dot = m.rfind('.');
    const auto* parent = named.find(dot == std::string::npos ? "" : m.substr(0, dot));
    if (!found || !parent) throw std::logic_error("pipeline parallelism: " + model_name(model_) + " has no " + m);
    // Freed, then out of the tree: the model's parameters are this rank's stages', under their whole-model names.
    for (auto& p : (*found)->parameters()) p.set_data(at::empty({0}, p.options()));
    (*parent)->unregister_module(dot == std::string::npos ? m : m.substr(dot + 1));
  }
  // A module of both the first and the last part (a tied head's embedding): two copies when they are on two ranks.
  if (pp_ == 1) return;
  const auto last = stages_->last_modules();
  for (const auto& m : stages_->first_modules()) {
    if (std::find(last.begin(), last.end(), m) == last.end()) continue;
    for (const auto& [name, t] : model_.named_parameters())
      if (name.rfind(m + ".", 0) == 0) tied_.push_back(name);
  }
  sync_tied_copies();
}

// The last stage's copy of a tied parameter starts as the first stage's.
void Pipeline::sync_tied_copies() {
  const int last = last_rank();
  const auto pg = group_->process_group();
  const int base = static_cast<int>(layout_.size()) * microbatches_ * Kinds;
  c10::NoGradGuard no_grad;
  for (size_t k = 0; k < tied_.size(); ++k) {
    at::Tensor p = parameter(tied_[k]);
    std::vector<at::Tensor> v{p.detach().contiguous()};
    if (rank_ == 0) pg->send(v, last, base + static_cast<int>(k))->wait();
    if (rank_ == last) {
      pg->recv(v, 0, base + static_cast<int>(k))->wait();
      p.copy_(v[0]);
    }
  }
}

at::Tensor Pipeline::parameter(const std::string& name) const {
  for (const auto& [n, t] : model_.named_parameters())
    if (n == name) return t;
  throw std::logic_error("pipeline parallelism: no parameter " + name);
}

std::vector<at::Tensor> Pipeline::tied_gradients() const {
  std::vector<at::Tensor> out;
  for (const auto& name : tied_) {
    const at::Tensor g = parameter(name).grad();
    out.push_back(g.defined() ? g.detach().clone() : at::Tensor());
  }
  return out;
}

void Pipeline::sum_tied_gradients(const std::vector<at::Tensor>& before) {
  const int peer = rank_ == 0 ? static_cast<int>(layout_.size() - 1) % pp_ : 0;
  const auto pg = group_->process_group();
  const int base = static_cast<int>(layout_.size()) * microbatches_ * Kinds;
  for (size_t k = 0; k < tied_.size(); ++k) {
    at::Tensor p = parameter(tied_[k]);
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    // Only this step's part travels: gradients accumulated before it (accumulation steps) were summed already.
    at::Tensor part = p.grad().contiguous().clone();
    if (before[k].defined()) part -= before[k];
    std::vector<at::Tensor> mine{part}, theirs{at::empty_like(mine[0])};
    auto sent = pg->send(mine, peer, base + static_cast<int>(k));
    pg->recv(theirs, peer, base + static_cast<int>(k))->wait();
    sent->wait();
    p.mutable_grad().add_(theirs[0]);  // the same sum on both ranks: a + b == b + a
  }
}

std::vector<TensorDict> Pipeline::micro_batches(const TensorDict& batch) const {
  int64_t rows = -1;
  std::string first;
  for (const auto& [name, t] : batch.items()) {
    if (t.dim() == 0) continue;  // a scalar goes to every micro-batch, as torch replicates non-tensors
    if (rows < 0) rows = t.size(0), first = name;
    if (t.size(0) != rows)
      throw refused("the batch's '" + name + "' has " + decimal(t.size(0)) + " rows and '" + first + "' " +
                    decimal(rows) + ": every tensor is split along dim 0");
  }
  if (rows < 0) throw refused("the batch has no tensor to split into micro-batches");
  if (rows % microbatches_ != 0)
    throw refused(decimal(microbatches_) + " microbatches do not divide the batch of " + decimal(rows) + " rows ('" +
                  first + "'): every micro-batch must have the same shape");
  const int64_t each = rows / microbatches_;
  std::vector<TensorDict> out(static_cast<size_t>(microbatches_));
  for (int i = 0; i < microbatches_; ++i)
    for (const auto& [name, t] : batch.items())
      out[static_cast<size_t>(i)].set(name, t.dim() == 0 ? t : t.narrow(0, i * each, each));
  return out;
}

void Pipeline::forward(const Action& a, const std::vector<TensorDict>& mbs, Exchange& ex,
                       std::vector<at::Tensor>& losses) {
  Local& st = local(a.stage);
  const auto i = static_cast<size_t>(a.microbatch);
  at::Tensor x;
  if (!st.layers.first)  // a leaf: its gradient is what backward sends to the previous stage
    x = ex.recv_activation((a.stage - 1) % pp_, a.stage - 1, a.microbatch, device_).requires_grad_(true);
  const at::Tensor out = stages_->stage_forward(mbs[i], x, st.layers);
  if (st.inputs.empty()) st.resize(mbs.size());
  st.inputs[i] = x;
  st.outputs[i] = out;
  if (st.layers.last) losses[i] = out.detach();
  else ex.send_activation(out.detach(), (a.stage + 1) % pp_, a.stage, a.microbatch);
}

// Where micro-batch i's backward on stage `st` begins: the loss, scaled, on the last stage (the mean over micro-batches:
// each loss scaled by 1 / microbatches, what torch's scale_grads divides the gradients by afterwards; scaling the
// loss leaves gradients accumulated before this step as they were), else the output with the gradient the next
// stage sent.
std::pair<at::Tensor, at::Tensor> Pipeline::backward_root(const Local& st, size_t i, Exchange& ex) {
  const at::Tensor out = st.outputs.at(i);
  if (st.layers.last) return {out * (loss_scale_ / static_cast<double>(microbatches_)), at::Tensor()};
  return {out, ex.recv_gradient(out, (st.stage + 1) % pp_, st.stage + 1, static_cast<int>(i))};
}

void Pipeline::send_input_gradient(const Local& st, size_t i, const at::Tensor& grad, Exchange& ex) {
  const at::Tensor& x = st.inputs[i];
  ex.send_gradient(grad.defined() ? grad : at::zeros_like(x), (st.stage - 1) % pp_, st.stage, static_cast<int>(i));
}

void Pipeline::backward(const Action& a, Exchange& ex) {
  Local& st = local(a.stage);
  const auto i = static_cast<size_t>(a.microbatch);
  const auto [root, grad] = backward_root(st, i, ex);
  if (root.requires_grad()) torch::autograd::backward({root}, {grad});
  if (!st.layers.first) send_input_gradient(st, i, st.inputs[i].grad(), ex);
  st.inputs[i] = st.outputs[i] = at::Tensor();  // this micro-batch's activations, freed
}

// Zero bubble's input gradient: sent at once, the weights' left for backward_weight. A first stage has no input
// gradient to send: its whole backward runs as its weight gradient (torch's).
void Pipeline::backward_input(const Action& a, Exchange& ex) {
  Local& st = local(a.stage);
  const auto i = static_cast<size_t>(a.microbatch);
  const auto [root, grad] = backward_root(st, i, ex);
  if (st.layers.first) {
    st.outputs[i] = root, st.output_grads[i] = grad;
    return;
  }
  at::Tensor dx;
  if (root.requires_grad()) dx = DeferredWeights::input_gradient(root, grad, st.inputs[i], st.weights[i]);
  send_input_gradient(st, i, dx, ex);
  st.inputs[i] = st.outputs[i] = at::Tensor();
}

void Pipeline::backward_weight(const Action& a) {
  Local& st = local(a.stage);
  const auto i = static_cast<size_t>(a.microbatch);
  if (st.layers.first) {
    if (st.outputs[i].requires_grad()) torch::autograd::backward({st.outputs[i]}, {st.output_grads[i]});
    st.outputs[i] = st.output_grads[i] = at::Tensor();
    return;
  }
  st.weights[i].accumulate();
}

Pipeline::Exchange Pipeline::exchange(bool training) const {
  // CPU tensors go through Gloo, which matches messages by tag. As many activations ahead as there are stages: no
  // more than 1F1B's warm-up holds.
  const int stages = static_cast<int>(layout_.size());
  Exchange ex(group_->process_group(), rank_, {microbatches_, training, device_.is_cpu(), stages});
  for (int s : local_stages())
    if (!layout_[static_cast<size_t>(s)].first) ex.expect_activations((s - 1) % pp_, s - 1);
  return ex;
}

double Pipeline::step(const TensorDict& batch, double loss_scale) {
  if (!c10::GradMode::is_enabled())
    throw std::logic_error(
        "step() requires gradients to be enabled for backward computation; it should not be used under "
        "torch.no_grad() context. Please call eval() instead.");
  const std::vector<TensorDict> mbs = micro_batches(batch);
  loss_scale_ = loss_scale;
  const std::vector<at::Tensor> tied_before = tied_gradients();
  Exchange ex = exchange(true);
  std::vector<at::Tensor> losses(static_cast<size_t>(microbatches_));
  for (const Action& a : actions(schedule_, rank_, pp_, per_rank_, microbatches_)) {
    switch (a.kind) {
      case Action::Forward: forward(a, mbs, ex, losses); break;
      case Action::Backward: backward(a, ex); break;
      case Action::BackwardInput: backward_input(a, ex); break;
      case Action::BackwardWeight: backward_weight(a); break;
    }
  }
  ex.finish();
  sum_tied_gradients(tied_before);
  return mean_loss(losses);
}

std::vector<at::Tensor> Pipeline::forward_only(const TensorDict& batch) {
  c10::NoGradGuard no_grad;
  const std::vector<TensorDict> mbs = micro_batches(batch);
  Exchange ex = exchange(false);
  std::vector<at::Tensor> outputs(static_cast<size_t>(microbatches_));
  // Micro-batch by micro-batch, up this rank's stages: every rank's order is part of one order of the whole
  // pipeline's forwards, so no receive waits on a send that comes after it.
  for (int i = 0; i < microbatches_; ++i)
    for (int s : local_stages()) forward({Action::Forward, s, i}, mbs, ex, outputs);
  ex.finish();
  for (auto& l : locals_) l->inputs.clear(), l->outputs.clear();
  return outputs;
}

double Pipeline::eval_step(const TensorDict& batch) { return mean_loss(forward_only(batch)); }

at::Tensor Pipeline::infer(const TensorDict& batch, bool gather_output) {
  const std::vector<at::Tensor> outputs = forward_only(batch);
  at::Tensor out = rank_ == last_rank() ? at::cat(outputs) : at::Tensor();
  if (!gather_output) return out;
  // The other ranks learn its shape and dtype first (Accelerate's copy_tensor_to_devices).
  constexpr int64_t kMaxDims = 8;
  at::Tensor meta = at::zeros({2 + kMaxDims}, at::TensorOptions(device_).dtype(at::kLong));
  if (out.defined()) {
    if (out.dim() > kMaxDims) throw std::invalid_argument("pipelined inference: outputs of over 8 dimensions");
    meta[0] = static_cast<int64_t>(out.scalar_type());
    meta[1] = out.dim();
    for (int64_t d = 0; d < out.dim(); ++d) meta[2 + d] = out.size(d);
  }
  group_->broadcast(meta, last_rank());
  const at::Tensor m = meta.cpu();
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < m[1].item<int64_t>(); ++d) shape.push_back(m[2 + d].item<int64_t>());
  if (!out.defined())
    out = at::empty(shape, at::TensorOptions(device_).dtype(static_cast<at::ScalarType>(m[0].item<int64_t>())));
  group_->broadcast(out, last_rank());
  return out;
}

NamedTensors Pipeline::whole_state(const NamedTensors& mine) const {
  NamedTensors out;
  std::set<std::string> seen;
  for (int r = 0; r < pp_; ++r) {
    // Rank r's names, dtypes and shapes as text ("name dtype d0 d1 ...\n" each), then its tensors, broadcast.
    std::string text;
    if (r == rank_)
      for (const auto& [name, t] : mine) {
        text += name + " " + decimal(static_cast<int64_t>(t.scalar_type()));
        for (int64_t d : t.sizes()) text += " " + decimal(d);
        text += "\n";
      }
    at::Tensor size = at::full({1}, static_cast<int64_t>(text.size()), at::TensorOptions(device_).dtype(at::kLong));
    group_->broadcast(size, r);
    at::Tensor bytes = at::empty({size.item<int64_t>()}, at::kByte);
    if (r == rank_) std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
    bytes = bytes.to(device_);
    group_->broadcast(bytes, r);
    bytes = bytes.cpu();
    text.assign(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
    size_t k = 0;
    for (size_t from = 0, end; (end = text.find('\n', from)) != std::string::npos; from = end + 1, ++k) {
      std::istringstream line(text.substr(from, end - from));
      std::string name;
      int64_t dtype = 0, d = 0;
      line >> name >> dtype;
      std::vector<int64_t> shape;
      while (line >> d) shape.push_back(d);
      at::Tensor t = r == rank_
                         ? mine[k].second.detach().contiguous().to(device_)
                         : at::empty(shape, at::TensorOptions(device_).dtype(static_cast<at::ScalarType>(dtype)));
      group_->broadcast(t, r);
      if (seen.insert(name).second) out.emplace_back(name, t);
    }
  }
  return out;
}

double Pipeline::mean_loss(const std::vector<at::Tensor>& losses) const {
  // From the last stage's rank to every rank (as Accelerate reports the loss).
  const int last = last_rank();
  at::Tensor mean = at::zeros({1}, at::kDouble);
  if (rank_ == last) {
    for (const auto& l : losses) mean += l.to(at::kCPU, at::kDouble);
    mean /= static_cast<double>(microbatches_);
  }
  if (pp_ > 1) group_->broadcast(mean, last);
  return mean.item<double>();
}

}  // namespace acc::core::pp
