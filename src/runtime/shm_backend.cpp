#include "runtime/shm_backend.hpp"

#include "runtime/gloo_forwarding.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

namespace acc::core {

bool shm_collectives_enabled() {
  const char* v = std::getenv("ACC_SHM_COLLECTIVES");
  if (!v || !*v) return true;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  throw std::invalid_argument("ACC_SHM_COLLECTIVES='" + std::string(v) + "': expected 1/true/on or 0/false/off");
}

namespace {

constexpr uint64_t kMagic = 0x61636373686d3032;  // "accshm02"
constexpr size_t kPage = 4096;

// One rank's control block, a cache line of its own (the others poll it).
struct alignas(64) RankCtl {
  std::atomic<uint32_t> seq;       // steps this rank has posted (its data for step seq-1 is in its buffer)
  std::atomic<uint32_t> sleepers;  // peers in a futex wait on seq: the poster wakes them only if there are any
  std::atomic<uint32_t> read;      // steps this rank has finished reading (every rank's buffers of step read-1)
  std::atomic<uint32_t> read_sleepers;  // peers in a futex wait on read
  std::atomic<int32_t> pid;
  // What the step of each parity belongs to (op, dtype, elements): ranks in different collectives fail naming
  // both instead of mixing their data. Written before seq is posted, read after.
  uint64_t what[2];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct Header {
  uint64_t magic;
  uint32_t world;
  uint32_t pad;
  uint64_t slot_bytes;
  // A rank that gave up (timeout, a dead peer) sets this to its rank + 1 and its reason, and wakes everyone: the
  // others fail at once instead of at their own timeout.
  std::atomic<int32_t> abandoned_by;
  char reason[244];
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// ACC_SHM_SLOT_BYTES, read strictly (decimal digits only, 64 to 1 GiB); 0 where unset or empty.
size_t slot_bytes_setting() {
  const char* v = std::getenv("ACC_SHM_SLOT_BYTES");
  if (!v || !*v) return 0;
  const char* end = v + std::strlen(v);
  uint64_t n = 0;
  const auto [stop, ec] = std::from_chars(v, end, n);
  if (ec != std::errc() || stop != end || n < 64 || n > (uint64_t{1} << 30))
    throw std::invalid_argument("ACC_SHM_SLOT_BYTES='" + std::string(v) +
                                "': expected a number of bytes from 64 to 1073741824, in decimal digits only");
  return static_cast<size_t>(n);
}

// ACC_SHM_TEST_STALL=RANK:SECONDS, for tests only: the group's rank RANK sleeps that long inside the window where
// the segment has a name in /dev/shm (rank 0 once it made it, another rank before it maps it), so that a test can
// kill a process there.
void stall_for_test(int rank) {
  const char* v = std::getenv("ACC_SHM_TEST_STALL");
  if (!v || !*v) return;
  int who = -1, used = 0;
  double seconds = 0;
  if (std::sscanf(v, "%d:%lf%n", &who, &seconds, &used) != 2 || v[used] != '\0' || seconds < 0)
    throw std::invalid_argument("ACC_SHM_TEST_STALL='" + std::string(v) + "': expected RANK:SECONDS");
  if (who == rank) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

size_t ctl_offset() { return round_up(sizeof(Header), 64); }
size_t data_offset(int size) { return round_up(ctl_offset() + sizeof(RankCtl) * size, kPage); }
size_t segment_bytes(int size, size_t slot) { return data_offset(size) + 2 * slot * size; }

// What /dev/shm has free and its size, in bytes (free: unlimited where statvfs cannot tell).
std::pair<uint64_t, uint64_t> dev_shm_space() {
  struct statvfs st{};
  if (::statvfs("/dev/shm", &st) != 0) return {UINT64_MAX, 0};
  return {static_cast<uint64_t>(st.f_bavail) * st.f_frsize, static_cast<uint64_t>(st.f_blocks) * st.f_frsize};
}

// "64.0 MiB"; below 16 MiB in KiB (rounded up), so that a segment a page too large for the space shows it.
std::string size_text(uint64_t bytes) {
  char buf[48];
  if (bytes >= (uint64_t{16} << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>((bytes + 1023) / 1024));
  return buf;
}

// The segment's name, "/acc-shm-[JOB-]PID-RANDOM". JOB is ACC_SHM_JOB, which acc launch sets for its processes
// (launcher/launch.cpp) so that it can remove, once they are gone, a segment that a process killed while its group
// was being made left behind.
std::string segment_name() {
  std::string job;
  if (const char* j = std::getenv("ACC_SHM_JOB"); j && *j) {
    job = j;
    const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
    if (job.size() > 32 || !std::all_of(job.begin(), job.end(), alnum))
      throw std::invalid_argument("ACC_SHM_JOB='" + job +
                                  "': expected 1 to 32 letters and digits (acc launch sets it)");
    job += "-";
  }
  std::random_device rd;
  char buf[96];
  std::snprintf(buf, sizeof buf, "/acc-shm-%s%d-%08x%08x", job.c_str(), static_cast<int>(::getpid()), rd(), rd());
  return buf;
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

// Whether process `pid` still runs: gone, or a zombie not yet reaped by its parent, is dead.
bool process_alive(int pid) {
  if (pid <= 0) return true;  // not known yet
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

std::string to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

bool shm_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong: return true;
    default: return false;
  }
}

enum class Fold { Sum, Max, Min };

bool shm_reduce(const c10d::ReduceOp& op, Fold* fold, bool* mean) {
  *mean = false;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: *fold = Fold::Sum; return true;
    case c10d::ReduceOp::AVG:
      *fold = Fold::Sum;
      *mean = true;
      return true;
    case c10d::ReduceOp::MAX: *fold = Fold::Max; return true;
    case c10d::ReduceOp::MIN: *fold = Fold::Min; return true;
    default: return false;
  }
}

// out = in[0] (op) in[1] (op) ... in rank order, each step rounded to the dtype (at::add of two bfloat16 tensors
// adds in float32 and rounds once, as c10::BFloat16's operator+ in Gloo's sum does).
void fold_into(at::Tensor& out, const std::vector<at::Tensor>& in, Fold op) {
  if (in.size() == 1) {
    out.copy_(in[0]);
    return;
  }
  switch (op) {
    case Fold::Sum: at::add_out(out, in[0], in[1]); break;
    case Fold::Max: at::maximum_out(out, in[0], in[1]); break;
    case Fold::Min: at::minimum_out(out, in[0], in[1]); break;
  }
  for (size_t j = 2; j < in.size(); ++j) {
    switch (op) {
      case Fold::Sum: out.add_(in[j]); break;
      case Fold::Max: at::maximum_out(out, out, in[j]); break;
      case Fold::Min: at::minimum_out(out, out, in[j]); break;
    }
  }
}

void finish_mean(at::Tensor& t, int size) {
  if (at::isFloatingType(t.scalar_type())) t.div_(size);
  else t.copy_(at::div(t, size, "trunc"));
}

class ShmBackend;

// A collective in flight. On the caller's thread its steps are posted when it is issued and read (peers' data
// folded into its output) when it is waited for, or when a later collective needs the buffers; on the backend's
// thread (ACC_SHM_THREAD) that thread does both.
class ShmWork final : public c10d::Work {
 public:
  ShmWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)) {}
  void complete(std::exception_ptr e) { finish(std::move(e)); }
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto f = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    wait();
    f->markCompleted(c10::IValue(outputs_));
    return f;
  }

