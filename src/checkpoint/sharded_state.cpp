#include "checkpoint/sharded_state.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "acc/files.hpp"
#include "acc/limits.hpp"
#include "formats/safetensors.hpp"
#include "models/placement.hpp"
#include <acc/json.hpp>

namespace acc::core {

namespace fs = std::filesystem;

namespace {

std::string slice_file(const char* kind, size_t index, int rank, const char* ext) {
  return std::string(kind) + "_slices_" + std::to_string(index) + ".rank" + std::to_string(rank) + ext;
}

// The slice files of one object, every rank's, in a stable order.
std::vector<fs::path> slice_files(const std::string& dir, const char* kind, size_t index) {
  const std::string prefix = std::string(kind) + "_slices_" + std::to_string(index) + ".rank", suffix = ".safetensors";
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0 && n.size() > prefix.size() + suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path sidecar(const fs::path& tensors) { return fs::path(tensors).replace_extension(".json"); }

// Tensor parallelism: a slice of a split parameter lies in this rank's part of it (the strategy shards what the
// split left), so its side entry also says which part: {"tp": {"dim", "packed", "rank", "size"}} as its placement
// splits it. Loading assembles each part, then joins the parts into the whole tensor, so any mesh can load it.
struct TpPart {
  int64_t dim = 0, packed = 1, rank = 0, size = 1;
};

// The part a slice of `name` (of a tensor of `shape`) lies in; nullopt when the tensor is whole on this rank.
std::optional<TpPart> tp_part(const Placements& placements, const std::string& name, at::IntArrayRef shape) {
  const Placement::Split* split = placements.split_of(name);
  if (!split || split->over->size == 1 || shape.equals(placements.find(name)->whole_shape)) return std::nullopt;
  return TpPart{split->dim, split->packed, split->over->rank, split->over->size};
}

void write_where(json::Writer& j, const std::string& name, int64_t offset, at::IntArrayRef shape,
                 const std::optional<TpPart>& tp = std::nullopt) {
  j.key(name).begin_object().key("offset").value(offset).key("shape").begin_array();
  for (int64_t d : shape) j.value(d);
  j.end_array();
  if (tp)
    j.key("tp")
        .begin_object()
        .key("dim")
        .value(tp->dim)
        .key("packed")
        .value(tp->packed)
        .key("rank")
        .value(tp->rank)
        .key("size")
        .value(tp->size)
        .end_object();
  j.end_object();
}

// Whole tensors assembled from slices, checked to be covered exactly once or more: hybrid sharding's replicas write
// the same slices, bit for bit (every replica applies the same all-reduced step), so slices that overlap must agree
// bit for bit, and one tensor's slices must share a dtype.
struct Assembly {
  std::map<std::string, at::Tensor> whole, covered;
  struct Placed {
    std::string file;
    int64_t begin, end;
  };
  std::map<std::string, std::vector<Placed>> placed;  // each tensor's slices so far: which file, which elements
  std::vector<std::string> order;

  void place(const std::string& name, const at::Tensor& data, int64_t offset, const std::vector<int64_t>& shape,
             const std::string& file) {
    auto it = whole.find(name);
    if (it == whole.end()) {
      it = whole.emplace(name, at::zeros(shape, data.options())).first;
      covered.emplace(name, at::zeros({it->second.numel()}, at::kBool));
      order.push_back(name);
    }
    at::Tensor flat = it->second.view({-1});
    if (!it->second.sizes().equals(shape) || offset < 0 || offset > flat.numel() - data.numel())
      throw std::invalid_argument(file + ": the slice of '" + shown(name) + "' does not fit its tensor of shape " +
                                  c10::str(it->second.sizes()));
    if (data.scalar_type() != it->second.scalar_type())
      throw std::invalid_argument(file + ": the slice of '" + shown(name) + "' is " + c10::str(data.scalar_type()) +
                                  ", " + placed.at(name).front().file + "'s is " + c10::str(it->second.scalar_type()));
    const int64_t end = offset + data.numel();
    at::Tensor target = flat.narrow(0, offset, data.numel()), seen = covered.at(name).narrow(0, offset, data.numel());
    const at::Tensor values = data.reshape({-1});
    if (seen.any().item<bool>()) {
      // Compared as bytes: bit for bit, NaNs included.
      const auto bytes = [&](const at::Tensor& t) { return t.masked_select(seen).contiguous().view(at::kByte); };
      if (!at::equal(bytes(target), bytes(values))) {
        std::string other;
        for (const Placed& p : placed.at(name))
          if (p.begin < end && offset < p.end) other += (other.empty() ? "" : ", ") + p.file;
        throw std::invalid_argument(file + ": the slice of '" + shown(name) + "' at [" + std::to_string(offset) + ", " +
                                    std::to_string(end) + ") overlaps what " + other +
                                    " holds, with other values (the files are not of one checkpoint)");
      }
    }
    target.copy_(values);
    seen.fill_(true);
    placed[name].push_back({file, offset, end});
  }

  // Tensor-parallel parts: the assembled key "{name}#tp{rank}" is that rank's part of `name`.
  struct Split {
    TpPart tp;
    std::string file;  // the first file that named it
  };
  std::map<std::string, Split> split;

  // The key a slice is assembled under; checks that every file splits a tensor alike.
  std::string key(const std::string& name, const std::optional<TpPart>& tp, const std::string& file) {
    if (!tp) {
      if (split.count(name))
        throw std::invalid_argument(file + ": '" + name + "' is whole here and split by tensor parallelism in " +
                                    split.at(name).file + " (the files are not of one checkpoint)");
      return name;
    }
    if (tp->size < 1 || tp->rank < 0 || tp->rank >= tp->size || tp->packed < 1 || tp->dim < 0)
      throw std::invalid_argument(file + ": the tensor-parallel part of '" + name + "' (rank " +
                                  std::to_string(tp->rank) + " of " + std::to_string(tp->size) + ", dim " +
                                  std::to_string(tp->dim) + ", " + std::to_string(tp->packed) + " packed) is not one");
    auto [it, added] = split.emplace(name, Split{*tp, file});
    const TpPart& first = it->second.tp;
    if (!added && (first.dim != tp->dim || first.packed != tp->packed || first.size != tp->size))
      throw std::invalid_argument(file + ": '" + name + "' is split by tensor parallelism into " +
                                  std::to_string(tp->size) + " parts along dim " + std::to_string(tp->dim) + "; " +
                                  it->second.file + " splits it into " + std::to_string(first.size) + " along dim " +
                                  std::to_string(first.dim) + " (the files are not of one checkpoint)");
    if (whole.count(name))
      throw std::invalid_argument(file + ": '" + name +
                                  "' is split by tensor parallelism here and whole in another "
                                  "file (the files are not of one checkpoint)");
    return name + "#tp" + std::to_string(tp->rank);
  }

  NamedTensors finish(const std::string& dir) const {
    std::map<std::string, at::Tensor> done;
    for (const auto& k : order) {
      const int64_t have = covered.at(k).sum().item<int64_t>();
      if (have != covered.at(k).numel())
        throw std::invalid_argument(dir + ": the slices of '" + shown(k) + "' cover " + std::to_string(have) +
                                    " of its " + std::to_string(covered.at(k).numel()) +
                                    " elements (a process's file is missing?)");
      done.emplace(k, whole.at(k));
    }
    NamedTensors out;
    std::set<std::string> joined;
    for (const auto& k : order) {
      const size_t hash = k.rfind("#tp");
      const std::string name = hash == std::string::npos || !split.count(k.substr(0, hash)) ? k : k.substr(0, hash);
      if (name == k) {
        out.emplace_back(k, done.at(k));
        continue;
      }
      if (!joined.insert(name).second) continue;
      const Split& sp = split.at(name);
      std::vector<at::Tensor> parts;
      for (int64_t r = 0; r < sp.tp.size; ++r) {
        auto it = done.find(name + "#tp" + std::to_string(r));
        if (it == done.end())
          throw std::invalid_argument(dir + ": '" + name + "' is split by tensor parallelism into " +
                                      std::to_string(sp.tp.size) + " parts (" + sp.file + "), and no file holds part " +
                                      std::to_string(r));
        if (!parts.empty() &&
            (it->second.sizes() != parts.front().sizes() || it->second.scalar_type() != parts.front().scalar_type()))
          throw std::invalid_argument(dir + ": the tensor-parallel parts of '" + name + "' differ: part 0 is " +
                                      c10::str(parts.front().sizes()) + ", part " + std::to_string(r) + " " +
                                      c10::str(it->second.sizes()));
        parts.push_back(it->second);
      }
      const at::Tensor& p0 = parts.front();
      if (sp.tp.dim >= p0.dim() || p0.size(sp.tp.dim) % sp.tp.packed != 0)
        throw std::invalid_argument(sp.file + ": the tensor-parallel part of '" + name + "' has shape " +
                                    c10::str(p0.sizes()) + ", which dim " + std::to_string(sp.tp.dim) + " in " +
                                    std::to_string(sp.tp.packed) + " packed blocks does not split");
      out.emplace_back(name, acc::core::join_parts(parts, sp.tp.dim, sp.tp.packed));
    }
    return out;
  }

  // A key as an error names it.
  static std::string shown(const std::string& k) {
    const size_t hash = k.rfind("#tp");
    if (hash == std::string::npos) return k;
    return k.substr(0, hash) + "' (tensor-parallel part " + k.substr(hash + 3) + ")";
  }
};

// Reads every slice file of an object into whole tensors; calls `json` with each file's side JSON.
template <class F>
std::optional<NamedTensors> assemble(const std::string& dir, const char* kind, size_t index, F&& json) {
  const auto files = slice_files(dir, kind, index);
  if (files.empty()) return std::nullopt;
  Assembly a;
  c10::NoGradGuard no_grad;
  for (const auto& f : files) {
    const std::string where = f.string();
    const std::string side_path = sidecar(f).string();
    const json::Document side =
        json::Document::object(config::read_file(side_path, limits::kCheckpointJsonBytes), side_path);
    const json::Value slices = side.root().get("slices");
    for (const auto& [name, data] : load_safetensors(where)) {
      const json::Value at = slices.get(name);
      std::vector<int64_t> shape;
      const json::Value dims = at.get("shape");
      for (size_t d = 0; d < dims.size(); ++d) shape.push_back(dims.at(d).as_int());
      std::optional<TpPart> tp;
      if (at.has("tp")) {
        const json::Value t = at.get("tp");
        tp = TpPart{t.get_int("dim"), t.get_int("packed"), t.get_int("rank"), t.get_int("size")};
      }
      a.place(a.key(name, tp, sidecar(f).string()), data, at.get_int("offset"), shape, where);
    }
    json(side.root());
  }
  return a.finish(dir);
}

}  // namespace

bool sharded_checkpoint(const Accelerator& acc, const PreparedModel& model) {
  const config::AcceleratorSettings& c = acc.settings();
  return model.strategy && model.strategy->sharded() && c.use_fsdp &&
         c.fsdp_plugin.state_dict_type.value_or("") == "SHARDED_STATE_DICT";
}

std::set<std::string> checkpointed_names(const Model& model) {
  std::set<std::string> names;
  bool frozen = false;
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.requires_grad()) names.insert(name);
    else frozen = true;
  }
  if (frozen) {
    for (const auto& [name, b] : model.named_buffers()) names.insert(name);
    return names;
  }
  for (const auto& [name, t] : model.state()) names.insert(name);
  return names;
}

