// Dataset files (files/table.hpp: JSONL, CSV, Parquet, Arrow IPC, save_to_disk folders) as preprocessing's input.
#pragma once
#include <string>
#include <vector>

#include "data/files/table.hpp"
#include "data/prep/prep.hpp"

namespace acc::data {

// The named columns of a batch (empty: all) as cells of JSON text (Column::json: json.dumps of what `datasets`
// gives), so that a string is a JSON string and a `messages` cell a list of objects.
Table table_from(const RecordBatch& batch, const std::vector<std::string>& columns = {});
// Every row a reader has left, read batch_rows at a time, as one Table.
Table read_table(Reader& reader, const std::vector<std::string>& columns = {}, size_t batch_rows = 4096);

}  // namespace acc::data
