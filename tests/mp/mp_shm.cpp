// One rank of the shared-memory collectives' tests (runtime/shm_backend.hpp), on acc::core::Comm itself: every
// operation against Gloo on the same inputs, in one job (the Gloo group is a subgroup of all ranks made with
// ACC_SHM_COLLECTIVES=0).
//
//   mp_shm equal TIMEOUT_S     every dtype, size (0, 1, odd, several steps) and operation: 2 ranks bit for bit as
//                              Gloo; 3 or more within (n-1) roundings per element. Also every rank's result is the
//                              same bits. Prints "N passed, N failed"; exits non-zero on a failed check.
//   mp_shm die TIMEOUT_S       rank 1 kills itself (SIGKILL) 50 ms into a loop of 64 MiB all-reduces; the others
//                              print "CAUGHT: <error>" and exit 0 (exit 3 if the loop ended without an error).
//   mp_shm transport TIMEOUT_S  rank 0 prints "TRANSPORT <the job's CPU transport>"; one 8 MiB all-reduce (several
//                              steps of the default buffers) against its sum. With ACC_SHM_TEST_STALL a process can
//                              be killed while the group makes its segment (mp_test.py case_shm_window).
//   mp_shm bench TIMEOUT_S     all-reduce times, the job's transport against Gloo, by size (rank 0 prints a table).
//   mp_shm hier TIMEOUT_S      a job on several machines (runtime/hierarchical_backend.hpp): the transport says
//                              hierarchical; all-reduce SUM, AVG, MAX, MIN of float32, bfloat16 and int64 against
//                              the exact result of every rank's inputs (integers equal, floats within (n-1)
//                              roundings of the float64 sum), every rank the same bits; a transposed tensor.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <acc/config.hpp>

#include "runtime/comm.hpp"
#include "util/errors.hpp"
#include "mp_check.hpp"

using acc::core::Comm;

namespace {

// The bits of `t`, as integers of its width (so that equal means bit-equal, -0.0 and NaNs included).
at::Tensor bits(const at::Tensor& t) {
  switch (t.element_size()) {
    case 1: return t.view(at::kChar);
    case 2: return t.view(at::kShort);
    case 4: return t.view(at::kInt);
    default: return t.view(at::kLong);
  }
}

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(bits(a.contiguous()), bits(b.contiguous()));
}

double eps(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return std::ldexp(1.0, -10);
    case at::kBFloat16: return std::ldexp(1.0, -7);
    case at::kFloat: return std::ldexp(1.0, -23);
    case at::kDouble: return std::ldexp(1.0, -52);
    default: return 0;
  }
}

// Rank-dependent inputs: normal floats of mixed magnitudes, integers that may wrap in 8 bits (as both wrap).
at::Tensor input(at::ScalarType t, int64_t n, int rank, int salt) {
  at::manual_seed(1000 * salt + rank);
  if (at::isFloatingType(t))
    return (at::randn({n}, at::kDouble) * at::pow(10.0, at::randint(-3, 4, {n}, at::kDouble))).to(t);
  if (t == at::kByte) return at::randint(0, 200, {n}, at::kLong).to(t);
  return at::randint(-100000, 100000, {n}, at::kLong).to(t);
}

// shm's result against Gloo's: bit-equal for 2 ranks and integers; otherwise within the rounding of n-1 additions
// in another order, relative to sum |x_r|. And every rank holds the same bits.
void compare(Comm& shm, const at::Tensor& got, const at::Tensor& want, const at::Tensor& sum_abs,
             const std::string& what) {
  if (shm.size() == 2 || !at::isFloatingType(got.scalar_type())) {
    expect(bit_equal(got, want), what + ": bit-equal to Gloo's");
  } else {
    const double bound = 2.0 * (shm.size() - 1) * eps(got.scalar_type());
    const at::Tensor diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs();
    const at::Tensor allowed = sum_abs * bound + 1e-300;
    const bool ok = got.numel() == 0 || (diff <= allowed).all().item<bool>();
    expect(ok, what + ": within " + std::to_string(bound) + " * sum|x| of Gloo's (max diff " +
                   (got.numel() ? std::to_string(diff.max().item<double>()) : std::string("-")) + ")");
  }
  at::Tensor flat = got.reshape({1, -1}).contiguous();
  at::Tensor all = shm.all_gather_cat(flat);
  bool same = true;
  for (int r = 1; r < shm.size(); ++r) same = same && bit_equal(all[r], all[0]);
  expect(same, what + ": every rank holds the same bits");
}

