// One rank of the C++ API's multi-process test, started by `acc launch`: named data loaders (columns and
// a sample function) sharded across processes keep each sample's tensors together and gather_for_metrics
// sees every sample once; gather_object, gather_object_for_metrics and broadcast_object carry byte
// strings between the processes. Prints "N passed, N failed"; exits non-zero on a failed check.
// `mp_cxx --write-script PATH` instead writes the TorchScript MLP test mp-sharded trains (3 -> 24 -> 1, tanh).
#include <acc/torch.hpp>
#include <torch/csrc/jit/api/module.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "mp_check.hpp"

namespace {

// Sample i: {"input_ids": [i, i], "attention_mask": [i odd, i odd] (bool), "labels": i (float)}.
acc::Batch sample(int64_t i) {
  return acc::Batch({{"input_ids", torch::full({2}, i, torch::kLong)},
                     {"attention_mask", torch::full({2}, i % 2 == 1, torch::kBool)},
                     {"labels", torch::scalar_tensor(static_cast<double>(i))}});
}

// One epoch of a prepared loader: each batch's tensors belong to the same samples, and the labels
// gathered for metrics are every sample exactly once.
void check_loader(acc::Accelerator& accelerator, acc::DataLoader loader, int64_t n, const std::string& what) {
  std::multiset<int64_t> seen;
  while (auto batch = loader.next()) {
    const auto& items = batch->items();
    expect(items.size() == 3 && items[0].first == "input_ids" && items[1].first == "attention_mask" &&
               items[2].first == "labels",
           what + ": the batch keeps the samples' names in order");
    auto labels = batch->at("labels").to(torch::kLong);
    auto ids = batch->at("input_ids");
    auto mask = batch->at("attention_mask");
    expect(ids.select(1, 0).equal(labels) && ids.select(1, 1).equal(labels), what + ": input_ids match labels");
    expect(mask.select(1, 0).equal(labels.remainder(2).to(torch::kBool)), what + ": attention_mask matches labels");
    auto all = accelerator.gather_for_metrics(batch->at("labels"));
    for (int64_t k = 0; k < all.size(0); ++k) seen.insert(all[k].item<int64_t>());
  }
  std::multiset<int64_t> want;
  for (int64_t i = 0; i < n; ++i) want.insert(i);
  expect(seen == want, what + ": gather_for_metrics sees every sample once");
}

// The k-th string of process r.
std::string item(int r, int k) {
  char text[32];
  std::snprintf(text, sizeof text, "r%d.%d", r, k);
  return text;
}

}  // namespace

int write_script(const std::string& path) {
  torch::manual_seed(3);
  torch::jit::Module m("ScriptedMlp");
  m.register_parameter("w1", (torch::randn({3, 24}) * 0.5).requires_grad_(), false);
  m.register_parameter("b1", torch::zeros({24}).requires_grad_(), false);
  m.register_parameter("w2", (torch::randn({24, 1}) * 0.2).requires_grad_(), false);
  m.register_parameter("b2", torch::zeros({1}).requires_grad_(), false);
  m.define(
      "def forward(self, input):\n    return torch.tanh(input.matmul(self.w1) + self.b1).matmul(self.w2) + self.b2\n");
  m.save(path);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-script") return write_script(argv[2]);
  acc::Accelerator accelerator;
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  const int64_t n = 11;

  // Named columns (torch's TensorDataset, named), and a sample function.
  std::vector<acc::Batch> rows;
  for (int64_t i = 0; i < n; ++i) rows.push_back(sample(i));
  std::vector<std::pair<std::string, torch::Tensor>> columns;
  for (size_t k = 0; k < 3; ++k) {
    std::vector<torch::Tensor> col;
    for (const auto& r : rows) col.push_back(r.items()[k].second);
    columns.emplace_back(rows[0].items()[k].first, torch::stack(col));
  }
  check_loader(accelerator, accelerator.prepare(acc::DataLoader(acc::Batch(columns), R"({"batch_size": 2})")), n,
               "named columns");
  check_loader(accelerator, accelerator.prepare(acc::DataLoader(n, sample, R"({"batch_size": 3})")), n,
               "sample function");

  // Objects: rank r gives r + 1 strings.
  std::vector<std::string> mine;
  for (int k = 0; k <= rank; ++k) mine.push_back(item(rank, k));
  std::vector<std::string> want;
  for (int r = 0; r < world; ++r)
    for (int k = 0; k <= r; ++k) want.push_back(item(r, k));
  expect(accelerator.gather_object(mine) == want, "gather_object: every process's strings in rank order");
  const int from = world - 1;
  std::vector<std::string> sent{"from " + std::to_string(rank), std::string("\0binary\xff", 8), ""};
  auto got = accelerator.broadcast_object(sent, from);
  expect(got.size() == 3 && got[0] == "from " + std::to_string(from) && got[1] == sent[1] && got[2].empty(),
         "broadcast_object: the last process's strings, bytes intact");

  // gather_object_for_metrics on a padded last batch keeps the real samples only.
  auto loader = accelerator.prepare(acc::DataLoader(n, sample, R"({"batch_size": 2})"));
  std::vector<std::string> labels;
  while (auto batch = loader.next()) {
    std::vector<std::string> items;
    auto l = batch->at("labels");
    for (int64_t k = 0; k < l.size(0); ++k) items.push_back(std::to_string(l[k].item<int64_t>()));
    for (auto& s : accelerator.gather_object_for_metrics(items)) labels.push_back(s);
  }
  std::multiset<std::string> got_labels(labels.begin(), labels.end()), want_labels;
  for (int64_t i = 0; i < n; ++i) want_labels.insert(std::to_string(i));
  expect(got_labels == want_labels, "gather_object_for_metrics: every sample once");

  // Trackers (init_trackers, log, log_json, end_training): only the main process writes.
  {
    char tmpl[] = "/tmp/acc_cxx_trackers_XXXXXX";
    std::string dir = rank == 0 ? std::string(mkdtemp(tmpl)) : std::string();
    dir = accelerator.broadcast_object({dir}, 0)[0];
    acc::Accelerator tracked(R"({"log_with": ["jsonl", "csv"], "project_dir": ")" + dir + "\"}");
    tracked.init_trackers("cxx", R"({"lr": 0.5})");
    for (int s = 0; s < 3; ++s) tracked.log({{"loss", 1.0 / (s + 1)}, {"rank", static_cast<double>(rank)}}, s);
    tracked.log_json(R"({"note": "done"})");
    bool threw = false;
    try {
      tracked.log_json("[1]");
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    expect(threw, "log_json: a JSON array is std::invalid_argument on every process");
    tracked.end_training();
    accelerator.wait_for_everyone();
    if (rank == 0) {
      std::ifstream f(dir + "/cxx/metrics.jsonl");
      std::vector<std::string> lines;
      for (std::string l; std::getline(f, l);) lines.push_back(l);
      expect(lines.size() == 4, "trackers: each line once (" + std::to_string(lines.size()) + ")");
      expect(lines.size() == 4 && lines[0].find("{\"loss\": 1, \"rank\": 0}") != std::string::npos &&
                 lines[3].find("{\"note\": \"done\"}") != std::string::npos,
             "trackers: the main process's values");
      std::ifstream h(dir + "/cxx/hparams.json");
      std::string hp;
      std::getline(h, hp);
      expect(hp == R"({"lr": 0.5})", "trackers: hyperparameters");
      std::system(("rm -rf '" + dir + "'").c_str());
    }
  }

  return finish();
}
