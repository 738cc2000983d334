// The safetensors header through the config library's JSON reader. See acc/safetensors_header.hpp.
#include "acc/safetensors_header.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tuple>

#include "acc/limits.hpp"
#include "internal.hpp"

namespace acc::config {

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<int64_t> safetensors_dtype_size(std::string_view dtype, bool* floating) {
  struct Type {
    std::string_view name;
    int64_t size;
    bool floating;
  };
  static constexpr Type kTypes[] = {{"F64", 8, true},     {"F32", 4, true},     {"F16", 2, true},  {"BF16", 2, true},
                                    {"F8_E4M3", 1, true}, {"F8_E5M2", 1, true}, {"I64", 8, false}, {"I32", 4, false},
                                    {"I16", 2, false},    {"I8", 1, false},     {"U64", 8, false}, {"U32", 4, false},
                                    {"U16", 2, false},    {"U8", 1, false},     {"BOOL", 1, false}};
  for (const Type& t : kTypes)
    if (t.name == dtype) {
      if (floating) *floating = t.floating;
      return t.size;
    }
  return std::nullopt;
}

SafetensorsHeader parse_safetensors_header(std::string_view json, const std::string& where,
                                           std::optional<uint64_t> data_size) {
  using detail::Kind;
  using detail::Node;
  // Any number of tensors with names of any length; strings UTF-8 without NUL, as for config files.
  constexpr detail::TextLimits kHeaderText{3, SIZE_MAX, limits::kSafetensorsHeaderBytes,
                                           limits::kSafetensorsHeaderBytes};
  Node root;
  try {
    root = detail::parse_json(json, kHeaderText);
  } catch (const Error& e) {
    throw Error(where + ": malformed header: " + e.what());
  }
  if (root.kind != Kind::Map) throw Error(where + ": malformed header: not a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + json.size();
  for (const auto& entry : root.map) {
    const std::string& name = entry.first;  // (not a structured binding: clang 14 cannot capture those)
    const Node& e = entry.second;
    if (name == "__metadata__") {
      bool ok = e.kind == Kind::Map;
      for (size_t i = 0; ok && i < e.map.size(); ++i) {
        ok = e.map[i].second.kind == Kind::String;
        if (ok) h.metadata[e.map[i].first] = e.map[i].second.s;
      }
      if (!ok) throw Error(where + ": __metadata__ must map strings to strings");
      continue;
    }
    auto bad = [&](const std::string& what) -> Error { return Error(where + ": tensor \"" + name + "\" " + what); };
    if (e.kind != Kind::Map) throw bad("is not described by an object");
    const Node* dtype = e.find("dtype");
    const Node* shape = e.find("shape");
    const Node* offsets = e.find("data_offsets");
    if (!dtype || !shape || !offsets) throw bad("lacks dtype, shape or data_offsets");
    SafetensorsEntry t;
    t.name = name;
    std::optional<int64_t> size;
    if (dtype->kind == Kind::String) size = safetensors_dtype_size(dtype->s);
    if (!size) throw bad("has an unknown dtype " + detail::brief_value(*dtype));
    t.dtype = dtype->s;
    bool ok = shape->kind == Kind::List;
    uint64_t bytes = static_cast<uint64_t>(*size);
    for (size_t i = 0; ok && i < shape->list.size(); ++i) {
      const Node& d = shape->list[i];
      ok = d.kind == Kind::Int && d.i >= 0 && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(d.i), &bytes);
      if (ok) t.shape.push_back(d.i);
    }
    if (!ok) throw bad("has a bad shape " + detail::brief_value(*shape));
    ok = offsets->kind == Kind::List && offsets->list.size() == 2;
    for (size_t i = 0; ok && i < 2; ++i) ok = offsets->list[i].kind == Kind::Int && offsets->list[i].i >= 0;
    if (ok) {
      t.begin = static_cast<uint64_t>(offsets->list[0].i);
      t.end = static_cast<uint64_t>(offsets->list[1].i);
    }
    if (!ok || t.end < t.begin || t.end - t.begin != bytes || (data_size && t.end > *data_size))
      throw bad("has data_offsets " + detail::brief_value(*offsets) + " that do not match its dtype and shape (" +
                std::to_string(bytes) + " bytes)" +
                (data_size ? " within the " + std::to_string(*data_size) + " bytes of data" : ""));
    h.tensors.push_back(std::move(t));
  }
  // The format's own validation: the tensors, in offset order, tile the data part exactly, with no overlap, no
  // hole and nothing after the last one.
  std::vector<const SafetensorsEntry*> order;
  for (const auto& t : h.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](auto* a, auto* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
  uint64_t covered = 0;
  for (const SafetensorsEntry* t : order) {
    if (t->begin != covered)
      throw Error(where + ": tensor \"" + t->name + "\" starts at byte " + std::to_string(t->begin) + " of the data, " +
                  (t->begin < covered ? "inside another tensor"
                                      : "leaving a hole after byte " + std::to_string(covered)));
    covered = t->end;
  }
  if (data_size && covered != *data_size)
    throw Error(where + ": " + std::to_string(*data_size - covered) + " bytes after the last tensor's data");
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(path + ": not a safetensors file (not a regular file)");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  const auto read_at = [&](void* into, size_t n, uint64_t at) {
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::pread(fd, static_cast<char*>(into) + got, n - got, static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  unsigned char le[8];
  if (file_size < 8 || !read_at(le, 8, 0)) throw Error(path + ": not a safetensors file (too short)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | le[i];
  // The format caps the header at 100 MB; anything else is not a safetensors file.
  if (n < 2 || n > limits::kSafetensorsHeaderBytes || n > file_size - 8)
    throw Error(path + ": not a safetensors file (header length " + std::to_string(n) + ")");
  std::string json(n, '\0');
  if (!read_at(json.data(), n, 8)) throw Error(path + ": truncated safetensors header");
  return parse_safetensors_header(json, path, file_size - 8 - n);
}

std::string format_safetensors_header(const std::vector<SafetensorsEntry>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_object();
  if (!metadata.empty()) {
    w.key("__metadata__").begin_object();
    for (const auto& [k, v] : metadata) w.key(k).value(v);
    w.end_object();
  }
  for (const SafetensorsEntry& e : tensors) {
    w.key(e.name).begin_object().key("dtype").value(e.dtype).key("shape").begin_array();
    for (int64_t d : e.shape) w.value(d);
    w.end_array().key("data_offsets").begin_array().value(e.begin).value(e.end).end_array().end_object();
  }
  w.end_object();
  std::string json = w.str();
  json.append((8 - json.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes with spaces
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(json.size()) >> (8 * i));
  return out + json;
}

}  // namespace acc::config
