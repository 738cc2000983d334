// The shared-memory collectives (src/runtime/shm_backend.cpp) inside one process: which groups get them, and what the
// mp tests cannot reach through Comm (AVG and MIN, a peer that never comes, ranks in different collectives, bad
// settings). Two "ranks" are two threads over one HashStore; the segment is the same as between processes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/shm_backend.hpp"

using acc::core::can_share_memory;
using acc::core::make_shm_backend;
using namespace std::chrono_literals;

namespace {

std::set<std::string> segments() {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("acc-shm-", 0) == 0) out.insert(e.path().filename().string());
  return out;
}

// Runs body(rank, backend) on `size` threads, each with its own backend of one group; returns each one's error.
std::vector<std::string> group(int size, std::chrono::milliseconds timeout,
                               const std::function<void(int, c10::intrusive_ptr<c10d::Backend>&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < size; ++r)
    ranks.push_back(std::async(std::launch::async, [=]() -> std::string {
      try {
        std::string why;
        auto b = make_shm_backend(store, r, size, {}, timeout, &why);
        if (!b) return "no backend: " + why;
        body(r, b);
        return "";
      } catch (const std::exception& e) {
        return e.what();
      }
    }));
  std::vector<std::string> errors;
  for (auto& f : ranks) errors.push_back(f.get());
  return errors;
}

}  // namespace

TEST(ShmChoice, SameMachineOnly) {
  std::string why;
  const std::string a = acc::core::machine_identity();
  EXPECT_EQ(std::count(a.begin(), a.end(), '|'), 3) << a;
  EXPECT_EQ(a, acc::core::machine_identity());
  EXPECT_TRUE(can_share_memory({a, a, a}, &why));
  EXPECT_TRUE(can_share_memory({a}, &why));
  EXPECT_FALSE(can_share_memory({a, "off", a}, &why));
  EXPECT_EQ(why, "rank 1 set ACC_SHM_COLLECTIVES=0");
  EXPECT_FALSE(can_share_memory({"hostA|boot|m|p", "hostA|boot|m|p", "hostB|boot2|m|p"}, &why));
  EXPECT_EQ(why, "rank 2 is not on rank 0's machine (hostB vs hostA)");
  // the same host name after a reboot, or in another mount namespace (its own /dev/shm): not the same machine
  EXPECT_FALSE(can_share_memory({"h|boot1|m|p", "h|boot2|m|p"}, &why));
  EXPECT_FALSE(can_share_memory({"h|b|m1|p", "h|b|m2|p"}, &why));
  EXPECT_FALSE(can_share_memory({"h|b|m|p1", "h|b|m|p2"}, &why));
}

// ACC_SHM_MACHINE tells apart processes that the kernel's view puts on one machine (two "machines" of a test).
TEST(ShmChoice, MachineLabel) {
  const char* keep = std::getenv("ACC_SHM_MACHINE");
  const std::string saved = keep ? keep : "";
  ::unsetenv("ACC_SHM_MACHINE");
  const std::string plain = acc::core::machine_identity();
  ::setenv("ACC_SHM_MACHINE", "", 1);
  EXPECT_EQ(acc::core::machine_identity(), plain);  // empty: no label
  ::setenv("ACC_SHM_MACHINE", "m1", 1);
  const std::string m1 = acc::core::machine_identity();
  EXPECT_EQ(m1, plain + "|m1");
  std::string why;
  EXPECT_FALSE(can_share_memory({plain, m1}, &why));
  EXPECT_TRUE(can_share_memory({m1, m1}, &why));
  if (keep) ::setenv("ACC_SHM_MACHINE", saved.c_str(), 1);
  else ::unsetenv("ACC_SHM_MACHINE");
}

TEST(ShmChoice, Switch) {
  const char* keep = std::getenv("ACC_SHM_COLLECTIVES");
  for (const char* on : {"", "1", "true", "ON", "yes"}) {
    ::setenv("ACC_SHM_COLLECTIVES", on, 1);
    EXPECT_TRUE(acc::core::shm_collectives_enabled()) << on;
  }
  for (const char* off : {"0", "false", "Off", "no"}) {
    ::setenv("ACC_SHM_COLLECTIVES", off, 1);
    EXPECT_FALSE(acc::core::shm_collectives_enabled()) << off;
  }
  ::setenv("ACC_SHM_COLLECTIVES", "maybe", 1);
  try {
    acc::core::shm_collectives_enabled();
    ADD_FAILURE() << "ACC_SHM_COLLECTIVES=maybe accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ACC_SHM_COLLECTIVES='maybe'"), std::string::npos) << e.what();
  }
  if (keep) ::setenv("ACC_SHM_COLLECTIVES", keep, 1);
  else ::unsetenv("ACC_SHM_COLLECTIVES");
}

