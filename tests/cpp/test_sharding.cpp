// Batch sharding against Accelerate's own expected index lists (tests/test_data_loader.py), and the
// exactness every mode must keep for gather_for_metrics: gathered in rank order with the padded
// duplicates of the last step dropped, each sample is seen exactly once.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "data/sharding.hpp"

namespace acc::core {
namespace {

using Shards = std::vector<std::vector<Batch>>;

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// BatchSampler(range(n), batch_size, drop_last) sharded over `procs` processes.
Shards shard_all(int64_t n, int64_t batch_size, bool drop_last, bool split = false, bool even = true, int procs = 2) {
  auto batches = make_batches(range(n), batch_size, drop_last);
  Shards out;
  for (int p = 0; p < procs; ++p)
    out.push_back(shard_batches(batches, ShardSpec{procs, p, split, even, drop_last, batch_size}));
  return out;
}

// A batch sampler with no batch size (Accelerate's batch_size=None): a plain list of batches.
Shards shard_varying(const std::vector<Batch>& batches, int procs, bool even, bool drop_last = false) {
  Shards out;
  for (int p = 0; p < procs; ++p) out.push_back(shard_batches(batches, ShardSpec{procs, p, false, even, drop_last, 0}));
  return out;
}

// test_batch_sampler_shards_with_no_splits
TEST(Sharding, NoSplits) {
  Shards round = {{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                  {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}};
  EXPECT_EQ(shard_all(24, 3, false), round);
  EXPECT_EQ(shard_all(24, 3, true), round);
  EXPECT_EQ(shard_all(21, 3, false), (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                                             {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {0, 1, 2}}}));
  Shards dropped = {{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}};
  EXPECT_EQ(shard_all(21, 3, true), dropped);
  EXPECT_EQ(shard_all(22, 3, false), (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                                             {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}}));
  EXPECT_EQ(shard_all(22, 3, true), dropped);
  EXPECT_EQ(shard_all(20, 3, false), (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 0}},
                                             {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {1, 2, 3}}}));
  EXPECT_EQ(shard_all(20, 3, true), dropped);
  EXPECT_EQ(shard_all(2, 3, false), (Shards{{{0, 1, 0}}, {{1, 0, 1}}}));
  EXPECT_EQ(shard_all(2, 3, true), (Shards{{}, {}}));
}

// test_batch_sampler_shards_with_splits
TEST(Sharding, Splits) {
  Shards round = {{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
                  {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}}};
  EXPECT_EQ(shard_all(24, 4, false, true), round);
  EXPECT_EQ(shard_all(24, 4, true, true), round);
  EXPECT_EQ(shard_all(22, 4, false, true), (Shards{{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
                                                   {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {0, 1}}}));
  Shards dropped = {{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}}, {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}};
  EXPECT_EQ(shard_all(22, 4, true, true), dropped);
  EXPECT_EQ(shard_all(21, 4, false, true), (Shards{{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 0}},
                                                   {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {1, 2}}}));
  EXPECT_EQ(shard_all(21, 4, true, true), dropped);
  EXPECT_EQ(shard_all(2, 4, false, true), (Shards{{{0, 1}}, {{0, 1}}}));
  EXPECT_EQ(shard_all(2, 4, true, true), (Shards{{}, {}}));
}

// test_batch_sampler_shards_with_no_splits_no_even
TEST(Sharding, NoSplitsNoEven) {
  Shards round = {{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                  {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}};
  EXPECT_EQ(shard_all(24, 3, false, false, false), round);
  EXPECT_EQ(shard_all(24, 3, true, false, false), round);
  EXPECT_EQ(shard_all(21, 3, false, false, false),
            (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}}));
  Shards dropped = {{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}};
  EXPECT_EQ(shard_all(21, 3, true, false, false), dropped);
  EXPECT_EQ(shard_all(22, 3, false, false, false),
            (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21}}}));
  EXPECT_EQ(shard_all(22, 3, true, false, false), dropped);
  EXPECT_EQ(shard_all(20, 3, false, false, false),
            (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}}));
  EXPECT_EQ(shard_all(20, 3, true, false, false), dropped);
  EXPECT_EQ(shard_all(2, 3, false, false, false), (Shards{{{0, 1}}, {}}));
  EXPECT_EQ(shard_all(2, 3, true, false, false), (Shards{{}, {}}));
}

