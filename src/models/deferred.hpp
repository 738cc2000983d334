// DeepSpeed's zero.Init (deepspeed_plugin.zero3_init_flag) for libacc's module trees: a model built on the meta device
// whose parameters are made when a ZeRO-3 strategy shards them at prepare, one module at a time, each process keeping
// only its shards, so that no process ever holds the whole model. The values are those the model would hold without
// the flag: the same draws from the same generator state in the same order (from_config), or the same checkpoint
// tensors (from_pretrained).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace acc::core {

struct InitModule;

class DeferredParameters {
 public:
  // Given each parameter's whole value (on the CPU, in the parameter's dtype), valid during the call only.
  using Place = std::function<void(const std::string& name, const at::Tensor& value)>;
  virtual ~DeferredParameters() = default;

  // Whether the parameters are still on the meta device, waiting to be made.
  bool pending() const { return pending_; }
  // What a strategy broadcasts from rank 0 (in place) before make(), so that every process makes rank 0's values, as
  // the model's own tensors are broadcast from rank 0 without the flag.
  virtual std::vector<at::Tensor> rank0_state() { return {}; }
  // Makes every parameter that construction or loading would have made, one module at a time in definition order.
  // While it runs, the module being made holds temporaries in place of its parameters: adopt nothing from `place`.
  virtual void make(const Place& place) = 0;
  // The model's (meta) parameter `name` is replaced by a new tensor on `value`'s storage (a leaf with the old one's
  // requires_grad), which is returned; an optimizer built over the old one finds the new one through replacement().
  at::Tensor adopt(const std::string& name, const at::Tensor& value);
  // Undoes every adopt (a prepare that failed half way): the model's parameters are the meta ones again.
  void revert();
  // Every parameter made whole on `device` (a strategy that does not shard them); then finish().
  void make_whole(c10::Device device);
  // Every parameter has been adopted: the model holds real tensors from here on.
  void finish() { pending_ = false; }
  // The tensor that replaced the parameter `old`, or an undefined tensor when `old` was not replaced.
  at::Tensor replacement(const at::Tensor& old) const;

 protected:
  // Records the tree's modules with parameters, in definition order (what reset_tree initialises).
  explicit DeferredParameters(std::shared_ptr<torch::nn::Module> root);
  std::shared_ptr<torch::nn::Module> root_;
  std::vector<std::pair<std::string, InitModule*>> modules_;  // dotted name ("" for the root), module

 private:
  bool pending_ = true;
  std::map<const void*, std::pair<at::Tensor, at::Tensor>> replaced_;  // old tensor's impl -> (old, new)
  std::vector<std::tuple<InitModule*, std::string, at::Tensor>> adopted_;  // module, local name, old tensor
};

// from_config's: records the CPU generator's state, then draws what construction draws (module by module, into
// temporaries freed after each module) so that the generator is left where construction leaves it; make() draws the
// same numbers again from the recorded state and then puts the generator back where it was. Initialisation time
// doubles; memory stays one module's parameters.
std::shared_ptr<DeferredParameters> defer_initialisation(std::shared_ptr<torch::nn::Module> root);

// from_pretrained's: each parameter `name` is read from the safetensors file `file_of.at(name)` (checked against the
// model already) and converted to the parameter's dtype; each file is mapped only while one module's tensors are read.
std::shared_ptr<DeferredParameters> defer_loading(std::shared_ptr<torch::nn::Module> root,
                                                  std::map<std::string, std::string> file_of);

}  // namespace acc::core
