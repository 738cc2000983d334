// The data loader itself, rank by rank: what each process of a job would get (Accelerate's expected
// index lists), end_of_dataloader, and the remainder gather_for_metrics keeps. Sharded loaders need no
// process group unless they dispatch or shuffle, so every rank can be simulated in one process.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <numeric>

#include "data/dataset.hpp"
#include "util/errors.hpp"

namespace acc::core {
namespace {

using Batches = std::vector<std::vector<int64_t>>;

std::shared_ptr<Dataset> range_dataset(int64_t n) {
  return make_tensor_dataset(at::arange(n, at::kLong), at::Tensor());
}

// The stream 0, 1, ..., n-1; counts the passes it was asked for.
std::shared_ptr<Dataset> range_stream(int64_t n, std::vector<int64_t>* epochs = nullptr) {
  auto pos = std::make_shared<int64_t>(0);
  return make_iterable_dataset(
      [pos, epochs](int64_t epoch) {
        *pos = 0;
        if (epochs) epochs->push_back(epoch);
      },
      [pos, n](Sample& s) {
        if (*pos >= n) return false;
        s = pair_sample(at::scalar_tensor(static_cast<double>((*pos)++), at::kLong), at::Tensor());
        return true;
      });
}

struct Pass {
  Batches batches;
  std::vector<bool> ends;       // end_of_dataloader after each batch
  int64_t last_remainder = -1;  // remainder() on the last batch
};

Pass run(DataLoader& dl) {
  Pass p;
  Sample s;
  while (dl.next(s)) {
    at::Tensor v = s.at("input").contiguous();
    p.batches.emplace_back(v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel());
    p.ends.push_back(dl.end_of_dataloader());
    p.last_remainder = dl.remainder();
  }
  EXPECT_FALSE(dl.end_of_dataloader());
  return p;
}

std::shared_ptr<DataLoader> prepared(std::shared_ptr<DataLoader> dl, int procs, int rank, bool split = false,
                                     bool even = true, std::optional<bool> dispatch = std::nullopt) {
  LoaderPrepare how;
  how.spec.num_processes = procs;
  how.spec.process_index = rank;
  how.spec.split_batches = split;
  how.spec.even_batches = even;
  how.dispatch_batches = dispatch;
  dl->prepare(how, c10::Device(c10::kCPU), nullptr);
  return dl;
}

std::vector<Pass> all_ranks(const std::function<std::shared_ptr<DataLoader>()>& make, int procs, bool split = false,
                            bool even = true, std::optional<bool> dispatch = std::nullopt) {
  std::vector<Pass> out;
  for (int r = 0; r < procs; ++r) out.push_back(run(*prepared(make(), procs, r, split, even, dispatch)));
  return out;
}

TEST(Loader, ShardsAsAccelerate) {
  // 21 samples, batch 3, two processes: rank 1 ends with [0, 1, 2]; 3 real samples in the last round.
  auto p =
      all_ranks([] { return std::make_shared<DataLoader>(range_dataset(21), LoaderOptions{3, false, {}, false}); }, 2);
  EXPECT_EQ(p[0].batches, (Batches{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(p[1].batches, (Batches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {0, 1, 2}}));
  for (auto& r : p) {
    EXPECT_EQ(r.ends, (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(r.last_remainder, 3);
  }
  // split_batches, batch 4 over 22: the last batch [20, 21] is completed with [0, 1].
  p = all_ranks([] { return std::make_shared<DataLoader>(range_dataset(22), LoaderOptions{4, false, {}, false}); }, 2,
                true);
  EXPECT_EQ(p[1].batches.back(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p[0].last_remainder, 2);
  // even_batches off: rank 1 gets three batches, nothing is padded.
  p = all_ranks([] { return std::make_shared<DataLoader>(range_dataset(21), LoaderOptions{3, false, {}, false}); }, 2,
                false, false);
  EXPECT_EQ(p[0].batches.size(), 4u);
  EXPECT_EQ(p[1].batches.size(), 3u);
  EXPECT_EQ(p[0].last_remainder, 0);
  // A full last round: nothing to drop.
  p = all_ranks([] { return std::make_shared<DataLoader>(range_dataset(24), LoaderOptions{3, false, {}, false}); }, 2);
  EXPECT_EQ(p[1].batches.back(), (std::vector<int64_t>{21, 22, 23}));
  EXPECT_EQ(p[1].last_remainder, 0);
}

TEST(Loader, ExplicitBatchesOfVaryingSize) {
  Batches five = {{0, 1, 2}, {3, 4}, {5, 6, 7, 8}, {9, 10, 11}, {12, 13}};
  auto p = all_ranks([&] { return std::make_shared<DataLoader>(range_dataset(14), five, false); }, 2);
  EXPECT_EQ(p[0].batches, (Batches{{0, 1, 2}, {5, 6, 7, 8}, {12, 13}}));
  EXPECT_EQ(p[1].batches, (Batches{{3, 4}, {9, 10, 11}, {0, 1, 2}}));
  EXPECT_EQ(p[0].last_remainder, 2);  // [12, 13] is real, the repeated [0, 1, 2] is not
  p = all_ranks([&] { return std::make_shared<DataLoader>(range_dataset(14), five, false); }, 2, false, false);
  EXPECT_EQ(p[1].batches, (Batches{{3, 4}, {9, 10, 11}}));
  EXPECT_THROW(prepared(std::make_shared<DataLoader>(range_dataset(14), five, false), 2, 0, true),
               std::invalid_argument);
  EXPECT_THROW(prepared(std::make_shared<DataLoader>(range_dataset(14), five, false), 1, 0, false, true, true),
               std::invalid_argument);
}

TEST(Loader, IterableDatasetShard) {
  // 10 elements, batch 4, two processes, not dispatched: global batches of 8; the last, [8, 9], is
  // completed with [0..5]; rank 0 takes [8, 9, 0, 1], rank 1 [2, 3, 4, 5].
  auto make = [] { return std::make_shared<DataLoader>(range_stream(10), LoaderOptions{4, false, {}, false}); };
  auto p = all_ranks(make, 2, false, true, false);
  EXPECT_EQ(p[0].batches, (Batches{{0, 1, 2, 3}, {8, 9, 0, 1}}));
  EXPECT_EQ(p[1].batches, (Batches{{4, 5, 6, 7}, {2, 3, 4, 5}}));
  for (auto& r : p) {
    EXPECT_EQ(r.ends, (std::vector<bool>{false, true}));
    EXPECT_EQ(r.last_remainder, 2);
  }
  // split_batches: global batches of 4, two each.
  p = all_ranks(make, 2, true, true, false);
  EXPECT_EQ(p[0].batches, (Batches{{0, 1}, {4, 5}, {8, 9}}));
  EXPECT_EQ(p[1].batches, (Batches{{2, 3}, {6, 7}, {0, 1}}));
  EXPECT_EQ(p[0].last_remainder, 2);
  // drop_last: only complete global batches.
  p = all_ranks([] { return std::make_shared<DataLoader>(range_stream(10), LoaderOptions{4, false, {}, true}); }, 2,
                false, true, false);
  EXPECT_EQ(p[0].batches, (Batches{{0, 1, 2, 3}}));
  EXPECT_EQ(p[1].batches, (Batches{{4, 5, 6, 7}}));
  // One process: plain batches, the last short.
  std::vector<int64_t> epochs;
  DataLoader one(range_stream(10, &epochs), LoaderOptions{4, false, {}, false});
  EXPECT_EQ(run(one).batches, (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  one.set_epoch(4);
  run(one);
  EXPECT_EQ(epochs, (std::vector<int64_t>{0, 4}));
  EXPECT_THROW(one.length(), UnsupportedError);
}

TEST(Loader, SkipFirstBatchesKeepsThePlanAndTheEpoch) {
  auto dl = prepared(std::make_shared<DataLoader>(range_dataset(21), LoaderOptions{3, false, {}, false}), 2, 1);
  dl->set_epoch(3);
  auto skip = dl->skip_first_batches(2);
  EXPECT_TRUE(skip->prepared());
  EXPECT_EQ(skip->epoch(), 3);
  EXPECT_EQ(skip->length(), 2);
  Pass p = run(*skip);
  EXPECT_EQ(p.batches, (Batches{{15, 16, 17}, {0, 1, 2}}));
  EXPECT_EQ(p.last_remainder, 3);
  EXPECT_EQ(skip->epoch(), 4);
  // An iterable shard reads and drops the skipped batches.
  auto it = prepared(std::make_shared<DataLoader>(range_stream(10), LoaderOptions{4, false, {}, false}), 2, 1, false,
                     true, false);
  EXPECT_EQ(run(*it->skip_first_batches(1)).batches, (Batches{{2, 3, 4, 5}}));
}

TEST(Loader, DispatcherWithOneProcess) {
  // Dispatching needs no group with one process: steps of one batch, the short last one as it is.
  auto dl = prepared(std::make_shared<DataLoader>(range_dataset(10), LoaderOptions{4, false, {}, false}), 1, 0, false,
                     true, true);
  EXPECT_TRUE(dl->dispatches());
  Pass p = run(*dl);
  EXPECT_EQ(p.batches, (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(p.ends, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(dl->length(), 3);
  // Several processes without a group: refused when it must talk.
  EXPECT_THROW(prepared(std::make_shared<DataLoader>(range_dataset(10), LoaderOptions{4, false, {}, false}), 2, 0,
                        false, true, true),
               StateError);
}

}  // namespace
}  // namespace acc::core
