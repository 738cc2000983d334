#include "runtime/hierarchical_backend.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "runtime/gloo_forwarding.hpp"
#include "runtime/shm_backend.hpp"

namespace acc::core {

namespace {

// A collective already done when its call returned.
class DoneWork final : public c10d::Work {
 public:
  DoneWork(int rank, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, c10d::OpType::ALLREDUCE), outputs_(std::move(outputs)) {
    finish(nullptr);
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto f = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    f->markCompleted(c10::IValue(outputs_));
    return f;
  }

 private:
  std::vector<at::Tensor> outputs_;
};

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ',';  // (appended apart: GCC 12 warns falsely on "," + std::string)
    s += std::to_string(r);
  }
  return s;
}

class HierarchicalBackend final : public GlooForwarding {
 public:
  // local: this machine's shared-memory backend (null where this rank is alone on its machine); leaders: the
  // leaders' Gloo (null unless this rank leads its machine); gloo: the whole group's.
  HierarchicalBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> local,
                      c10::intrusive_ptr<c10d::Backend> leaders, c10::intrusive_ptr<c10d::Backend> gloo,
                      std::vector<int> machine_ranks, std::vector<int> leader_ranks)
      : GlooForwarding(rank, size, std::move(gloo)),
        local_(std::move(local)),
        leaders_(std::move(leaders)),
        machine_ranks_(std::move(machine_ranks)),
        leader_ranks_(std::move(leader_ranks)) {}

  const std::string getBackendName() const override { return "acc-hierarchical"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const auto op = opts.reduceOp.op_;
    if (tensors.size() != 1 || !ours(tensors[0]) ||
        (op != c10d::ReduceOp::SUM && op != c10d::ReduceOp::AVG && op != c10d::ReduceOp::MAX &&
         op != c10d::ReduceOp::MIN))
      return gloo_->allreduce(tensors, opts);
    at::Tensor t = tensors[0];
    at::Tensor c = t.is_contiguous() ? t.view({-1}) : t.contiguous().view({-1});
    c10d::AllreduceOptions o;
    o.reduceOp = op == c10d::ReduceOp::AVG ? c10d::ReduceOp(c10d::ReduceOp::SUM) : opts.reduceOp;
    o.timeout = opts.timeout;
    std::vector<at::Tensor> v{c};
    // The shared memory's messages name its own numbering (0 for this machine's first rank): say which is which.
    std::string local_numbers;
    for (size_t i = 0; i < machine_ranks_.size(); ++i) local_numbers += (i ? "," : "") + std::to_string(i);
    const std::string here = "hierarchical all-reduce, shared memory of this machine's ranks " +
                             join_ranks(machine_ranks_) + " (numbered " + local_numbers + " there): ";
    if (local_) run(here, [&] { local_->allreduce(v, o)->wait(); });
    if (leaders_) {
      try {
        leaders_->allreduce(v, o)->wait();
      } catch (const std::exception& e) {
        const std::string why = "hierarchical all-reduce between the machines' first ranks " +
                                join_ranks(leader_ranks_) + " (rank " + std::to_string(rank_) + "'s Gloo): " + e.what();
        if (local_) give_up_shm_backend(local_, why);  // the machine's other ranks wait for this one's broadcast
        throw std::runtime_error(why);
      }
    }
    if (local_) {
      c10d::BroadcastOptions b;
      b.rootRank = 0;
      run(here, [&] { local_->broadcast(v, b)->wait(); });
    }
    if (op == c10d::ReduceOp::AVG) {
      if (at::isFloatingType(c.scalar_type())) c.div_(size_);
      else c.copy_(at::div(c, size_, "trunc"));  // as the shared memory's and Comm's integer means
    }
    if (!t.is_contiguous()) t.copy_(c.view(t.sizes()));
    return c10::make_intrusive<DoneWork>(rank_, std::vector<at::Tensor>{t});
  }

  // The rest: the whole group's Gloo (GlooForwarding).

 private:
  static bool ours(const at::Tensor& t) { return shm_carries(t); }

  template <class F>
  static void run(const std::string& where, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw std::runtime_error(where + e.what());
    }
  }

  c10::intrusive_ptr<c10d::Backend> local_, leaders_;
  std::vector<int> machine_ranks_, leader_ranks_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_hierarchical_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                            int size, const std::vector<std::string>& where,
                                                            const c10::intrusive_ptr<c10d::Backend>& gloo,
                                                            const GlooFactory& make_gloo,
                                                            std::chrono::milliseconds timeout, std::string* why,
                                                            std::string* shape) {
  // The machines in order of their first rank (their leader); each machine's ranks in rank order.
  std::vector<std::vector<int>> machines;
  std::map<std::string, size_t> index;
  for (int r = 0; r < size; ++r) {
    if (where[r] == "off") {
      *why = "rank " + std::to_string(r) + " set ACC_SHM_COLLECTIVES=0";
      return {};
    }
    auto [it, added] = index.emplace(where[r], machines.size());
    if (added) machines.emplace_back();
    machines[it->second].push_back(r);
  }
  size_t widest = 0;
  for (const auto& m : machines) widest = std::max(widest, m.size());
  if (machines.size() < 2 || widest < 2) {
    *why = machines.size() < 2 ? "every rank is on one machine" : "one process per machine";
    return {};
  }
  const std::vector<int>& mine = machines[index.at(where[rank])];
  const int local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  const int local_size = static_cast<int>(mine.size());
  // 1. Each machine's shared memory (its own store prefix, named by its leader); every rank says whether it has it.
  c10::intrusive_ptr<c10d::Backend> local;
  std::string mine_ok = "ok";
  if (local_size > 1) {
    std::string local_why;
    // Null Gloo: this backend only hands the shared memory what it folds itself.
    local = make_shm_backend(c10::make_intrusive<c10d::PrefixStore>("machine" + std::to_string(mine[0]) + "/", store),
                             local_rank, local_size, nullptr, timeout, &local_why);
    if (!local) mine_ok = local_why;
  }
  store->set("ok/" + std::to_string(rank), std::vector<uint8_t>(mine_ok.begin(), mine_ok.end()));
  for (int r = 0; r < size; ++r) {
    const std::string key = "ok/" + std::to_string(r);
    store->wait({key}, timeout);
    const auto v = store->get(key);
    if (std::string(v.begin(), v.end()) != "ok") {
      *why = "rank " + std::to_string(r) + "'s machine: " + std::string(v.begin(), v.end());
      return {};
    }
  }
  // 2. The leaders' Gloo, numbered by machine.
  c10::intrusive_ptr<c10d::Backend> leaders;
  if (local_rank == 0)
    leaders = make_gloo(c10::make_intrusive<c10d::PrefixStore>("leaders/", store),
                        static_cast<int>(index.at(where[rank])), static_cast<int>(machines.size()));
  *shape = std::to_string(machines.size()) + " machines x ";
  for (size_t m = 0; m < machines.size(); ++m) *shape += (m ? "," : "") + std::to_string(machines[m].size());
  *shape += " processes";
  std::vector<int> leader_ranks;
  for (const auto& m : machines) leader_ranks.push_back(m[0]);
  return c10::make_intrusive<HierarchicalBackend>(rank, size, local, leaders, gloo, mine, leader_ranks);
}

}  // namespace acc::core