// test_batch_sampler_shards_with_splits_no_even
TEST(Sharding, SplitsNoEven) {
  Shards round = {{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
                  {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}}};
  EXPECT_EQ(shard_all(24, 4, false, true, false), round);
  EXPECT_EQ(shard_all(24, 4, true, true, false), round);
  EXPECT_EQ(shard_all(22, 4, false, true, false), (Shards{{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
                                                          {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}}));
  Shards dropped = {{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}}, {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}};
  EXPECT_EQ(shard_all(22, 4, true, true, false), dropped);
  EXPECT_EQ(shard_all(21, 4, false, true, false), (Shards{{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20}},
                                                          {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}}));
  EXPECT_EQ(shard_all(21, 4, true, true, false), dropped);
  EXPECT_EQ(shard_all(2, 4, false, true, false), (Shards{{{0, 1}}, {}}));
  EXPECT_EQ(shard_all(2, 4, true, true, false), (Shards{{}, {}}));
}

// test_batch_sampler_with_varying_batch_size
TEST(Sharding, VaryingBatchSize) {
  std::vector<Batch> b = {{0, 1, 2}, {3, 4}, {5, 6, 7, 8}, {9, 10, 11}, {12, 13}};
  EXPECT_EQ(shard_varying(b, 2, false), (Shards{{{0, 1, 2}, {5, 6, 7, 8}, {12, 13}}, {{3, 4}, {9, 10, 11}}}));
}

// test_batch_sampler_varying_batch_size_even_batches
TEST(Sharding, VaryingBatchSizeEvenBatches) {
  EXPECT_EQ(shard_varying({{0, 1, 2}, {3, 4}, {5, 6, 7, 8}, {9, 10, 11}}, 2, true),
            (Shards{{{0, 1, 2}, {5, 6, 7, 8}}, {{3, 4}, {9, 10, 11}}}));
  std::vector<Batch> five = {{0, 1, 2}, {3, 4}, {5, 6, 7, 8}, {9, 10, 11}, {12, 13}};
  EXPECT_EQ(shard_varying(five, 2, true),
            (Shards{{{0, 1, 2}, {5, 6, 7, 8}, {12, 13}}, {{3, 4}, {9, 10, 11}, {0, 1, 2}}}));
  EXPECT_EQ(shard_varying({{0, 1, 2}}, 2, true), (Shards{{{0, 1, 2}}, {{0, 1, 2}}}));
  EXPECT_EQ(shard_varying({{0, 1, 2}}, 3, true), (Shards{{{0, 1, 2}}, {{0, 1, 2}}, {{0, 1, 2}}}));
  // drop_last read from the batch sampler: the incomplete last round is dropped.
  EXPECT_EQ(shard_varying(five, 2, true, true), (Shards{{{0, 1, 2}, {5, 6, 7, 8}}, {{3, 4}, {9, 10, 11}}}));
}

// test_batch_sampler_varying_batch_size_many_processes
TEST(Sharding, VaryingBatchSizeManyProcesses) {
  EXPECT_EQ(shard_varying({{0}, {1, 2}, {3, 4, 5}, {6}, {7, 8}, {9, 10, 11}}, 3, true),
            (Shards{{{0}, {6}}, {{1, 2}, {7, 8}}, {{3, 4, 5}, {9, 10, 11}}}));
  EXPECT_EQ(shard_varying({{0}, {1, 2}, {3, 4, 5}, {6}, {7, 8}, {9, 10, 11}, {12, 13}}, 3, true),
            (Shards{{{0}, {6}, {12, 13}}, {{1, 2}, {7, 8}, {0}}, {{3, 4, 5}, {9, 10, 11}, {1, 2}}}));
}

// test_split_batches_validates_dynamic_batch_size / _non_divisible_batch_size, and a bad process index
TEST(Sharding, SplitNeedsDivisibleBatch) {
  EXPECT_THROW(shard_batches({{0, 1, 2, 3}}, ShardSpec{2, 0, true, true, false, 0}), std::invalid_argument);
  EXPECT_THROW(shard_batches({}, ShardSpec{2, 0, true, true, false, 3}), std::invalid_argument);
  EXPECT_THROW(shard_batches({}, ShardSpec{2, 2, false, true, false, 3}), std::invalid_argument);
  EXPECT_THROW(IterableShard(ShardSpec{2, 0, true, true, false, 3}), std::invalid_argument);
  try {
    shard_batches({}, ShardSpec{2, 0, true, true, false, 3});
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple"), std::string::npos);
  }
}