 private:
  friend class ShmBackend;
  std::vector<at::Tensor> outputs_;
  ShmBackend* backend_ = nullptr;  // who reads its steps when it is waited for (null: the backend's thread does)
  uint32_t last_step_ = 0;
};

class ShmBackend final : public GlooForwarding {
 public:
  ShmBackend(int rank, int size, void* base, size_t bytes, c10::intrusive_ptr<c10d::Backend> gloo,
             std::chrono::milliseconds timeout)
      : GlooForwarding(rank, size, std::move(gloo)), base_(static_cast<char*>(base)), bytes_(bytes), timeout_(timeout) {
    header_ = reinterpret_cast<Header*>(base_);
    ctl_ = reinterpret_cast<RankCtl*>(base_ + ctl_offset());
    data_ = base_ + data_offset(size);
    slot_ = header_->slot_bytes;
    if (const char* v = std::getenv("ACC_SHM_THREAD"); v && *v && std::strcmp(v, "0") != 0)
      worker_ = std::thread([this] { run_queue(); });
    // ACC_SHM_SPLIT=0: a collective on the caller's thread is done before its issue returns (no split phase).
    if (const char* v = std::getenv("ACC_SHM_SPLIT"); v && std::strcmp(v, "0") == 0) split_ = false;
  }

  ~ShmBackend() override {
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        stopping_ = true;
      }
      queue_cv_.notify_all();
      worker_.join();
    }
    // Collectives never waited for: their works fail instead of reading an unmapped segment.
    auto gone = std::make_exception_ptr(
        std::runtime_error("the process group was destroyed before the collective was waited for"));
    for (Pending& p : pending_) {
      if (!p.work) continue;
      p.work->backend_ = nullptr;
      if (!p.work->isCompleted()) p.work->complete(gone);
    }
    ::munmap(base_, bytes_);
  }