void load_checkpointed_state(const PreparedModel& model, const NamedTensors& tensors, const std::string& source) {
  std::set<std::string> given, all;
  for (const auto& [name, t] : tensors) given.insert(name);
  for (const auto& [name, t] : model.model->state()) all.insert(name);
  if (given == all) return model.strategy->load_full_state_dict(tensors, source);
  const std::set<std::string> held = checkpointed_names(*model.model);
  for (const auto& name : given)
    if (!held.count(name))
      throw std::invalid_argument(source + ": '" + name + "' " +
                                  (all.count(name)
                                       ? "is a frozen parameter of the model: its checkpoint holds what trains"
                                       : "is not a tensor of the model"));
  for (const auto& name : held)
    if (!given.count(name))
      throw std::invalid_argument(source + ": '" + name + "' is missing (the checkpoint holds " +
                                  std::to_string(given.size()) + " of the model's tensors)");
  // The frozen rest as the model holds it now (a collective under ZeRO-3 / FSDP), the checkpoint's tensors over it.
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, t] : tensors) by_name[name] = &t;
  NamedTensors merged = model.strategy->full_state_dict();
  for (auto& [name, t] : merged)
    if (auto it = by_name.find(name); it != by_name.end()) t = *it->second;
  model.strategy->load_full_state_dict(merged, source);
}

