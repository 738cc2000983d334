#include "checkpoint/safetensors.hpp"

#include <ATen/ATen.h>
#include <cjson/cJSON.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include "acc/files.hpp"

namespace acc::core {
namespace {

const std::map<at::ScalarType, std::string>& dtype_names() {
  static const std::map<at::ScalarType, std::string> m = {
      {at::kFloat, "F32"}, {at::kDouble, "F64"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
      {at::kLong, "I64"},  {at::kInt, "I32"},    {at::kShort, "I16"}, {at::kChar, "I8"},
      {at::kByte, "U8"},   {at::kBool, "BOOL"},  {at::kFloat8_e4m3fn, "F8_E4M3"},
      {at::kFloat8_e5m2, "F8_E5M2"}};
  return m;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::ios_base::failure("safetensors file '" + path + "': " + what);
}

struct CJsonPtr {
  cJSON* p;
  ~CJsonPtr() { cJSON_Delete(p); }
};

}  // namespace

void save_safetensors(const NamedTensors& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  CJsonPtr header{cJSON_CreateObject()};
  if (!metadata.empty()) {
    cJSON* meta = cJSON_AddObjectToObject(header.p, "__metadata__");
    for (auto& [k, v] : metadata) cJSON_AddStringToObject(meta, k.c_str(), v.c_str());
  }
  std::vector<at::Tensor> data;
  std::set<std::string> seen;
  int64_t offset = 0;
  for (auto& [name, t] : tensors) {
    if (!seen.insert(name).second) throw std::invalid_argument("duplicate tensor name '" + name + "'");
    auto it = dtype_names().find(t.scalar_type());
    if (it == dtype_names().end())
      throw std::invalid_argument("tensor '" + name + "' has dtype " + c10::str(t.scalar_type()) +
                                  ", which safetensors cannot store");
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    cJSON* e = cJSON_AddObjectToObject(header.p, name.c_str());
    cJSON_AddStringToObject(e, "dtype", it->second.c_str());
    cJSON* shape = cJSON_AddArrayToObject(e, "shape");
    for (int64_t d : c.sizes()) cJSON_AddItemToArray(shape, cJSON_CreateNumber(static_cast<double>(d)));
    int64_t n = static_cast<int64_t>(c.nbytes());
    cJSON* offs = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber(static_cast<double>(offset)));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber(static_cast<double>(offset + n)));
    offset += n;
    data.push_back(c);
  }
  char* text = cJSON_PrintUnformatted(header.p);
  std::string json(text);
  cJSON_free(text);
  json.append((8 - json.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes with spaces
  uint64_t len = json.size();
  char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<char>(len >> (8 * i));
  // Written in pieces (no copy of the tensors into one buffer); a crash leaves the old file or the new one.
  std::vector<std::string_view> pieces = {std::string_view(le, 8), json};
  for (auto& t : data) pieces.emplace_back(static_cast<const char*>(t.data_ptr()), t.nbytes());
  config::write_file_atomic(path, pieces);  // throws std::ios_base::failure naming the path
}

NamedTensors load_safetensors(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    bad(path, "is not a regular file");
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  // The whole file mapped once (copy-on-write, so an in-place change never reaches the file): the tensors
  // are views on it, read by the kernel's readahead as they are copied, with no second buffer.
  void* addr = file_size ? ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  const int err = errno;
  ::close(fd);
  if (file_size < 8) bad(path, "too short for a header");
  if (addr == MAP_FAILED) bad(path, std::string("cannot map: ") + std::strerror(err));
  ::madvise(addr, file_size, MADV_SEQUENTIAL);
  auto mapping = std::shared_ptr<void>(addr, [file_size](void* a) { ::munmap(a, file_size); });
  const auto* bytes = static_cast<const unsigned char*>(addr);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (len > 100u * 1024 * 1024 || 8 + len > file_size) bad(path, "header length " + std::to_string(len) + " is invalid");
  CJsonPtr header{cJSON_ParseWithLength(reinterpret_cast<const char*>(bytes + 8), len)};
  if (!header.p || !cJSON_IsObject(header.p)) bad(path, "header is not a JSON object");
  const uint64_t data_size = file_size - 8 - len;
  char* data = static_cast<char*>(addr) + 8 + len;
  NamedTensors out;
  for (cJSON* e = header.p->child; e; e = e->next) {
    std::string name = e->string;
    if (name == "__metadata__") continue;
    cJSON* dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    cJSON* shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    cJSON* offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
      bad(path, "entry '" + name + "' lacks dtype, shape or data_offsets");
    std::optional<at::ScalarType> type;
    for (auto& [t, n] : dtype_names())
      if (n == dt->valuestring) type = t;
    if (!type) bad(path, "entry '" + name + "' has unsupported dtype " + dt->valuestring);
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (cJSON* d = shape->child; d; d = d->next) {
      if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9e15) bad(path, "entry '" + name + "' has a bad shape");
      dims.push_back(static_cast<int64_t>(d->valuedouble));
      numel = dims.back() && numel > data_size ? data_size + 1 : numel * static_cast<uint64_t>(dims.back());
    }
    cJSON* b = cJSON_GetArrayItem(offs, 0);
    cJSON* f = cJSON_GetArrayItem(offs, 1);
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(f) || b->valuedouble < 0 || f->valuedouble < b->valuedouble)
      bad(path, "entry '" + name + "' has bad data_offsets");
    const auto begin = static_cast<uint64_t>(b->valuedouble);
    const auto end = static_cast<uint64_t>(f->valuedouble);
    if (end > data_size) bad(path, "entry '" + name + "' is truncated (its data ends past the end of the file)");
    if (end - begin != numel * c10::elementSize(*type))
      bad(path, "entry '" + name + "' has data_offsets that do not match its shape and dtype");
    out.emplace_back(name, at::from_blob(data + begin, dims, [mapping](void*) {}, at::TensorOptions().dtype(*type)));
  }
  return out;
}

}  // namespace acc::core
