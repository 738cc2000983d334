// The base of libacc's CPU transports in front of Gloo (runtime/shm_backend, runtime/hierarchical_backend): a c10d
// Backend that hands every collective to the group's Gloo backend, so that each transport overrides only the
// collectives it carries itself.
#pragma once
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "runtime/c10d_names.hpp"

namespace acc::core {

class GlooForwarding : public c10d::Backend {
 public:
  GlooForwarding(int rank, int size, c10::intrusive_ptr<c10d::Backend> gloo)
      : c10d::Backend(rank, size), gloo_(std::move(gloo)) {}

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) override {
    return gloo_->broadcast(t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) override {
    return gloo_->allreduce(t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& t,
                                                     const c10d::AllreduceCoalescedOptions& o) override {
    return gloo_->allreduce_coalesced(t, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions& o) override {
    return gloo_->reduce(t, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& o) override {
    return gloo_->allgather(out, in, o);
  }
#ifdef ACC_C10D_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& out, at::Tensor& in,
                                                   const c10d::AllgatherOptions& o) override {
    return gloo_->all_gather_single(out, in, o);
  }
#endif
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& o) override {
    return gloo_->_allgather_base(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& out,
                                                     std::vector<at::Tensor>& in,
                                                     const c10d::AllgatherOptions& o) override {
    return gloo_->allgather_coalesced(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                 std::vector<at::Tensor>& in,
                                                                 const c10d::AllgatherOptions& o) override {
    return gloo_->allgather_into_tensor_coalesced(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                        const c10d::GatherOptions& o) override {
    return gloo_->gather(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                         const c10d::ScatterOptions& o) override {
    return gloo_->scatter(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                                const c10d::ReduceScatterOptions& o) override {
    return gloo_->reduce_scatter(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    return gloo_->_reduce_scatter_base(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                 std::vector<at::Tensor>& in,
                                                                 const c10d::ReduceScatterOptions& o) override {
    return gloo_->reduce_scatter_tensor_coalesced(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& os,
                                               std::vector<int64_t>& is, const c10d::AllToAllOptions& o) override {
    return gloo_->alltoall_base(out, in, os, is, o);
  }
#ifdef ACC_C10D_SINGLE_NAMES
  // (Gloo implements the single-tensor all-to-all as alltoall_base.)
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& os,
                                                   std::vector<int64_t>& is, const c10d::AllToAllOptions& o) override {
    return gloo_->alltoall_base(out, in, os, is, o);
  }
#endif
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                          const c10d::AllToAllOptions& o) override {
    return gloo_->alltoall(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int dst, int tag) override {
    return gloo_->send(t, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int src, int tag) override {
    return gloo_->recv(t, src, tag);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& t, int tag) override {
    return gloo_->recvAnysource(t, tag);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override { return gloo_->barrier(o); }
  void monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all) override { gloo_->monitoredBarrier(o, wait_all); }

 protected:
  c10::intrusive_ptr<c10d::Backend> gloo_;
};

}  // namespace acc::core
