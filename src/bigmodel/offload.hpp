// Disk offload for inference (Accelerate's offload to "disk"): the weights a device map puts on the disk stay
// in the mapped checkpoint file and are read when a forward pass reaches them; after each use their pages are
// given back (madvise MADV_DONTNEED), so the process holds at most the layer at work besides what lives in
// memory. Units are a decoder's layers and the modules outside them.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace acc::core::bigmodel {

class DiskOffload {
 public:
  // `t` (a view of a mapped file) belongs to `unit` ("model.layers.3", "lm_head").
  void add(const std::string& unit, const at::Tensor& t);
  // Gives back the pages that lie wholly inside the unit's tensors (clean file pages: the next use reads them
  // again). No-op for a unit with nothing on the disk.
  void release(const std::string& unit) const;
  bool empty() const { return units_.empty(); }
  int64_t bytes() const;

 private:
  std::map<std::string, std::vector<std::pair<char*, size_t>>> units_;
};

// The unit a parameter's pages are released with: its decoder layer ("model.layers.3"), or its top-level module
// ("model.embed_tokens", "lm_head").
std::string offload_unit(const std::string& parameter);

}  // namespace acc::core::bigmodel