  const std::string getBackendName() const override { return "acc-shm"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    Fold fold;
    bool mean;
    if (tensors.size() != 1 || !ours(tensors[0]) || !shm_reduce(opts.reduceOp, &fold, &mean))
      return gloo_->allreduce(tensors, opts);
    at::Tensor t = tensors[0], c = flat_of(t);
    return submit(
        c10d::OpType::ALLREDUCE, {t}, [this, c, fold] { do_allreduce(c, fold); },
        [this, t, c, mean]() mutable {
          if (mean) finish_mean(c, size_);
          copy_back(t, c);
        });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& opts) override {
    Fold fold;
    bool mean;
    if (!ours(out) || !ours(in) || !shm_reduce(opts.reduceOp, &fold, &mean))
      return c10d_reduce_scatter_single(*gloo_, out, in, opts);
    if (in.numel() != out.numel() * size_ || in.scalar_type() != out.scalar_type())
      throw std::invalid_argument("reduce_scatter: the input must hold size() times the output's elements, same dtype");
    at::Tensor o = flat_of(out), i = in.contiguous();
    return submit(
        c10d::OpType::_REDUCE_SCATTER_BASE, {out}, [this, o, i, fold] { do_reduce_scatter(o, i, fold); },
        [this, out, o, mean]() mutable {
          if (mean) finish_mean(o, size_);
          copy_back(out, o);
        });
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return coalesced(outs, ins, [&](at::Tensor& o, at::Tensor& i) { return _reduce_scatter_base(o, i, opts); });
  }
#ifdef ACC_C10D_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& out, at::Tensor& in,
                                                       const c10d::ReduceScatterOptions& opts) override {
    return _reduce_scatter_base(out, in, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_tensor_coalesced(outs, ins, opts);
  }
#endif

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& opts) override {
    if (!ours(out) || !ours(in)) return c10d_all_gather_single(*gloo_, out, in, opts);
    if (out.numel() != in.numel() * size_ || in.scalar_type() != out.scalar_type())
      throw std::invalid_argument("all_gather: the output must hold size() times the input's elements, same dtype");
    at::Tensor o = flat_of(out), i = in.contiguous();
    return submit(
        c10d::OpType::_ALLGATHER_BASE, {out}, [this, o, i] { do_allgather(o, i); },
        [out, o]() mutable { copy_back(out, o); });
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::AllgatherOptions& opts) override {
    return coalesced(outs, ins, [&](at::Tensor& o, at::Tensor& i) { return _allgather_base(o, i, opts); });
  }
#ifdef ACC_C10D_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& out, at::Tensor& in,
                                                   const c10d::AllgatherOptions& opts) override {
    return _allgather_base(out, in, opts);
  }
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outs,
                                                             std::vector<at::Tensor>& ins,
                                                             const c10d::AllgatherOptions& opts) override {
    return allgather_into_tensor_coalesced(outs, ins, opts);
  }
