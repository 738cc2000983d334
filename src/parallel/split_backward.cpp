// The zero-bubble schedule's split backward (split_backward.hpp), after torch's _backward.py.
#include "parallel/split_backward.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/node.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace acc::core::pp {

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;
using NodePtr = decltype(Edge::function);

struct DeferredWeights::Group {
  std::vector<NodePtr> intermediates;  // kept alive: the weights' parts of the graph hang below them
  std::vector<variable_list> grads;    // what reached each in the input gradient's pass (empty: nothing did)
  std::vector<NodePtr> weights;        // the weights' gradient accumulators
};

namespace split_backward_impl {

// Each node of the graph from `root` down -> the nodes that take its output (the graph's edges reversed); `nodes`
// gets every node's pointer.
std::map<Node*, std::vector<Node*>> reverse_graph(const NodePtr& root, std::map<Node*, NodePtr>& nodes) {
  std::map<Node*, std::vector<Node*>> out;
  std::deque<Node*> todo{root.get()};
  out[root.get()];
  nodes.emplace(root.get(), root);
  while (!todo.empty()) {
    Node* n = todo.front();
    todo.pop_front();
    for (const Edge& e : n->next_edges()) {
      if (!e.function) continue;
      Node* next = e.function.get();
      nodes.emplace(next, e.function);
      auto [it, fresh] = out.try_emplace(next);
      if (fresh) todo.push_back(next);
      it->second.push_back(n);
    }
  }
  return out;
}

// The nodes reached from `roots` up the reversed edges, not crossing the `targets`, and the targets met
// (torch's reverse_closure).
std::pair<std::set<Node*>, std::set<Node*>> reverse_closure(const std::vector<Node*>& roots,
                                                            const std::set<Node*>& targets,
                                                            const std::map<Node*, std::vector<Node*>>& up) {
  std::set<Node*> closure(roots.begin(), roots.end()), met;
  std::deque<Node*> todo(roots.begin(), roots.end());
  while (!todo.empty()) {
    Node* n = todo.front();
    todo.pop_front();
    auto it = up.find(n);
    if (it == up.end()) continue;
    for (Node* next : it->second) {
      if (closure.count(next)) continue;
      if (targets.count(next)) {
        met.insert(next);
        continue;
      }
      closure.insert(next);
      todo.push_back(next);
    }
  }
  return {closure, met};
}

// A pre-hook that records the gradients reaching its node (the input gradient's pass)...
struct Capture final : torch::autograd::FunctionPreHook {
  explicit Capture(variable_list* slot) : slot(slot) {}
  variable_list operator()(const variable_list& grads) override {
    *slot = grads;
    return grads;
  }
  variable_list* slot;
};
// ... and one that puts them back (the weights' pass: a node below another one of the group gets what it had, not
// that plus what flows from the other, torch's "clamp saved grads to avoid double counting").
struct Restore final : torch::autograd::FunctionPreHook {
  explicit Restore(variable_list grads) : grads(std::move(grads)) {}
  variable_list operator()(const variable_list&) override { return grads; }
  variable_list grads;
};

// Pre-hooks added for one pass, removed when it is over (or has thrown).
class PassHooks {
 public:
  PassHooks() = default;
  PassHooks(const PassHooks&) = delete;
  PassHooks& operator=(const PassHooks&) = delete;
  ~PassHooks() {
    for (auto [node, hook] : added_) {
      auto& hooks = node->pre_hooks();
      hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](const auto& h) { return h.get() == hook; }),
                  hooks.end());
    }
  }
  void add(Node& node, std::unique_ptr<torch::autograd::FunctionPreHook> hook) {
    added_.emplace_back(&node, hook.get());
    node.add_pre_hook(std::move(hook));
  }

 private:
  std::vector<std::pair<Node*, const torch::autograd::FunctionPreHook*>> added_;
};

