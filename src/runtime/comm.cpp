#include "runtime/comm.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

#include "cuda/plugin.hpp"
#include "runtime/cuda.hpp"
#include "runtime/c10d_names.hpp"
#include "runtime/hierarchical_backend.hpp"
#include "runtime/shm_backend.hpp"
#include "util/errors.hpp"

namespace acc::core {

struct Comm::Impl {
  ProcessState state;  // rank and world_size: this group's
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  c10::intrusive_ptr<c10d::Store> store;  // the job's (prefixed "acc/default_pg")
  std::chrono::milliseconds timeout{0};
  int cuda_device = -1;
  bool shm = false;           // CPU collectives through the shared-memory backend (runtime/shm_backend.hpp)
  std::string cpu_transport;  // what carries them, for people
};

namespace {

// A backend's message without the C++ backtrace c10 and Gloo append ("Exception raised from ...", "frame #0"):
// the message is for people; the backtrace says nothing about which peer or why.
std::string without_backtrace(std::string m) {
  for (const char* marker : {"\nException raised from", "Exception raised from ", "\nframe #"})
    if (size_t at = m.find(marker); at != std::string::npos) m.resize(at);
  while (!m.empty() && std::isspace(static_cast<unsigned char>(m.back()))) m.pop_back();
  return m;
}

// Runs a collective (or its wait): whatever the backend throws (a peer that died or stalled past the timeout, a
// connection closed) becomes a DistributedError naming it, so the C ABI answers ACC_ERR_DISTRIBUTED.
template <class F>
decltype(auto) collective(const char* what, F&& f) {
  try {
    return f();
  } catch (const DistributedError&) {
    throw;
  } catch (const c10::Error& e) {
    throw DistributedError(std::string(what) + " failed: " + without_backtrace(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw DistributedError(std::string(what) + " failed: " + without_backtrace(e.what()));
  }
}

class C10dWork final : public PendingWork {
 public:
  C10dWork(const char* what, c10::intrusive_ptr<c10d::Work> w) : what_(what), work_(std::move(w)) {}
  void wait() override {
    collective(what_, [&] { work_->wait(); });
  }

 private:
  const char* what_;
  c10::intrusive_ptr<c10d::Work> work_;
};

// A collective, then what makes its result (run by wait, on the waiting thread).
class ThenWork final : public PendingWork {
 public:
  ThenWork(std::unique_ptr<PendingWork> first, std::function<void()> then)
      : first_(std::move(first)), then_(std::move(then)) {}
  void wait() override {
    first_->wait();
    if (then_) std::exchange(then_, nullptr)();
  }

 private:
  std::unique_ptr<PendingWork> first_;
  std::function<void()> then_;
};

// Several collectives that make one result together.
class AllWork final : public PendingWork {
 public:
  explicit AllWork(std::vector<std::unique_ptr<PendingWork>> parts) : parts_(std::move(parts)) {}
  void wait() override {
    for (auto& p : parts_) p->wait();
    parts_.clear();
  }

 private:
  std::vector<std::unique_ptr<PendingWork>> parts_;
};

std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr) {
  // As torch.distributed does: GLOO_SOCKET_IFNAME names the interface; otherwise bind the address
  // that reaches the master (loopback for single-machine jobs, the hostname's address otherwise).
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master_addr == "127.0.0.1" || master_addr == "localhost")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

using AddrInfo = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// MASTER_ADDR:MASTER_PORT as a TCP address (the first getaddrinfo gives).
AddrInfo resolve_master(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw DistributedError("cannot resolve MASTER_ADDR '" + host + "': " + ::gai_strerror(rc));
  return AddrInfo(res, ::freeaddrinfo);
}

// The store's listening socket, bound to MASTER_ADDR's own address (127.0.0.1 for a one-machine job, the
// address the user named for several machines) where c10d would listen on every interface: nobody else on the
// network can join or poison the job (docs/security.md). TCPStore takes the descriptor over.
int store_listen_socket(const std::string& host, int port) {
  const AddrInfo res = resolve_master(host, port);
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("rendezvous: socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 2048) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error("rendezvous: cannot listen on " + host + ":" + std::to_string(port) + ": " +
                             std::strerror(err) +
                             (err == EADDRNOTAVAIL
                                  ? " (MASTER_ADDR is not an address of this machine, where rank 0 runs)"
                              : err == EADDRINUSE ? " (something else uses the port; choose another main_process_port)"
                                                  : ""));
  }
  return fd;
}

// How often a rendezvous that waits says whom it waits for: 30 s as torchrun's store (ACC_WAIT_REPORT_SECONDS).
std::chrono::milliseconds report_interval() {
  const char* v = std::getenv("ACC_WAIT_REPORT_SECONDS");
  const double seconds = v && *v ? std::atof(v) : 30.0;
  return std::chrono::milliseconds(std::llround(std::clamp(seconds, 0.1, 3600.0) * 1000));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t k = 0; k < ranks.size() && k < 16; ++k) out += (k ? ", " : "") + std::to_string(ranks[k]);
  if (ranks.size() > 16) out += " and " + std::to_string(ranks.size() - 16) + " more";
  return out;
}

// Whether something listens at host:port now (one connect, closed at once).
bool listening(const addrinfo& at) {
  const int fd = ::socket(at.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = ::connect(fd, at.ai_addr, at.ai_addrlen) == 0;
  ::close(fd);
  return ok;
}

// A rank other than 0 first waits for rank 0's store to listen, saying every report_interval() that it waits
// (c10d's own client retries fill the log with backtraces instead), then connects.
void wait_for_store(const ProcessState& state, std::chrono::milliseconds timeout) {
  const AddrInfo res = resolve_master(state.master_addr, state.master_port);
  const auto start = std::chrono::steady_clock::now();
  auto next_report = start + report_interval();
  while (!listening(*res)) {
    const auto now = std::chrono::steady_clock::now();
    const double waited = std::chrono::duration<double>(now - start).count();
    if (now - start >= timeout)
      throw DistributedError("rendezvous at " + state.master_addr + ":" + std::to_string(state.master_port) +
                             ": rank 0's store did not come within " + std::to_string(std::llround(waited)) +
                             " s (rank " + std::to_string(state.rank) + " of " + std::to_string(state.world_size) +
                             ")");
    if (now >= next_report) {
      std::fprintf(stderr, "libacc: rank %d: waiting for rank 0's store at %s:%d (%.0f s so far; timeout %g s)\n",
                   state.rank, state.master_addr.c_str(), state.master_port, waited,
                   std::chrono::duration<double>(timeout).count());
      next_report += report_interval();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Every rank announces itself in the store and waits for all the others, saying every report_interval() which
// ranks are still awaited; at the timeout it fails naming them (c10d would wait silently).
void wait_for_ranks(c10d::Store& store, const ProcessState& state, std::chrono::milliseconds timeout) {
  const auto key = [](int r) { return "acc/joined/" + std::to_string(r); };
  store.set(key(state.rank), std::vector<uint8_t>{1});
  std::vector<std::string> all;
  for (int r = 0; r < state.world_size; ++r) all.push_back(key(r));
  const auto start = std::chrono::steady_clock::now();
  auto next_report = start + report_interval();
  std::vector<int> missing;  // as last seen
  const auto where = "rendezvous at " + state.master_addr + ":" + std::to_string(state.master_port) + ": ";
  for (;;) {
    try {
      if (store.check(all)) return;
      const auto now = std::chrono::steady_clock::now();
      const bool late = now - start >= timeout;
      if (late || now >= next_report) {
        missing.clear();
        for (int r = 0; r < state.world_size; ++r)
          if (!store.check({key(r)})) missing.push_back(r);
        const double waited = std::chrono::duration<double>(now - start).count();
        if (late)
          throw DistributedError(where + "rank " + rank_list(missing) + " of " + std::to_string(state.world_size) +
                                 " never joined within " + std::to_string(std::llround(waited)) + " s");
        std::fprintf(stderr,
                     "libacc: rank %d: waiting for rank %s to join (%d of %d joined, %.0f s so far; timeout %g s)\n",
                     state.rank, rank_list(missing).c_str(), state.world_size - static_cast<int>(missing.size()),
                     state.world_size, waited, std::chrono::duration<double>(timeout).count());
        next_report += report_interval();
      }
    } catch (const DistributedError&) {
      throw;
    } catch (const std::exception& e) {
      // Rank 0 gave up first (its timeout) and its store went away: say whom everyone was waiting for.
      if (missing.empty()) throw;
      throw DistributedError(where + "rank " + rank_list(missing) + " of " + std::to_string(state.world_size) +
                             " never joined (rank 0 ended the rendezvous)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Gloo (or, where every rank is on this machine, the shared-memory backend in front of Gloo) for CPU tensors and,
// with a CUDA device, NCCL for CUDA ones, over `store`.
c10::intrusive_ptr<c10d::ProcessGroup> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  const c10::intrusive_ptr<c10d::Backend>& gloo,
                                                  const c10::intrusive_ptr<c10d::Backend>& shm, int cuda_device,
                                                  std::chrono::milliseconds timeout) {
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  if (cuda_device >= 0) {
    // As init_process_group(device_id=...) does: backends set after this are bound to the device; the
    // nccl2 backend creates its communicator when bound.
    pg->setBoundDeviceId(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)));
  }
  if (shm) {
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, shm);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
  } else {
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  }
  if (cuda_device >= 0) {
    std::string why;
    const cuda::PluginV1* plugin = cuda::plugin(&why);
    if (!plugin) throw std::runtime_error("NCCL needs the CUDA plugin: " + why);
    auto nccl = plugin->make_nccl(c10::make_intrusive<c10d::PrefixStore>("cuda/", store), rank, size, timeout);
    pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
  }
  return pg;
}

// The shared-memory backend where every rank of the group is on this machine; where the ranks are on several
// machines, some with more than one, the two-level all-reduce (runtime/hierarchical_backend.hpp); null otherwise.
// `on` says whether it is the shared-memory one (which also does reduce-scatter and all-gather), `transport` which.
c10::intrusive_ptr<c10d::Backend> shm_for(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          const c10::intrusive_ptr<c10d::Backend>& gloo, const std::string& master_addr,
                                          std::chrono::milliseconds timeout, bool* on, std::string* transport) {
  std::string why;
  auto shm_store = c10::make_intrusive<c10d::PrefixStore>("shm/", store);
  auto shm = collective("joining the process group",
                        [&] { return make_shm_backend(shm_store, rank, size, gloo, timeout, &why); });
  *on = static_cast<bool>(shm);
  *transport = shm ? "shared memory" : "gloo (" + why + ")";
  if (!shm && why.find("is not on rank 0's machine") != std::string::npos) {
    std::string hwhy, shape;
    auto two_level = collective("joining the process group", [&] {
      // The identities make_shm_backend exchanged, read back (already in the store).
      const auto where = machine_identities(shm_store, rank, size, timeout);
      const GlooFactory make_gloo = [&](const c10::intrusive_ptr<c10d::Store>& s, int r, int n) {
        auto gopts = c10d::ProcessGroupGloo::Options::create(timeout);
        gopts->devices.push_back(gloo_device(master_addr));
        return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<c10d::ProcessGroupGloo>(s, r, n, gopts));
      };
      return make_hierarchical_backend(c10::make_intrusive<c10d::PrefixStore>("hier/", store), rank, size, where, gloo,
                                       make_gloo, timeout, &hwhy, &shape);
    });
    if (two_level) {
      *transport = "hierarchical (all-reduce: shared memory inside each machine, Gloo between them; " + shape + ")";
      return two_level;
    }
    *transport += "; not hierarchical: " + hwhy;
  }
  // A segment that could not be made is worth a line: the job runs, slower. Opting out or several machines is not.
  if (!shm && rank == 0 && why.find("segment") != std::string::npos)
    std::fprintf(stderr,
                 "libacc: this group's CPU collectives go over Gloo, slower, instead of shared memory: %s. %sSet "
                 "ACC_SHM_COLLECTIVES=0 to choose Gloo without this message.\n",
                 why.c_str(),
                 why.find("/dev/shm has") != std::string::npos
                     ? "Give the job more shared memory (Docker: --shm-size=1g; Kubernetes: an emptyDir of medium "
                       "Memory on /dev/shm) or free some in /dev/shm. "
                     : "");
  return shm;
}

}  // namespace

Comm::Comm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Comm::~Comm() = default;

std::shared_ptr<Comm> Comm::connect(const ProcessState& state, std::chrono::milliseconds timeout, int cuda_device) {
  const cuda::PluginV1* plugin = nullptr;
  if (cuda_device >= 0) {
    std::string why;
    plugin = cuda::plugin(&why);
    if (!plugin) throw std::runtime_error("NCCL needs the CUDA plugin: " + why);
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(state.master_port);
  opts.isServer = state.rank == 0;
  opts.numWorkers = state.world_size;
  opts.waitWorkers = false;  // wait_for_ranks waits, and says for whom
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    if (opts.isServer) opts.masterListenFd = store_listen_socket(state.master_addr, state.master_port);
    opts.timeout = timeout;
    if (!opts.isServer) wait_for_store(state, timeout);
    tcp = c10::make_intrusive<c10d::TCPStore>(state.master_addr, opts);
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError("rendezvous at " + state.master_addr + ":" + std::to_string(state.master_port) +
                           " failed (rank " + std::to_string(state.rank) + " of " + std::to_string(state.world_size) +
                           "): " + without_backtrace(e.what()));
  }
  collective("rendezvous", [&] { wait_for_ranks(*tcp, state, timeout); });
  auto store = c10::make_intrusive<c10d::PrefixStore>("acc/default_pg", tcp);
  const auto timeout_ms = timeout;
  auto gopts = c10d::ProcessGroupGloo::Options::create(timeout_ms);
  gopts->devices.push_back(gloo_device(state.master_addr));
  // As torch.distributed does for "cpu:gloo,cuda:nccl": one store prefix per device's backend. Gloo's
  // is the same whether or not this rank uses CUDA, so that a mixed job meets in Gloo for the check below.
  auto gloo = collective("joining the process group", [&] {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("cpu/", store),
                                                       state.rank, state.world_size, gopts);
  });
  // Every rank must agree on CUDA before any NCCL communicator is made: a rank that stays on the CPU
  // would never join it, and the others would wait out the whole timeout.
  {
    std::vector<at::Tensor> v{at::tensor({cuda_device >= 0 ? int64_t{1} : int64_t{0}}, at::kLong)};
    collective("joining the process group", [&] { gloo->allreduce(v)->wait(); });
    const int64_t on_cuda = v[0].item<int64_t>();
    if (on_cuda != 0 && on_cuda != state.world_size)
      throw std::runtime_error(std::to_string(on_cuda) + " of " + std::to_string(state.world_size) +
                               " ranks train on CUDA and the others on the CPU (this rank: " +
                               (cuda_device >= 0 ? "CUDA" : "CPU") +
                               "); make CUDA usable on every rank or set cpu = true (ACCELERATE_USE_CPU=true)");
  }
  auto impl = std::make_unique<Impl>();
  impl->state = state;
  impl->store = store;
  impl->timeout = timeout_ms;
  impl->cuda_device = cuda_device;
  auto shm = shm_for(store, state.rank, state.world_size, gloo, state.master_addr, timeout_ms, &impl->shm,
                     &impl->cpu_transport);
  impl->pg = make_group(store, state.rank, state.world_size, gloo, shm, cuda_device, timeout_ms);
  return std::shared_ptr<Comm>(new Comm(std::move(impl)));
}

std::shared_ptr<Comm> Comm::subgroup(const std::vector<int>& ranks, const std::string& tag) const {
  const auto me = std::find(ranks.begin(), ranks.end(), impl_->state.rank);
  if (me == ranks.end())
    throw std::invalid_argument("subgroup '" + tag + "': rank " + std::to_string(impl_->state.rank) +
                                " is not a member");
  auto store = c10::make_intrusive<c10d::PrefixStore>("sub/" + tag, impl_->store);
  const int rank = static_cast<int>(me - ranks.begin()), size = static_cast<int>(ranks.size());
  auto gopts = c10d::ProcessGroupGloo::Options::create(impl_->timeout);
  gopts->devices.push_back(gloo_device(impl_->state.master_addr));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("cpu/", store), rank,
                                                          size, gopts);
  auto impl = std::make_unique<Impl>();
  impl->state = impl_->state;
  impl->state.rank = rank;
  impl->state.world_size = size;
  impl->store = store;
  impl->timeout = impl_->timeout;
  impl->cuda_device = impl_->cuda_device;
  auto shm =
      shm_for(store, rank, size, gloo, impl_->state.master_addr, impl_->timeout, &impl->shm, &impl->cpu_transport);
  impl->pg = make_group(store, rank, size, gloo, shm, impl_->cuda_device, impl_->timeout);
  return std::shared_ptr<Comm>(new Comm(std::move(impl)));
}

int Comm::rank() const { return impl_->state.rank; }
const c10::intrusive_ptr<c10d::ProcessGroup>& Comm::process_group() const { return impl_->pg; }
int Comm::size() const { return impl_->state.world_size; }

const std::string& Comm::cpu_transport() const { return impl_->cpu_transport; }
void Comm::all_reduce(at::Tensor& t, ReduceOp op) {
  if (t.scalar_type() == at::kBool) {
    at::Tensor b = t.to(at::kByte);
    all_reduce(b, op == ReduceOp::Mean ? ReduceOp::Sum : op);
    t.copy_(b.to(at::kBool));  // any-true for sum and max
    return;
  }
  // Gloo has no AVG: sum, then divide (integer means round toward zero, as torch's div does).
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = op == ReduceOp::Max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  collective("all_reduce", [&] { impl_->pg->allreduce(v, o)->wait(); });
  if (op == ReduceOp::Mean) {
    if (at::isFloatingType(t.scalar_type())) t.div_(size());
    else t.copy_(at::div(t, size(), "trunc"));
  }
}

std::unique_ptr<PendingWork> Comm::all_reduce_sum_async(at::Tensor& t) {
  std::vector<at::Tensor> v{t};
  return std::make_unique<C10dWork>("all_reduce", collective("all_reduce", [&] { return impl_->pg->allreduce(v); }));
}

at::Tensor Comm::all_gather_cat(const at::Tensor& input) {
  // Gloo has no bool: travel as uint8.
  if (input.scalar_type() == at::kBool) return all_gather_cat(input.to(at::kByte)).to(at::kBool);
  at::Tensor t = input.dim() == 0 ? input.reshape({1}) : input.contiguous();
  // Exchange dim-0 sizes first, so uneven shards are padded for the collective and trimmed after.
  at::Tensor n = at::tensor({t.size(0)}, at::kLong);
  std::vector<at::Tensor> n_in{n};
  std::vector<std::vector<at::Tensor>> n_out(1);
  for (int r = 0; r < size(); ++r) n_out[0].push_back(at::empty_like(n));
  collective("all_gather", [&] { impl_->pg->allgather(n_out, n_in)->wait(); });
  int64_t max_n = 0;
  for (auto& s : n_out[0]) max_n = std::max(max_n, s.item<int64_t>());
  at::Tensor padded = t;
  if (t.size(0) < max_n) {
    auto shape = t.sizes().vec();
    shape[0] = max_n - t.size(0);
    padded = at::cat({t, at::zeros(shape, t.options())});
  }
  std::vector<at::Tensor> in{padded};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size(); ++r) out[0].push_back(at::empty_like(padded));
  collective("all_gather", [&] { impl_->pg->allgather(out, in)->wait(); });
  std::vector<at::Tensor> parts;
  for (int r = 0; r < size(); ++r) parts.push_back(out[0][r].narrow(0, 0, n_out[0][r].item<int64_t>()));
  return at::cat(parts);
}

