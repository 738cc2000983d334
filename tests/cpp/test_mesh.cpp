// The process mesh's rank layout and the context-parallel sequence split against torch's own answers
// (tests/cpp/fixtures/mesh_layout.json, made by make_mesh_fixture.py from DeviceMesh as Accelerate builds it, and
// from context_parallel's buffer sharding). No processes: the groups themselves are tested by tests/mp (mp-mesh).
//   test_mesh FIXTURE_JSON
#include <acc/json.hpp>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <set>
#include <sstream>

#include "data/batch.hpp"
#include "data/sharding.hpp"
#include "runtime/mesh.hpp"

namespace acc::core {
namespace {

std::unique_ptr<json::Document> g_doc;

std::vector<int> ints(const json::Value& v) {
  std::vector<int> out;
  for (const auto& e : v.elements()) out.push_back(static_cast<int>(e.as_int()));
  return out;
}

TEST(MeshLayout, GroupsAreDeviceMeshs) {
  const json::Value meshes = g_doc->root().get("meshes");
  ASSERT_GE(meshes.size(), 40u);
  for (const auto& m : meshes.elements()) {
    const auto s = ints(m.get("sizes"));
    const MeshSizes sizes{s[0], s[1], s[2], s[3]};
    const int rank = static_cast<int>(m.get_int("rank"));
    const MeshLayout layout(sizes, rank);
    for (const auto& [name, g] : m.get("groups").items()) {
      const auto members = ints(g.get("members"));
      const std::string where = std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]) + "x" +
                                std::to_string(s[3]) + " rank " + std::to_string(rank) + " group " + name;
      EXPECT_EQ(layout.members(name), members) << where;
      EXPECT_EQ(layout.rank(name), g.get_int("rank")) << where;
      EXPECT_EQ(layout.size(name), static_cast<int>(members.size())) << where;
    }
  }
}

TEST(MeshLayout, GroupIndexNamesEachGroupOnce) {
  // Ranks of one group agree on its index; different groups of a name have different indices, 0 .. world/size - 1.
  const MeshSizes sizes{2, 2, 2, 2};
  for (const auto& name : MeshLayout::group_names()) {
    std::map<int, std::vector<int>> by_index;
    for (int r = 0; r < sizes.total(); ++r) {
      const MeshLayout l(sizes, r);
      auto& members = by_index[l.group_index(name)];
      if (members.empty()) members = l.members(name);
      EXPECT_EQ(members, l.members(name)) << name << " rank " << r;
    }
    EXPECT_EQ(static_cast<int>(by_index.size()), sizes.total() / MeshLayout(sizes, 0).size(name)) << name;
    EXPECT_EQ(by_index.begin()->first, 0);
    EXPECT_EQ(by_index.rbegin()->first, static_cast<int>(by_index.size()) - 1);
  }
}