void save_model_slices(const PreparedModel& model, size_t index, int rank, const std::string& dir) {
  const std::set<std::string> held = checkpointed_names(*model.model);
  NamedTensors tensors;
  json::Writer j;
  j.begin_object().key("slices").begin_object();
  const Placements& placements = model.model->placements();
  for (const Strategy::Slice& s : model.strategy->model_slices()) {
    if (!held.count(s.name)) continue;
    tensors.emplace_back(s.name, s.piece.detach());
    write_where(j, s.name, s.offset, s.shape, tp_part(placements, s.name, s.shape));
  }
  // What is not sharded (buffers, a tied weight's other names) rank 0 writes whole; one split by tensor parallelism
  // is gathered first (a collective over its group, so every rank takes part).
  std::set<std::string> sharded;
  std::set<const void*> seen;
  for (const auto& [name, p] : model.model->named_parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) sharded.insert(name);
  for (const auto& [name, t] : model.model->state())
    if (!sharded.count(name) && held.count(name)) {
      const at::Tensor whole = whole_tensor(placements, name, t.detach());
      if (rank != 0) continue;
      tensors.emplace_back(name, whole.reshape({-1}));
      write_where(j, name, 0, whole.sizes());
    }
  j.end_object().end_object();
  const fs::path file = fs::path(dir) / slice_file("model", index, rank, ".safetensors");
  save_safetensors(tensors, file.string(), {{"format", "pt"}});
  config::write_file_atomic(sidecar(file).string(), j.str());
}

