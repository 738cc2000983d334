// The trackers' files (src/tracking/), torch-free: TensorBoard records parsed back with the same messages,
// JSON lines, CSV, and MLflow's file store layout. tests/tracking/read_tensorboard.py reads the event files
// with TensorBoard's own reader and the mlflow run with the MLflow client.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tensorboard.pb.h"
#include "tracking/http.hpp"
#include "tracking/tracking.hpp"

using namespace acc::tracking;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/acc_tracking_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::vector<std::string> list(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// The records of an event file, checking both CRCs of each.
std::vector<acc::tb::Event> read_events(const std::string& path) {
  std::string data = slurp(path);
  std::vector<acc::tb::Event> out;
  size_t pos = 0;
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(data[at + i])) << (8 * i);
    return v;
  };
  while (pos < data.size()) {
    EXPECT_LE(pos + 12, data.size());
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(data[pos + i])) << (8 * i);
    EXPECT_EQ(u32(pos + 8), masked_crc32c(data.data() + pos, 8));
    EXPECT_EQ(u32(pos + 12 + len), masked_crc32c(data.data() + pos + 12, len));
    acc::tb::Event e;
    EXPECT_TRUE(e.ParseFromArray(data.data() + pos + 12, static_cast<int>(len)));
    out.push_back(e);
    pos += 12 + len + 4;
  }
  return out;
}

std::string event_file(const std::string& dir) {
  for (const auto& n : list(dir))
    if (n.rfind("events.out.tfevents.", 0) == 0) return dir + "/" + n;
  return "";
}

}  // namespace

TEST(Crc32c, KnownValues) {
  // The CRC-32C check value, and RFC 3720's 32 zero bytes.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  // The mask TensorFlow's record writer applies.
  uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(Values, ParseAndFlatten) {
  Values v = parse_values(R"({"loss": 0.5, "ok": true, "note": "hi", "none": null, "acc": {"a": 1, "b": 2.5}})");
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v[0].first, "loss");
  EXPECT_EQ(v[0].second.kind, Value::Kind::Number);
  EXPECT_EQ(v[1].second.scalar().value(), 1.0);
  EXPECT_EQ(v[2].second.text, "hi");
  EXPECT_EQ(v[3].second.kind, Value::Kind::Null);
  ASSERT_EQ(v[4].second.dict.size(), 2u);
  EXPECT_EQ(v[4].second.dict[1].second, 2.5);
  EXPECT_THROW(parse_values("[1]"), std::invalid_argument);
  EXPECT_THROW(parse_values(R"({"a": [1]})"), std::invalid_argument);
  EXPECT_THROW(parse_values(R"({"a": {"b": "x"}})"), std::invalid_argument);
  EXPECT_THROW(parse_values(R"({"a": 1, "a": 2})"), std::invalid_argument);
  EXPECT_THROW(parse_values("{nope"), std::invalid_argument);
  // NaN and the infinities as Python's json module writes them; in strings they stay text.
  Values s = parse_values(R"({"loss": NaN, "up": Infinity, "down": -Infinity, "g": {"a": NaN}, "t": "NaN x"})");
  EXPECT_TRUE(std::isnan(s[0].second.number));
  EXPECT_EQ(s[1].second.number, HUGE_VAL);
  EXPECT_EQ(s[2].second.number, -HUGE_VAL);
  EXPECT_TRUE(std::isnan(s[3].second.dict[0].second));
  EXPECT_EQ(s[4].second.text, "NaN x");

  Values h = parse_hparams(R"({"lr": 0.001, "opt": {"name": "adamw", "betas": [0.9, 0.95]}, "amp": false})");
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[1].first, "opt.name");
  EXPECT_EQ(h[2].first, "opt.betas");
  EXPECT_EQ(h[2].second.text, "[0.9,0.95]");
  EXPECT_EQ(python_str(h[0].second), "0.001");
  EXPECT_EQ(python_str(h[3].second), "False");
  EXPECT_TRUE(parse_hparams("").empty());
  EXPECT_TRUE(parse_hparams("null").empty());
  EXPECT_EQ(format_number(3), "3");
  EXPECT_EQ(format_number(1e-5), "1e-05");
}

