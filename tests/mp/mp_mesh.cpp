// One rank of the process-mesh test (tests/mp/mp_test.py case_mesh), started by `acc launch`: the Accelerator made
// from the parallelism_config the environment carries builds its mesh; every group holds the ranks torch's DeviceMesh
// puts in it (the expected members computed here, independently, from the row-major layout over
// (dp_replicate, dp_shard, cp, tp)), in order, and a sum over it is the sum of its members; a prepared loader gives the
// ranks of one data-parallel coordinate (tensor / context-parallel peers) the same batches and the others different
// ones, and gather_for_metrics (and gather_object for metrics) gathers over the data-parallel ranks only. Prints "rank R:
// N passed, N failed".
//   mp_mesh DP_REPLICATE DP_SHARD CP TP
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "runtime/mesh.hpp"
#include "train/accelerator.hpp"

#include "mp_check.hpp"

using namespace acc::core;

namespace {

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: mp_mesh DP_REPLICATE DP_SHARD CP TP\n");
    return 2;
  }
  const int sizes[4] = {std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4])};
  const char* dim_names[4] = {"dp_replicate", "dp_shard", "cp", "tp"};
  const std::map<std::string, std::vector<int>> spans = {{"dp_replicate", {0}}, {"dp_shard", {1}},
                                                         {"cp", {2}},           {"tp", {3}},
                                                         {"dp", {0, 1}},        {"dp_shard_cp", {1, 2}},
                                                         {"dp_cp", {0, 1, 2}}};
  try {
    auto acc = Accelerator::create(nullptr);  // parallelism_config from the environment accelerate launch sets
    const int world = acc->state().world_size, me = acc->state().rank;
    const auto& mesh = acc->mesh();
    if (!mesh) throw std::runtime_error("no mesh: run with several processes");
    for (int d = 0; d < 4; ++d)
      expect(mesh->size(dim_names[d]) == sizes[d],
             std::string(dim_names[d]) + " size " + std::to_string(mesh->size(dim_names[d])));
    // Coordinates the simple way: rank = ((r * dp_shard + s) * cp + c) * tp + t.
    auto coord = [&](int rank) {
      std::vector<int> c(4);
      for (int d = 3; d >= 0; --d) {
        c[d] = rank % sizes[d];
        rank /= sizes[d];
      }
      return c;
    };
    const auto mine = coord(me);
    for (const auto& [name, dims] : spans) {
      // The members: every rank equal to this one outside the group's dimensions, in increasing order (row-major
      // over the group's dimensions, as DeviceMesh's groups and _flatten order them).
      std::vector<int64_t> expected;
      for (int r = 0; r < world; ++r) {
        const auto c = coord(r);
        bool same = true;
        for (int d = 0; d < 4; ++d)
          if (std::find(dims.begin(), dims.end(), d) == dims.end() && c[d] != mine[d]) same = false;
        if (same) expected.push_back(r);
      }
      auto group = mesh->group(name);
      expect(group->size() == static_cast<int>(expected.size()), name + ": size " + std::to_string(group->size()));
      const int64_t my_place = std::find(expected.begin(), expected.end(), me) - expected.begin();
      expect(group->rank() == my_place && mesh->rank(name) == my_place,
             name + ": rank " + std::to_string(group->rank()) + ", expected " + std::to_string(my_place));
      at::Tensor gathered = group->all_gather_cat(at::tensor({static_cast<int64_t>(me)}, at::kLong));
      std::vector<int64_t> got(gathered.data_ptr<int64_t>(), gathered.data_ptr<int64_t>() + gathered.numel());
      expect(got == expected,
             "rank " + std::to_string(me) + " " + name + ": members " + list(got) + ", expected " + list(expected));
      at::Tensor sum = at::tensor({static_cast<int64_t>(me) + 1}, at::kLong);
      group->all_reduce(sum, ReduceOp::Sum);
      int64_t want = 0;
      for (int64_t r : expected) want += r + 1;
      expect(sum.item<int64_t>() == want,
             name + ": sum " + std::to_string(sum.item<int64_t>()) + ", expected " + std::to_string(want));
    }

    // Data: 40 samples (x = index), batches of 2, shuffled: every rank reads its data-parallel shard.
    for (const bool dispatch : {false, true}) {
      auto ds = make_tensor_dataset(TensorDict{{"x", at::arange(40, at::kLong)}});
      LoaderOptions o;
      o.batch_size = 2;
      o.shuffle = true;
      auto loader = std::make_shared<DataLoader>(ds, o);
      if (dispatch) {
        // dispatch_batches (rank 0 reads, every rank keeps its data-parallel rank's rows), prepared as the accelerator
        // prepares a loader but with dispatch on (the config of this accelerator has it off).
        LoaderPrepare h =
            LoaderPrepare::from_config(acc->settings().dataloader_config, ShardSpec{}, acc->mesh()->world());
        h.spec.num_processes = mesh->size("dp");
        h.spec.process_index = mesh->rank("dp");
        h.dispatch_batches = true;
        loader->prepare(h, at::kCPU, nullptr);
      } else {
        acc->prepare(nullptr, nullptr, nullptr, loader);
      }
      Sample b;
      std::vector<int64_t> all_rows;
      int steps = 0;
      while (loader->next(b)) {
        const at::Tensor x = b.at("x").contiguous();
        // Every rank's batch, by global rank.
        at::Tensor everyone = mesh->world()->all_gather_cat(x);
        const int64_t per = x.size(0);
        expect(everyone.size(0) == per * world, "equal batch sizes");
        for (int r = 0; r < world; ++r) {
          const auto c = coord(r);
          const bool same_dp = c[0] == mine[0] && c[1] == mine[1];
          const bool equal = at::equal(everyone.narrow(0, r * per, per), x);
          if (same_dp) expect(equal, "rank " + std::to_string(r) + " (same dp coordinate) got another batch");
          else expect(!equal, "rank " + std::to_string(r) + " (another dp coordinate) got the same batch");
        }
        if (!dispatch) {
          // gather_for_metrics: the dp ranks' batches, once each.
          at::Tensor metrics = acc->gather_for_metrics(x);
          expect(metrics.size(0) == per * mesh->size("dp"), "gather_for_metrics: " + std::to_string(metrics.size(0)) +
                                                                " rows, expected " +
                                                                std::to_string(per * mesh->size("dp")));
          for (int64_t i = 0; i < metrics.size(0); ++i) all_rows.push_back(metrics[i].item<int64_t>());
          // gather_object for metrics too: one string per sample, over the dp ranks.
          std::vector<std::string> mine;
          for (int64_t i = 0; i < per; ++i) mine.push_back(std::to_string(x[i].item<int64_t>()));
          const auto objects = acc->gather_object(mine, /*for_metrics=*/true);
          bool same = static_cast<int64_t>(objects.size()) == metrics.size(0);
          for (size_t i = 0; same && i < objects.size(); ++i)
            same = objects[i] == std::to_string(metrics[static_cast<int64_t>(i)].item<int64_t>());
          expect(same,
                 "gather_object for metrics: " + std::to_string(objects.size()) + " objects, as gather_for_metrics");
        }
        ++steps;
      }
      expect(steps == 40 / (2 * mesh->size("dp")), "steps " + std::to_string(steps));
      if (!dispatch) {
        std::sort(all_rows.begin(), all_rows.end());
        std::vector<int64_t> every(40);
        for (int64_t i = 0; i < 40; ++i) every[static_cast<size_t>(i)] = i;
        expect(all_rows == every, "gather_for_metrics saw every sample once: " + list(all_rows));
      }
    }
  } catch (const std::exception& e) {
    expect(false, e.what());
  }
  return finish();
}