// test_skip_batch_sampler: SkipBatchSampler is the plan minus its first batches.
TEST(Sharding, SkipBatches) {
  auto b = make_batches(range(16), 4, false);
  std::vector<Batch> skipped(b.begin() + 2, b.end());
  EXPECT_EQ(skipped, (std::vector<Batch>{{8, 9, 10, 11}, {12, 13, 14, 15}}));
}

TEST(Sharding, GatherForMetricsShape) {
  // 99 samples, batch 16, 2 processes: the last round pads rank 0 from the epoch's start.
  auto s = shard_all(99, 16, false);
  ASSERT_EQ(s[0].size(), 4u);
  ASSERT_EQ(s[1].size(), 4u);
  EXPECT_EQ(s[0][3].size(), 16u);
  EXPECT_EQ((std::vector<int64_t>(s[0][3].begin(), s[0][3].begin() + 4)), (std::vector<int64_t>{96, 97, 98, 0}));
  EXPECT_EQ(shard_padded_real(make_batches(range(99), 16, false), ShardSpec{2, 0, false, true, false, 16}), 3);
}

// What gather_for_metrics sees: per step, the batches of every process that has one, in rank order;
// the last step cut to `real` when padded. Returns the concatenation.
std::vector<int64_t> gathered(const Shards& shards, int64_t real) {
  size_t steps = 0;
  for (auto& s : shards) steps = std::max(steps, s.size());
  std::vector<int64_t> out;
  for (size_t k = 0; k < steps; ++k) {
    std::vector<int64_t> step;
    for (auto& s : shards)
      if (k < s.size()) step.insert(step.end(), s[k].begin(), s[k].end());
    if (k + 1 == steps && real > 0) step.resize(static_cast<size_t>(real));
    out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

// Every combination: without drop_last each sample exactly once and in order; with drop_last exactly the
// samples of the complete steps.
TEST(Sharding, GatherForMetricsIsExactEverywhere) {
  for (int procs = 1; procs <= 4; ++procs)
    for (int64_t bs = 1; bs <= 5; ++bs)
      for (int64_t n = 0; n <= 3 * procs * bs + 2; ++n)
        for (int mode = 0; mode < 8; ++mode) {
          const bool split = mode & 1, even = mode & 2, drop = mode & 4;
          if (split && bs % procs != 0) continue;
          auto batches = make_batches(range(n), bs, drop);
          ShardSpec spec{procs, 0, split, even, drop, bs};
          Shards shards;
          for (int p = 0; p < procs; ++p) {
            spec.process_index = p;
            shards.push_back(shard_batches(batches, spec));
          }
          // Every process yields the same number of batches with even_batches (or drop_last).
          if (even || drop) {
            for (auto& s : shards) EXPECT_EQ(s.size(), shards[0].size());
          }
          const int64_t total = split ? bs : bs * procs;
          const int64_t want = drop ? n / total * total : n;
          EXPECT_EQ(gathered(shards, shard_padded_real(batches, spec)), range(want))
              << "n=" << n << " bs=" << bs << " procs=" << procs << " split=" << split << " even=" << even
              << " drop_last=" << drop;
        }
}

TEST(Sharding, VaryingBatchSizeGatherIsExact) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int procs = 1 + trial % 4;
    std::vector<Batch> batches;
    int64_t next = 0;
    const int nb = static_cast<int>(rng() % 9);
    for (int i = 0; i < nb; ++i) {
      Batch b;
      for (int k = static_cast<int>(1 + rng() % 5); k > 0; --k) b.push_back(next++);
      batches.push_back(b);
    }
    for (int mode = 0; mode < 3; ++mode) {  // even, not even, drop_last
      const bool even = mode == 0, drop = mode == 2;
      ShardSpec spec{procs, 0, false, even, drop, 0};
      Shards shards;
      for (int p = 0; p < procs; ++p) {
        spec.process_index = p;
        shards.push_back(shard_batches(batches, spec));
      }
      int64_t want = next;
      if (drop) {
        want = 0;
        for (size_t i = 0; i < batches.size() / procs * procs; ++i) want += static_cast<int64_t>(batches[i].size());
      }
      EXPECT_EQ(gathered(shards, shard_padded_real(batches, spec)), range(want))
          << "trial " << trial << " mode " << mode;
    }
  }
}