std::unique_ptr<PendingWork> Comm::reduce_scatter_sum_async(at::Tensor& out, at::Tensor& in) {
  if (in.is_cuda() || impl_->shm)
    return std::make_unique<C10dWork>("reduce_scatter", collective("reduce_scatter", [&] {
                                        return c10d_reduce_scatter_single(*impl_->pg, out, in,
                                                                          c10d::ReduceScatterOptions());
                                      }));
  std::vector<at::Tensor> v{in};
  auto sum = std::make_unique<C10dWork>("reduce_scatter",
                                        collective("reduce_scatter", [&] { return impl_->pg->allreduce(v); }));
  return std::make_unique<ThenWork>(std::move(sum), [out, in, rank = rank()]() mutable {
    out.copy_(in.narrow(0, rank * out.numel(), out.numel()));
  });
}

void Comm::all_gather_into(at::Tensor& out, at::Tensor& in) { all_gather_into_async(out, in)->wait(); }

std::unique_ptr<PendingWork> Comm::all_gather_into_async(at::Tensor& out, at::Tensor& in) {
  if (in.is_cuda() || impl_->shm)
    return std::make_unique<C10dWork>("all_gather", collective("all_gather", [&] {
                                        return c10d_all_gather_single(*impl_->pg, out, in, c10d::AllgatherOptions());
                                      }));
  // Gloo's all-gather receives into a temporary as large as `out`, held until its work is destroyed (for a prefetch,
  // a second copy of the unit). Each rank's slice broadcast from that rank straight into `out` moves the same bytes.
  const int64_t n = in.numel();
  out.narrow(0, rank() * n, n).copy_(in.reshape({-1}));
  std::vector<std::unique_ptr<PendingWork>> slices;
  for (int r = 0; r < size(); ++r) {
    std::vector<at::Tensor> v{out.narrow(0, r * n, n)};
    c10d::BroadcastOptions o;
    o.rootRank = r;
    slices.push_back(std::make_unique<C10dWork>("all_gather",
                                                collective("all_gather", [&] { return impl_->pg->broadcast(v, o); })));
  }
  return std::make_unique<AllWork>(std::move(slices));
}

void Comm::broadcast(at::Tensor& t, int root) {
  std::vector<at::Tensor> v{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  collective("broadcast", [&] { impl_->pg->broadcast(v, o)->wait(); });
}

void Comm::barrier() {
  collective("barrier", [&] { impl_->pg->barrier()->wait(); });
}

}  // namespace acc::core
