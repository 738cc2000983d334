#include "formats/safetensors.hpp"

#include <ATen/ATen.h>

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
#include "acc/limits.hpp"
#include "acc/safetensors_header.hpp"

namespace acc::core {
namespace {

const std::map<at::ScalarType, std::string>& dtype_names() {
  static const std::map<at::ScalarType, std::string> m = {{at::kFloat, "F32"},
                                                          {at::kDouble, "F64"},
                                                          {at::kHalf, "F16"},
                                                          {at::kBFloat16, "BF16"},
                                                          {at::kLong, "I64"},
                                                          {at::kInt, "I32"},
                                                          {at::kShort, "I16"},
                                                          {at::kChar, "I8"},
                                                          {at::kByte, "U8"},
                                                          {at::kBool, "BOOL"},
                                                          {at::kFloat8_e4m3fn, "F8_E4M3"},
                                                          {at::kFloat8_e5m2, "F8_E5M2"}};
  return m;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw config::FileError("cannot load safetensors file", path, what, EINVAL);
}

}  // namespace

std::optional<at::ScalarType> safetensors_scalar_type(const std::string& dtype) {
  for (auto& [t, n] : dtype_names())
    if (n == dtype) return t;
  return std::nullopt;
}

void save_safetensors(const NamedTensors& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<config::SafetensorsEntry> entries;
  std::vector<at::Tensor> data;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    if (!seen.insert(name).second) throw std::invalid_argument("duplicate tensor name '" + name + "'");
    auto it = dtype_names().find(t.scalar_type());
    if (it == dtype_names().end())
      throw std::invalid_argument("tensor '" + name + "' has dtype " + c10::str(t.scalar_type()) +
                                  ", which safetensors cannot store");
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const uint64_t n = c.nbytes();
    entries.push_back({name, it->second, c.sizes().vec(), offset, offset + n});
    offset += n;
    data.push_back(c);
  }
  const std::string header = config::format_safetensors_header(entries, metadata);
  // Written in pieces (no copy of the tensors into one buffer); a crash leaves the old file or the new one.
  std::vector<std::string_view> pieces = {header};
  for (auto& t : data) pieces.emplace_back(static_cast<const char*>(t.data_ptr()), t.nbytes());
  config::write_file_atomic(path, pieces);  // throws std::ios_base::failure naming the path
}

NamedTensors load_safetensors(const std::string& path) {
  // Non-blocking: a FIFO with no writer would hold open() forever; it is refused as not a regular file below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) bad(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st{};
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
  if (len < 2 || len > limits::kSafetensorsHeaderBytes || len > file_size - 8)
    bad(path, "header length " + std::to_string(len) + " is invalid");
  // The one strict reader of headers (base/), also used by the launcher's tools.
  config::SafetensorsHeader header;
  try {
    header = config::parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(bytes + 8), len), "header",
                                              file_size - 8 - len);
  } catch (const config::Error& e) {
    bad(path, std::string(e.what()).substr(std::string_view("header: ").size()));
  }
  char* data = static_cast<char*>(addr) + 8 + len;
  NamedTensors out;
  for (const config::SafetensorsEntry& e : header.tensors) {
    const std::optional<at::ScalarType> type = safetensors_scalar_type(e.dtype);
    if (!type) bad(path, "tensor \"" + e.name + "\" has dtype " + e.dtype + ", which libacc does not load");
    out.emplace_back(e.name,
                     at::from_blob(data + e.begin, e.shape, [mapping](void*) {}, at::TensorOptions().dtype(*type)));
  }
  return out;
}

}  // namespace acc::core