TEST(LogWith, ResolvedAsAccelerate) {
  EXPECT_EQ(resolve_log_with({"all"}, "/x"), tracker_names());
  EXPECT_EQ(resolve_log_with({"csv", "jsonl", "csv"}, "/x"), (std::vector<std::string>{"csv", "jsonl"}));
  EXPECT_EQ(resolve_log_with({"mlflow"}, ""), std::vector<std::string>{"mlflow"});
  try {
    resolve_log_with({"tensorboard"}, "");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("requires a logging directory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(resolve_log_with({"wandb"}, ""), std::vector<std::string>{"wandb"});  // ./wandb, as wandb.init
  EXPECT_THROW(resolve_log_with({"comet_ml"}, "/x"), std::invalid_argument);
}

TEST(TensorBoard, ScalarsTextGroupsAndHparams) {
  TempDir t;
  {
    TrackerSet set({"tensorboard"}, "proj", t.path, "", {});
    set.store_init_configuration(parse_hparams(R"({"lr": 0.001, "name": "gpt", "amp": true, "gone": null})"));
    set.log(parse_values(R"({"loss": 2.5, "lr": 0.001})"), 1);
    set.log(parse_values(R"({"loss": 1.25, "note": "hello", "acc": {"train": 0.5, "val": 0.25}})"), 2);
    set.finish();
  }
  const std::string dir = t.path + "/proj";
  std::string path = event_file(dir);
  ASSERT_FALSE(path.empty());
  auto events = read_events(path);
  ASSERT_GE(events.size(), 6u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GT(events[0].wall_time(), 1.6e9);
  // hparams: session_start_info
  ASSERT_TRUE(events[1].has_summary());
  const auto& hv = events[1].summary().value(0);
  EXPECT_EQ(hv.tag(), "_hparams_/session_start_info");
  EXPECT_EQ(hv.metadata().plugin_data().plugin_name(), "hparams");
  acc::tb::HParamsPluginData pd;
  ASSERT_TRUE(pd.ParseFromString(hv.metadata().plugin_data().content()));
  EXPECT_EQ(pd.version(), 0);
  ASSERT_TRUE(pd.has_session_start_info());
  const auto& hp = pd.session_start_info().hparams();
  EXPECT_EQ(hp.size(), 3u);  // null skipped
  EXPECT_EQ(hp.at("lr").number_value(), 0.001);
  EXPECT_EQ(hp.at("name").string_value(), "gpt");
  EXPECT_TRUE(hp.at("amp").bool_value());
  // scalars
  std::vector<std::tuple<std::string, int64_t, float>> scalars;
  std::string text;
  bool ended = false;
  for (const auto& e : events) {
    if (!e.has_summary()) continue;
    for (const auto& v : e.summary().value()) {
      if (v.has_simple_value()) scalars.emplace_back(v.tag(), e.step(), v.simple_value());
      if (v.tag() == "note/text_summary") {
        EXPECT_EQ(v.metadata().plugin_data().plugin_name(), "text");
        EXPECT_EQ(v.tensor().dtype(), acc::tb::DT_STRING);
        text = v.tensor().string_val(0);
        EXPECT_EQ(e.step(), 2);
      }
      if (v.tag() == "_hparams_/session_end_info") {
        acc::tb::HParamsPluginData end;
        ASSERT_TRUE(end.ParseFromString(v.metadata().plugin_data().content()));
        EXPECT_EQ(end.session_end_info().status(), acc::tb::STATUS_SUCCESS);
        ended = true;
      }
    }
  }
  EXPECT_EQ(text, "hello");
  EXPECT_TRUE(ended);
  ASSERT_EQ(scalars.size(), 3u);
  EXPECT_EQ(scalars[0], std::make_tuple(std::string("loss"), int64_t{1}, 2.5f));
  EXPECT_EQ(scalars[1], std::make_tuple(std::string("lr"), int64_t{1}, 0.001f));
  EXPECT_EQ(scalars[2], std::make_tuple(std::string("loss"), int64_t{2}, 1.25f));
  // add_scalars: one run directory per member, tagged with the group's name
  auto sub = read_events(event_file(dir + "/acc_train"));
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub[1].summary().value(0).tag(), "acc");
  EXPECT_EQ(sub[1].summary().value(0).simple_value(), 0.5f);
  EXPECT_FALSE(event_file(dir + "/acc_val").empty());
}

TEST(TensorBoard, UnknownKwargIsAnError) {
  TempDir t;
  EXPECT_THROW(TrackerSet({"tensorboard"}, "p", t.path, R"({"tensorboard": {"flush_secs": 3}})", {}),
               std::invalid_argument);
  EXPECT_THROW(TrackerSet({"tensorboard"}, "p", t.path, R"({"comet_ml": {}})", {}), std::invalid_argument);
  TrackerSet ok({"tensorboard"}, "p", t.path, R"({"tensorboard": {"filename_suffix": ".v2"}})", {});
  EXPECT_NE(event_file(t.path + "/p").find(".v2"), std::string::npos);
  EXPECT_THROW(TrackerSet({"jsonl"}, "a/b", t.path, "", {}), std::invalid_argument);
}

// hparams.json holding a NaN (written as Python does) is still the trackers' own: a later run replaces it.
TEST(Jsonl, HparamsWithNaNStayTheTrackers) {
  TempDir t;
  {
    TrackerSet set({"jsonl"}, "proj", t.path, "", {});
    set.store_init_configuration(Values{{"lr", Value::of(std::nan(""))}});
    set.finish();
  }
  EXPECT_EQ(slurp(t.path + "/proj/hparams.json"), "{\"lr\": NaN}\n");
  TrackerSet again({"jsonl"}, "proj", t.path, "", {});
  again.store_init_configuration(parse_hparams(R"({"lr": 0.1})"));
  again.finish();
  EXPECT_EQ(slurp(t.path + "/proj/hparams.json"), "{\"lr\": 0.1}\n");
}

TEST(Jsonl, OneObjectPerCallAndResume) {
  TempDir t;
  {
    TrackerSet set({"jsonl"}, "proj", t.path, "", {});
    set.store_init_configuration(parse_hparams(R"({"lr": 0.001, "opt": {"name": "sgd"}})"));
    set.log(parse_values(R"({"loss": 0.5, "note": "a\"b"})"), 3);
    set.log(Values{{"nan", Value::of(std::nan(""))}}, std::nullopt);
    set.finish();
  }
  const std::string dir = t.path + "/proj";
  EXPECT_EQ(slurp(dir + "/hparams.json"), "{\"lr\": 0.001, \"opt.name\": \"sgd\"}\n");
  auto l = lines(slurp(dir + "/metrics.jsonl"));
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].rfind("{\"step\": 3, \"time\": ", 0), 0u) << l[0];
  EXPECT_NE(l[0].find("\"values\": {\"loss\": 0.5, \"note\": \"a\\\"b\"}}"), std::string::npos) << l[0];
  EXPECT_EQ(l[1].rfind("{\"step\": null", 0), 0u);
  EXPECT_NE(l[1].find("{\"nan\": NaN}"), std::string::npos);
  // A crash cut the last line short: reopening drops it and appends after the complete ones.
  {
    std::ofstream f(dir + "/metrics.jsonl", std::ios::app);
    f << "{\"step\": 9, \"ti";
  }
  {
    TrackerSet set({"jsonl"}, "proj", t.path, "", {});
    set.log(parse_values(R"({"loss": 0.25})"), 4);
  }
  l = lines(slurp(dir + "/metrics.jsonl"));
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[2].rfind("{\"step\": 4,", 0), 0u) << l[2];
}

