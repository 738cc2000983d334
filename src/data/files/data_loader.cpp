// libacc.so's side of data_ffi.h: the Rust dataset-file library is libacc_data.so, loaded on first use from the folder
// libacc.so is in (or $ACC_DATA_LIBRARY), as text_loader.cpp loads libacc_text.so, so that programs that read no
// dataset files, the demo among them, neither build nor load it. Each accdata_ function forwards to the library's;
// accdata_open reports a missing library as its error (the others only run on what it made).
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "data/files/data_ffi.h"
#include "util/lazy_library.hpp"

namespace {

// clang-format off: the table of functions, several a line
#define ACC_DATA_FUNCTIONS(X)                                                                                      \
  X(accdata_open) X(accdata_reader_free) X(accdata_reader_info) X(accdata_reader_next) X(accdata_reader_rewind)   \
  X(accdata_reader_batch) X(accdata_reader_rows) X(accdata_reader_take) X(accdata_batch_interleave)               \
  X(accdata_batch_free) X(accdata_batch_rows) X(accdata_batch_first_row) X(accdata_batch_columns)                 \
  X(accdata_batch_column_info) X(accdata_cell_is_null) X(accdata_cell_str) X(accdata_cell_i64)                    \
  X(accdata_cell_f64) X(accdata_cell_bool) X(accdata_cell_int_list) X(accdata_cell_json)
// clang-format on

struct Library {
#define X(name) decltype(&::name) name = nullptr;
  ACC_DATA_FUNCTIONS(X)
#undef X
  std::string why;  // empty once loaded
};

const Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
#define X(name) #name,
    static const char* const names[] = {ACC_DATA_FUNCTIONS(X)};
#undef X
#define X(name) reinterpret_cast<void**>(&lib.name),
    void** const slots[] = {ACC_DATA_FUNCTIONS(X)};
#undef X
    lib.why = acc::util::load_beside_libacc("libacc_data.so", "ACC_DATA_LIBRARY", "dataset file", names, slots,
                                            sizeof(slots) / sizeof(slots[0]));
  });
  return lib;
}

}  // namespace

extern "C" {

// Both sides allocate with malloc (the Rust side through libc), so this needs no library.
void accdata_string_free(char* s) { std::free(s); }

int accdata_open(const char* const* paths, size_t n_paths, int format, const char* const* columns, size_t n_columns,
                 uint8_t csv_delimiter, uint8_t csv_header, accdata_reader** out, char** err) {
  const Library& l = library();
  if (l.why.empty())
    return l.accdata_open(paths, n_paths, format, columns, n_columns, csv_delimiter, csv_header, out, err);
  if (out) *out = nullptr;
  if (err) {
    *err = static_cast<char*>(std::malloc(l.why.size() + 1));
    if (*err) std::memcpy(*err, l.why.c_str(), l.why.size() + 1);
  }
  return 1;
}

// The rest take what accdata_open made, so the library is loaded when they run.
void accdata_reader_free(accdata_reader* r) {
  if (r) library().accdata_reader_free(r);
}
int accdata_reader_info(const accdata_reader* r, char** out, char** err) {
  return library().accdata_reader_info(r, out, err);
}
int accdata_reader_next(accdata_reader* r, size_t max_rows, accdata_batch** out, char** err) {
  return library().accdata_reader_next(r, max_rows, out, err);
}
int accdata_reader_rewind(accdata_reader* r, char** err) { return library().accdata_reader_rewind(r, err); }
int accdata_reader_batch(accdata_reader* r, size_t i, accdata_batch** out, char** err) {
  return library().accdata_reader_batch(r, i, out, err);
}
int accdata_reader_rows(accdata_reader* r, uint64_t first, uint64_t count, accdata_batch** out, char** err) {
  return library().accdata_reader_rows(r, first, count, out, err);
}
int accdata_reader_take(accdata_reader* r, const int64_t* rows, size_t n, accdata_batch** out, char** err) {
  return library().accdata_reader_take(r, rows, n, out, err);
}
int accdata_batch_interleave(const accdata_batch* const* batches, size_t n_batches, const size_t* picks, size_t n_picks,
                             accdata_batch** out, char** err) {
  return library().accdata_batch_interleave(batches, n_batches, picks, n_picks, out, err);
}
void accdata_batch_free(accdata_batch* b) {
  if (b) library().accdata_batch_free(b);
}
size_t accdata_batch_rows(const accdata_batch* b) { return library().accdata_batch_rows(b); }
uint64_t accdata_batch_first_row(const accdata_batch* b) { return library().accdata_batch_first_row(b); }
size_t accdata_batch_columns(const accdata_batch* b) { return library().accdata_batch_columns(b); }
void accdata_batch_column_info(const accdata_batch* b, size_t col, const char** name, size_t* name_len,
                               const char** type, size_t* type_len) {
  library().accdata_batch_column_info(b, col, name, name_len, type, type_len);
}
int accdata_cell_is_null(const accdata_batch* b, size_t col, size_t row) {
  return library().accdata_cell_is_null(b, col, row);
}
int accdata_cell_str(const accdata_batch* b, size_t col, size_t row, const char** ptr, size_t* len, char** err) {
  return library().accdata_cell_str(b, col, row, ptr, len, err);
}
int accdata_cell_i64(const accdata_batch* b, size_t col, size_t row, int64_t* out, char** err) {
  return library().accdata_cell_i64(b, col, row, out, err);
}
int accdata_cell_f64(const accdata_batch* b, size_t col, size_t row, double* out, char** err) {
  return library().accdata_cell_f64(b, col, row, out, err);
}
int accdata_cell_bool(const accdata_batch* b, size_t col, size_t row, uint8_t* out, char** err) {
  return library().accdata_cell_bool(b, col, row, out, err);
}
int accdata_cell_int_list(const accdata_batch* b, size_t col, size_t row, int64_t** out, size_t* len, char** err) {
  return library().accdata_cell_int_list(b, col, row, out, len, err);
}
int accdata_cell_json(const accdata_batch* b, size_t col, size_t row, char** out, size_t* len, char** err) {
  return library().accdata_cell_json(b, col, row, out, len, err);
}

}  // extern "C"