#endif
  // One input, one output per rank of the same shape and dtype: the gathered tensor, split.
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                           const c10d::AllgatherOptions& opts) override {
    bool same = ins.size() == 1 && outs.size() == 1 && static_cast<int>(outs[0].size()) == size_ && ours(ins[0]);
    for (size_t r = 0; same && r < outs[0].size(); ++r)
      same = ours(outs[0][r]) && outs[0][r].numel() == ins[0].numel() &&
             outs[0][r].scalar_type() == ins[0].scalar_type();
    if (!same) return gloo_->allgather(outs, ins, opts);
    std::vector<at::Tensor> parts = outs[0];
    at::Tensor in = ins[0];
    at::Tensor all = at::empty({in.numel() * size_}, in.options()), i = in.contiguous();
    return submit(
        c10d::OpType::ALLGATHER, parts, [this, all, i] { do_allgather(all, i); },
        [this, parts, all, i]() mutable {
          for (int r = 0; r < size_; ++r)
            parts[r].copy_(all.narrow(0, r * i.numel(), i.numel()).view(parts[r].sizes()));
        });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    if (tensors.size() != 1 || !ours(tensors[0]) || opts.rootRank < 0 || opts.rootRank >= size_)
      return gloo_->broadcast(tensors, opts);
    at::Tensor t = tensors[0];
    const int root = static_cast<int>(opts.rootRank);
    at::Tensor c = flat_of(t);
    return submit(
        c10d::OpType::BROADCAST, {t}, [this, c, root] { do_broadcast(c, root); },
        [t, c]() mutable { copy_back(t, c); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return submit(c10d::OpType::BARRIER, {}, [this] { post(uint64_t{kBarrier} << 56, nullptr, nullptr); });
  }

  // The rest: Gloo (GlooForwarding).

 private:
  static bool ours(const at::Tensor& t) { return shm_carries(t); }

  // A contiguous flat tensor over `t`'s elements: `t` itself, or a copy that copy_back writes back when done.
  static at::Tensor flat_of(const at::Tensor& t) {
    return t.is_contiguous() ? t.view({-1}) : t.contiguous().view({-1});
  }
  static void copy_back(at::Tensor& t, const at::Tensor& flat) {
    if (!t.is_contiguous()) t.copy_(flat.view(t.sizes()));
  }

  template <class F>
  c10::intrusive_ptr<c10d::Work> coalesced(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins, F&& one) {
    if (outs.size() != ins.size()) throw std::invalid_argument("coalesced collective: as many outputs as inputs");
    // Works complete in call order (one channel, and a failure fails every later one): the last says for all.
    c10::intrusive_ptr<c10d::Work> last;
    for (size_t i = 0; i < outs.size(); ++i) last = one(outs[i], ins[i]);
    if (!last) return submit(c10d::OpType::COALESCED, {}, [] {});
    return last;
  }

  // `job` posts the collective's steps (pending: read later, in order); `then` runs after its last step is read
  // (the mean, a non-contiguous output written back). On the caller's thread the posts happen now and the reads
  // when the work is waited for (or a later collective needs the buffers), so a collective issued during backward
  // costs a copy and lets computation go on; with ACC_SHM_THREAD=1 the backend's thread does both, in call order.
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, std::vector<at::Tensor> outputs, std::function<void()> job,
                                        std::function<void()> then = nullptr) {
    auto work = c10::make_intrusive<ShmWork>(rank_, type, std::move(outputs));
    if (!worker_.joinable()) {
      std::lock_guard<std::mutex> lock(channel_mutex_);
      issue(work, job, std::move(then));  // throws
      if (work->isCompleted()) return work;
      if (!split_) {
        progress_through(work->last_step_);  // throws
        return work;
      }
      work->backend_ = this;
      return work;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.push_back({work, std::move(job), std::move(then)});
    }
    queue_cv_.notify_one();
    return work;
  }

  // Posts `job`'s steps and hands `work` and `then` to its last one (a job without steps is done at once).
  void issue(const c10::intrusive_ptr<ShmWork>& work, const std::function<void()>& job, std::function<void()> then) {
    if (!failed_.empty())
      throw std::runtime_error("shared-memory collectives stopped after an earlier failure: " + failed_);
    const uint64_t first = posted_;
    try {
      job();
    } catch (const std::exception& e) {
      fail(e.what(), std::current_exception());
      throw;
    }
    if (posted_ == first) {
      if (then) then();
      work->complete(nullptr);
      return;
    }
    Pending& last = pending_.back();
    last.then = std::move(then);
    last.work = work;
    work->last_step_ = last.k;
  }

 public:
  // A collective of another transport this group is part of failed (the hierarchical all-reduce's leaders): the
  // peers waiting here fail at once with `why` instead of at the timeout.
  void give_up(const std::string& why) {
    std::lock_guard<std::mutex> lock(channel_mutex_);
    fail(why, std::make_exception_ptr(std::runtime_error(why)));
  }

  // ShmWork::wait on the caller's thread: reads every pending step up to the work's last (its error, if one, is
  // the work's own: wait rethrows it).
  void complete_through(uint32_t k) {
    std::lock_guard<std::mutex> lock(channel_mutex_);
    try {
      progress_through(k);
    } catch (const std::exception&) {
    }
  }

 private:
  void run_queue() {
    for (;;) {
      Queued item;
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        issue(item.work, item.job, std::move(item.then));
        if (posted_ > 0) progress_through(static_cast<uint32_t>(posted_ - 1));
      } catch (...) {
        if (!item.work->isCompleted()) item.work->complete(std::current_exception());
      }
    }
  }

  // The first failure stops the channel: the peers are told, and every collective still pending fails with it.
  void fail(const std::string& why, std::exception_ptr e) {
    if (failed_.empty()) failed_ = why;
    abandon(why);
    for (Pending& p : pending_)
      if (p.work && !p.work->isCompleted()) p.work->complete(e);
    pending_.clear();
  }

  char* buffer(int r, uint32_t step) const { return data_ + (static_cast<size_t>(r) * 2 + (step & 1)) * slot_; }

  // One step of every collective: write this rank's part into its buffer and post the step; `read` (every rank's
  // buffers of the step, once all have posted it) runs later, in step order (progress_through). A rank's buffer
  // alternates between two halves: before writing half h again (two steps later), this rank reads the step that
  // used it, and waits until every peer has read it too.
  void post(uint64_t what, const std::function<void(char*)>& fill, std::function<void(uint32_t)> read) {
    const uint32_t k = static_cast<uint32_t>(posted_);
    if (posted_ >= 2) {
      progress_through(k - 2);
      for (int r = 0; r < size_; ++r)
        if (r != rank_) wait_for(r, ctl_[r].read, ctl_[r].read_sleepers, k - 1);
    }
    if (fill) fill(buffer(rank_, k));
    RankCtl& me = ctl_[rank_];
    me.what[k & 1] = what;
    me.seq.store(k + 1, std::memory_order_seq_cst);
    if (me.sleepers.load(std::memory_order_seq_cst) > 0) futex(&me.seq, FUTEX_WAKE, INT32_MAX, nullptr);
    ++posted_;
    pending_.push_back({k, what, std::move(read), nullptr, nullptr});
  }

  // Reads the pending steps up to k (waiting for the peers to post them), runs what finishes each collective and
  // completes its work. A failure fails every pending work and is rethrown.
  void progress_through(uint32_t k) {
    while (!pending_.empty() && reached(k, pending_.front().k)) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      try {
        for (int r = 0; r < size_; ++r) {
          if (r == rank_) continue;
          wait_for(r, ctl_[r].seq, ctl_[r].sleepers, p.k + 1);
          if (ctl_[r].what[p.k & 1] != p.what)
            throw std::runtime_error("rank " + std::to_string(r) + " is in another collective (" +
                                     describe(ctl_[r].what[p.k & 1]) + ") than rank " + std::to_string(rank_) + " (" +
                                     describe(p.what) + ")");
        }
        if (p.read) p.read(p.k);
        RankCtl& me = ctl_[rank_];
        me.read.store(p.k + 1, std::memory_order_seq_cst);
        if (me.read_sleepers.load(std::memory_order_seq_cst) > 0) futex(&me.read, FUTEX_WAKE, INT32_MAX, nullptr);
        if (p.then) p.then();
      } catch (const std::exception& e) {
        if (p.work) p.work->complete(std::current_exception());
        fail(e.what(), std::current_exception());
        throw;
      }
      if (p.work) p.work->complete(nullptr);
    }
  }

  // A collective's signature: what, of which dtype, how many elements (the same on every rank).
  enum What : uint64_t { kAllreduce = 1, kReduceScatter, kAllgather, kBroadcast, kBarrier };
  static uint64_t signature(What op, const at::Tensor& t) {
    return (static_cast<uint64_t>(op) << 56) | (static_cast<uint64_t>(t.scalar_type()) << 48) |
           (static_cast<uint64_t>(t.numel()) & ((uint64_t{1} << 48) - 1));
  }
  static std::string describe(uint64_t what) {
    static const char* names[] = {"?", "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"};
    const uint64_t op = what >> 56;
    if (op == kBarrier) return "barrier";
    return std::string(op < 6 ? names[op] : "?") + " of " + std::to_string(what & ((uint64_t{1} << 48) - 1)) + " " +
           c10::toString(static_cast<at::ScalarType>((what >> 48) & 0xff));
  }

  static bool reached(uint32_t seq, uint32_t target) { return static_cast<int32_t>(seq - target) >= 0; }

  // Waits until rank r's counter `word` (its seq or its read) reaches target.
  void wait_for(int r, std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, uint32_t target) {
    RankCtl& peer = ctl_[r];
    if (reached(word.load(std::memory_order_acquire), target)) return;
    const auto start = std::chrono::steady_clock::now();
    // A short spin: a peer a few microseconds behind answers without a system call.
    for (int i = 0; i < 4000; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (reached(word.load(std::memory_order_acquire), target)) return;
    }
    const timespec slice{0, 20 * 1000 * 1000};  // 20 ms: how often a sleeping rank checks its peers
    for (;;) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = word.load(std::memory_order_seq_cst);
      if (!reached(seen, target)) futex(&word, FUTEX_WAIT, seen, &slice);
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (reached(word.load(std::memory_order_acquire), target)) return;
      if (const int by = header_->abandoned_by.load(std::memory_order_acquire); by > 0 && by - 1 != rank_) {
        char reason[sizeof header_->reason + 1] = {};
        std::memcpy(reason, header_->reason, sizeof header_->reason);
        throw std::runtime_error("rank " + std::to_string(by - 1) + " gave up the collective: " + reason);
      }
      if (!process_alive(peer.pid.load(std::memory_order_relaxed)))
        throw std::runtime_error("rank " + std::to_string(r) + " (pid " + std::to_string(peer.pid.load()) +
                                 ") died during the collective (shared-memory transport, rank " +
                                 std::to_string(rank_) + ")");
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited >= timeout_)
        throw std::runtime_error("timed out after " +
                                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                                 " ms waiting for rank " + std::to_string(r) + " (shared-memory transport, rank " +
                                 std::to_string(rank_) + ")");
    }
  }

  // Tells the peers this rank gave up (the first reason only), and wakes them.
  void abandon(const std::string& why) {
    int32_t none = 0;
    if (header_->abandoned_by.load() == 0) {
      std::snprintf(header_->reason, sizeof header_->reason, "%s", why.c_str());
      header_->abandoned_by.compare_exchange_strong(none, rank_ + 1);
    }
    for (int r = 0; r < size_; ++r) {
      futex(&ctl_[r].seq, FUTEX_WAKE, INT32_MAX, nullptr);
      futex(&ctl_[r].read, FUTEX_WAKE, INT32_MAX, nullptr);
    }
  }

  std::vector<at::Tensor> peers_view(uint32_t k, size_t offset_bytes, int64_t n, at::ScalarType dtype) const {
    std::vector<at::Tensor> v;
    for (int r = 0; r < size_; ++r)
      v.push_back(at::from_blob(buffer(r, k) + offset_bytes, {n}, at::TensorOptions().dtype(dtype)));
    return v;
  }

  // The read closures hold their tensors: they run when the work is waited for.
  void do_allreduce(const at::Tensor& t, Fold fold) {
    const size_t esz = t.element_size();
    const int64_t per_step = static_cast<int64_t>(slot_ / esz);
    const char* p = static_cast<const char*>(t.data_ptr());
    const uint64_t what = signature(kAllreduce, t);
    for (int64_t off = 0; off < t.numel(); off += per_step) {
      const int64_t n = std::min(per_step, t.numel() - off);
      post(
          what, [&](char* mine) { std::memcpy(mine, p + off * esz, n * esz); },
          [this, t, off, n, fold](uint32_t k) {
            at::Tensor out = t.narrow(0, off, n);
            fold_into(out, peers_view(k, 0, n, t.scalar_type()), fold);
          });
    }
    if (t.numel() == 0) post(what, nullptr, nullptr);
  }

  // Rank r's `out` = fold over ranks of their `in`'s slice r; each step carries one piece of every slice.
  void do_reduce_scatter(const at::Tensor& out, const at::Tensor& in, Fold fold) {
    const size_t esz = out.element_size();
    const int64_t count = out.numel();
    const int64_t per_step = std::max<int64_t>(1, static_cast<int64_t>(slot_ / esz / size_));
    const char* src = static_cast<const char*>(in.data_ptr());
    const uint64_t what = signature(kReduceScatter, out);
    for (int64_t off = 0; off < count; off += per_step) {
      const int64_t n = std::min(per_step, count - off);
      post(
          what,
          [&](char* mine) {
            for (int d = 0; d < size_; ++d) std::memcpy(mine + d * n * esz, src + (d * count + off) * esz, n * esz);
          },
          [this, out, off, n, esz, fold](uint32_t k) {
            at::Tensor o = out.narrow(0, off, n);
            fold_into(o, peers_view(k, static_cast<size_t>(rank_) * n * esz, n, out.scalar_type()), fold);
          });
    }
    if (count == 0) post(what, nullptr, nullptr);
  }

  void do_allgather(const at::Tensor& out, const at::Tensor& in) {
    const size_t esz = in.element_size();
    const int64_t count = in.numel();
    const int64_t per_step = static_cast<int64_t>(slot_ / esz);
    const char* src = static_cast<const char*>(in.data_ptr());
    const uint64_t what = signature(kAllgather, in);
    for (int64_t off = 0; off < count; off += per_step) {
      const int64_t n = std::min(per_step, count - off);
      post(
          what, [&](char* mine) { std::memcpy(mine, src + off * esz, n * esz); },
          [this, out, off, n, esz, count](uint32_t k) {
            char* dst = static_cast<char*>(out.data_ptr());
            for (int r = 0; r < size_; ++r) std::memcpy(dst + (r * count + off) * esz, buffer(r, k), n * esz);
          });
    }
    if (count == 0) post(what, nullptr, nullptr);
  }

  void do_broadcast(const at::Tensor& t, int root) {
    const size_t esz = t.element_size();
    const int64_t per_step = static_cast<int64_t>(slot_ / esz);
    const char* p = static_cast<const char*>(t.data_ptr());
    const uint64_t what = signature(kBroadcast, t);
    for (int64_t off = 0; off < t.numel(); off += per_step) {
      const int64_t n = std::min(per_step, t.numel() - off);
      std::function<void(char*)> fill;
      if (rank_ == root) fill = [&](char* mine) { std::memcpy(mine, p + off * esz, n * esz); };
      std::function<void(uint32_t)> read;
      if (rank_ != root)
        read = [this, t, off, n, esz, root](uint32_t k) {
          std::memcpy(static_cast<char*>(t.data_ptr()) + off * esz, buffer(root, k), n * esz);
        };
      post(what, fill, std::move(read));
    }
    if (t.numel() == 0) post(what, nullptr, nullptr);
  }

  // A posted step not yet read; the last step of a collective carries its work and what finishes it.
  struct Pending {
    uint32_t k;
    uint64_t what;
    std::function<void(uint32_t)> read;
    std::function<void()> then;
    c10::intrusive_ptr<ShmWork> work;
  };
  struct Queued {
    c10::intrusive_ptr<ShmWork> work;
    std::function<void()> job, then;
  };

  char* base_;
  size_t bytes_;
  Header* header_;
  RankCtl* ctl_;
  char* data_;
  size_t slot_;
  bool split_ = true;
  uint64_t posted_ = 0;  // steps this rank has posted
  std::deque<Pending> pending_;
  std::mutex channel_mutex_;  // the caller's-thread channel: issue and complete_through
  std::chrono::milliseconds timeout_;
  std::string failed_;
  std::thread worker_;
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Queued> queue_;
  bool stopping_ = false;
};