// IterableDatasetShard: each process's stream, as Accelerate's check_iterable_dataset_shards checks it.
std::vector<std::vector<int64_t>> iterable_shards(int64_t length, const ShardSpec& base, std::vector<int64_t>* real) {
  std::vector<std::vector<int64_t>> lists;
  for (int p = 0; p < base.num_processes; ++p) {
    ShardSpec s = base;
    s.process_index = p;
    IterableShard shard(s);
    std::vector<int64_t> mine;
    for (int64_t e = 0; e < length; ++e)
      if (auto b = shard.push(e)) mine.insert(mine.end(), b->begin(), b->end());
    if (auto b = shard.finish()) mine.insert(mine.end(), b->begin(), b->end());
    if (real) real->push_back(shard.padded_real());
    lists.push_back(mine);
  }
  return lists;
}

void check_iterable_dataset_shards(int64_t length, int64_t batch_size, bool drop_last, int procs, bool split) {
  ShardSpec spec{procs, 0, split, true, drop_last, batch_size};
  std::vector<int64_t> reals;
  auto lists = iterable_shards(length, spec, &reals);
  const int64_t shard_batch = split ? batch_size / procs : batch_size;
  for (auto& l : lists) {
    ASSERT_EQ(l.size(), lists[0].size());
    ASSERT_EQ(static_cast<int64_t>(l.size()) % shard_batch, 0);
  }
  std::vector<int64_t> observed;
  for (size_t i = 0; i < lists[0].size(); i += static_cast<size_t>(shard_batch))
    for (auto& l : lists)
      observed.insert(observed.end(), l.begin() + static_cast<std::ptrdiff_t>(i),
                      l.begin() + static_cast<std::ptrdiff_t>(i + static_cast<size_t>(shard_batch)));
  std::vector<int64_t> reference = range(length);
  if (!drop_last && !reference.empty())
    while (reference.size() < observed.size()) {
      auto twice = reference;
      twice.insert(twice.end(), reference.begin(), reference.end());
      reference = twice;
    }
  ASSERT_LE(observed.size(), reference.size());
  EXPECT_EQ(observed,
            std::vector<int64_t>(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(observed.size())))
      << "length " << length;
  // gather_for_metrics: dropping the padding of the last global batch leaves each element once.
  const int64_t global = split ? batch_size : batch_size * procs;
  for (int64_t r : reals) EXPECT_EQ(r, reals[0]);
  if (reals[0] > 0) observed.resize(observed.size() - static_cast<size_t>(global - reals[0]));
  EXPECT_EQ(observed, range(drop_last ? length / global * global : length)) << "length " << length;
}

// test_iterable_dataset_shard: Accelerate draws random lengths (p_stop 0.01, at most 1000) and the
// edge case of a very small dataset (max_length 2); here every length up to 130 and a few long ones.
TEST(Sharding, IterableDatasetShard) {
  std::vector<int64_t> lengths = {997, 1000};
  for (int64_t n = 0; n <= 130; ++n) lengths.push_back(n);
  for (int64_t n : lengths)
    for (int drop = 0; drop < 2; ++drop) {
      check_iterable_dataset_shards(n, 4, drop, 2, false);
      check_iterable_dataset_shards(n, 4, drop, 2, true);
      check_iterable_dataset_shards(n, 4, drop, 4, true);
      check_iterable_dataset_shards(n, 3, drop, 3, false);
    }
}

TEST(Sharding, IterableShardSmall) {
  // Two elements, batch 4, two processes: the first (partial) batch repeats to fill the round.
  ShardSpec spec{2, 0, false, true, false, 4};
  auto lists = iterable_shards(2, spec, nullptr);
  EXPECT_EQ(lists, (std::vector<std::vector<int64_t>>{{0, 1, 0, 1}, {0, 1, 0, 1}}));
  spec.split_batches = true;
  lists = iterable_shards(2, spec, nullptr);
  EXPECT_EQ(lists, (std::vector<std::vector<int64_t>>{{0, 1}, {0, 1}}));
  spec.drop_last = true;
  lists = iterable_shards(2, spec, nullptr);
  EXPECT_EQ(lists, (std::vector<std::vector<int64_t>>{{}, {}}));
  // 10 elements, batch 2, split over 2: [0],[1] ... ; 9 elements: the last batch [8] pads with [0].
  spec = ShardSpec{2, 0, true, true, false, 2};
  lists = iterable_shards(9, spec, nullptr);
  EXPECT_EQ(lists, (std::vector<std::vector<int64_t>>{{0, 2, 4, 6, 8}, {1, 3, 5, 7, 0}}));
}

