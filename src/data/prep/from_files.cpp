// Dataset files as preprocessing's input.
#include "data/prep/from_files.hpp"

namespace acc::data {

Table table_from(const RecordBatch& batch, const std::vector<std::string>& columns) {
  Table t;
  std::vector<const Column*> cols;
  if (columns.empty())
    for (const auto& c : batch.columns()) cols.push_back(&c);
  else
    for (const auto& name : columns) cols.push_back(&batch.column(name));  // an error lists the columns there are
  for (const Column* c : cols) {
    std::vector<std::string> cells;
    cells.reserve(batch.rows);
    for (size_t i = 0; i < batch.rows; ++i) cells.push_back(c->json(i));
    t.add(c->name(), std::move(cells));
  }
  return t;
}

Table read_table(Reader& reader, const std::vector<std::string>& columns, size_t batch_rows) {
  Table all;
  while (auto b = reader.next_batch(batch_rows)) {
    Table part = table_from(*b, columns);
    if (all.names.empty()) {
      all = std::move(part);
      continue;
    }
    for (size_t c = 0; c < all.cells.size(); ++c)
      all.cells[c].insert(all.cells[c].end(), std::make_move_iterator(part.cells[c].begin()),
                          std::make_move_iterator(part.cells[c].end()));
  }
  return all;
}

}  // namespace acc::data