bool ShmWork::wait(std::chrono::milliseconds timeout) {
  if (backend_ && !isCompleted()) backend_->complete_through(last_step_);
  return c10d::Work::wait(timeout);
}

// Blocks until every key is in the store (its own timeout).
std::vector<std::string> wait_all(c10d::Store& store, const std::string& prefix, int size,
                                  std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<std::string> values;
  for (const auto& k : keys) values.push_back(to_string(store.get(k)));
  return values;
}

// Waits until every key of `keys` (rank -> key) is in the store, as wait_all, but fails as soon as the process of a
// rank whose key is missing is gone (its pid from "shm/pid/RANK"), not at the timeout: a process killed while the group
// makes its segment would otherwise hold the others, and the segment's name in /dev/shm, that long.
void wait_watching(c10d::Store& store, std::vector<std::pair<int, std::string>> keys,
                   std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  std::map<int, int> pids;  // read when first needed: every rank set its pid before the machine identities
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    keys.erase(std::remove_if(keys.begin(), keys.end(), [&](const auto& k) { return store.check({k.second}); }),
               keys.end());
    if (keys.empty()) return;
    for (const auto& [r, key] : keys) {
      auto it = pids.find(r);
      if (it == pids.end())
        it = pids.emplace(r, std::atoi(to_string(store.get("shm/pid/" + std::to_string(r))).c_str())).first;
      if (!process_alive(it->second))
        throw std::runtime_error("rank " + std::to_string(r) + " (pid " + std::to_string(it->second) +
                                 ") died while the group made its shared-memory segment");
    }
    if (std::chrono::steady_clock::now() - start >= timeout) {
      std::string who;
      for (const auto& [r, key] : keys) who += (who.empty() ? "" : ", ") + std::to_string(r);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", static_cast<double>(timeout.count()) / 1000);
      throw std::runtime_error(std::string("timed out after ") + secs + " s waiting for rank(s) " + who +
                               " while the group made its shared-memory segment");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace

size_t shm_slot_bytes(int size, uint64_t free_bytes) {
  if (const size_t set = slot_bytes_setting()) return round_up(set, 64);
  // At most half of what /dev/shm has free, so that the job's other groups and whatever else uses it (DataLoader
  // workers) keep room, and at most 64 MiB. Each buffer 4 MiB at most (a few steps per DDP bucket) and 64 KiB at
  // least (smaller ones would split a collective into very many steps: the segment is then tried at that size).
  constexpr uint64_t kCap = uint64_t{64} << 20;
  constexpr size_t kMinSlot = size_t{64} << 10, kMaxSlot = size_t{4} << 20;
  const uint64_t budget = std::min(kCap, free_bytes / 2), header = data_offset(size);
  const uint64_t per_rank = (budget > header ? budget - header : 0) / (2 * static_cast<uint64_t>(size));
  return std::clamp(static_cast<size_t>(std::min<uint64_t>(per_rank, kMaxSlot)) / 64 * 64, kMinSlot, kMaxSlot);
}
size_t shm_segment_bytes(int size, size_t slot_bytes) { return segment_bytes(size, slot_bytes); }

bool shm_carries(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && shm_dtype(t.scalar_type());
}

std::string machine_identity() {
  auto read_first_line = [](const char* path) {
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
  };
  auto ns = [](const char* path) {
    struct stat st{};
    return ::stat(path, &st) == 0 ? std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) : std::string("?");
  };
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string id = std::string(host) + "|" + read_first_line("/proc/sys/kernel/random/boot_id") + "|" +
                   ns("/proc/self/ns/mnt") + "|" + ns("/proc/self/ns/pid");
  // Processes the kernel cannot tell apart (containers sharing /dev/shm and process ids) told apart by hand.
  if (const char* label = std::getenv("ACC_SHM_MACHINE"); label && *label) id += std::string("|") + label;
  return id;
}

std::vector<std::string> machine_identities(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout) {
  store->set("shm/where/" + std::to_string(rank),
             to_bytes(shm_collectives_enabled() ? machine_identity() : std::string("off")));
  return wait_all(*store, "shm/where/", size, timeout);
}

void give_up_shm_backend(const c10::intrusive_ptr<c10d::Backend>& shm, const std::string& why) {
  if (auto* b = dynamic_cast<ShmBackend*>(shm.get())) b->give_up(why);
}

bool can_share_memory(const std::vector<std::string>& where, std::string* why) {
  for (size_t r = 0; r < where.size(); ++r) {
    if (where[r] == "off") {
      *why = "rank " + std::to_string(r) + " set ACC_SHM_COLLECTIVES=0";
      return false;
    }
  }
  for (size_t r = 1; r < where.size(); ++r) {
    if (where[r] != where[0]) {
      *why = "rank " + std::to_string(r) + " is not on rank 0's machine (" + where[r].substr(0, where[r].find('|')) +
             " vs " + where[0].substr(0, where[0].find('|')) + ")";
      return false;
    }
  }
  return true;
}

namespace {

// This rank's view of the group's segment while it is made: its name, this rank's mapping of it, and what this rank
// says of it ("ok", or why not).
struct SegmentMapping {
  std::string name;
  void* base = MAP_FAILED;
  size_t bytes = 0;
  std::string mine = "ok";
};

// Rank 0: names the segment, and makes it once every rank has read the name (sized for its /dev/shm's free space),
// with the header and every rank's control block written.
void make_segment(const c10::intrusive_ptr<c10d::Store>& store, int size, std::chrono::milliseconds timeout,
                  SegmentMapping& m) {
  const auto [free_bytes, total_bytes] = dev_shm_space();
  const size_t slot = shm_slot_bytes(size, free_bytes);
  m.bytes = segment_bytes(size, slot);
  m.name = segment_name();
  store->set("shm/name", to_bytes(m.name));
  std::vector<std::pair<int, std::string>> readers;
  for (int r = 1; r < size; ++r) readers.emplace_back(r, "shm/named/" + std::to_string(r));
  wait_watching(*store, std::move(readers), timeout);
  const int fd = ::shm_open(m.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  int err = fd < 0 ? errno : 0;
  // Reserve the pages now: a /dev/shm too small fails here, not as SIGBUS in a collective.
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(m.bytes)) != 0) err = errno;
  if (fd >= 0 && !err) err = ::posix_fallocate(fd, 0, static_cast<off_t>(m.bytes));
  if (!err) {
    m.base = ::mmap(nullptr, m.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m.base == MAP_FAILED) err = errno;
  }
  if (fd >= 0) ::close(fd);
  if (err) {
    const std::string free_text = free_bytes == UINT64_MAX ? std::string("?") : size_text(free_bytes);
    m.mine = "cannot make a " + size_text(m.bytes) + " segment in /dev/shm for " + std::to_string(size) +
             " processes (" + std::strerror(err) + "; /dev/shm has " + free_text + " free of " +
             size_text(total_bytes) + ")";
    if (fd >= 0) ::shm_unlink(m.name.c_str());
  } else {
    auto* h = new (m.base) Header{};
    h->magic = kMagic;
    h->world = static_cast<uint32_t>(size);
    h->slot_bytes = slot;
    for (int r = 0; r < size; ++r) new (static_cast<char*>(m.base) + ctl_offset() + r * sizeof(RankCtl)) RankCtl{};
  }
  stall_for_test(0);
}

// The other ranks: read the segment's name, say so, and map the segment once rank 0 said it could make it.
void map_segment(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
                 SegmentMapping& m) {
  wait_watching(*store, {{0, "shm/name"}}, timeout);
  m.name = to_string(store->get("shm/name"));
  store->set("shm/named/" + std::to_string(rank), to_bytes("yes"));
  stall_for_test(rank);
  wait_watching(*store, {{0, "shm/mapped/0"}}, timeout);
  if (to_string(store->get("shm/mapped/0")) != "ok") {
    m.mine = "rank 0 could not make the segment";
    return;
  }
  // Rank 0 chose the layout (its /dev/shm's free space, its ACC_SHM_SLOT_BYTES): read from the segment.
  const int fd = ::shm_open(m.name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  struct stat st{};
  if (fd < 0) {
    m.mine = std::string("cannot open rank 0's segment: ") + std::strerror(errno);
  } else if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < data_offset(size)) {
    m.mine = "rank 0's segment is smaller than its header";
  } else {
    m.bytes = static_cast<size_t>(st.st_size);
    m.base = ::mmap(nullptr, m.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const auto* h = static_cast<const Header*>(m.base);
    if (m.base == MAP_FAILED) m.mine = std::string("cannot map rank 0's segment: ") + std::strerror(errno);
    else if (h->magic != kMagic || h->world != static_cast<uint32_t>(size) ||
             segment_bytes(size, h->slot_bytes) != m.bytes)
      m.mine = "rank 0's segment is not this group's";
  }
  if (fd >= 0) ::close(fd);
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_shm_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   const c10::intrusive_ptr<c10d::Backend>& gloo,
                                                   std::chrono::milliseconds timeout, std::string* why) {
  slot_bytes_setting();  // a bad ACC_SHM_SLOT_BYTES is refused on every rank, not only on rank 0, which reads it
  // 1. Who can share a segment: every rank says where it runs (or that it opted out), after its pid (wait_watching).
  store->set("shm/pid/" + std::to_string(rank), to_bytes(std::to_string(::getpid())));
  if (!can_share_memory(machine_identities(store, rank, size, timeout), why)) return {};
  // 2. Rank 0 names the segment and makes it once every rank has read the name: every rank knows the name of
  // anything that may be in /dev/shm, so that whichever survives a failure below removes it (and acc launch, by the
  // name's ACC_SHM_JOB, when none does). Then each of the others maps it, once rank 0 said it could make it, and
  // everyone says whether it could.
  SegmentMapping m;
  try {
    if (rank == 0) make_segment(store, size, timeout, m);
    else map_segment(store, rank, size, timeout, m);
    if (m.base != MAP_FAILED && m.mine == "ok")
      reinterpret_cast<RankCtl*>(static_cast<char*>(m.base) + ctl_offset())[rank]
          .pid.store(static_cast<int32_t>(::getpid()));
    store->set("shm/mapped/" + std::to_string(rank), to_bytes(m.mine));
    std::vector<std::pair<int, std::string>> keys;
    for (int r = 0; r < size; ++r) keys.emplace_back(r, "shm/mapped/" + std::to_string(r));
    wait_watching(*store, std::move(keys), timeout);
  } catch (...) {
    if (!m.name.empty()) ::shm_unlink(m.name.c_str());  // ENOENT where another rank did it first
    if (m.base != MAP_FAILED) ::munmap(m.base, m.bytes);
    throw;
  }
  // 3. Everyone has mapped it (or failed to): nothing needs the name any more. Every rank removes it, so that it goes
  // even if rank 0 dies now.
  ::shm_unlink(m.name.c_str());
  for (int r = 0; r < size; ++r) {
    const std::string said = to_string(store->get("shm/mapped/" + std::to_string(r)));
    if (said != "ok") {
      *why = "rank " + std::to_string(r) + ": " + said;
      if (m.base != MAP_FAILED) ::munmap(m.base, m.bytes);
      return {};
    }
  }
  return c10::make_intrusive<ShmBackend>(rank, size, m.base, m.bytes, gloo, timeout);
}

}  // namespace acc::core
