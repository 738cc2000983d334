// The tensorboard tracker: TensorBoard event files, as torch's SummaryWriter writes them for Accelerate's
// TensorBoardTracker.
//
// An event file is a sequence of TFRecords, each
//   uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
// where data is a serialized Event (tensorboard.proto): first {wall_time, file_version: "brain.Event:2"},
// then one event per value with wall_time, step and a Summary. The CRC mask is ((crc >> 15 | crc << 17) +
// 0xa282ead8) mod 2^32. Scalars are simple_value summaries (add_scalar), strings text-plugin tensors tagged
// "<name>/text_summary" (add_text), objects of numbers one event file per member in "<run>/<name>_<member>"
// (add_scalars), hyperparameters the HParams plugin's session_start_info (and session_end_info at finish).
#include <unistd.h>

#include <acc/config.hpp>
#include <acc/files.hpp>

#include <cerrno>

#include <array>
#include <atomic>
#include <cstdio>
#include <ios>
#include <map>

#include "tensorboard.pb.h"
#include "tracking/tracking.hpp"

namespace acc::tracking {

namespace {

// CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF.
const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto& t = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  auto le = [](std::string& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  std::string out;
  out.reserve(data.size() + 16);
  le(out, data.size(), 8);
  le(out, masked_crc32c(out.data(), 8), 4);
  out.append(data);
  le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

namespace {

std::atomic<int> g_uid{0};

// One event file: events.out.tfevents.<seconds>.<host>.<pid>.<uid><suffix>, as SummaryWriter names them. The name
// is new: an existing file of that name (a restarted job with the same pid in the same second) is left alone and
// the next uid taken, where SummaryWriter would truncate it.
class EventFile {
 public:
  EventFile(const std::string& dir, const std::string& suffix) {
    config::make_directories(dir);
    for (int attempt = 0;; ++attempt) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%010lld", static_cast<long long>(wall_time()));
      path_ = name_path(dir,
                        std::string("events.out.tfevents.") + secs + "." + config::host_name() + "." +
                            std::to_string(::getpid()) + "." + std::to_string(g_uid++) + suffix,
                        "event file", /*nested=*/false);
      try {
        file_ = AppendFile::create(path_);
        break;
      } catch (const std::ios_base::failure& e) {
        if (e.code().value() != EEXIST || attempt >= 1000) throw;
      }
    }
    tb::Event e;
    e.set_wall_time(wall_time());
    e.set_file_version("brain.Event:2");
    write(e);
  }
  void write(const tb::Event& e) {
    std::string data;
    if (!e.SerializeToString(&data)) throw std::runtime_error("cannot serialize a TensorBoard event");
    file_.append(tfrecord(data));
  }
  void close() {
    file_.sync();
    file_.close();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  AppendFile file_;
};

tb::Event event_at(std::optional<int64_t> step) {
  tb::Event e;
  e.set_wall_time(wall_time());
  if (step) e.set_step(*step);
  return e;
}

void set_hparams_metadata(tb::Summary::Value* v, const tb::HParamsPluginData& data) {
  auto* pd = v->mutable_metadata()->mutable_plugin_data();
  pd->set_plugin_name("hparams");
  pd->set_content(data.SerializeAsString());
  // The HParams writer's null tensor: DT_FLOAT of shape [0].
  auto* t = v->mutable_tensor();
  t->set_dtype(tb::DT_FLOAT);
  t->mutable_tensor_shape()->add_dim()->set_size(0);
}

class TensorBoardTracker final : public Tracker {
 public:
  explicit TensorBoardTracker(const RunOptions& o) {
    check_kwargs(o, "tensorboard", {"filename_suffix"});
    suffix_ = kwarg_string(o, "tensorboard", "filename_suffix").value_or("");
    if (suffix_.find('/') != std::string::npos)
      throw std::invalid_argument("init_kwargs.tensorboard.filename_suffix must not contain '/'");
    dir_ = name_path(o.logging_dir, o.project_name, "project_name", /*nested=*/false);
    main_ = std::make_unique<EventFile>(dir_, suffix_);
  }
  ~TensorBoardTracker() override {
    try {
      finish();
    } catch (...) {
    }
  }
  const char* name() const override { return "tensorboard"; }
  const std::string& location() const override { return dir_; }

  void store_init_configuration(const Values& hparams) override {
    tb::HParamsPluginData data;
    data.set_version(0);
    auto* ssi = data.mutable_session_start_info();
    ssi->set_start_time_secs(wall_time());
    auto& map = *ssi->mutable_hparams();
    for (const auto& [k, v] : hparams) {
      tb::HParamValue hv;
      switch (v.kind) {
        case Value::Kind::Number: hv.set_number_value(v.number); break;
        case Value::Kind::Bool: hv.set_bool_value(v.flag); break;
        case Value::Kind::String: hv.set_string_value(v.text); break;
        case Value::Kind::Dict: hv.set_string_value(python_str(v)); break;
        case Value::Kind::Null: continue;  // add_hparams skips None
      }
      map[k] = hv;
    }
    tb::Event e = event_at(std::nullopt);
    auto* val = e.mutable_summary()->add_value();
    val->set_tag("_hparams_/session_start_info");
    set_hparams_metadata(val, data);
    main_->write(e);
    session_started_ = true;
  }

  void log(const Values& values, std::optional<int64_t> step) override {
    for (const auto& [k, v] : values) {
      if (auto x = v.scalar()) {
        tb::Event e = event_at(step);
        auto* val = e.mutable_summary()->add_value();
        val->set_tag(k);
        val->set_simple_value(static_cast<float>(*x));
        main_->write(e);
      } else if (v.kind == Value::Kind::String) {
        tb::Event e = event_at(step);
        auto* val = e.mutable_summary()->add_value();
        val->set_tag(k + "/text_summary");
        auto* pd = val->mutable_metadata()->mutable_plugin_data();
        pd->set_plugin_name("text");
        pd->set_content(tb::TextPluginData().SerializeAsString());
        auto* t = val->mutable_tensor();
        t->set_dtype(tb::DT_STRING);
        t->mutable_tensor_shape()->add_dim()->set_size(1);
        t->add_string_val(v.text);
        main_->write(e);
      } else if (v.kind == Value::Kind::Dict) {
        for (const auto& [member, x] : v.dict) {
          std::string sub = scalars_run(k, member);
          auto it = subs_.find(sub);
          if (it == subs_.end()) it = subs_.emplace(sub, std::make_unique<EventFile>(sub, suffix_)).first;
          tb::Event e = event_at(step);
          auto* val = e.mutable_summary()->add_value();
          val->set_tag(k);
          val->set_simple_value(static_cast<float>(x));
          it->second->write(e);
        }
      }
      // null: nothing, as SummaryWriter has no such value
    }
  }

  // Every add_scalars run of `values` stays inside the run's folder: checked before any tracker writes.
  void check(const Values& values) const override {
    for (const auto& [k, v] : values)
      if (v.kind == Value::Kind::Dict)
        for (const auto& m : v.dict) scalars_run(k, m.first);
  }

  void finish() override {
    if (!main_) return;
    if (session_started_) {
      tb::HParamsPluginData data;
      data.set_version(0);
      auto* sei = data.mutable_session_end_info();
      sei->set_status(tb::STATUS_SUCCESS);
      sei->set_end_time_secs(wall_time());
      tb::Event e = event_at(std::nullopt);
      auto* val = e.mutable_summary()->add_value();
      val->set_tag("_hparams_/session_end_info");
      set_hparams_metadata(val, data);
      main_->write(e);
    }
    for (auto& [p, f] : subs_) f->close();
    subs_.clear();
    main_->close();
    main_.reset();
  }

 private:
  // add_scalars' run folder of one member: "<main_tag with '/' as '_'>_<member>", the member unchanged, as
  // SummaryWriter.add_scalars names it ("a/b" in a member nests the run); a member that would climb out of the run's
  // folder ("..", "", "." parts) is refused naming the metric.
  std::string scalars_run(const std::string& main_tag, const std::string& member) const {
    std::string base = main_tag;
    for (char& c : base)
      if (c == '/') c = '_';
    return name_path(dir_, base + "_" + member, "the add_scalars run of '" + main_tag + "'", /*nested=*/true);
  }

  std::string dir_, suffix_;
  std::unique_ptr<EventFile> main_;
  std::map<std::string, std::unique_ptr<EventFile>> subs_;
  bool session_started_ = false;
};

}  // namespace

std::unique_ptr<Tracker> make_tensorboard(const RunOptions& o) { return std::make_unique<TensorBoardTracker>(o); }

}  // namespace acc::tracking
