// acc_data: the Rust side of libacc's dataset files (../data_ffi.h; DESIGN.md section 7, docs/data.md). arrow-rs's
// own readers (parquet, arrow-ipc, arrow-csv, arrow-json) behind a narrow C interface. No panic crosses it: every
// entry point runs under catch_unwind and reports a panic as an error.
mod cell;
mod pages;
mod table;

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow_array::RecordBatch;

use table::{Format, Options, Table};

/// The limits of ../../../../base/include/acc/limits.hpp (kept equal; docs/data.md).
pub mod limits {
    /// One JSONL line or CSV record: longer is refused before it is read whole.
    pub const MAX_LINE_BYTES: usize = 64 << 20;
    /// The JSON text of one batch of JSONL lines (a batch ends early past it).
    pub const MAX_BATCH_BYTES: usize = 256 << 20;
    /// JSONL columns are inferred from the first lines: this many, or this many bytes.
    pub const JSONL_INFER_LINES: usize = 10_000;
    pub const JSONL_INFER_BYTES: usize = 64 << 20;
    /// CSV types are inferred from the first rows.
    pub const CSV_INFER_ROWS: usize = 10_000;
    pub const CSV_READ_ROWS: usize = 65_536;
    /// Rows decoded at once from a Parquet row group.
    pub const PARQUET_READ_ROWS: usize = 65_536;
    /// One Arrow IPC message's metadata (the flatbuffer; the body is bounded by the file).
    pub const MAX_IPC_METADATA: u64 = 64 << 20;
    pub const MAX_STATE_JSON: u64 = 64 << 20;
    /// Rows of one Arrow IPC record batch or Parquet row group: Arrow's own bound on an array's length (int32
    /// offsets), past which a file's metadata is lying (a batch of no columns or null columns costs nothing to claim).
    pub const MAX_BATCH_ROWS: u64 = (1 << 31) - 1;
    /// One Parquet page, uncompressed (writers make 1 MiB pages; one value larger than that makes a larger page), and
    /// one page header (statistics hold a min and a max value).
    pub const MAX_PAGE_BYTES: u64 = 512 << 20;
    pub const MAX_PAGE_HEADER_BYTES: u64 = 16 << 20;
}

pub struct Reader {
    table: Table,
}

pub struct Batch {
    rb: RecordBatch,
    first_row: u64,
    names: Vec<String>,
    types: Vec<String>,
}

impl Batch {
    fn new(rb: RecordBatch, first_row: u64) -> Box<Batch> {
        let names = rb.schema().fields().iter().map(|f| f.name().clone()).collect();
        let types = rb.schema().fields().iter().map(|f| cell::type_name(f.data_type())).collect();
        Box::new(Batch { rb, first_row, names, types })
    }
}

unsafe fn c_string(s: &str) -> *mut c_char {
    let p = libc::malloc(s.len() + 1) as *mut u8;
    if !p.is_null() {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        *p.add(s.len()) = 0;
    }
    p as *mut c_char
}

unsafe fn set_err(err: *mut *mut c_char, msg: &str) {
    if !err.is_null() {
        *err = c_string(msg);
    }
}

thread_local! {
    // Where the last panic on this thread happened (the hook below records it instead of printing).
    static PANIC_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Panics are reported as errors, not printed: the readers of arrow-rs panic on some inconsistent files (an offset past
/// a buffer), and a library must not write to the program's stderr. Installed once, for this library's own Rust
/// runtime (libacc_data.so has its own std).
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            PANIC_AT.with(|p| *p.borrow_mut() = at);
        }))
    });
}

pub fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into());
    let at = PANIC_AT.with(|a| a.borrow().clone());
    if at.is_empty() {
        what
    } else {
        format!("{what} (at {at})")
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    format!("the data file reader stopped on an inconsistency: {}", panic_message(&p))
}

/// Runs f, turning an error or a panic into 1 and *err.
unsafe fn guard<F: FnOnce() -> Result<(), String>>(err: *mut *mut c_char, f: F) -> i32 {
    if !err.is_null() {
        *err = std::ptr::null_mut();
    }
    quiet_panics();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_err(err, &e);
            1
        }
        Err(p) => {
            set_err(err, &panic_text(p));
            1
        }
    }
}

unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    CStr::from_ptr(p).to_str().map_err(|_| format!("{what} is not UTF-8"))
}

#[no_mangle]
pub unsafe extern "C" fn accdata_string_free(s: *mut c_char) {
    libc::free(s as *mut libc::c_void);
}

