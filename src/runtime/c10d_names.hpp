// c10d renamed its single-tensor collectives in LibTorch 2.15 (all_gather_single for _allgather_base,
// reduce_scatter_single for _reduce_scatter_base, all_to_all_single for alltoall_base, the *_single_coalesced
// pair); the old names stay there as deprecated aliases. libacc builds against both: the 2.15 wheel setup.sh pins
// and the LibTorch a GPU image ships (2.11), so callers go through these two functions and backends override the
// new names only where they exist.
#pragma once
#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define ACC_C10D_SINGLE_NAMES 1
#endif

namespace acc::core {

template <class Group, class Options>
auto c10d_reduce_scatter_single(Group& g, at::Tensor& out, at::Tensor& in, const Options& opts) {
#ifdef ACC_C10D_SINGLE_NAMES
  return g.reduce_scatter_single(out, in, opts);
#else
  return g._reduce_scatter_base(out, in, opts);
#endif
}

template <class Group, class Options>
auto c10d_all_gather_single(Group& g, at::Tensor& out, at::Tensor& in, const Options& opts) {
#ifdef ACC_C10D_SINGLE_NAMES
  return g.all_gather_single(out, in, opts);
#else
  return g._allgather_base(out, in, opts);
#endif
}

}  // namespace acc::core