void save_optimizer_slices(const PreparedOptimizer& opt, size_t index, int rank, const std::string& dir) {
  const auto slices = opt.model->strategy->optimizer_slices(opt.opt->whole_groups());
  const Placements& placements = opt.model->model->placements();
  const Optimizer::State st = opt.opt->save_state();  // indexed by piece
  const json::Document doc = json::Document::object(st.json, "optimizer state");
  const json::Value groups = doc.root().get("param_groups");
  json::Writer j;
  // "lr" and "initial_lr": the first group's (what files of libacc 1.1 hold); "groups": every group's.
  // clang-format off: one key a line
  j.begin_object()
      .key("type").value(doc.root().get_string("type"))
      .key("lr").value(groups.at(0).get_double("lr"))
      .key("initial_lr").value(groups.at(0).get_double("initial_lr"))
      .key("groups").begin_array();
  // clang-format on
  for (size_t g = 0; g < groups.size(); ++g)
    j.begin_object()
        .key("lr")
        .value(groups.at(g).get_double("lr"))
        .key("initial_lr")
        .value(groups.at(g).get_double("initial_lr"))
        .end_object();
  j.end_array().key("steps").begin_object();
  const json::Value state = doc.root().get("state");
  for (const std::string& k : state.keys())
    if (state.get(k).has("step")) j.key(slices.at(std::stoul(k)).name).value(state.get(k).get_int("step"));
  j.end_object().key("slices").begin_object();
  NamedTensors tensors;
  for (const auto& [name, t] : st.tensors) {  // state.{piece}.{kind} -> state.{parameter}.{kind}
    const size_t dot = name.find('.', 6);
    const Strategy::Slice& s = slices.at(std::stoul(name.substr(6, dot - 6)));
    const std::string renamed = "state." + s.name + name.substr(dot);
    tensors.emplace_back(renamed, t);
    write_where(j, renamed, s.offset, s.shape, tp_part(placements, s.name, s.shape));
  }
  j.end_object().end_object();
  const fs::path file = fs::path(dir) / slice_file("optimizer", index, rank, ".safetensors");
  save_safetensors(tensors, file.string());
  config::write_file_atomic(sidecar(file).string(), j.str());
}