// DataLoaderDispatcher: rank 0 reads num_processes batches per step (one with split_batches) and every
// process takes its slice; the last step is completed from the first step's first rows.
Shards dispatch_all(int64_t n, int64_t bs, bool drop_last, bool split, int procs) {
  auto base = make_batches(range(n), bs, drop_last);
  Shards out;
  for (int p = 0; p < procs; ++p) out.push_back(dispatch_shard(base, ShardSpec{procs, p, split, true, drop_last, bs}));
  return out;
}

TEST(Sharding, Dispatcher) {
  // 24 samples, batch 3, 2 processes: steps of 6 rows, 3 each (the same lists as BatchSamplerShard).
  EXPECT_EQ(dispatch_all(24, 3, false, false, 2), (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                                                          {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}}));
  // 11 samples, batch 4: steps [0..7] and [8, 9, 10]; the last is padded with rows 0, 1: 2 rows each.
  EXPECT_EQ(dispatch_all(11, 4, false, false, 2), (Shards{{{0, 1, 2, 3}, {8, 9}}, {{4, 5, 6, 7}, {10, 0}}}));
  // 10 samples: the last step [8, 9] splits evenly, one row each, no padding.
  EXPECT_EQ(dispatch_all(10, 4, false, false, 2), (Shards{{{0, 1, 2, 3}, {8}}, {{4, 5, 6, 7}, {9}}}));
  // drop_last: the incomplete step is dropped.
  EXPECT_EQ(dispatch_all(11, 4, true, false, 2), (Shards{{{0, 1, 2, 3}}, {{4, 5, 6, 7}}}));
  // 12 samples, batch 4, the last step is one full batch: 2 rows each.
  EXPECT_EQ(dispatch_all(12, 4, false, false, 2), (Shards{{{0, 1, 2, 3}, {8, 9}}, {{4, 5, 6, 7}, {10, 11}}}));
  // split_batches: one batch per step, halved; the short last batch [8] pads with row 0.
  EXPECT_EQ(dispatch_all(9, 4, false, true, 2), (Shards{{{0, 1}, {4, 5}, {8}}, {{2, 3}, {6, 7}, {0}}}));
  EXPECT_EQ(dispatch_all(9, 4, true, true, 2), (Shards{{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}}));
  // One sample on three processes: [0] + first rows [0] gives the last process nothing.
  auto one = dispatch_all(1, 4, false, false, 3);
  EXPECT_EQ(one[0], (std::vector<Batch>{{0}}));
  EXPECT_EQ(one[1], (std::vector<Batch>{{0}}));
  EXPECT_EQ(one[2], (std::vector<Batch>{{}}));
}

TEST(Sharding, DispatcherGatherIsExact) {
  for (int procs = 1; procs <= 4; ++procs)
    for (int64_t bs = 1; bs <= 5; ++bs)
      for (int64_t n = 0; n <= 3 * procs * bs + 2; ++n)
        for (int mode = 0; mode < 4; ++mode) {
          const bool split = mode & 1, drop = mode & 2;
          if (split && bs % procs != 0) continue;
          auto base = make_batches(range(n), bs, drop);
          Shards shards;
          for (int p = 0; p < procs; ++p)
            shards.push_back(dispatch_shard(base, ShardSpec{procs, p, split, true, drop, bs}));
          for (auto& s : shards) EXPECT_EQ(s.size(), shards[0].size());
          auto steps = dispatch_steps(base, ShardSpec{procs, 0, split, true, drop, bs});
          int64_t real = 0, want = 0;
          if (!steps.empty()) {
            const int64_t observed = static_cast<int64_t>(steps.back().size());
            if (dispatch_slice(observed, true, ShardSpec{procs, 0, split, true, drop, bs}).padded) real = observed;
          }
          for (auto& s : steps) want += static_cast<int64_t>(s.size());
          EXPECT_EQ(gathered(shards, real), range(want))
              << "n=" << n << " bs=" << bs << " procs=" << procs << " split=" << split << " drop_last=" << drop;
          if (!drop) {
            EXPECT_EQ(want, n);
          }
        }
}

}  // namespace
}  // namespace acc::core