// AVG and MIN (Comm asks for SUM and MAX only), through several steps of small buffers, on 3 ranks.
TEST(ShmBackend, AvgAndMin) {
  ::setenv("ACC_SHM_SLOT_BYTES", "256", 1);
  const auto before = segments();
  auto errors = group(3, 10s, [](int r, c10::intrusive_ptr<c10d::Backend>& b) {
    const int64_t n = 1001;
    at::Tensor x = at::arange(n, at::kFloat) * (r + 1);  // mean: arange * 2; min: arange
    std::vector<at::Tensor> v{x.clone()};
    c10d::AllreduceOptions avg;
    avg.reduceOp = c10d::ReduceOp::AVG;
    b->allreduce(v, avg)->wait();
    if (!at::equal(v[0], at::arange(n, at::kFloat) * 2)) throw std::runtime_error("AVG differs");
    std::vector<at::Tensor> w{x.clone()};
    c10d::AllreduceOptions mn;
    mn.reduceOp = c10d::ReduceOp::MIN;
    b->allreduce(w, mn)->wait();
    if (!at::equal(w[0], at::arange(n, at::kFloat))) throw std::runtime_error("MIN differs");
    // integer AVG truncates toward zero, as torch's div(rounding_mode='trunc')
    std::vector<at::Tensor> i{at::full({5}, r == 0 ? -4 : 0, at::kLong)};
    b->allreduce(i, avg)->wait();
    if (!at::equal(i[0], at::full({5}, -1, at::kLong))) throw std::runtime_error("integer AVG differs");
    b->barrier()->wait();
  });
  ::unsetenv("ACC_SHM_SLOT_BYTES");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_EQ(segments(), before) << "a segment was left in /dev/shm";
}

// Issuing a collective posts this rank's part and returns: the peers' parts are read when the work is waited for
// (or when a later collective needs the buffers). Many collectives in flight at once, over many steps of small
// buffers, waited for in reverse order, give what each gives alone.
TEST(ShmBackend, CollectivesInFlight) {
  ::setenv("ACC_SHM_SLOT_BYTES", "256", 1);
  const auto before = segments();
  std::vector<double> issue_s(2), wait_s(2);
  auto errors = group(2, 10s, [&](int r, c10::intrusive_ptr<c10d::Backend>& b) {
    // A late peer: rank 0's issue does not wait for it, its wait does.
    if (r == 1) std::this_thread::sleep_for(300ms);
    at::Tensor first = at::full({3}, float(r + 1));
    std::vector<at::Tensor> v0{first};
    const auto t0 = std::chrono::steady_clock::now();
    auto w0 = b->allreduce(v0);
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t n = 1001;
    std::vector<at::Tensor> sum{at::arange(n, at::kFloat) * (r + 1)};
    auto w1 = b->allreduce(sum);
    at::Tensor rs_in = at::arange(2 * n, at::kDouble) + r, rs_out = at::empty({n}, at::kDouble);
    auto w2 = b->_reduce_scatter_base(rs_out, rs_in);
    at::Tensor ag_in = at::full({n}, int64_t(r + 7)), ag_out = at::empty({2 * n}, at::kLong);
    auto w3 = b->_allgather_base(ag_out, ag_in);
    // a non-contiguous tensor: the result is written back when the work completes
    at::Tensor bc = (r == 0 ? at::arange(2 * n, at::kFloat) : at::zeros({2 * n}, at::kFloat)).view({n, 2}).t();
    std::vector<at::Tensor> v4{bc};
    c10d::BroadcastOptions root;
    auto w4 = b->broadcast(v4, root);
    w4->wait();
    w3->wait();
    w2->wait();
    w1->wait();
    w0->wait();
    const auto t2 = std::chrono::steady_clock::now();
    issue_s[r] = std::chrono::duration<double>(t1 - t0).count();
    wait_s[r] = std::chrono::duration<double>(t2 - t0).count();
    if (!at::equal(first, at::full({3}, 3.0f))) throw std::runtime_error("first all_reduce differs");
    if (!at::equal(sum[0], at::arange(n, at::kFloat) * 3)) throw std::runtime_error("all_reduce differs");
    if (!at::equal(rs_out, (at::arange(n, at::kDouble) + r * n) * 2 + 1))
      throw std::runtime_error("reduce_scatter differs");
    at::Tensor gathered = at::cat({at::full({n}, int64_t(7)), at::full({n}, int64_t(8))});
    if (!at::equal(ag_out, gathered)) throw std::runtime_error("all_gather differs");
    if (!at::equal(bc, at::arange(2 * n, at::kFloat).view({n, 2}).t())) throw std::runtime_error("broadcast differs");
  });
  ::unsetenv("ACC_SHM_SLOT_BYTES");
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_LT(issue_s[0], 0.1) << "issuing waited for the late peer";
  EXPECT_GT(wait_s[0], 0.2) << "waiting did not wait for the late peer";
  EXPECT_EQ(segments(), before) << "a segment was left in /dev/shm";
}