TEST(Csv, HeaderFromFirstCallNewKeysWiden) {
  TempDir t;
  const std::string path = t.path + "/proj/metrics.csv";
  {
    TrackerSet set({"csv"}, "proj", t.path, "", {});
    set.log(parse_values(R"({"loss": 0.5, "note": "a,b"})"), 1);
    set.log(parse_values(R"({"loss": 0.25})"), 2);
    set.log(parse_values(R"({"acc": {"x": 1}, "loss": 0.125, "lr": 0.01})"), 3);
    set.finish();
  }
  auto l = lines(slurp(path));
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0], "step,time,loss,note,acc/x,lr");
  auto cells = [](const std::string& row) {
    std::vector<std::string> c;
    std::string cur;
    bool q = false;
    for (char ch : row) {
      if (ch == '"') q = !q;
      else if (ch == ',' && !q) c.push_back(cur), cur.clear();
      else cur += ch;
    }
    c.push_back(cur);
    return c;
  };
  auto r1 = cells(l[1]);
  ASSERT_EQ(r1.size(), 6u);
  EXPECT_EQ(r1[0], "1");
  EXPECT_EQ(r1[2], "0.5");
  EXPECT_EQ(r1[3], "a,b");
  EXPECT_EQ(r1[4], "");
  auto r3 = cells(l[3]);
  EXPECT_EQ(r3[2], "0.125");
  EXPECT_EQ(r3[3], "");
  EXPECT_EQ(r3[4], "1");
  EXPECT_EQ(r3[5], "0.01");
  // Resume: the header read back, rows appended.
  {
    TrackerSet set({"csv"}, "proj", t.path, "", {});
    set.log(parse_values(R"({"lr": 0.02})"), std::nullopt);
  }
  l = lines(slurp(path));
  ASSERT_EQ(l.size(), 5u);
  auto r4 = cells(l[4]);
  EXPECT_EQ(r4[0], "");
  EXPECT_EQ(r4[5], "0.02");
  mkdir((t.path + "/bad").c_str(), 0755);
  spit(t.path + "/bad/metrics.csv", "a,b\n1,2\n");
  EXPECT_THROW(TrackerSet({"csv"}, "bad", t.path, "", {}), std::invalid_argument);
}