std::optional<NamedTensors> load_model_slices(size_t index, const std::string& dir) {
  return assemble(dir, "model", index, [](const json::Value&) {});
}

std::optional<Optimizer::State> load_optimizer_slices(const PreparedOptimizer& opt, size_t index,
                                                      const std::string& dir) {
  std::string type;
  std::vector<std::pair<double, double>> lrs;  // per group: lr, initial_lr
  std::map<std::string, int64_t> steps;
  auto whole = assemble(dir, "optimizer", index, [&](const json::Value& side) {
    type = side.get_string("type");
    lrs.clear();
    if (side.has("groups")) {
      const json::Value g = side.get("groups");
      for (size_t k = 0; k < g.size(); ++k)
        lrs.emplace_back(g.at(k).get_double("lr"), g.at(k).get_double("initial_lr"));
    } else {
      lrs.emplace_back(side.get_double("lr"), side.get_double("initial_lr"));
    }
    const json::Value s = side.get("steps");
    for (const std::string& name : s.keys()) steps[name] = std::max(steps[name], s.get_int(name));
  });
  if (!whole) return std::nullopt;
  // The unsharded layout: the optimizer's whole parameters, group by group, each tensor in its parameter's shape.
  const auto groups = opt.opt->whole_groups();
  if (lrs.size() != groups.size())
    throw std::invalid_argument(dir + ": the optimizer slices have " + std::to_string(lrs.size()) +
                                " parameter groups; this optimizer has " + std::to_string(groups.size()));
  std::map<const void*, std::string> names;
  for (const auto& [name, p] : opt.model->model->named_parameters()) names.emplace(p.unsafeGetTensorImpl(), name);
  std::vector<std::string> params;
  for (const auto& g : groups)
    for (const at::Tensor& p : g) params.push_back(names.at(p.unsafeGetTensorImpl()));
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < params.size(); ++i) index_of[params[i]] = i;
  Optimizer::State st;
  std::set<size_t> with_state;
  for (const auto& [name, t] : *whole) {
    const size_t dot = name.rfind('.');
    const std::string param = name.substr(6, dot - 6);
    auto it = index_of.find(param);
    if (it == index_of.end())
      throw std::invalid_argument(dir + ": optimizer state of '" + param + "', which the optimizer does not train");
    st.tensors.emplace_back("state." + std::to_string(it->second) + name.substr(dot), t);
    with_state.insert(it->second);
  }
  for (const auto& [name, s] : steps)
    if (index_of.count(name)) with_state.insert(index_of.at(name));
  json::Writer j;
  j.begin_object().key("type").value(type).key("param_groups").begin_array();
  for (size_t g = 0; g < groups.size(); ++g)
    j.begin_object()
        .key("lr")
        .value(lrs[g].first)
        .key("initial_lr")
        .value(lrs[g].second)
        .key("num_params")
        .value(static_cast<int64_t>(groups[g].size()))
        .end_object();
  j.end_array().key("state").begin_object();
  for (size_t i : with_state) {
    j.key(std::to_string(i)).begin_object();
    if (auto s = steps.find(params[i]); s != steps.end()) j.key("step").value(s->second);
    j.end_object();
  }
  j.end_object().end_object();
  st.json = j.str();
  return st;
}

}  // namespace acc::core
