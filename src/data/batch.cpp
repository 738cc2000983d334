#include "data/batch.hpp"

#include <stdexcept>

namespace acc::core {

TensorDict::TensorDict(std::initializer_list<std::pair<std::string, at::Tensor>> items) {
  for (const auto& [name, t] : items) set(name, t);
}

void TensorDict::set(const std::string& name, at::Tensor t) {
  for (auto& [n, v] : items_)
    if (n == name) {
      v = std::move(t);
      return;
    }
  items_.emplace_back(name, std::move(t));
}

bool TensorDict::contains(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return true;
  return false;
}

const at::Tensor& TensorDict::at(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return v;
  throw std::invalid_argument("the batch has no tensor '" + name + "' (it has: " +
                              (items_.empty() ? std::string("nothing") : keys()) + ")");
}

at::Tensor TensorDict::get(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return v;
  return {};
}

std::string TensorDict::keys() const {
  std::string s;
  for (const auto& [n, v] : items_) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace acc::core