TEST(Mlflow, FileStoreLayout) {
  TempDir t;
  std::string run_dir, exp_id;
  {
    TrackerSet set({"mlflow"}, "proj", t.path, R"({"mlflow": {"run_name": "first", "tags": {"team": "x"}}})",
                   {{"USER", "tester"}});
    run_dir = set.trackers()[0]->location();
    set.store_init_configuration(parse_hparams(R"({"lr": 0.001, "amp": true, "opt": {"name": "adamw"}})"));
    set.log(parse_values(R"({"loss": 0.5, "note": "skipped", "train/acc": 0.75})"), 3);
    set.log(parse_values(R"({"loss": 0.25})"), std::nullopt);
    EXPECT_THROW(set.log(parse_values(R"({"bad*name": 1})"), 1), std::invalid_argument);
    EXPECT_THROW(set.log(parse_values(R"({"a//b": 1})"), 1), std::invalid_argument);
    std::string meta = slurp(run_dir + "/meta.yaml");
    EXPECT_NE(meta.find("status: 1"), std::string::npos) << meta;
    EXPECT_NE(meta.find("end_time: ~"), std::string::npos) << meta;
    set.finish();
  }
  const std::string root = t.path + "/mlruns";
  EXPECT_EQ(list(root).size(), 3u);  // .trash, 0, the experiment
  EXPECT_NE(slurp(root + "/0/meta.yaml").find("name: \"Default\""), std::string::npos);
  exp_id = run_dir.substr(root.size() + 1, run_dir.rfind('/') - root.size() - 1);
  std::string emeta = slurp(root + "/" + exp_id + "/meta.yaml");
  EXPECT_NE(emeta.find("name: \"proj\""), std::string::npos) << emeta;
  EXPECT_NE(emeta.find("experiment_id: '" + exp_id + "'"), std::string::npos) << emeta;
  EXPECT_EQ(slurp(root + "/" + exp_id + "/tags/team"), "x");
  std::string meta = slurp(run_dir + "/meta.yaml");
  EXPECT_NE(meta.find("status: 3"), std::string::npos) << meta;
  EXPECT_NE(meta.find("run_name: \"first\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("user_id: \"tester\""), std::string::npos) << meta;
  EXPECT_EQ(slurp(run_dir + "/params/lr"), "0.001");
  EXPECT_EQ(slurp(run_dir + "/params/amp"), "True");
  EXPECT_EQ(slurp(run_dir + "/params/opt.name"), "adamw");
  EXPECT_EQ(slurp(run_dir + "/tags/mlflow.runName"), "first");
  EXPECT_EQ(slurp(run_dir + "/tags/team"), "x");
  auto loss = lines(slurp(run_dir + "/metrics/loss"));
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_NE(loss[0].find(" 0.5 3"), std::string::npos) << loss[0];
  EXPECT_NE(loss[1].find(" 0.25 0"), std::string::npos) << loss[1];
  EXPECT_EQ(lines(slurp(run_dir + "/metrics/train/acc")).size(), 1u);
  EXPECT_FALSE(exists(run_dir + "/metrics/note"));
  // A second run of the same project reuses the experiment; MLFLOW_EXPERIMENT_NAME names another.
  {
    TrackerSet set({"mlflow"}, "proj", t.path, "", {});
    EXPECT_EQ(set.trackers()[0]->location().rfind(root + "/" + exp_id + "/", 0), 0u);
  }
  {
    TrackerSet set({"mlflow"}, "proj", t.path, "", {{"MLFLOW_EXPERIMENT_NAME", "other"}});
    EXPECT_NE(set.trackers()[0]->location().rfind(root + "/" + exp_id + "/", 0), 0u);
  }
  // MLFLOW_RUN_ID continues a run; MLFLOW_TRACKING_URI moves the store; other URIs are refused.
  const std::string run_id = run_dir.substr(run_dir.rfind('/') + 1);
  {
    TrackerSet set({"mlflow"}, "proj", t.path, "", {{"MLFLOW_RUN_ID", run_id}});
    EXPECT_EQ(set.trackers()[0]->location(), run_dir);
    EXPECT_NE(slurp(run_dir + "/meta.yaml").find("status: 1"), std::string::npos);
    set.log(parse_values(R"({"loss": 0.125})"), 4);
  }
  EXPECT_EQ(lines(slurp(run_dir + "/metrics/loss")).size(), 3u);
  EXPECT_NE(slurp(run_dir + "/meta.yaml").find("status: 3"), std::string::npos);
  {
    TrackerSet set({"mlflow"}, "proj", "", "", {{"MLFLOW_TRACKING_URI", "file://" + t.path + "/elsewhere"}});
    EXPECT_TRUE(exists(t.path + "/elsewhere/0/meta.yaml"));
  }
  EXPECT_THROW(TrackerSet({"mlflow"}, "proj", t.path, "", {{"MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"}}),
               std::invalid_argument);
  // An http(s) URI is a tracking server (tests/tracking/mlflow_server.py talks to a real one): one that cannot be
  // reached fails at once with an I/O error naming its URL, and writes nothing.
  try {
    TrackerSet({"mlflow"}, "proj", t.path + "/server", "", {{"MLFLOW_TRACKING_URI", "http://127.0.0.1:1"}});
    ADD_FAILURE() << "an unreachable tracking server was accepted";
  } catch (const std::ios_base::failure& e) {
    EXPECT_NE(std::string(e.what()).find("http://127.0.0.1:1/api/2.0/mlflow/"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(t.path + "/server"));
}

// Names that become paths (issue 23): the project name, an add_scalars member, an MLflow metric, parameter or tag
// stay inside the run's folder, for every tracker alike; what would leave it is refused naming the metric, before
// any tracker writes.
TEST(Names, StayInsideTheRunFolder) {
  TempDir t;
  const std::string logs = t.path + "/logs";
  mkdir(logs.c_str(), 0755);
  {
    TrackerSet set({"tensorboard", "jsonl", "csv", "mlflow"}, "proj", logs, "", {});
    set.log(parse_values(R"({"loss": 1})"), 0);
    for (const char* bad : {R"({"acc": {"/../../../x": 1}})", R"({"acc": {"a/../../../x": 1}})",
                            R"({"acc": {"a/..": 1}})", R"({"acc": {"a//b": 1}})", R"({"acc": {"a/": 1}})"}) {
      try {
        set.log(parse_values(bad), 1);
        ADD_FAILURE() << "accepted " << bad;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'acc'"), std::string::npos) << e.what();
      }
    }
    // A '/' in a member nests the run, as SummaryWriter.add_scalars does ("<main_tag>_<tag>" unchanged); the main
    // tag's '/' becomes '_'.
    set.log(parse_values(R"({"a/b": {"c/d": 2, "": 3}})"), 2);
    set.finish();
  }
  EXPECT_EQ(list(t.path), std::vector<std::string>{"logs"});
  EXPECT_EQ(list(logs), (std::vector<std::string>{"mlruns", "proj"}));
  EXPECT_FALSE(event_file(logs + "/proj/a_b_c/d").empty());
  EXPECT_FALSE(event_file(logs + "/proj/a_b_").empty());
  // The refused calls wrote nothing in any tracker.
  EXPECT_EQ(lines(slurp(logs + "/proj/metrics.jsonl")).size(), 2u);
  EXPECT_EQ(lines(slurp(logs + "/proj/metrics.csv")).size(), 3u);

  // The project name is one plain name for every tracker, MLflow's too (its experiment's name).
  for (const char* tracker : {"tensorboard", "jsonl", "csv", "mlflow"})
    for (const std::string& bad : {std::string(), std::string("."), std::string(".."), std::string("a/b"),
                                   std::string("/abs"), std::string("a\0b", 3), std::string(256, 'p')}) {
      EXPECT_THROW(TrackerSet({tracker}, bad, logs, "", {}), std::invalid_argument) << tracker << " " << bad;
    }
  EXPECT_EQ(list(t.path), std::vector<std::string>{"logs"});
}

// MLflow's own client validates every name it reads back (mlflow.utils.validation: _validate_metric_name,
// _validate_param_name, _validate_tag_name); a name it refuses makes the run unreadable, so libacc refuses it first.
TEST(Mlflow, NamesAsMlflowValidatesThem) {
  TempDir t;
  TrackerSet set({"mlflow"}, "proj", t.path, "", {});
  const std::string run = set.trackers()[0]->location();
  const std::vector<std::string> bad = {"..x",
                                        "...",
                                        "..",
                                        ".",
                                        "./a",
                                        "a/.",
                                        "a/./b",
                                        "a/../b",
                                        "a/",
                                        "/a",
                                        "a//b",
                                        "a\tb",
                                        "a*b",
                                        "a\\b",
                                        "loss\xe2\x82\xac",  // '€' is not a word character
                                        "a\xc2\xa0"
                                        "b",     // a no-break space
                                        "\xc3(",
                                        "\xff",
                                        std::string(251, 'x')};
  for (const auto& name : bad) {
    EXPECT_THROW(set.log(Values{{name, Value::of(1.0)}}, 0), std::invalid_argument) << name;
    EXPECT_THROW(set.store_init_configuration(Values{{name, Value::of(1.0)}}), std::invalid_argument) << name;
    const std::string tags = "{\"mlflow\": {\"tags\": {\"" + name + "\": \"v\"}}}";
    if (name.find_first_of("\\\t\xff") == std::string::npos && name != "\xc3(") {
      EXPECT_THROW(TrackerSet({"mlflow"}, "proj", t.path, tags, {}), std::invalid_argument) << name;
    }
  }
  const std::vector<std::string> good = {"a/..x",
                                         "a/b",
                                         "pr\xc3\xa9"
                                         "cision",
                                         "a:b c",
                                         "x.y-z_w",
                                         "a..b",
                                         std::string(250, 'x')};
  for (const auto& name : good) {
    EXPECT_NO_THROW(set.log(Values{{name, Value::of(1.0)}}, 0)) << name;
    EXPECT_TRUE(exists(run + "/metrics/" + name)) << name;
  }
  EXPECT_EQ(list(run + "/metrics").size(), good.size() - 1);  // a/..x and a/b share the folder a
}

// The trackers write only files they made: a file of the user's under one of their names is refused (never cut,
// replaced or appended to), a link or a FIFO is not followed or opened for writing, and a new event file never takes
// an existing name.
TEST(Trackers, KeepTheUsersFiles) {
  TempDir t;
  const std::string dir = t.path + "/proj";
  mkdir(dir.c_str(), 0755);
  const std::string outside = t.path + "/outside.txt";
  spit(outside, "mine");
  auto refused = [&](const std::string& tracker, const std::string& file, const std::string& needle) {
    try {
      TrackerSet set({tracker}, "proj", t.path, "", {});
      set.store_init_configuration(parse_hparams(R"({"lr": 1})"));
      set.log(parse_values(R"({"loss": 1})"), 0);
      ADD_FAILURE() << tracker << " wrote into " << file;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // The user's own metrics files, without a final newline (what a crash would leave of libacc's).
  spit(dir + "/metrics.jsonl", "my notes");
  refused("jsonl", "metrics.jsonl", "not a libacc");
  EXPECT_EQ(slurp(dir + "/metrics.jsonl"), "my notes");
  spit(dir + "/metrics.csv", "a,b\n1,2");
  refused("csv", "metrics.csv", "not a libacc");
  EXPECT_EQ(slurp(dir + "/metrics.csv"), "a,b\n1,2");
  unlink((dir + "/metrics.csv").c_str());
  // A link to a file elsewhere, and a FIFO (opening it for writing would wait for a reader).
  unlink((dir + "/metrics.jsonl").c_str());
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/metrics.jsonl").c_str()), 0);
  refused("jsonl", "metrics.jsonl", "symbolic link");
  EXPECT_EQ(slurp(outside), "mine");
  ASSERT_EQ(symlink((t.path + "/made_by_tracker").c_str(), (dir + "/metrics.csv").c_str()), 0);  // dangling
  refused("csv", "metrics.csv", "symbolic link");
  EXPECT_FALSE(exists(t.path + "/made_by_tracker"));
  unlink((dir + "/metrics.jsonl").c_str());
  ASSERT_EQ(mkfifo((dir + "/metrics.jsonl").c_str(), 0644), 0);
  refused("jsonl", "metrics.jsonl", "not a regular file");
  unlink((dir + "/metrics.jsonl").c_str());
  unlink((dir + "/metrics.csv").c_str());
  // The user's hparams.json (a nested config, which the trackers never write) is not replaced.
  spit(dir + "/hparams.json", R"({"model": {"layers": 4}})");
  refused("jsonl", "hparams.json", "not a libacc");
  EXPECT_EQ(slurp(dir + "/hparams.json"), R"({"model": {"layers": 4}})");
  unlink((dir + "/hparams.json").c_str());
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/hparams.json").c_str()), 0);
  refused("csv", "hparams.json", "symbolic link");
  EXPECT_EQ(slurp(outside), "mine");
  unlink((dir + "/hparams.json").c_str());
  // libacc's own files are continued (a resumed run) and its hparams.json replaced.
  {
    TrackerSet set({"jsonl", "csv"}, "proj", t.path, "", {});
    set.store_init_configuration(parse_hparams(R"({"lr": 1})"));
    set.log(parse_values(R"({"loss": 1})"), 0);
  }
  {
    TrackerSet set({"jsonl", "csv"}, "proj", t.path, "", {});
    set.store_init_configuration(parse_hparams(R"({"lr": 2})"));
    set.log(parse_values(R"({"loss": 2})"), 1);
  }
  EXPECT_EQ(lines(slurp(dir + "/metrics.jsonl")).size(), 2u);
  EXPECT_EQ(lines(slurp(dir + "/metrics.csv")).size(), 3u);
  EXPECT_EQ(slurp(dir + "/hparams.json"), "{\"lr\": 2}\n");
  // Event files: a file of the name SummaryWriter's scheme would give now is left as it is.
  const std::string tb = t.path + "/tb";
  mkdir(tb.c_str(), 0755);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<std::string> taken;
  for (long secs = static_cast<long>(time(nullptr)); secs < static_cast<long>(time(nullptr)) + 3; ++secs)
    for (int uid = 0; uid < 64; ++uid) {
      char name[512];
      snprintf(name, sizeof name, "%s/events.out.tfevents.%010ld.%s.%d.%d", tb.c_str(), secs, host,
               static_cast<int>(getpid()), uid);
      spit(name, "user");
      taken.push_back(name);
    }
  {
    TrackerSet set({"tensorboard"}, "tb", t.path, "", {});
    set.log(parse_values(R"({"loss": 1})"), 0);
  }
  for (const auto& p : taken) EXPECT_EQ(slurp(p), "user") << p;
  EXPECT_EQ(list(tb).size(), taken.size() + 1);
}

// The MLflow server client's messages name the URL without the credentials a URI may hold; query values are escaped.
TEST(Http, UrlsInMessages) {
  using acc::tracking::http::escape;
  using acc::tracking::http::redacted;
  EXPECT_EQ(redacted("https://me:secret@host:5000/api?x=a@b"), "https://***@host:5000/api?x=a@b");
  EXPECT_EQ(redacted("http://host:5000/api?x=a@b"), "http://host:5000/api?x=a@b");
  EXPECT_EQ(redacted("http://me@host"), "http://***@host");
  EXPECT_EQ(escape("a b/c&d=é"), "a%20b%2Fc%26d%3D%C3%A9");
}

// A server's error body quoted in a message (issue 36): bounded, its control bytes (C0, DEL, C1) and bytes that are not
// UTF-8 written as \xNN, its characters otherwise kept whole.
TEST(Http, ServerTextInMessages) {
  namespace http = acc::tracking::http;  // not std::quoted, which a std::string argument finds too
  EXPECT_EQ(http::quoted("bad credentials"), "bad credentials");
  EXPECT_EQ(http::quoted("\x1b[2J\r\n\x7f"
                         "é\xc2\x9b"
                         "1m"),
            "\\x1b[2J\\x0d\\x0a\\x7fé\\xc2\\x9b1m");
  // Not UTF-8: a lone continuation byte, an overlong '/', a surrogate, a sequence cut short at the end.
  EXPECT_EQ(http::quoted("a\x80"
                         "b\xc0\xaf"
                         "c\xed\xa0\x80"
                         "d\xe2\x82"),
            "a\\x80b\\xc0\\xafc\\xed\\xa0\\x80d\\xe2\\x82");
  EXPECT_EQ(http::quoted("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
  // 100 KB: the first 300 bytes (a character never split), then the size.
  std::string body;
  for (int i = 0; i < 50000; ++i) body += "é";
  const std::string q = http::quoted(body);
  EXPECT_EQ(q, std::string(body, 0, 300) + "... (100000 bytes)");
  std::string escapes(100000, '\x1b');
  const std::string e = http::quoted(escapes);
  EXPECT_LE(e.size(), 300u + 4 + 20);
  EXPECT_EQ(e.find('\x1b'), std::string::npos);
  EXPECT_NE(e.find("... (100000 bytes)"), std::string::npos) << e;
  EXPECT_EQ(http::quoted("abcdef", 3), "abc... (6 bytes)");
}

// W&B's .wandb framing (wandb/sdk/internal/datastore.py): chunks of CRC-32 (zlib's, of the type byte then the data) |
// uint16 length | type, in 32 KiB blocks whose last 1..6 bytes are zeros. trackers-read reads whole runs with wandb's
// own reader; here the block edges are placed exactly.
TEST(Wandb, LogChunksAtBlockEdges) {
  struct Chunk {
    uint32_t crc;
    size_t length;
    int type;
  };
  auto chunks = [](const std::string& bytes, size_t pad) {
    std::vector<Chunk> out;
    for (size_t i = 0; i < pad; ++i) EXPECT_EQ(bytes[i], '\0');
    for (size_t at = pad; at < bytes.size();) {
      const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + at);
      Chunk c{p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24, static_cast<size_t>(p[4] | p[5] << 8),
              p[6]};
      out.push_back(c);
      at += 7 + c.length;
    }
    return out;
  };
  constexpr uint64_t kBlock = 32768;
  auto c = chunks(wandb_log_chunks(7, "abc"), 0);  // after the file header: one FULL chunk
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].crc, 0x539d20a9u);  // zlib.crc32(b"\x01abc")
  EXPECT_EQ(c[0].length, 3u);
  EXPECT_EQ(c[0].type, 1);
  EXPECT_EQ(wandb_log_chunks(kBlock - 10, "abc").size(), 10u);  // fills the block exactly: FULL
  c = chunks(wandb_log_chunks(kBlock - 10, "abcd"), 0);  // one byte more: FIRST (3), LAST (1)
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].type, 2);
  EXPECT_EQ(c[0].length, 3u);
  EXPECT_EQ(c[1].type, 4);
  EXPECT_EQ(c[1].length, 1u);
  c = chunks(wandb_log_chunks(kBlock - 7, "xyz"), 0);  // room for a header only: an empty FIRST, then LAST
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].type, 2);
  EXPECT_EQ(c[0].length, 0u);
  EXPECT_EQ(c[1].type, 4);
  EXPECT_EQ(c[1].length, 3u);
  for (uint64_t left = 1; left < 7; ++left) {  // too short for a header: zeros, then FULL in the next block
    const std::string bytes = wandb_log_chunks(kBlock - left, "xxx");
    ASSERT_EQ(bytes.size(), left + 10) << left;
    c = chunks(bytes, left);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].type, 1);
  }
  c = chunks(wandb_log_chunks(7, std::string(70000, 'x')), 0);  // FIRST, MIDDLE, LAST: each to its block's end
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].type, 2);
  EXPECT_EQ(c[0].length, kBlock - 14);
  EXPECT_EQ(c[1].type, 3);
  EXPECT_EQ(c[1].length, kBlock - 7);
  EXPECT_EQ(c[2].type, 4);
  EXPECT_EQ(c[2].length, 70000 - (kBlock - 14) - (kBlock - 7));
  EXPECT_EQ(wandb_log_chunks(7, "").size(), 7u);  // an empty record: one empty FULL chunk
}
