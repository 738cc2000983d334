// A port of accelerate/utils/modeling.py's planning functions, step for step, so that the maps are Accelerate's:
// where this reads oddly, so does the original (the comments name the Python function each part follows).
#include "bigmodel/device_map.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <stdexcept>

#include "formats/hf_weights.hpp"

namespace acc::core::bigmodel {

namespace {

// An entry of Accelerate's `modules_to_treat`: a module, or a parameter or buffer (which cannot be split).
struct Entry {
  std::string name;
  int module = -1;  // index into tree.modules; -1 for a tensor
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// `name + "." in k + "."`: k is name or inside it.
bool inside(const std::string& k, const std::string& name) { return (k + ".").find(name + ".") != std::string::npos; }

// named_parameters(recurse=False) + named_children() [+ named_buffers(recurse=False)] of a module, full names.
std::vector<Entry> direct_entries(const ModuleTree& tree, int m, const std::string& name, bool with_buffers) {
  const std::string prefix = name.empty() ? "" : name + ".";
  std::vector<Entry> out;
  for (const auto& [n, t] : tree.modules[m].parameters) out.push_back({prefix + n, -1});
  for (const auto& [n, c] : tree.modules[m].children) out.push_back({prefix + n, c});
  if (with_buffers)
    for (const auto& [n, t] : tree.modules[m].buffers) out.push_back({prefix + n, -1});
  return out;
}

bool unsplittable(const ModuleTree& tree, const Entry& e, const std::vector<std::string>& no_split) {
  if (e.module < 0 || tree.modules[e.module].children.empty()) return true;
  return std::find(no_split.begin(), no_split.end(), tree.modules[e.module].class_name) != no_split.end();
}

// get_max_layer_size
std::pair<int64_t, std::vector<std::string>> max_layer_size(const ModuleTree& tree, std::vector<Entry> todo,
                                                            const ModuleSizes& sizes,
                                                            const std::vector<std::string>& no_split) {
  int64_t max_size = 0;
  std::vector<std::string> names;
  while (!todo.empty()) {
    Entry e = todo.front();
    todo.erase(todo.begin());
    if (unsplittable(tree, e, no_split)) {
      const int64_t size = sizes.of(e.name);
      if (size > max_size) {
        max_size = size;
        names = {e.name};
      } else if (size == max_size) {
        names.push_back(e.name);
      }
    } else {
      std::vector<Entry> children;
      for (const auto& [n, c] : tree.modules[e.module].children) children.push_back({e.name + "." + n, c});
      todo.insert(todo.begin(), children.begin(), children.end());
    }
  }
  return {max_size, names};
}

std::vector<Entry> modules_only(const std::vector<Entry>& entries) {
  std::vector<Entry> out;
  for (const auto& e : entries)
    if (e.module >= 0) out.push_back(e);
  return out;
}

// get_module_size_with_ties
struct WithTies {
  int64_t size;
  std::vector<std::string> names;
  std::vector<Entry> entries;
};
WithTies size_with_ties(const std::vector<std::string>& tied_params, int64_t module_size, const ModuleSizes& sizes,
                        const std::vector<Entry>& todo) {
  WithTies w{module_size, {}, {}};
  for (const std::string& p : tied_params) {
    auto it = std::find_if(todo.begin(), todo.end(), [&](const Entry& e) { return starts_with(p, e.name + "."); });
    if (it == todo.end()) throw std::logic_error("device map: the module of tied parameter '" + p + "' is gone");
    w.names.push_back(it->name);
    w.entries.push_back(*it);
  }
  for (size_t i = 0; i < tied_params.size(); ++i) w.size += sizes.of(w.names[i]) - sizes.of(tied_params[i]);
  return w;
}

// The tied groups that reach out of `name`, and their members outside it.
std::vector<std::string> tied_outside(const ModuleTree& tree, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& group : tree.tied) {
    const auto in = [&](const std::string& k) { return inside(k, name); };
    if (!std::any_of(group.begin(), group.end(), in) || std::all_of(group.begin(), group.end(), in)) continue;
    for (const auto& k : group)
      if (!inside(k, name)) out.push_back(k);
  }
  return out;
}

// fallback_allocate: the first module (breadth-first through splittable ones) that fits in size_limit, taken
// out of `modules` (its ancestors in the list replaced by their children).
bool fallback_allocate(const ModuleTree& tree, std::vector<Entry>& modules, const ModuleSizes& sizes, int64_t limit,
                       const std::vector<std::string>& no_split, Entry& found) {
  std::vector<Entry> search = modules;
  bool ok = false;
  Entry e;
  while (!search.empty()) {
    e = search.front();
    search.erase(search.begin());
    const WithTies w = size_with_ties(tied_outside(tree, e.name), sizes.of(e.name), sizes, search);
    if (w.size <= limit) {
      ok = true;
      break;
    }
    if (unsplittable(tree, e, no_split)) continue;
    std::vector<Entry> children = direct_entries(tree, e.module, e.name, false);
    search.insert(search.begin(), children.begin(), children.end());
  }
  if (!ok) return false;
  for (size_t dot = e.name.find('.'); dot != std::string::npos; dot = e.name.find('.', dot + 1)) {
    const std::string parent = e.name.substr(0, dot);
    auto it = std::find_if(modules.begin(), modules.end(), [&](const Entry& m) { return m.name == parent; });
    if (it == modules.end()) continue;
    std::vector<Entry> children = direct_entries(tree, it->module, parent, false);
    const auto at = modules.erase(it);
    modules.insert(at, children.begin(), children.end());
  }
  auto it = std::find_if(modules.begin(), modules.end(), [&](const Entry& m) { return m.name == e.name; });
  found = *it;
  modules.erase(it);
  return true;
}

// clean_device_map: children that all went to one device are replaced by their parent.
void clean(std::map<std::string, Device>& map, const std::string& module_name) {
  const std::string prefix = module_name.empty() ? "" : module_name + ".";
  std::vector<std::string> keys;
  std::set<Device> values;
  for (const auto& [k, v] : map)
    if (starts_with(k, prefix)) keys.push_back(k), values.insert(v);
  if (values.size() == 1 && keys.size() > 1) {
    const Device d = *values.begin();
    for (const auto& k : keys) map.erase(k);
    map[module_name] = d;
  }
  // The names one level below module_name ("".join of the first depth parts of each key).
  const size_t depth =
      module_name.empty() ? 1 : static_cast<size_t>(std::count(module_name.begin(), module_name.end(), '.')) + 2;
  std::set<std::string> children;
  for (const auto& [k, v] : map) {
    if (!starts_with(k, prefix) || k.size() <= module_name.size()) continue;
    size_t end = 0;
    for (size_t parts = 0; parts < depth && end != std::string::npos; ++parts)
      end = k.find('.', parts == 0 ? 0 : end + 1);
    children.insert(end == std::string::npos ? k : k.substr(0, end));
  }
  for (const auto& c : children) clean(map, c);
}

}  // namespace

bool is_accelerator(const Device& d) {
  return !d.empty() && std::all_of(d.begin(), d.end(), [](unsigned char c) { return std::isdigit(c); });
}

int64_t ModuleSizes::of(const std::string& name) const {
  auto it = bytes.find(name);
  return it == bytes.end() ? 0 : it->second;
}

Budget ordered_budget(const std::vector<std::pair<Device, std::string>>& max_memory) {
  // get_max_memory: accelerators sorted by index, then mps, cpu and disk.
  std::vector<std::pair<int64_t, int64_t>> accelerators;
  std::map<std::string, int64_t> others;
  for (const auto& [d, size] : max_memory) {
    const int64_t bytes = parse_shard_size(size);
    if (is_accelerator(d)) accelerators.emplace_back(std::stoll(d), bytes);
    else if (d == "cpu" || d == "disk") others[d] = bytes;
    else
      throw std::invalid_argument("max_memory: device '" + d +
                                  "' is not recognized; devices are integers (accelerators), 'cpu' and 'disk'");
  }
  std::sort(accelerators.begin(), accelerators.end());
  Budget out;
  for (const auto& [i, b] : accelerators) out.emplace_back(std::to_string(i), b);
  for (const char* d : {"cpu", "disk"})
    if (others.count(d)) out.emplace_back(d, others[d]);
  return out;
}

ModuleSizes compute_module_sizes(const ModuleTree& tree, int element_size) {
  ModuleSizes s;
  std::set<std::string> tied_seen;
  const auto add = [&](const std::string& name, const ModuleTree::Tensor& t) {
    const int64_t each = t.integer || element_size <= 0 ? t.element_size : std::min(element_size, t.element_size);
    const int64_t size = t.numel * each;
    for (size_t dot = 0;; dot = name.find('.', dot + 1)) {
      const std::string prefix = dot == std::string::npos ? name : name.substr(0, dot);
      if (!s.bytes.count(prefix)) s.order.push_back(prefix);
      s.bytes[prefix] += size;
      if (dot == std::string::npos) break;
    }
  };
  // named_parameters (recurse, each tensor once: the first of a tied group), then named_buffers.
  std::vector<std::pair<std::string, int>> stack{{"", 0}};
  std::vector<std::pair<std::string, int>> order;  // modules in named_modules order
  while (!stack.empty()) {
    auto [name, m] = stack.back();
    stack.pop_back();
    order.emplace_back(name, m);
    const auto& kids = tree.modules[m].children;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      stack.emplace_back(name.empty() ? it->first : name + "." + it->first, it->second);
  }
  for (const auto& [name, m] : order)
    for (const auto& [n, t] : tree.modules[m].parameters) {
      const std::string full = name.empty() ? n : name + "." + n;
      bool duplicate = false;
      for (const auto& group : tree.tied)
        if (std::find(group.begin(), group.end(), full) != group.end()) {
          for (const auto& k : group) duplicate = duplicate || tied_seen.count(k);
          tied_seen.insert(full);
        }
      if (!duplicate) add(full, t);
    }
  for (const auto& [name, m] : order)
    for (const auto& [n, t] : tree.modules[m].buffers) add(name.empty() ? n : name + "." + n, t);
  if (!s.bytes.count("")) s.order.insert(s.order.begin(), ""), s.bytes[""] = 0;
  return s;
}

Budget balanced_memory(const ModuleTree& tree, Budget max_memory, const std::vector<std::string>& no_split,
                       int element_size, bool low_zero) {
  int64_t devices = 0;
  for (const auto& [d, b] : max_memory) {
    if (d == "disk")  // as Accelerate, which cannot balance over it
      throw std::invalid_argument(
          "balanced device map: max_memory names 'disk', which cannot be balanced over; plan "
          "with the accelerators and the cpu (the disk takes what is left), or use a sequential map");
    devices += is_accelerator(d) && b > 0;
  }
  if (devices == 0) return max_memory;
  if (devices == 1) low_zero = false;
  ModuleSizes sizes = compute_module_sizes(tree, element_size);
  int64_t per_device = sizes.of("") / (low_zero ? devices - 1 : devices);
  // The size of the first module of each no-split class met (in module_sizes' order).
  int64_t buffer = 0;
  if (!no_split.empty()) {
    std::map<std::string, int64_t> first;
    for (const std::string& name : sizes.order) {
      const int m = name.empty() ? -1 : tree.module_at(name);
      if (m < 0) continue;
      const std::string& cls = tree.modules[m].class_name;
      if (std::find(no_split.begin(), no_split.end(), cls) != no_split.end() && !first.count(cls))
        first[cls] = sizes.of(name);
      if (first.size() == std::set<std::string>(no_split.begin(), no_split.end()).size()) break;
    }
    for (const auto& [c, b] : first) buffer = std::max(buffer, b);
  }
  // The mean size of the last modules (get_module_leaves twice: the tensors, then the modules holding them).
  const auto leaves = [](const std::vector<std::string>& names) {
    std::map<std::string, int> children;
    for (const auto& n : names) {
      if (n.empty() || n.find('.') == std::string::npos) continue;
      children[n.substr(0, n.rfind('.'))] += 1;
    }
    std::vector<std::string> out;
    for (const auto& n : names)
      if (!n.empty() && !children.count(n)) out.push_back(n);
    return out;
  };
  const std::vector<std::string> tensors = leaves(sizes.order);
  std::set<std::string> tensor_set(tensors.begin(), tensors.end());
  std::vector<std::string> rest;
  for (const auto& n : sizes.order)
    if (!tensor_set.count(n)) rest.push_back(n);
  const std::vector<std::string> last = leaves(rest);
  int64_t total = 0;
  for (const auto& n : last) total += sizes.of(n);
  const int64_t mean =
      static_cast<int64_t>(static_cast<double>(total) / static_cast<double>(std::max<size_t>(last.size(), 1)));
  buffer = static_cast<int64_t>(1.25 * static_cast<double>(std::max(buffer, mean)));
  per_device += buffer;
  std::vector<int64_t> ids;
  for (const auto& [d, b] : max_memory)
    if (is_accelerator(d) && b > 0) ids.push_back(std::stoll(d));
  std::sort(ids.begin(), ids.end());
  const auto slot = [&](int64_t id) -> int64_t& {
    for (auto& [d, b] : max_memory)
      if (d == std::to_string(id)) return b;
    throw std::invalid_argument("balanced memory: no budget for device " + std::to_string(id));
  };
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    slot(ids[i]) = std::min(low_zero && ids[i] == 0 ? slot(0) : per_device, slot(ids[i]));
  if (low_zero) {
    int64_t others = 0;
    for (int64_t i = 1; i < devices; ++i) others += slot(i);
    slot(0) = std::min(std::max<int64_t>(0, sizes.of("") - others), slot(0));
  }
  return max_memory;
}

std::map<std::string, Device> infer_auto_device_map(const ModuleTree& tree, const Budget& budget_in,
                                                    const MapOptions& o) {
  // _init_infer_auto_device_map
  Budget budget = budget_in;
  std::vector<Device> devices;
  for (const auto& [d, b] : budget) devices.push_back(d);
  if (std::find(devices.begin(), devices.end(), "disk") == devices.end()) devices.push_back("disk");
  std::vector<Device> gpus;
  for (const auto& d : devices)
    if (d != "cpu" && d != "disk") gpus.push_back(d);
  const std::vector<Device> main_devices = gpus.empty() ? std::vector<Device>{"cpu"}
                                                        : std::vector<Device>{gpus[0], "cpu"};
  const ModuleSizes sizes = compute_module_sizes(tree, o.element_size);
  std::vector<Entry> todo = direct_entries(tree, 0, "", true);
  const auto limit_of = [&](const Device& d) {
    for (const auto& [k, b] : budget)
      if (k == d) return b;
    return int64_t{0};
  };

  std::map<std::string, Device> map;
  size_t current = 0;
  std::map<Device, int64_t> used;
  auto [max_layer, max_layer_names] = max_layer_size(tree, todo, sizes, o.no_split);
  while (!todo.empty()) {
    Entry e = todo.front();
    todo.erase(todo.begin());
    std::erase_if(max_layer_names, [&](const std::string& n) { return n == e.name || starts_with(n, e.name + "."); });
    if (max_layer_names.empty())
      std::tie(max_layer, max_layer_names) = max_layer_size(tree, modules_only(todo), sizes, o.no_split);
    const int64_t module_size = sizes.of(e.name);
    const std::vector<std::string> tied_params = tied_outside(tree, e.name);
    if (current >= devices.size())
      throw std::invalid_argument("device map: '" + e.name + "' fits on no device, not even the disk");
    const Device device = devices[current];
    const bool on_disk = device == "disk";
    int64_t max_size = on_disk ? 0 : limit_of(device);
    int64_t reserved = 0;
    if (std::find(main_devices.begin(), main_devices.end(), device) != main_devices.end()) {
      max_size -= max_layer;
      reserved = max_layer;
    }
    WithTies w = size_with_ties(tied_params, module_size, sizes, todo);
    if (on_disk || used[device] + w.size <= max_size) {
      used[device] += w.size;
      map[e.name] = device;
      for (const std::string& t : w.names) {
        auto it = std::find_if(todo.begin(), todo.end(), [&](const Entry& x) { return x.name == t; });
        if (it != todo.end()) todo.erase(it);
        map[t] = device;
      }
      continue;
    }
    // The module fits without its tied modules: split one of those.
    if (!tied_params.empty() && used[device] + module_size <= max_size) {
      bool split = false;
      for (size_t i = 0; i < w.entries.size(); ++i) {
        const Entry& t = w.entries[i];
        if (unsplittable(tree, t, o.no_split)) continue;
        std::vector<Entry> children = direct_entries(tree, t.module, t.name, false);
        auto at = std::find_if(todo.begin(), todo.end(), [&](const Entry& x) { return x.name == t.name; });
        const size_t index = static_cast<size_t>(at - todo.begin());
        std::vector<Entry> next{e};
        next.insert(next.end(), todo.begin(), todo.begin() + static_cast<std::ptrdiff_t>(index));
        next.insert(next.end(), children.begin(), children.end());
        next.insert(next.end(), todo.begin() + static_cast<std::ptrdiff_t>(index) + 1, todo.end());
        todo = std::move(next);
        std::tie(max_layer, max_layer_names) = max_layer_size(tree, modules_only(todo), sizes, o.no_split);
        split = true;
        break;
      }
      if (split) continue;
    }
    // The module does not fit: split it, or go to the next device.
    if (used[device] + module_size >= max_size && !unsplittable(tree, e, o.no_split)) {
      std::vector<Entry> children = direct_entries(tree, e.module, e.name, false);
      todo.insert(todo.begin(), children.begin(), children.end());
      std::tie(max_layer, max_layer_names) = max_layer_size(tree, modules_only(todo), sizes, o.no_split);
      continue;
    }
    if (used[device] == 0 && o.fallback_allocation && !on_disk) {
      const int64_t limit = limit_of(device) - std::max(max_layer, w.size);
      Entry found;
      std::vector<Entry> remaining = todo;
      if (limit >= 0 && fallback_allocate(tree, remaining, sizes, limit - used[device], o.no_split, found)) {
        todo = {found, e};
        todo.insert(todo.end(), remaining.begin(), remaining.end());
        continue;
      }
    }
    used[device] += reserved;
    ++current;
    todo.insert(todo.begin(), e);
  }
  if (o.clean_result) clean(map, "");
  return map;
}

namespace {

// convert_bytes then, as generate_device_map does, the number rounded up and times 1.1, read back as
// convert_file_size_to_int reads it ("KB", "MB", ... are powers of 1000 there, of 1024 in convert_bytes).
int64_t pippy_budget(double size) {
  const char* const units[] = {"bytes", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (unit < 4 && size >= 1024.0) size /= 1024.0, ++unit;
  if (unit == 0)
    throw std::invalid_argument("pipelined inference: the model is too small for Accelerate's automatic split ("
                                "under 1 KB per process: convert_file_size_to_int cannot read '" +
                                std::to_string(size) + " " + units[unit] + "'); give split_points");
  const double value = std::ceil(std::nearbyint(size * 100.0) / 100.0) * 1.1;  // round(size, 2)
  return static_cast<int64_t>(value * std::pow(1000.0, unit));
}

}  // namespace

std::vector<std::string> pippy_split_points(const ModuleTree& tree, int num_chunks,
                                            const std::vector<std::string>& no_split,
                                            const std::vector<std::string>& model_no_split) {
  const ModuleSizes sizes = compute_module_sizes(tree);
  const int64_t largest = max_layer_size(tree, direct_entries(tree, 0, "", true), sizes, model_no_split).first;
  const int64_t each = pippy_budget(static_cast<double>(sizes.of("") + largest) / num_chunks);
  Budget budget;
  for (int i = 0; i < num_chunks; ++i) budget.emplace_back(std::to_string(i), each);
  MapOptions o;
  o.no_split = no_split;
  o.clean_result = false;
  const std::map<std::string, Device> map = infer_auto_device_map(tree, budget, o);
  std::map<std::string, size_t> position;  // the model's order (named_module_tensors')
  for (size_t i = 0; i < sizes.order.size(); ++i) position.emplace(sizes.order[i], i);
  const auto at = [&](const std::string& name) {
    auto it = position.find(name);
    return it != position.end() ? it->second : sizes.order.size();
  };
  std::vector<std::string> out;
  for (int i = 1; i < num_chunks; ++i) {
    std::string first;
    for (const auto& [name, device] : map)
      if (device == std::to_string(i) && (first.empty() || at(name) < at(first))) first = name;
    if (first.empty())
      throw std::invalid_argument("pipelined inference: the automatic device map puts no module on process " +
                                  std::to_string(i) + " of " + std::to_string(num_chunks) + "; give split_points");
    out.push_back(first);
  }
  return out;
}

}  // namespace acc::core::bigmodel
