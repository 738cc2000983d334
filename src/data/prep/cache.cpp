// On-disk caching of processed datasets (as datasets.map's cache files): one file per key, named by its hash.
//
// File layout (native little-endian): "ACCPREP1", u64 key length, key, u64 columns; per column u64 name length, name,
// u64 rows, u64 values, rows + 1 u64 offsets, the int64 values; then the FNV-1a 64 hash of everything before it.
// The key is stored whole and compared, so a hash collision is a miss, never a wrong dataset.
//
// Damage: a file with our header whose body does not check out (cut short, changed bytes) can only be ours, left
// by a disk or a hand that broke it: it is reported and rebuilt, replaced atomically. A file at our name without our
// header is somebody else's: refused, naming it, and left alone (we never delete what we did not make).
#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "acc/files.hpp"
#include "acc/json.hpp"
#include "data/prep/prep.hpp"
#include "text/tokenizer.hpp"

namespace acc::data {
namespace {

constexpr char kMagic[8] = {'A', 'C', 'C', 'P', 'R', 'E', 'P', '1'};

uint64_t fnv1a(std::string_view bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

std::string serialize(const std::string& key, const Examples& ex) {
  std::string out(kMagic, sizeof kMagic);
  put_u64(out, key.size());
  out += key;
  put_u64(out, ex.columns.size());
  for (size_t c = 0; c < ex.columns.size(); ++c) {
    const auto& col = ex.columns[c];
    put_u64(out, ex.names[c].size());
    out += ex.names[c];
    put_u64(out, col.rows());
    put_u64(out, col.values.size());
    for (size_t o : col.offsets) put_u64(out, o);
    out.append(reinterpret_cast<const char*>(col.values.data()), col.values.size() * sizeof(int64_t));
  }
  put_u64(out, fnv1a(out));
  return out;
}

// Reads the body; nullopt when it is damaged.
struct Reader {
  std::string_view in;
  size_t at = 0;
  bool u64(uint64_t& v) {
    if (in.size() - at < sizeof v) return false;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return true;
  }
  bool bytes(size_t n, std::string& s) {
    if (in.size() - at < n) return false;
    s.assign(in.data() + at, n);
    at += n;
    return true;
  }
};

std::optional<Examples> deserialize(std::string_view bytes, const std::string& key, bool& other_key) {
  if (bytes.size() < sizeof kMagic + 8) return std::nullopt;
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (fnv1a(bytes.substr(0, bytes.size() - 8)) != stored) return std::nullopt;
  Reader r{bytes.substr(0, bytes.size() - 8), sizeof kMagic};
  uint64_t n;
  std::string s;
  if (!r.u64(n) || !r.bytes(n, s)) return std::nullopt;
  if (s != key) {
    other_key = true;
    return std::nullopt;
  }
  Examples ex;
  uint64_t columns;
  if (!r.u64(columns)) return std::nullopt;
  for (uint64_t c = 0; c < columns; ++c) {
    uint64_t rows, values;
    if (!r.u64(n) || !r.bytes(n, s) || !r.u64(rows) || !r.u64(values)) return std::nullopt;
    if (rows > r.in.size() / 8 || values > r.in.size() / 8) return std::nullopt;
    auto& col = ex.add(s);
    col.offsets.resize(rows + 1);
    for (auto& o : col.offsets)
      if (!r.u64(n)) return std::nullopt;
      else o = n;
    if (col.offsets.front() != 0 || col.offsets.back() != values) return std::nullopt;
    for (size_t i = 1; i < col.offsets.size(); ++i)
      if (col.offsets[i] < col.offsets[i - 1]) return std::nullopt;
    if (r.in.size() - r.at < values * 8) return std::nullopt;
    col.values.resize(values);
    std::memcpy(col.values.data(), r.in.data() + r.at, values * 8);
    r.at += values * 8;
    if (c > 0 && rows != ex.columns[0].rows()) return std::nullopt;
  }
  if (r.at != r.in.size()) return std::nullopt;
  return ex;
}

std::string file_stamp(const std::string& path, bool content_hash) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    throw std::runtime_error("cannot fingerprint '" + path + "': " + std::strerror(errno));
  std::string s = path + " size=" + std::to_string(st.st_size);
  if (content_hash) {
    s += " fnv=" + hash_hex(config::read_file(path));
  } else {
    s += " mtime=" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  }
  return s;
}

}  // namespace

std::string hash_hex(std::string_view bytes) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, fnv1a(bytes));
  return buf;
}