// torch's get_param_groups: each weight with the nodes where its part of the graph joins the input's (the root, for
// a weight whose part never does); weights that share such a node are one group.
std::vector<std::shared_ptr<DeferredWeights::Group>> weight_groups(const NodePtr& root, Node* input) {
  std::map<Node*, NodePtr> nodes;
  const auto up = reverse_graph(root, nodes);
  const std::set<Node*> inputs_closure = reverse_closure({input}, {}, up).first;
  std::vector<Node*> weights;
  std::vector<std::set<Node*>> joints;
  for (const auto& [node, ptr] : nodes)
    if (node != input && dynamic_cast<torch::autograd::AccumulateGrad*>(node)) weights.push_back(node);
  std::sort(weights.begin(), weights.end(), [](Node* a, Node* b) { return a->sequence_nr() > b->sequence_nr(); });
  for (Node* w : weights) {
    joints.push_back(reverse_closure({w}, inputs_closure, up).second);
    if (joints.back().empty()) joints.back().insert(root.get());
  }
  // Union-find over the weights, joined through a shared node.
  std::vector<size_t> parent(weights.size());
  for (size_t k = 0; k < parent.size(); ++k) parent[k] = k;
  auto find = [&](size_t k) {
    while (parent[k] != k) k = parent[k] = parent[parent[k]];
    return k;
  };
  std::map<Node*, size_t> first_with;
  for (size_t k = 0; k < weights.size(); ++k)
    for (Node* j : joints[k]) {
      auto [it, fresh] = first_with.emplace(j, k);
      if (!fresh) parent[find(k)] = find(it->second);
    }
  std::map<size_t, std::shared_ptr<DeferredWeights::Group>> by_root;
  std::vector<std::shared_ptr<DeferredWeights::Group>> groups;
  for (size_t k = 0; k < weights.size(); ++k) {
    auto& g = by_root[find(k)];
    if (!g) groups.push_back(g = std::make_shared<DeferredWeights::Group>());
    g->weights.push_back(nodes.at(weights[k]));
  }
  for (const auto& [joint, k] : first_with) by_root.at(find(k))->intermediates.push_back(nodes.at(joint));
  // In the graph's order (the maps above are by address), so that every run adds the same gradients in the same order.
  auto by_sequence = [](const NodePtr& a, const NodePtr& b) { return a->sequence_nr() > b->sequence_nr(); };
  for (const auto& g : groups) std::sort(g->intermediates.begin(), g->intermediates.end(), by_sequence);
  return groups;
}

}  // namespace split_backward_impl

using namespace split_backward_impl;

at::Tensor DeferredWeights::input_gradient(const at::Tensor& output, const at::Tensor& grad, const at::Tensor& input,
                                           DeferredWeights& rest) {
  const NodePtr root = output.grad_fn();
  const NodePtr input_node = torch::autograd::impl::grad_accumulator(input);
  if (!root || !input_node) throw std::logic_error("split backward: the output has no graph or the input is no leaf");
  const at::Tensor g = grad.defined() ? grad : at::ones_like(output);
  rest.groups_ = weight_groups(root, input_node.get());
  PassHooks hooks;
  for (const auto& group : rest.groups_) {
    group->grads.resize(group->intermediates.size());
    for (size_t k = 0; k < group->intermediates.size(); ++k) {
      Node* n = group->intermediates[k].get();
      if (n == root.get()) {  // what reaches the output's own node is `grad`, at the output's place
        group->grads[k].resize(n->num_inputs());
        group->grads[k].at(output.output_nr()) = g;
        continue;
      }
      hooks.add(*n, std::make_unique<Capture>(&group->grads[k]));
    }
  }
  return torch::autograd::grad({output}, {input}, {g}, /*retain_graph=*/true, /*create_graph=*/false,
                               /*allow_unused=*/true)
      .at(0);
}

void DeferredWeights::accumulate() {
  for (const auto& g : groups_) {
    torch::autograd::edge_list roots, weights;
    variable_list root_grads;
    PassHooks hooks;
    for (size_t k = 0; k < g->intermediates.size(); ++k) {
      const NodePtr& n = g->intermediates[k];
      if (g->grads[k].empty()) continue;  // nothing reached it
      for (size_t i = 0; i < g->grads[k].size(); ++i)
        if (g->grads[k][i].defined())
          roots.emplace_back(n, static_cast<uint32_t>(i)), root_grads.push_back(g->grads[k][i]);
      if (g->intermediates.size() > 1) hooks.add(*n, std::make_unique<Restore>(g->grads[k]));
    }
    if (roots.empty()) continue;
    for (const NodePtr& w : g->weights) weights.emplace_back(w, 0);
    variable_list dw = torch::autograd::Engine::get_default_engine().execute(roots, root_grads, /*keep_graph=*/true,
                                                                             /*create_graph=*/false,
                                                                             /*accumulate_grad=*/false, weights);
    // As AccumulateGrad adds a gradient (stolen or copied to the weight's layout, added in place), its hooks aside.
    at::NoGradGuard no_grad;
    for (size_t k = 0; k < g->weights.size(); ++k) {
      if (!dw[k].defined()) continue;
      const at::Tensor& weight = static_cast<torch::autograd::AccumulateGrad*>(g->weights[k].get())->variable;
      at::Tensor& grad = weight.mutable_grad();
      at::Tensor added = std::move(dw[k]);
      torch::autograd::AccumulateGrad::accumulateGrad(weight, grad, added, 1,
                                                      [&](at::Tensor&& sum) { grad = std::move(sum); });
    }
  }
  groups_.clear();
}

}  // namespace acc::core::pp
