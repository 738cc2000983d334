// Batch sharding against Accelerate's own expected index lists (tests/test_data_loader.py).
#include <gtest/gtest.h>

#include <numeric>

#include "data/sharding.hpp"

namespace acc {
namespace {

using Shards = std::vector<std::vector<Batch>>;

Shards shard_all(int64_t n, int64_t batch_size, bool drop_last, bool split = false, bool even = true,
                 int procs = 2) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto batches = make_batches(order, batch_size, drop_last);
  Shards out;
  for (int p = 0; p < procs; ++p) {
    ShardSpec s{procs, p, split, even, drop_last, batch_size};
    out.push_back(shard_batches(batches, s));
  }
  return out;
}

TEST(Sharding, NoSplits) {
  Shards round = {{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}};
  EXPECT_EQ(shard_all(24, 3, false), round);
  EXPECT_EQ(shard_all(24, 3, true), round);
  EXPECT_EQ(shard_all(21, 3, false),
            (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {0, 1, 2}}}));
  Shards dropped = {{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}};
  EXPECT_EQ(shard_all(21, 3, true), dropped);
  EXPECT_EQ(shard_all(22, 3, false),
            (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}}));
  EXPECT_EQ(shard_all(22, 3, true), dropped);
  EXPECT_EQ(shard_all(20, 3, false),
            (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 0}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {1, 2, 3}}}));
  EXPECT_EQ(shard_all(20, 3, true), dropped);
  EXPECT_EQ(shard_all(2, 3, false), (Shards{{{0, 1, 0}}, {{1, 0, 1}}}));
  EXPECT_EQ(shard_all(2, 3, true), (Shards{{}, {}}));
}

TEST(Sharding, Splits) {
  Shards round = {{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}}, {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}}};
  EXPECT_EQ(shard_all(24, 4, false, true), round);
  EXPECT_EQ(shard_all(24, 4, true, true), round);
  EXPECT_EQ(shard_all(22, 4, false, true),
            (Shards{{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}}, {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {0, 1}}}));
  EXPECT_EQ(shard_all(22, 4, true, true),
            (Shards{{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}}, {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}}));
}

TEST(Sharding, NoSplitsNoEven) {
  EXPECT_EQ(shard_all(21, 3, false, false, false),
            (Shards{{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}, {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}}));
}

TEST(Sharding, GatherForMetricsShape) {
  // 99 samples, batch 16, 2 processes: the last round pads rank 0 from the epoch's start.
  auto s = shard_all(99, 16, false);
  ASSERT_EQ(s[0].size(), 4u);
  ASSERT_EQ(s[1].size(), 4u);
  EXPECT_EQ(s[0][3].size(), 16u);
  EXPECT_EQ((std::vector<int64_t>(s[0][3].begin(), s[0][3].begin() + 4)), (std::vector<int64_t>{96, 97, 98, 0}));
}

TEST(Sharding, SplitNeedsDivisibleBatch) {
  EXPECT_THROW(shard_batches({}, ShardSpec{2, 0, true, true, false, 3}), std::invalid_argument);
  EXPECT_THROW(shard_batches({}, ShardSpec{2, 2, false, true, false, 3}), std::invalid_argument);
}

}  // namespace
}  // namespace acc
