#include "runtime/affinity.hpp"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace acc::core {

std::vector<int> parse_cpu_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(what + ": '" + text + "' is not a CPU list (such as 0-3,8)");
    return std::stoi(s);
  };
  while (std::getline(in, item, ',')) {
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    if (item.empty()) continue;
    const size_t dash = item.find('-');
    const int lo = number(item.substr(0, dash)), hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) throw std::invalid_argument(what + ": '" + text + "' is not a CPU list (such as 0-3,8)");
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

std::vector<int> cpu_share(const std::vector<int>& allowed, const std::vector<std::vector<int>>& nodes, int local_rank,
                           int local_world) {
  if (local_world < 1 || local_rank < 0 || local_rank >= local_world)
    throw std::invalid_argument("cpu_share: local rank " + std::to_string(local_rank) + " of " +
                                std::to_string(local_world));
  // The allowed cores of each node, in order; nodes without any are left out. Cores no node names form one more.
  const std::set<int> ok(allowed.begin(), allowed.end());
  std::vector<std::vector<int>> groups;
  std::set<int> placed;
  for (const auto& node : nodes) {
    std::vector<int> g;
    for (int c : node)
      if (ok.count(c) && placed.insert(c).second) g.push_back(c);
    std::sort(g.begin(), g.end());
    if (!g.empty()) groups.push_back(std::move(g));
  }
  std::vector<int> rest;
  for (int c : ok)
    if (!placed.count(c)) rest.push_back(c);
  if (!rest.empty()) groups.push_back(std::move(rest));
  if (groups.empty()) return {};
  const int n = static_cast<int>(groups.size());
  if (local_world <= n) {  // whole nodes: process r takes nodes [r n / w, (r + 1) n / w)
    std::vector<int> out;
    for (int g = local_rank * n / local_world; g < (local_rank + 1) * n / local_world; ++g)
      out.insert(out.end(), groups[g].begin(), groups[g].end());
    std::sort(out.begin(), out.end());
    return out;
  }
  // Node g holds processes [g w / n, (g + 1) w / n); its cores are split evenly among them, in order.
  int node = 0;
  while ((node + 1) * local_world / n <= local_rank) ++node;
  const int first = node * local_world / n, count = (node + 1) * local_world / n - first;
  const std::vector<int>& cores = groups[node];
  const int k = local_rank - first, size = static_cast<int>(cores.size());
  if (count > size) return {cores[k % size]};  // more processes than cores: share
  return std::vector<int>(cores.begin() + k * size / count, cores.begin() + (k + 1) * size / count);
}

namespace {

std::vector<std::vector<int>> numa_nodes() {
  std::vector<std::vector<int>> nodes;
  std::error_code ec;
  const std::filesystem::path root = "/sys/devices/system/node";
  std::vector<std::pair<int, std::filesystem::path>> found;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 || name.find_first_not_of("0123456789", 4) != std::string::npos)
      continue;
    found.emplace_back(std::stoi(name.substr(4)), e.path() / "cpulist");
  }
  std::sort(found.begin(), found.end());
  for (const auto& [index, path] : found) {
    std::ifstream in(path);
    std::string text;
    if (!in || !std::getline(in, text)) continue;
    try {
      nodes.push_back(parse_cpu_list(text, path.string()));
    } catch (const std::invalid_argument&) {
      return {};  // an unreadable topology: one node
    }
  }
  return nodes;
}

}  // namespace

std::vector<int> pin_to_cpu_share(int local_rank, int local_world) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    throw std::runtime_error(std::string("enable_cpu_affinity: sched_getaffinity failed: ") + std::strerror(errno));
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) allowed.push_back(c);
  const std::vector<int> share = cpu_share(allowed, numa_nodes(), local_rank, local_world);
  if (share.empty()) return allowed;
  CPU_ZERO(&set);
  for (int c : share) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    throw std::runtime_error(std::string("enable_cpu_affinity: sched_setaffinity failed: ") + std::strerror(errno));
  return share;
}

}  // namespace acc::core
