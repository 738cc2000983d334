/* The narrow C interface between libacc's C++ and its Rust dataset-file library (rust/, DESIGN.md section 7,
 * docs/data.md). Internal: the accdata_ prefix is outside libacc's exported acc_* names, so the version script hides
 * it. Conventions as text_ffi.h's: a function returning int returns 0 on success; on failure it returns 1 and sets
 * *err to a message (UTF-8, NUL-terminated) the caller frees with accdata_string_free. Strings in are NUL-terminated
 * UTF-8; strings out are malloc'd by Rust and freed with accdata_string_free. No panic crosses this interface (each
 * entry point catches it and reports it as an error). A reader is used by one thread at a time; a batch is
 * immutable and may be read by many threads at once. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct accdata_reader accdata_reader;
typedef struct accdata_batch accdata_batch;

void accdata_string_free(char* s);

/* A table over n paths (files, or folders: a save_to_disk folder, or a folder of data files), read as one table in
 * order. format: 0 auto, 1 JSON lines, 2 CSV, 3 Parquet, 4 Arrow IPC stream, 5 Arrow IPC file (acc::data::Format).
 * columns (n_columns; 0: all): the columns read, in this order; one the files lack is an error listing theirs.
 * csv_delimiter: 0 for ',' (or '\t' for .tsv); csv_header: 1 when the first row names the columns. */
int accdata_open(const char* const* paths, size_t n_paths, int format, const char* const* columns, size_t n_columns,
                 uint8_t csv_delimiter, uint8_t csv_header, accdata_reader** out, char** err);
void accdata_reader_free(accdata_reader* r);
/* {"format": "jsonl"|"csv"|"parquet"|"arrow_stream"|"arrow_file", "num_rows": N|null, "num_batches": N|null,
 *  "fields": [{"name": .., "type": .. (pyarrow's name), "nullable": ..}]}; num_rows is null for readers that read in
 * order only (JSON lines, CSV). */
int accdata_reader_info(const accdata_reader* r, char** out_json, char** err);
/* The next at most max_rows rows in table order; *out is NULL at the end. */
int accdata_reader_next(accdata_reader* r, size_t max_rows, accdata_batch** out, char** err);
int accdata_reader_rewind(accdata_reader* r, char** err);
/* Map-style readers (num_rows not null): the i-th of the files' own batches (row groups, IPC record batches); rows
 * [first, first + count) clipped at the end; the n given rows in order (repeats allowed). */
int accdata_reader_batch(accdata_reader* r, size_t i, accdata_batch** out, char** err);
int accdata_reader_rows(accdata_reader* r, uint64_t first, uint64_t count, accdata_batch** out, char** err);
int accdata_reader_take(accdata_reader* r, const int64_t* rows, size_t n, accdata_batch** out, char** err);
/* One batch of rows of several batches of one schema: row k is row picks[2k + 1] of batches[picks[2k]]. */
int accdata_batch_interleave(const accdata_batch* const* batches, size_t n_batches, const size_t* picks, size_t n_picks,
                             accdata_batch** out, char** err);

void accdata_batch_free(accdata_batch* b);
size_t accdata_batch_rows(const accdata_batch* b);
/* The batch's first row's number in the table (0 for take and interleave). */
uint64_t accdata_batch_first_row(const accdata_batch* b);
size_t accdata_batch_columns(const accdata_batch* b);
/* Column col's name and type (pyarrow's name), borrowed while the batch lives; not NUL-terminated. */
void accdata_batch_column_info(const accdata_batch* b, size_t col, const char** name, size_t* name_len,
                               const char** type, size_t* type_len);

/* Cells (column col, row row). is_null: 1 or 0. The others fail, with the reason in *err, for a null cell, a row
 * outside the batch or a type they do not read (table.hpp's Column says which they read). str borrows the bytes from
 * the batch; int_list and json return malloc'd memory (free with accdata_string_free). json: the cell as Python's
 * json.dumps(value, ensure_ascii=False) of the value datasets gives. */
int accdata_cell_is_null(const accdata_batch* b, size_t col, size_t row);
int accdata_cell_str(const accdata_batch* b, size_t col, size_t row, const char** ptr, size_t* len, char** err);
int accdata_cell_i64(const accdata_batch* b, size_t col, size_t row, int64_t* out, char** err);
int accdata_cell_f64(const accdata_batch* b, size_t col, size_t row, double* out, char** err);
int accdata_cell_bool(const accdata_batch* b, size_t col, size_t row, uint8_t* out, char** err);
int accdata_cell_int_list(const accdata_batch* b, size_t col, size_t row, int64_t** out, size_t* len, char** err);
int accdata_cell_json(const accdata_batch* b, size_t col, size_t row, char** out, size_t* len, char** err);

#ifdef __cplusplus
}
#endif