#[no_mangle]
pub unsafe extern "C" fn accdata_open(
    paths: *const *const c_char,
    n_paths: usize,
    format: i32,
    columns: *const *const c_char,
    n_columns: usize,
    csv_delimiter: u8,
    csv_header: u8,
    out: *mut *mut Reader,
    err: *mut *mut c_char,
) -> i32 {
    if !out.is_null() {
        *out = std::ptr::null_mut();
    }
    guard(err, || {
        if out.is_null() || (n_paths > 0 && paths.is_null()) || (n_columns > 0 && columns.is_null()) {
            return Err("accdata_open: a NULL argument".into());
        }
        let mut ps = Vec::new();
        for i in 0..n_paths {
            ps.push(str_arg(*paths.add(i), "a path")?.to_string());
        }
        let mut cs = Vec::new();
        for i in 0..n_columns {
            cs.push(str_arg(*columns.add(i), "a column name")?.to_string());
        }
        let options = Options { format: Format::from_int(format)?, columns: cs, csv_delimiter, csv_header: csv_header != 0 };
        let table = Table::open(&ps, options)?;
        *out = Box::into_raw(Box::new(Reader { table }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_reader_free(r: *mut Reader) {
    if !r.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(r))));
    }
}

/// {"format": "...", "num_rows": N or null, "num_batches": N or null, "fields": [{"name", "type", "nullable"}]}
#[no_mangle]
pub unsafe extern "C" fn accdata_reader_info(r: *const Reader, out: *mut *mut c_char, err: *mut *mut c_char) -> i32 {
    if !out.is_null() {
        *out = std::ptr::null_mut();
    }
    guard(err, || {
        let t = &r.as_ref().ok_or("a NULL reader")?.table;
        let fields: Vec<serde_json::Value> = t
            .field_list()
            .into_iter()
            .map(|(n, ty, nl)| serde_json::json!({"name": n, "type": ty, "nullable": nl}))
            .collect();
        let v = serde_json::json!({
            "format": t.format.name(),
            "num_rows": t.num_rows,
            "num_batches": t.num_chunks(),
            "fields": fields,
        });
        *out = c_string(&v.to_string());
        Ok(())
    })
}

unsafe fn give(out: *mut *mut Batch, b: Option<(RecordBatch, u64)>) {
    *out = match b {
        Some((rb, first)) => Box::into_raw(Batch::new(rb, first)),
        None => std::ptr::null_mut(),
    };
}

/// *out is NULL at the end of the table.
#[no_mangle]
pub unsafe extern "C" fn accdata_reader_next(r: *mut Reader, max_rows: usize, out: *mut *mut Batch, err: *mut *mut c_char) -> i32 {
    if !out.is_null() {
        *out = std::ptr::null_mut();
    }
    guard(err, || {
        let t = &mut r.as_mut().ok_or("a NULL reader")?.table;
        let b = t.next(max_rows)?;
        give(out, b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_reader_rewind(r: *mut Reader, err: *mut *mut c_char) -> i32 {
    guard(err, || {
        r.as_mut().ok_or("a NULL reader")?.table.rewind();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_reader_batch(r: *mut Reader, i: usize, out: *mut *mut Batch, err: *mut *mut c_char) -> i32 {
    if !out.is_null() {
        *out = std::ptr::null_mut();
    }
    guard(err, || {
        let t = &mut r.as_mut().ok_or("a NULL reader")?.table;
        let b = t.chunk(i)?;
        give(out, Some(b));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_reader_rows(
    r: *mut Reader,
    first: u64,
    count: u64,
    out: *mut *mut Batch,
    err: *mut *mut c_char,
) -> i32 {
    if !out.is_null() {
        *out = std::ptr::null_mut();
    }
    guard(err, || {
        let t = &mut r.as_mut().ok_or("a NULL reader")?.table;
        let b = t.rows(first, count)?;
        give(out, Some((b, first)));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_reader_take(
    r: *mut Reader,
    rows: *const i64,
    n: usize,
    out: *mut *mut Batch,
    err: *mut *mut c_char,
) -> i32 {
    if !out.is_null() {
        *out = std::ptr::null_mut();
    }
    guard(err, || {
        let t = &mut r.as_mut().ok_or("a NULL reader")?.table;
        let rows = if n == 0 { &[][..] } else { std::slice::from_raw_parts(rows, n) };
        let b = t.take(rows)?;
        give(out, Some((b, 0)));
        Ok(())
    })
}

/// One batch of the rows picks[2k] (a batch of `batches`), picks[2k + 1] (its row): rows of several batches.
#[no_mangle]
pub unsafe extern "C" fn accdata_batch_interleave(
    batches: *const *const Batch,
    n_batches: usize,
    picks: *const usize,
    n_picks: usize,
    out: *mut *mut Batch,
    err: *mut *mut c_char,
) -> i32 {
    if !out.is_null() {
        *out = std::ptr::null_mut();
    }
    guard(err, || {
        if n_batches == 0 || batches.is_null() {
            return Err("no batches to take rows from".into());
        }
        let bs: Vec<&RecordBatch> = (0..n_batches).map(|i| &(**batches.add(i)).rb).collect();
        let mut idx = Vec::with_capacity(n_picks);
        for k in 0..n_picks {
            let (b, row) = (*picks.add(2 * k), *picks.add(2 * k + 1));
            if b >= n_batches || row >= bs[b].num_rows() {
                return Err(format!("pick {k}: row {row} of batch {b} is outside them"));
            }
            idx.push((b, row));
        }
        let rb = if idx.is_empty() {
            RecordBatch::new_empty(bs[0].schema())
        } else {
            arrow_select::interleave::interleave_record_batch(&bs, &idx).map_err(|e| e.to_string())?
        };
        give(out, Some((rb, 0)));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_batch_free(b: *mut Batch) {
    if !b.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(b))));
    }
}

#[no_mangle]
pub unsafe extern "C" fn accdata_batch_rows(b: *const Batch) -> usize {
    b.as_ref().map_or(0, |b| b.rb.num_rows())
}

#[no_mangle]
pub unsafe extern "C" fn accdata_batch_first_row(b: *const Batch) -> u64 {
    b.as_ref().map_or(0, |b| b.first_row)
}

#[no_mangle]
pub unsafe extern "C" fn accdata_batch_columns(b: *const Batch) -> usize {
    b.as_ref().map_or(0, |b| b.rb.num_columns())
}

/// Column col's name and type (pyarrow's name), borrowed from the batch; empty for a column past the end.
#[no_mangle]
pub unsafe extern "C" fn accdata_batch_column_info(
    b: *const Batch,
    col: usize,
    name: *mut *const c_char,
    name_len: *mut usize,
    type_: *mut *const c_char,
    type_len: *mut usize,
) {
    let (n, t) = match b.as_ref() {
        Some(b) if col < b.names.len() => (b.names[col].as_str(), b.types[col].as_str()),
        _ => ("", ""),
    };
    *name = n.as_ptr() as *const c_char;
    *name_len = n.len();
    *type_ = t.as_ptr() as *const c_char;
    *type_len = t.len();
}

unsafe fn column<'a>(b: *const Batch, col: usize) -> Result<&'a dyn arrow_array::Array, String> {
    let b = b.as_ref().ok_or("a NULL batch")?;
    if col >= b.rb.num_columns() {
        return Err(format!("column {col} of {}", b.rb.num_columns()));
    }
    Ok(b.rb.column(col).as_ref())
}

/// 1 when the cell is null, 0 when not (and for a cell outside the batch).
#[no_mangle]
pub unsafe extern "C" fn accdata_cell_is_null(b: *const Batch, col: usize, row: usize) -> i32 {
    match column(b, col) {
        Ok(a) if row < a.len() => a.is_null(row) as i32,
        _ => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn accdata_cell_str(
    b: *const Batch,
    col: usize,
    row: usize,
    ptr: *mut *const c_char,
    len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    guard(err, || {
        let s = cell::str_cell(column(b, col)?, row)?;
        *ptr = s.as_ptr() as *const c_char;
        *len = s.len();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_cell_i64(b: *const Batch, col: usize, row: usize, out: *mut i64, err: *mut *mut c_char) -> i32 {
    guard(err, || {
        *out = cell::i64_cell(column(b, col)?, row)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_cell_f64(b: *const Batch, col: usize, row: usize, out: *mut f64, err: *mut *mut c_char) -> i32 {
    guard(err, || {
        *out = cell::f64_cell(column(b, col)?, row)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn accdata_cell_bool(b: *const Batch, col: usize, row: usize, out: *mut u8, err: *mut *mut c_char) -> i32 {
    guard(err, || {
        *out = cell::bool_cell(column(b, col)?, row)? as u8;
        Ok(())
    })
}

/// *out: malloc'd (free with accdata_string_free), *len integers.
#[no_mangle]
pub unsafe extern "C" fn accdata_cell_int_list(
    b: *const Batch,
    col: usize,
    row: usize,
    out: *mut *mut i64,
    len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    *out = std::ptr::null_mut();
    *len = 0;
    guard(err, || {
        let v = cell::int_list_cell(column(b, col)?, row)?;
        if !v.is_empty() {
            let p = libc::malloc(v.len() * 8) as *mut i64;
            if p.is_null() {
                return Err(format!("out of memory for a list of {} integers", v.len()));
            }
            std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len());
            *out = p;
        }
        *len = v.len();
        Ok(())
    })
}

/// *out: malloc'd JSON text (free with accdata_string_free), *len bytes.
#[no_mangle]
pub unsafe extern "C" fn accdata_cell_json(
    b: *const Batch,
    col: usize,
    row: usize,
    out: *mut *mut c_char,
    len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    *out = std::ptr::null_mut();
    *len = 0;
    guard(err, || {
        let mut s = String::new();
        cell::json_value(column(b, col)?, row, &mut s)?;
        let p = c_string(&s);
        if p.is_null() {
            return Err("out of memory".into());
        }
        *out = p;
        *len = s.len();
        Ok(())
    })
}
