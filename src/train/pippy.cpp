// Pipelined inference as Accelerate's prepare_pippy (inference.py): the model cut into one stage per process at the
// split points ("auto": the balanced device map's, as Accelerate computes it), every forward run as GPipe's forwards
// over num_chunks micro-batches, the outputs on the last process or, with gather_output, on every one.
#include <ATen/ATen.h>

#include <stdexcept>

#include "acc/json.hpp"
#include "bigmodel/device_map.hpp"
#include "models/deferred.hpp"
#include "models/module_tree.hpp"
#include "models/pipeline_stages.hpp"
#include "parallel/pipeline.hpp"
#include "train/accelerator.hpp"
#include "util/errors.hpp"

namespace acc::core {

namespace {

std::vector<std::string> strings(const json::Value& v, const std::string& key) {
  if (!v.is_array()) throw std::invalid_argument("prepare_pippy: '" + key + "' must be a list of strings");
  std::vector<std::string> out;
  for (const json::Value& e : v.elements()) {
    if (!e.is_string()) throw std::invalid_argument("prepare_pippy: '" + key + "' must be a list of strings");
    out.push_back(e.as_string());
  }
  return out;
}

// The split points: as given, or (auto) where Accelerate's generate_device_map over `devices` starts each, keeping
// the model's _no_split_modules whole (for a model without them, as the built-in GPT, its blocks' class).
std::vector<std::string> split_points_of(const Model& model, const PippyOptions& o, int devices) {
  if (!o.split_points.empty()) return o.split_points;
  const ModuleTree tree = tree_of(model);
  std::vector<std::string> no_split = o.no_split_given ? o.no_split_module_classes : model.no_split_modules();
  const auto* stages = dynamic_cast<const PipelineStages*>(&model);
  if (!o.no_split_given && no_split.empty() && stages && stages->num_blocks() > 0)
    if (const int block = tree.module_at(stages->block_module(0)); block >= 0)
      no_split.push_back(tree.modules[static_cast<size_t>(block)].class_name);
  return bigmodel::pippy_split_points(tree, devices, no_split, model.no_split_modules());
}

}  // namespace

PippyOptions PippyOptions::from_json(const std::string& text) {
  PippyOptions o;
  const json::Document doc = json::Document::object(text.empty() ? "{}" : text, "prepare_pippy options");
  for (const auto& [key, v] : doc.root().items()) {
    if (key == "split_points") {
      if (v.is_string() && v.as_string() == "auto") continue;
      o.split_points = strings(v, key);
      if (o.split_points.empty())
        throw std::invalid_argument("prepare_pippy: 'split_points' is an empty list (give \"auto\" or the modules)");
    } else if (key == "no_split_module_classes") {
      o.no_split_module_classes = strings(v, key);
      o.no_split_given = true;
    } else if (key == "num_chunks") {
      if (!v.is_integer() || v.as_int() < 1)
        throw std::invalid_argument("prepare_pippy: 'num_chunks' must be an integer >= 1; got " + v.text());
      o.num_chunks = static_cast<int>(v.as_int());
    } else if (key == "gather_output") {
      if (!v.is_bool()) throw std::invalid_argument("prepare_pippy: 'gather_output' must be true or false");
      o.gather_output = v.as_bool();
    } else {
      throw std::invalid_argument("prepare_pippy: unknown option '" + key +
                                  "' (it takes split_points, no_split_module_classes, num_chunks, gather_output)");
    }
  }
  return o;
}

void Accelerator::prepare_pippy(const std::shared_ptr<PreparedModel>& model, const PippyOptions& o) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!model) throw std::invalid_argument("prepare_pippy needs a model");
  if (model->owner) throw StateError("the model is already prepared");
  const int world = state().world_size;
  // Accelerate: num_chunks defaults to the number of processes; "auto" plans over num_chunks devices.
  const int chunks = o.num_chunks > 0 ? o.num_chunks : world;
  Model& m = *model->model;
  if (m.deferred() && m.deferred()->pending()) m.deferred()->make_whole(device_);
  m.to(device_);
  std::shared_ptr<pp::Pipeline> pipeline;
  if (comm_ && world > 1) {
    // "auto" plans over the processes (Accelerate plans over num_chunks devices, which only works where the two are
    // equal: the same split there).
    const std::vector<std::string> points = split_points_of(m, o, world);
    if (static_cast<int>(points.size()) + 1 != world)
      throw std::invalid_argument("prepare_pippy: " + std::to_string(points.size()) + " split points make " +
                                  std::to_string(points.size() + 1) + " stages; the job has " + std::to_string(world) +
                                  " processes, one stage each");
    pp::Options po;
    po.schedule = "GPipe";
    po.microbatches = chunks;
    po.split_points = pp::split_point_indices(m, points);
    broadcast_from_rank0(*comm_, m);  // every process starts from rank 0's weights
    pipeline = std::make_shared<pp::Pipeline>(m, comm_, po);
  }
  model->strategy = make_single_strategy(model->model, device_);
  model->pipeline = std::move(pipeline);
  model->pippy = PreparedModel::Pippy{chunks, o.gather_output};
  model->device = device_;
  model->owner = shared_from_this();
  models_.push_back(model);
}

TensorDict PreparedModel::pippy_forward(const TensorDict& batch) {
  if (batch.contains(model->target_name()))
    throw std::invalid_argument("prepare_pippy: the forward takes the inputs alone and returns the logits; '" +
                                model->target_name() + "' given");
  // Rows padded with zeros to a multiple of num_chunks (as Accelerate pads the first process's inputs), the outputs
  // cut back to the batch's rows.
  int64_t rows = -1;
  for (const auto& [name, t] : batch.items())
    if (t.defined() && t.dim() > 0) rows = rows < 0 ? t.size(0) : rows;
  if (rows <= 0) throw std::invalid_argument("prepare_pippy: the batch has no rows");
  const int64_t chunks = pippy->num_chunks, padded = (rows + chunks - 1) / chunks * chunks;
  TensorDict in;
  for (const auto& [name, t] : batch.items()) {
    if (!t.defined() || t.dim() == 0 || padded == rows) {
      in.set(name, t);
      continue;
    }
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] = padded - rows;
    in.set(name, at::cat({t, at::zeros(shape, t.options())}));
  }
  ForwardScope scope(*this);
  const at::Tensor out = pipeline->infer(in, pippy->gather_output);
  if (!out.defined()) return {};  // not the last process: Accelerate returns None there
  return {{"logits", output_to_fp32(out.narrow(0, 0, rows))}};
}

}  // namespace acc::core
