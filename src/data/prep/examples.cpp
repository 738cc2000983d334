// Table, SeqColumn, Examples, Batch: the containers of prep.hpp.
#include <stdexcept>

#include "data/prep/prep.hpp"
#include "data/prep/prep_internal.hpp"

namespace acc::data {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + ("'" + n + "'");
  return out.empty() ? "none" : out;
}

bool Table::has(std::string_view name) const {
  for (const auto& n : names)
    if (n == name) return true;
  return false;
}

const std::vector<std::string>& Table::column(std::string_view name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return cells[i];
  throw std::invalid_argument("no column '" + std::string(name) + "' in the rows (columns: " + join_names(names) + ")");
}

void Table::add(std::string name, std::vector<std::string> c) {
  if (has(name)) throw std::invalid_argument("column '" + name + "' given twice");
  if (!cells.empty() && c.size() != rows())
    throw std::invalid_argument("column '" + name + "' has " + std::to_string(c.size()) + " rows, the others " +
                                std::to_string(rows()));
  names.push_back(std::move(name));
  cells.push_back(std::move(c));
}

void SeqColumn::append(const SeqColumn& other) {
  const size_t base = values.size();
  values.insert(values.end(), other.values.begin(), other.values.end());
  for (size_t i = 1; i < other.offsets.size(); ++i) offsets.push_back(base + other.offsets[i]);
}

const SeqColumn* Examples::find(std::string_view name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return &columns[i];
  return nullptr;
}

const SeqColumn& Examples::column(std::string_view name) const {
  if (const auto* c = find(name)) return *c;
  throw std::invalid_argument("no column '" + std::string(name) + "' in the examples (columns: " + join_names(names) +
                              ")");
}

SeqColumn& Examples::add(std::string name) {
  if (find(name)) throw std::invalid_argument("column '" + name + "' made twice");
  names.push_back(std::move(name));
  columns.emplace_back();
  return columns.back();
}

void Examples::append(const Examples& other) {
  if (other.names.empty()) return;
  if (names.empty()) {
    *this = other;
    return;
  }
  if (other.names != names)
    throw std::logic_error("appending examples with columns " + join_names(other.names) + " to " + join_names(names));
  for (size_t i = 0; i < columns.size(); ++i) columns[i].append(other.columns[i]);
}

const Matrix* Batch::find(std::string_view name) const {
  for (const auto& f : fields)
    if (f.first == name) return &f.second;
  return nullptr;
}

const Matrix& Batch::at(std::string_view name) const {
  if (const auto* m = find(name)) return *m;
  std::vector<std::string> names;
  for (const auto& f : fields) names.push_back(f.first);
  throw std::invalid_argument("no '" + std::string(name) + "' in the batch (it has " + join_names(names) + ")");
}

}  // namespace acc::data