// ACC_SHM_SPLIT=0: issuing a collective on the caller's thread completes it (it waits for the late peer).
TEST(ShmBackend, SplitOffCompletesAtIssue) {
  ::setenv("ACC_SHM_SPLIT", "0", 1);
  double issue_s = 0;
  bool done = false;
  auto errors = group(2, 10s, [&](int r, c10::intrusive_ptr<c10d::Backend>& b) {
    if (r == 1) std::this_thread::sleep_for(300ms);
    std::vector<at::Tensor> v{at::full({3}, float(r + 1))};
    const auto t0 = std::chrono::steady_clock::now();
    auto w = b->allreduce(v);
    if (r == 0) {
      issue_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      done = w->isCompleted();
    }
    w->wait();
    if (!at::equal(v[0], at::full({3}, 3.0f))) throw std::runtime_error("all_reduce differs");
  });
  ::unsetenv("ACC_SHM_SPLIT");
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_GT(issue_s, 0.2);
  EXPECT_TRUE(done);
}

// A peer that never comes: the waiting rank fails at the timeout naming it.
TEST(ShmBackend, TimeoutNamesThePeer) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = group(2, 500ms, [](int r, c10::intrusive_ptr<c10d::Backend>& b) {
    if (r == 1) {
      std::this_thread::sleep_for(1500ms);
      return;
    }
    std::vector<at::Tensor> v{at::ones({10})};
    b->allreduce(v)->wait();
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(errors[0].find("waiting for rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("timed out after"), std::string::npos) << errors[0];
  EXPECT_LT(s, 5.0);
}

// Ranks in different collectives fail naming both, instead of mixing their data; the group refuses more work.
TEST(ShmBackend, DifferentCollectivesFail) {
  auto errors = group(2, 5s, [](int r, c10::intrusive_ptr<c10d::Backend>& b) {
    std::vector<at::Tensor> v{at::ones({r == 0 ? 10 : 12})};
    try {
      if (r == 0) b->allreduce(v)->wait();
      else b->broadcast(v)->wait();
    } catch (const std::exception& e) {
      std::vector<at::Tensor> again{at::ones({3})};
      try {
        b->allreduce(again)->wait();
      } catch (const std::exception& e2) {
        throw std::runtime_error(std::string(e.what()) + " / then: " + e2.what());
      }
      throw;
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(errors[r].find("is in another collective") != std::string::npos ||
                errors[r].find("gave up the collective") != std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("stopped after an earlier failure"), std::string::npos) << errors[r];
  }
  EXPECT_TRUE(errors[0].find("all_reduce of 10 Float") != std::string::npos ||
              errors[1].find("all_reduce of 10 Float") != std::string::npos)
      << errors[0] << " | " << errors[1];
}

TEST(ShmBackend, BadSlotSizeIsNamed) {
  // Out of range, and (issue 36) a number with anything around it: atoll read "65536xyz" as 65536.
  for (const char* bad :
       {"12", "65536xyz", "0x10000", " 65536", "+65536", "-64", "65536 ", "1e6", "99999999999999999999"}) {
    ::setenv("ACC_SHM_SLOT_BYTES", bad, 1);
    auto errors = group(1, 1s, [](int, c10::intrusive_ptr<c10d::Backend>&) {});
    ::unsetenv("ACC_SHM_SLOT_BYTES");
    EXPECT_NE(errors[0].find("ACC_SHM_SLOT_BYTES='" + std::string(bad) + "'"), std::string::npos)
        << bad << ": " << errors[0];
  }
  ::setenv("ACC_SHM_SLOT_BYTES", "65536", 1);
  EXPECT_EQ(acc::core::shm_slot_bytes(2, uint64_t{1} << 40), 65536u);
  ::unsetenv("ACC_SHM_SLOT_BYTES");
}

// Docker's default /dev/shm is 64 MiB: a group's segment takes at most half of what /dev/shm has free (room for the
// job's other groups and whatever else uses it, such as DataLoader workers), and 64 MiB where more is free; the step
// buffers are 4 MiB at most, 64 KiB at least. It was 64 MiB and a page for every group of 8 or more processes, so
// those always fell back to Gloo there.
TEST(ShmLayout, FitsTheFreeSpace) {
  using acc::core::shm_segment_bytes;
  using acc::core::shm_slot_bytes;
  for (int n : {1, 2, 3, 7, 8, 9, 16, 64, 128}) {
    const size_t docker = shm_slot_bytes(n, uint64_t{64} << 20), big = shm_slot_bytes(n, uint64_t{1} << 40);
    EXPECT_LE(shm_segment_bytes(n, docker), size_t{32} << 20) << n << " processes, 64 MiB free";
    EXPECT_LE(shm_segment_bytes(n, big), size_t{64} << 20) << n << " processes, 1 TiB free";
    for (size_t slot : {docker, big}) {
      EXPECT_EQ(slot % 64, 0u) << n;
      EXPECT_GE(slot, size_t{64} << 10) << n;
      EXPECT_LE(slot, size_t{4} << 20) << n;
    }
    if (n <= 7) {
      EXPECT_EQ(big, size_t{4} << 20) << n;
    }
  }
  EXPECT_GE(shm_slot_bytes(8, uint64_t{64} << 20), size_t{1} << 20);
}