std::string cache_path(const std::string& dir, const std::string& key) {
  return dir + "/acc-prep-" + hash_hex(key) + ".bin";
}

Examples cached(const std::string& dir, const std::string& key, const std::function<Examples()>& build) {
  if (dir.empty()) return build();
  const std::string path = cache_path(dir, key);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::string bytes = config::read_file(path);
    if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
      throw std::runtime_error("preprocessing cache: '" + path +
                               "' is not a libacc cache file (no ACCPREP1 header);"
                               " it is left alone: move it away or choose another cache folder");
    bool other_key = false;
    if (auto ex = deserialize(bytes, key, other_key)) return *ex;
    std::fprintf(stderr, "libacc: preprocessing cache '%s' %s; rebuilding it\n", path.c_str(),
                 other_key ? "holds another dataset's rows (a hash collision)" : "is damaged (checksum or size)");
  }
  Examples ex = build();
  config::make_directories(dir);
  config::write_file_atomic(path, serialize(key, ex));
  return ex;
}

std::string fingerprint_files(const std::vector<std::string>& paths, bool content_hash) {
  std::string s;
  for (const auto& p : paths) s += file_stamp(p, content_hash) + "\n";
  return s;
}

std::string fingerprint_tokenizer(const text::Tokenizer& tok) {
  std::string s = "tokenizer " + tok.source() + "\n" + text::info_json(tok) + "\n";
  std::error_code ec;
  if (std::filesystem::is_directory(tok.source(), ec))
    for (const char* f :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
      const std::string p = tok.source() + "/" + f;
      if (std::filesystem::exists(p, ec)) s += file_stamp(p, false) + "\n";
    }
  for (const auto& [name, source] : tok.chat_templates())
    s += "template " + json::quote(name) + " " + json::quote(source) + "\n";
  return s;
}

std::string settings_key(const TokenizeOptions& o) {
  return "tokenize column=" + o.column + " add_special_tokens=" + std::to_string(o.add_special_tokens) +
         " truncation=" + std::to_string(o.truncation) +
         " max_length=" + (o.max_length ? std::to_string(*o.max_length) : "none") +
         " token_type_ids=" + std::to_string(o.return_token_type_ids);
}

std::string settings_key(const GroupOptions& o) {
  return "group_texts block_size=" + std::to_string(o.block_size) +
         " map_batch_size=" + std::to_string(o.map_batch_size);
}

std::string settings_key(const SftOptions& o) {
  auto opt = [](const std::optional<std::string>& s) { return s ? json::quote(*s) : std::string("none"); };
  return "sft text_field=" + o.text_field + " max_length=" + (o.max_length ? std::to_string(*o.max_length) : "none") +
         " truncation_mode=" + std::to_string(static_cast<int>(o.truncation_mode)) +
         " packing=" + std::to_string(o.packing) + " strategy=" + std::to_string(static_cast<int>(o.packing_strategy)) +
         " completion_only_loss=" + (o.completion_only_loss ? std::to_string(*o.completion_only_loss) : "auto") +
         " assistant_only_loss=" + std::to_string(o.assistant_only_loss) + " chat_template=" + opt(o.chat_template) +
         " eos_token=" + opt(o.eos_token) + " map_batch_size=" + std::to_string(o.map_batch_size) +
         " padding_free=" + std::to_string(o.padding_free) +  // the collator's pad settings do not change the rows
         (o.now_unix >= 0 ? " now=" + std::to_string(o.now_unix) : "");
}

}  // namespace acc::data