int equal(Comm& shm, Comm& gloo) {
  const int n = shm.size(), rank = shm.rank();
  expect(shm.cpu_transport() == "shared memory", "the job's group runs over shared memory: " + shm.cpu_transport());
  expect(gloo.cpu_transport().rfind("gloo (", 0) == 0 &&
             gloo.cpu_transport().find("ACC_SHM_COLLECTIVES=0") != std::string::npos,
         "the opted-out group runs over Gloo and says why: " + gloo.cpu_transport());
  const std::vector<at::ScalarType> dtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                              at::kLong,  at::kInt,    at::kChar, at::kByte};
  const std::vector<int64_t> sizes = {0, 1, 7, 1031, 300001};
  int salt = 0;
  for (auto dt : dtypes) {
    std::vector<int64_t> these = sizes;
    if (dt == at::kFloat || dt == at::kDouble) these.push_back(2000001);  // past the default 4 MiB step buffers
    for (int64_t size : these) {
      const std::string tag = std::string(c10::toString(dt)) + "[" + std::to_string(size) + "]";
      const at::Tensor x = input(dt, size, rank, ++salt);
      at::Tensor sum_abs = x.to(at::kDouble).abs();
      gloo.all_reduce(sum_abs, acc::core::ReduceOp::Sum);
      // all_reduce: sum, mean, max
      for (auto op : {acc::core::ReduceOp::Sum, acc::core::ReduceOp::Mean, acc::core::ReduceOp::Max}) {
        at::Tensor a = x.clone(), b = x.clone();
        shm.all_reduce(a, op);
        gloo.all_reduce(b, op);
        const char* name = op == acc::core::ReduceOp::Sum ? "sum" : op == acc::core::ReduceOp::Mean ? "mean" : "max";
        compare(shm, a, b, op == acc::core::ReduceOp::Max ? sum_abs * 0 : sum_abs,
                std::string("all_reduce ") + name + " " + tag);
      }
      // the DDP path (asynchronous sum)
      {
        at::Tensor a = x.clone(), b = x.clone();
        auto wa = shm.all_reduce_sum_async(a);
        auto wb = gloo.all_reduce_sum_async(b);
        wa->wait();
        wb->wait();
        compare(shm, a, b, sum_abs, "all_reduce_sum_async " + tag);
      }
      // reduce-scatter (ZeRO, FSDP): n slices of `size` elements
      {
        const at::Tensor in = input(dt, size * n, rank, ++salt);
        at::Tensor in_a = in.clone(), in_b = in.clone();
        at::Tensor out_a = at::empty({size}, in.options()), out_b = at::empty({size}, in.options());
        shm.reduce_scatter_sum_async(out_a, in_a)->wait();
        gloo.reduce_scatter_sum_async(out_b, in_b)->wait();
        at::Tensor sa = in.to(at::kDouble).abs();
        gloo.all_reduce(sa, acc::core::ReduceOp::Sum);
        const at::Tensor mine = sa.narrow(0, rank * size, size);
        if (n == 2 || !at::isFloatingType(dt))
          expect(bit_equal(out_a, out_b), "reduce_scatter " + tag + ": bit-equal to Gloo's");
        else
          expect(size == 0 || ((out_a.to(at::kDouble) - out_b.to(at::kDouble)).abs() <=
                               mine * (2.0 * (n - 1) * eps(dt)) + 1e-300)
                                  .all()
                                  .item<bool>(),
                 "reduce_scatter " + tag + ": within (n-1) roundings of Gloo's");
      }
      // all-gather into one tensor (ZeRO, FSDP) and all_gather_cat (lists, uneven dim 0)
      {
        at::Tensor a = at::full({size * n}, 7, x.options()), b = a.clone();
        at::Tensor in = x.clone();
        shm.all_gather_into(a, in);
        gloo.all_gather_into(b, in);
        expect(bit_equal(a, b), "all_gather_into " + tag);
        const at::Tensor rows = x.narrow(0, 0, std::min<int64_t>(size, rank + 1));
        expect(bit_equal(shm.all_gather_cat(rows), gloo.all_gather_cat(rows)), "all_gather_cat " + tag);
      }
      // broadcast from every root
      for (int root = 0; root < n; ++root) {
        at::Tensor a = x.clone(), b = x.clone();
        shm.broadcast(a, root);
        gloo.broadcast(b, root);
        expect(bit_equal(a, b), "broadcast from " + std::to_string(root) + " " + tag);
      }
    }
  }
  // A tensor that is not contiguous (a transpose): the result lands in it, strides kept.
  {
    at::Tensor base = input(at::kFloat, 64 * 33, rank, 99).view({64, 33});
    at::Tensor a = base.clone().t(), b = base.clone().t();
    shm.all_reduce(a, acc::core::ReduceOp::Sum);
    gloo.all_reduce(b, acc::core::ReduceOp::Sum);
    expect(!a.is_contiguous() && (n == 2 ? bit_equal(a, b) : at::allclose(a, b, 1e-5, 1e-4)), "a transposed tensor");
  }
  shm.barrier();
  return finish();
}

