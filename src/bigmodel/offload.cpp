#include "bigmodel/offload.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include "util/pattern.hpp"

namespace acc::core::bigmodel {

void DiskOffload::add(const std::string& unit, const at::Tensor& t) {
  units_[unit].emplace_back(static_cast<char*>(t.data_ptr()), t.nbytes());
}

void DiskOffload::release(const std::string& unit) const {
  auto it = units_.find(unit);
  if (it == units_.end()) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const auto& [data, size] : it->second) {
    // Whole pages only: a page shared with a neighbouring tensor may hold another unit's weights.
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

int64_t DiskOffload::bytes() const {
  int64_t n = 0;
  for (const auto& [unit, ranges] : units_)
    for (const auto& [data, size] : ranges) n += static_cast<int64_t>(size);
  return n;
}

std::string offload_unit(const std::string& parameter) {
  static const Pattern layer(R"((.*\.(layers|h|layer)\.\d+)\..*)", "offload unit");
  if (std::string unit; layer.full_match(parameter, &unit)) return unit;
  const size_t last = parameter.rfind('.');
  return last == std::string::npos ? parameter : parameter.substr(0, last);
}

}  // namespace acc::core::bigmodel