TEST(MeshLayout, RowMajorWithTpInnermost) {
  // rank = ((r * dp_shard + s) * cp + c) * tp + t
  const MeshLayout l({2, 3, 2, 2}, 17);  // 17 = ((1 * 3 + 1) * 2 + 0) * 2 + 1
  EXPECT_EQ(l.coordinate(), (std::array<int, kMeshDims>{0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(l.members("tp"), (std::vector<int>{16, 17}));
  EXPECT_EQ(l.members("dp"), (std::vector<int>{1, 5, 9, 13, 17, 21}));
  EXPECT_EQ(l.rank("dp"), 4);
  EXPECT_EQ(l.members("dp_shard_cp"), (std::vector<int>{13, 15, 17, 19, 21, 23}));
}

TEST(MeshLayout, SpBetweenCpAndTp) {
  // Accelerate's order: dp_replicate, dp_shard, cp, sp, tp. dp_shard 2 x sp 2 x tp 2: rank = (s * 2 + q) * 2 + t.
  MeshSizes sizes{1, 2, 1, 2};
  sizes.sp = 2;
  const MeshLayout l(sizes, 5);  // 5 = (1 * 2 + 0) * 2 + 1
  EXPECT_EQ(l.coordinate(), (std::array<int, kMeshDims>{0, 0, 1, 0, 0, 1}));
  EXPECT_EQ(l.members("sp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.members("tp"), (std::vector<int>{4, 5}));
  // The data-parallel groups hold sp (its ranks hold different tokens of the same batch).
  EXPECT_EQ(l.members("dp_shard_cp"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(l.members("dp_cp"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(l.members("dp"), (std::vector<int>{1, 5}));
}

TEST(MeshLayout, PpOutermost) {
  // torchtitan's order: pp, dp_replicate, dp_shard, cp, sp, tp. pp 2 x dp_replicate 2 x tp 2: rank = (p * 2 + r) * 2 + t.
  MeshSizes sizes{2, 1, 1, 2};
  sizes.pp = 2;
  EXPECT_EQ(sizes.total(), 8);
  const MeshLayout l(sizes, 5);  // 5 = (1 * 2 + 0) * 2 + 1
  EXPECT_EQ(l.coordinate(), (std::array<int, kMeshDims>{1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(l.members("pp"), (std::vector<int>{1, 5}));
  EXPECT_EQ(l.rank("pp"), 1);
  EXPECT_EQ(l.members("tp"), (std::vector<int>{4, 5}));
  // The data-parallel groups stay inside a stage: every rank of a pp group reads the same batch (same dp rank).
  EXPECT_EQ(l.members("dp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.members("dp_cp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.rank("dp"), MeshLayout(sizes, 1).rank("dp"));
  EXPECT_EQ(l.group_index("pp"), 1);
  EXPECT_EQ(sizes.text(), "pp 2 x dp_replicate 2 x dp_shard 1 x cp 1 x tp 2");
}

TEST(MeshLayout, BadInput) {
  EXPECT_THROW(MeshLayout({0, 1, 1, 1}, 0), std::invalid_argument);
  EXPECT_THROW(MeshLayout({2, 2, 1, 1}, 4), std::invalid_argument);
  EXPECT_THROW(MeshLayout({2, 2, 1, 1}, -1), std::invalid_argument);
  // Sizes whose product wraps in int (65536 x 65537 is 65536 modulo 2^32) are refused, not laid out.
  try {
    MeshLayout({65536, 65537, 1, 1}, 0);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dp_replicate 65536 x dp_shard 65537 x cp 1 x tp 1 is more than"),
              std::string::npos)
        << e.what();
  }
  try {
    MeshLayout({2, 2, 1, 1}, 0).size("fsdp");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no group 'fsdp'; its groups are pp, dp_replicate, dp_shard, cp, sp, tp, dp, "
                                         "dp_shard_cp, dp_cp"),
              std::string::npos)
        << e.what();
  }
}

TEST(ContextParallel, PositionsAreTorchs) {
  const json::Value cases = g_doc->root().get("context_parallel");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases.elements()) {
    const int64_t seq = c.get_int("seq_len");
    const int cp = static_cast<int>(c.get_int("cp"));
    const auto want = c.get("positions").elements();
    for (int r = 0; r < cp; ++r) {
      std::vector<int64_t> expected;
      for (const auto& e : want[static_cast<size_t>(r)].elements()) expected.push_back(e.as_int());
      EXPECT_EQ(context_parallel_positions(seq, cp, r), expected) << "seq " << seq << " cp " << cp << " rank " << r;
    }
  }
  EXPECT_THROW(context_parallel_positions(8, 2, 2), std::invalid_argument);
  EXPECT_THROW(context_parallel_positions(8, 0, 0), std::invalid_argument);
  EXPECT_THROW(context_parallel_positions(-1, 2, 0), std::invalid_argument);
}

TEST(ContextParallel, ShardsABatchAlongTheSequence) {
  // [batch 2, seq 8, hidden 3]: rank 1 of 2 keeps positions 2..5 (head-tail chunks 1 and 2 of 4).
  const at::Tensor x = at::arange(48, at::kLong).reshape({2, 8, 3});
  const at::Tensor got = context_parallel_shard(x, 1, 2, 1);
  EXPECT_TRUE(at::equal(got, x.narrow(1, 2, 4)));
  // A batch: tensors with a sequence dimension are split, per-sample ones (dim 0 only) are kept whole.
  TensorDict batch{{"input_ids", at::arange(16, at::kLong).reshape({2, 8})}, {"label", at::tensor({1, 0}, at::kLong)}};
  const TensorDict part = context_parallel_shard(batch, 1, 2, 0);
  EXPECT_TRUE(at::equal(part.at("input_ids"), at::tensor({0, 1, 6, 7, 8, 9, 14, 15}, at::kLong).reshape({2, 4})));
  EXPECT_TRUE(at::equal(part.at("label"), batch.at("label")));
  EXPECT_THROW(context_parallel_shard(x, 3, 2, 0), std::invalid_argument);
}

}  // namespace
}  // namespace acc::core

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) return 2;
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  try {
    acc::core::g_doc = std::make_unique<acc::json::Document>(text.str(), argv[1]);
  } catch (const acc::json::Error& e) {
    std::fprintf(stderr, "cannot read %s\n", e.what());
    return 2;
  }
  return RUN_ALL_TESTS();
}