int die(Comm& shm) {
  if (shm.rank() == 1)
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ::raise(SIGKILL);
    }).detach();
  at::Tensor t = at::ones({16 << 20}, at::kFloat);
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 200; ++i) shm.all_reduce(t, acc::core::ReduceOp::Sum);
  } catch (const acc::core::DistributedError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("CAUGHT after %.2f s: %s\n", s, e.what());
    return 0;
  }
  std::printf("rank %d: the loop ended without an error\n", shm.rank());
  return 3;
}

int transport(Comm& comm) {
  if (comm.rank() == 0) std::printf("TRANSPORT %s\n", comm.cpu_transport().c_str());
  std::fflush(stdout);
  const int n = comm.size();
  at::Tensor t = at::full({int64_t{2} << 20}, comm.rank() + 1, at::kFloat);
  comm.all_reduce(t, acc::core::ReduceOp::Sum);
  expect(at::all(t == n * (n + 1) / 2).item<bool>(), "an 8 MiB all-reduce over " + comm.cpu_transport());
  comm.barrier();
  return finish();
}

// The two-level all-reduce against the exact result: every rank makes every rank's inputs (seeded by rank).
int hier(Comm& comm) {
  const int n = comm.size(), rank = comm.rank();
  expect(comm.cpu_transport().rfind("hierarchical", 0) == 0,
         "the job's all-reduce is hierarchical: " + comm.cpu_transport());
  auto& pg = comm.process_group();
  int salt = 0;
  for (auto dt : {at::kFloat, at::kBFloat16, at::kLong}) {
    std::vector<int64_t> sizes = {0, 1, 7, 1031, 300001};
    if (dt == at::kFloat) sizes.push_back(2000001);  // past the default 4 MiB step buffers
    for (int64_t size : sizes) {
      ++salt;
      std::vector<at::Tensor> xs;
      for (int r = 0; r < n; ++r) xs.push_back(input(dt, size, r, salt));
      const at::Tensor all = at::stack(xs).to(dt == at::kLong ? at::kLong : at::kDouble);
      const at::Tensor sum = all.sum(0), sum_abs = all.abs().sum(0).to(at::kDouble);
      const std::string tag = std::string(c10::toString(dt)) + "[" + std::to_string(size) + "]";
      for (auto op : {c10d::ReduceOp::SUM, c10d::ReduceOp::AVG, c10d::ReduceOp::MAX, c10d::ReduceOp::MIN}) {
        at::Tensor want;
        double bound = 0;  // per element, times sum|x|, plus the mean's own rounding
        switch (op) {
          case c10d::ReduceOp::SUM:
            want = sum;
            bound = (n - 1) * eps(dt);
            break;
          case c10d::ReduceOp::AVG:
            want = dt == at::kLong ? at::div(sum, n, "trunc") : sum / n;
            bound = (n - 1) * eps(dt) / n;
            break;
          case c10d::ReduceOp::MAX: want = std::get<0>(all.max(0)); break;
          default: want = std::get<0>(all.min(0)); break;
        }
        std::vector<at::Tensor> v{xs[rank].clone()};
        c10d::AllreduceOptions o;
        o.reduceOp = c10d::ReduceOp(op);
        pg->allreduce(v, o)->wait();
        const at::Tensor got = v[0];
        const std::string what = "all_reduce " + std::to_string(static_cast<int>(op)) + " " + tag;
        if (dt == at::kLong || bound == 0) {
          expect(at::equal(got, want.to(dt)), what + ": exact");
        } else {
          const at::Tensor diff = (got.to(at::kDouble) - want).abs();
          const at::Tensor allowed = sum_abs * bound + want.abs() * (op == c10d::ReduceOp::AVG ? eps(dt) : 0) + 1e-300;
          expect(size == 0 || (diff <= allowed).all().item<bool>(),
                 what + ": within (n-1) roundings of the float64 result (max diff " +
                     (size ? std::to_string(diff.max().item<double>()) : std::string("-")) + ")");
        }
        at::Tensor gathered = comm.all_gather_cat(got.reshape({1, -1}).contiguous());
        bool same = true;
        for (int r = 1; r < n; ++r) same = same && bit_equal(gathered[r], gathered[0]);
        expect(same, what + ": every rank holds the same bits");
      }
    }
  }
  {
    std::vector<at::Tensor> xs;
    for (int r = 0; r < n; ++r) xs.push_back(input(at::kFloat, 64 * 33, r, 99).view({64, 33}));
    at::Tensor a = xs[rank].clone().t();
    comm.all_reduce(a, acc::core::ReduceOp::Sum);
    expect(!a.is_contiguous() && at::allclose(a, at::stack(xs).sum(0).t(), 1e-5, 1e-4), "a transposed tensor");
  }
  comm.barrier();
  return finish();
}

double time_all_reduce(Comm& c, int64_t numel, int iters) {
  at::Tensor t = at::ones({numel}, at::kFloat);
  c.all_reduce(t, acc::core::ReduceOp::Sum);
  c.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) c.all_reduce_sum_async(t)->wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
}

int bench(Comm& shm, Comm& gloo) {
  if (shm.rank() == 0) std::printf("%12s %14s %14s %8s\n", "bytes", "gloo us", "shm us", "speedup");
  for (int64_t bytes : {int64_t{4} << 10, int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20, int64_t{25} << 20,
                        int64_t{100} << 20}) {
    const int iters = bytes >= (25 << 20) ? 10 : 50;
    const double g = time_all_reduce(gloo, bytes / 4, iters), s = time_all_reduce(shm, bytes / 4, iters);
    if (shm.rank() == 0)
      std::printf("%12lld %14.1f %14.1f %8.2f\n", static_cast<long long>(bytes), g * 1e6, s * 1e6, g / s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mp_shm equal|die|transport|bench|hier TIMEOUT_S\n");
    return 2;
  }
  const std::string mode = argv[1];
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(std::atof(argv[2]) * 1000));
  try {
    at::set_num_threads(1);
    const auto state = acc::core::ProcessState::from_environment(acc::config::current_environment());
    auto shm = Comm::connect(state, timeout);
    if (mode == "die") return die(*shm);
    if (mode == "hier") return hier(*shm);
    if (mode == "transport") return transport(*shm);
    std::vector<int> all;
    for (int r = 0; r < shm->size(); ++r) all.push_back(r);
    ::setenv("ACC_SHM_COLLECTIVES", "0", 1);
    auto gloo = shm->subgroup(all, "gloo");
    if (mode == "equal") return equal(*shm, *gloo);
    if (mode == "bench") return bench(*shm, *gloo);
    std::fprintf(stderr, "mp_shm: unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mp_shm: %s\n", e.what());
    return 1;
  }
}
