// A table over dataset files: one format, one schema, files in order. Map-style sources (Parquet, Arrow IPC in
// both formats) know their rows from metadata and read any row range; JSONL and CSV are read in order only.
// Every read holds at most a batch (and, for Parquet, the pages it decodes), never a whole file.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::{Block, MessageHeader, MetadataVersion};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::basic::Compression;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::arrow::ProjectionMask;

use crate::limits;

pub type Res<T> = Result<T, String>;

/// A batch decoded from Parquet, checked whole (offsets within their buffers, UTF-8, nested lengths): arrow-rs's
/// Parquet readers build arrays without that check, and a corrupt page made a string's offsets point past its bytes
/// (found by fuzz_parquet_footer: tests/data/bad/string_offsets.parquet). Arrow IPC's decoder checks its own.
fn validated(path: &str, b: RecordBatch) -> Res<RecordBatch> {
    for (k, c) in b.columns().iter().enumerate() {
        c.to_data()
            .validate_full()
            .map_err(|e| format!("{path}: corrupt file: column '{}': {e}", b.schema().field(k).name()))?;
    }
    Ok(b)
}

/// Runs a read of arrow-rs on one file: a panic there (its readers assert on some inconsistent files) is that file's
/// error, named, rather than a failure of the library.
fn file_read<T>(path: &str, f: impl FnOnce() -> Res<T>) -> Res<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!("{path}: corrupt file: {}", crate::panic_message(&p))),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    Auto = 0,
    Jsonl = 1,
    Csv = 2,
    Parquet = 3,
    ArrowStream = 4,
    ArrowFile = 5,
}

impl Format {
    pub fn from_int(v: i32) -> Res<Format> {
        Ok(match v {
            0 => Format::Auto,
            1 => Format::Jsonl,
            2 => Format::Csv,
            3 => Format::Parquet,
            4 => Format::ArrowStream,
            5 => Format::ArrowFile,
            _ => return Err(format!("unknown format {v}")),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
            Format::Parquet => "parquet",
            Format::ArrowStream => "arrow_stream",
            Format::ArrowFile => "arrow_file",
        }
    }
}

pub struct Options {
    pub format: Format,
    pub columns: Vec<String>,
    pub csv_delimiter: u8,
    pub csv_header: bool,
}

/// Opens a path that must be a regular file: a FIFO or a device would block or never end.
fn open_regular(path: &str) -> Res<(File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "{path}: not a regular file (a FIFO, socket or device): dataset files are read from regular files"
        ));
    }
    let f = File::open(path).map_err(|e| format!("{path}: {e}"))?;
    Ok((f, meta.len()))
}

fn read_at(file: &File, path: &str, offset: u64, len: usize, what: &str) -> Res<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)
        .map_err(|e| format!("{path}: truncated or unreadable: {what} at byte {offset} ({len} bytes): {e}"))?;
    Ok(buf)
}

// ---------------------------------------------------------------------------------------------------------------
// Arrow IPC (stream and file format): an index of the messages, decoded one record batch at a time.

struct IpcSource {
    path: String,
    file: File,
    decoder: FileDecoder,
    blocks: Vec<(Block, u64)>, // record batches: where, and their rows
}

fn ipc_message<'a>(buf: &'a [u8], path: &str, offset: u64) -> Res<arrow_ipc::Message<'a>> {
    arrow_ipc::root_as_message(buf).map_err(|e| format!("{path}: corrupt Arrow IPC message at byte {offset}: {e}"))
}

/// What an Arrow IPC file holds, found from its messages (stream format) or its footer (file format).
struct IpcIndex {
    schema: Schema,
    version: MetadataVersion,
    dict_blocks: Vec<Block>,
    batch_blocks: Vec<(Block, u64)>, // record batches: where, and their rows
}

/// The metadata of the stream's message at `pos`, and the length of the prefix before it; None at the end of the
/// stream. Messages: [0xFFFFFFFF] int32 metadata length, the flatbuffer Message, then bodyLength bytes.
fn stream_metadata_at(file: &File, path: &str, len: u64, pos: u64) -> Res<Option<(Vec<u8>, u64)>> {
    if pos + 4 > len {
        if pos == len {
            return Ok(None); // the end-of-stream marker is optional
        }
        return Err(format!("{path}: truncated Arrow IPC stream at byte {pos}"));
    }
    let mut head = read_at(file, path, pos, 4, "a message length")?;
    let mut prefix = 4u64;
    if head == [0xff; 4] {
        if pos + 8 > len {
            return Err(format!("{path}: truncated Arrow IPC stream at byte {pos}"));
        }
        head = read_at(file, path, pos + 4, 4, "a message length")?;
        prefix = 8;
    }
    let meta_len = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    if meta_len == 0 {
        return Ok(None);
    }
    if meta_len < 0 || meta_len as u64 > limits::MAX_IPC_METADATA || pos + prefix + meta_len as u64 > len {
        return Err(format!(
            "{path}: truncated or corrupt Arrow IPC stream: the message at byte {pos} says {meta_len} \
             metadata bytes; the file has {} left",
            len - pos - prefix
        ));
    }
    Ok(Some((read_at(file, path, pos + prefix, meta_len as usize, "a message")?, prefix)))
}

/// Stream format: every message read in turn, the schema first.
fn index_stream(file: &File, path: &str, len: u64) -> Res<IpcIndex> {
    let mut dict_blocks = Vec::new();
    let mut batch_blocks = Vec::new();
    let mut pos = 0u64;
    let mut first: Option<(Schema, MetadataVersion)> = None;
    while let Some((meta, prefix)) = stream_metadata_at(file, path, len, pos)? {
        let meta_len = meta.len() as u64;
        let msg = ipc_message(&meta, path, pos)?;
        let body = msg.bodyLength();
        let end = (pos + prefix + meta_len).checked_add(body.max(0) as u64);
        if body < 0 || end.map_or(true, |e| e > len) {
            return Err(format!(
                "{path}: truncated or corrupt Arrow IPC stream: the message at byte {pos} says a body of \
                 {body} bytes; the file has {} left",
                len - pos - prefix - meta_len
            ));
        }
        let block = Block::new(pos as i64, (prefix + meta_len) as i32, body);
        match msg.header_type() {
            MessageHeader::Schema => {
                if first.is_some() {
                    return Err(format!("{path}: a second schema message at byte {pos}"));
                }
                let fb = msg.header_as_schema().ok_or_else(|| format!("{path}: corrupt schema message"))?;
                let s = arrow_ipc::convert::try_fb_to_schema(fb).map_err(|e| format!("{path}: {e}"))?;
                first = Some((s, msg.version()));
            }
            _ if first.is_none() => {
                return Err(format!("{path}: not an Arrow IPC stream (its first message is not a schema)"))
            }
            MessageHeader::DictionaryBatch => dict_blocks.push(block),
            MessageHeader::RecordBatch => {
                let rb = msg.header_as_record_batch().ok_or_else(|| format!("{path}: corrupt record batch"))?;
                if rb.length() < 0 || rb.length() as u64 > limits::MAX_BATCH_ROWS {
                    return Err(format!("{path}: a record batch at byte {pos} says {} rows", rb.length()));
                }
                batch_blocks.push((block, rb.length() as u64));
            }
            t => return Err(format!("{path}: unexpected Arrow IPC message {t:?} at byte {pos}")),
        }
        pos = end.unwrap();
    }
    let (schema, version) = first.ok_or_else(|| format!("{path}: an empty file, not an Arrow IPC stream"))?;
    Ok(IpcIndex { schema, version, dict_blocks, batch_blocks })
}

/// A block of the file format's footer must lie inside the file, after the leading magic.
fn check_footer_block(b: &Block, path: &str, len: u64) -> Res<()> {
    let end = (b.offset() as i128) + (b.metaDataLength() as i128) + (b.bodyLength() as i128);
    if b.offset() < 8 || b.metaDataLength() < 8 || b.bodyLength() < 0 || end > len as i128 {
        return Err(format!(
            "{path}: corrupt Arrow IPC footer: a block at byte {} of {} + {} bytes in a file of {len}",
            b.offset(),
            b.metaDataLength(),
            b.bodyLength()
        ));
    }
    Ok(())
}

/// The rows of the record batch a footer block points at, from its message.
fn footer_batch_rows(file: &File, path: &str, b: &Block) -> Res<u64> {
    let meta = read_at(file, path, b.offset() as u64, b.metaDataLength() as usize, "a message")?;
    let skip = if meta[..4] == [0xff; 4] { 8 } else { 4 };
    let msg = ipc_message(&meta[skip..], path, b.offset() as u64)?;
    let rb = msg
        .header_as_record_batch()
        .ok_or_else(|| format!("{path}: the block at byte {} is not a record batch", b.offset()))?;
    if rb.length() < 0 || rb.length() as u64 > limits::MAX_BATCH_ROWS {
        return Err(format!("{path}: a record batch at byte {} says {} rows", b.offset(), rb.length()));
    }
    Ok(rb.length() as u64)
}

/// File format: ARROW1, padding, a stream, the footer (a flatbuffer), its int32 length, ARROW1.
fn index_file(file: &File, path: &str, len: u64) -> Res<IpcIndex> {
    if len < 18 {
        return Err(format!("{path}: truncated Arrow IPC file ({len} bytes)"));
    }
    let tail = read_at(file, path, len - 10, 10, "the footer length")?;
    let magic = read_at(file, path, 0, 6, "the magic")?;
    if &tail[4..] != b"ARROW1" || magic != b"ARROW1" {
        return Err(format!("{path}: not an Arrow IPC file, or truncated (no ARROW1 magic at both ends)"));
    }
    let footer_len = i32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if footer_len <= 0 || footer_len as u64 > len - 18 {
        return Err(format!("{path}: corrupt Arrow IPC file: a footer of {footer_len} bytes in a file of {len}"));
    }
    let footer_buf = read_at(file, path, len - 10 - footer_len as u64, footer_len as usize, "the footer")?;
    let footer = arrow_ipc::root_as_footer(&footer_buf)
        .map_err(|e| format!("{path}: corrupt Arrow IPC footer: {e}"))?;
    let fb = footer.schema().ok_or_else(|| format!("{path}: the Arrow IPC footer has no schema"))?;
    let schema = arrow_ipc::convert::try_fb_to_schema(fb).map_err(|e| format!("{path}: {e}"))?;
    let version = footer.version();
    let mut dict_blocks = Vec::new();
    let mut batch_blocks = Vec::new();
    for b in footer.dictionaries().into_iter().flatten() {
        check_footer_block(b, path, len)?;
        dict_blocks.push(*b);
    }
    for b in footer.recordBatches().into_iter().flatten() {
        check_footer_block(b, path, len)?;
        batch_blocks.push((*b, footer_batch_rows(file, path, b)?));
    }
    Ok(IpcIndex { schema, version, dict_blocks, batch_blocks })
}

impl IpcSource {
    fn open(path: &str, stream: bool, projection: &dyn Fn(&Schema) -> Res<Vec<usize>>) -> Res<(IpcSource, SchemaRef)> {
        let (file, len) = open_regular(path)?;
        let IpcIndex { schema, version, dict_blocks, batch_blocks } =
            if stream { index_stream(&file, path, len)? } else { index_file(&file, path, len)? };
        let schema = Arc::new(schema);
        let proj = projection(&schema)?;
        let mut decoder = FileDecoder::new(schema.clone(), version).with_projection(proj.clone());
        let mut src = IpcSource { path: path.to_string(), file, decoder: FileDecoder::new(schema.clone(), version), blocks: batch_blocks };
        for b in &dict_blocks {
            let buf = src.read_block(b)?;
            decoder.read_dictionary(b, &buf).map_err(|e| format!("{path}: a dictionary at byte {}: {e}", b.offset()))?;
        }
        src.decoder = decoder;
        let projected = Arc::new(schema.project(&proj).map_err(|e| e.to_string())?);
        Ok((src, projected))
    }

    fn read_block(&self, b: &Block) -> Res<arrow_buffer::Buffer> {
        let len = b.metaDataLength() as usize + b.bodyLength() as usize;
        let buf = read_at(&self.file, &self.path, b.offset() as u64, len, "a record batch")?;
        if buf.len() < 8 {
            return Err(format!("{}: a message at byte {} is too short", self.path, b.offset()));
        }
        Ok(arrow_buffer::Buffer::from_vec(buf))
    }

    fn batch(&self, i: usize) -> Res<RecordBatch> {
        file_read(&self.path, || self.batch_inner(i))
    }

    fn batch_inner(&self, i: usize) -> Res<RecordBatch> {
        let (b, rows) = &self.blocks[i];
        let buf = self.read_block(b)?;
        let rb = self
            .decoder
            .read_record_batch(b, &buf)
            .map_err(|e| format!("{}: the record batch at byte {}: {e}", self.path, b.offset()))?
            .ok_or_else(|| format!("{}: no record batch at byte {}", self.path, b.offset()))?;
        if rb.num_rows() as u64 != *rows {
            return Err(format!("{}: the record batch at byte {} says {rows} rows and has {}", self.path, b.offset(), rb.num_rows()));
        }
        Ok(rb)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Parquet: the footer's row groups; rows read through a row selection of one row group at a time.

struct ParquetSource {
    path: String,
    file: File,
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
    groups: Vec<u64>, // rows per row group
}

impl ParquetSource {
    fn open(path: &str, projection: &dyn Fn(&Schema) -> Res<Vec<usize>>) -> Res<(ParquetSource, SchemaRef)> {
        let (file, len) = open_regular(path)?;
        let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(|e| format!("{path}: {e}"))?;
        crate::pages::check(path, &file, len, meta.metadata())?;
        let proj = projection(meta.schema())?;
        // Codecs left out of the build (Cargo.toml) are refused here, naming them, not as arrow-rs's "disabled feature".
        for (g, group) in meta.metadata().row_groups().iter().enumerate() {
            for (c, chunk) in group.columns().iter().enumerate() {
                let unread = match chunk.compression() {
                    Compression::LZO => "LZO",
                    Compression::BROTLI(_) => "BROTLI",
                    Compression::LZ4 => "LZ4",
                    Compression::LZ4_RAW => "LZ4_RAW",
                    _ => continue,
                };
                if proj.contains(&meta.parquet_schema().get_column_root_idx(c)) {
                    return Err(format!(
                        "{path}: column chunk {c} of row group {g} is compressed with {unread}, which libacc does not read (it reads uncompressed, SNAPPY, GZIP and ZSTD Parquet, what pyarrow and datasets write by default or when asked; rewrite the file with one of them)"
                    ));
                }
            }
        }
        let mask = ProjectionMask::roots(meta.parquet_schema(), proj.iter().copied());
        let mut groups = Vec::new();
        for g in meta.metadata().row_groups() {
            if g.num_rows() < 0 || g.num_rows() as u64 > limits::MAX_BATCH_ROWS {
                return Err(format!("{path}: corrupt Parquet metadata: a row group of {} rows", g.num_rows()));
            }
            groups.push(g.num_rows() as u64);
        }
        // ProjectionMask keeps the file's column order: the table reorders by name.
        let mut sorted = proj.clone();
        sorted.sort();
        let schema = Arc::new(meta.schema().project(&sorted).map_err(|e| e.to_string())?);
        Ok((ParquetSource { path: path.to_string(), file, meta, mask, groups }, schema))
    }

    fn builder(&self) -> Res<ParquetRecordBatchReaderBuilder<File>> {
        let f = self.file.try_clone().map_err(|e| format!("{}: {e}", self.path))?;
        Ok(ParquetRecordBatchReaderBuilder::new_with_metadata(f, self.meta.clone()).with_projection(self.mask.clone()))
    }

    /// The selected rows of row group g (selection: (first, count) runs, ascending), concatenated.
    fn read(&self, g: usize, selection: &[(u64, u64)], schema: &SchemaRef) -> Res<RecordBatch> {
        file_read(&self.path, || self.read_inner(g, selection, schema))
    }

    fn read_inner(&self, g: usize, selection: &[(u64, u64)], schema: &SchemaRef) -> Res<RecordBatch> {
        let mut sel = Vec::new();
        let mut at = 0u64;
        let mut want = 0u64;
        for &(first, count) in selection {
            if first > at {
                sel.push(RowSelector::skip((first - at) as usize));
            }
            sel.push(RowSelector::select(count as usize));
            at = first + count;
            want += count;
        }
        let reader = self
            .builder()?
            .with_row_groups(vec![g])
            .with_row_selection(RowSelection::from(sel))
            .with_batch_size((want as usize).clamp(1, limits::PARQUET_READ_ROWS))
            .build()
            .map_err(|e| format!("{}: row group {g}: {e}", self.path))?;
        let mut parts = Vec::new();
        for b in reader {
            parts.push(validated(&self.path, b.map_err(|e| format!("{}: row group {g}: {e}", self.path))?)?);
        }
        let rb = arrow_select::concat::concat_batches(schema, &parts).map_err(|e| format!("{}: {e}", self.path))?;
        if rb.num_rows() as u64 != want {
            return Err(format!(
                "{}: corrupt Parquet file: row group {g} gave {} of the {want} rows its metadata promises",
                self.path,
                rb.num_rows()
            ));
        }
        Ok(rb)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// JSON lines: line by line, bounded; each line parsed by serde_json so that an error names its line.

/// Reads lines of at most `limit` bytes without holding more: a longer line is refused when the limit is passed.
pub struct Lines<R: BufRead> {
    r: R,
    pub line: u64,
    limit: usize,
    path: String,
}

impl<R: BufRead> Lines<R> {
    pub fn new(r: R, path: &str, limit: usize) -> Self {
        Lines { r, line: 0, limit, path: path.to_string() }
    }
    /// The next line (without its newline) into buf; false at the end.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> Res<bool> {
        buf.clear();
        let mut any = false;
        loop {
            let avail = self.r.fill_buf().map_err(|e| format!("{}: line {}: {e}", self.path, self.line + 1))?;
            if avail.is_empty() {
                if any {
                    self.line += 1;
                }
                return Ok(any);
            }
            any = true;
            let (take, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(p) => (p, true),
                None => (avail.len(), false),
            };
            if buf.len() + take > self.limit {
                return Err(format!(
                    "{}: line {} is longer than {} bytes (the limit of one record)",
                    self.path,
                    self.line + 1,
                    self.limit
                ));
            }
            buf.extend_from_slice(&avail[..take]);
            self.r.consume(if done { take + 1 } else { take });
            if done {
                self.line += 1;
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
                return Ok(true);
            }
        }
    }
}

/// Parses one JSON line into an object (None for a blank line), naming file and line on error.
pub fn parse_json_line(buf: &[u8], path: &str, line: u64) -> Res<Option<serde_json::Value>> {
    let text = std::str::from_utf8(buf)
        .map_err(|e| format!("{path}: line {line} is not UTF-8 (byte {} of the line)", e.valid_up_to() + 1))?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    // A JSON array (what json.dump of a list writes) is not JSON lines: say so on its first line.
    let hint = if line == 1 && text.trim_start().starts_with('[') {
        " (a JSON array: this reader reads JSON lines, one object per line; jq -c '.[]' writes them)"
    } else {
        ""
    };
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{path}: line {line} is not JSON: {e}{hint}"))?;
    if !v.is_object() {
        return Err(format!("{path}: line {line} is not a JSON object{hint}"));
    }
    Ok(Some(v))
}

/// The columns of a JSON lines file, inferred as pyarrow infers them from its first lines (at most
/// limits::JSONL_INFER_LINES lines or JSONL_INFER_BYTES bytes).
fn jsonl_schema(path: &str) -> Res<Schema> {
    let (file, _) = open_regular(path)?;
    let mut lines = Lines::new(BufReader::with_capacity(1 << 16, file), path, limits::MAX_LINE_BYTES);
    let mut buf = Vec::new();
    let mut values = Vec::new();
    let mut bytes = 0usize;
    while values.len() < limits::JSONL_INFER_LINES && bytes < limits::JSONL_INFER_BYTES && lines.next_line(&mut buf)? {
        bytes += buf.len();
        if let Some(v) = parse_json_line(&buf, path, lines.line)? {
            values.push(v);
        }
    }
    arrow_json::reader::infer_json_schema_from_iterator(values.iter().map(Ok))
        .map_err(|e| format!("{path}: the columns cannot be inferred from the first lines: {e}"))
}

struct JsonlStream {
    path: String,
    lines: Lines<BufReader<File>>,
    schema: SchemaRef,
    strict: bool,
    buf: Vec<u8>,
}

impl JsonlStream {
    fn decoder(&self, rows: usize) -> Res<arrow_json::reader::Decoder> {
        arrow_json::ReaderBuilder::new(self.schema.clone())
            .with_batch_size(rows.max(1))
            .with_strict_mode(self.strict)
            .build_decoder()
            .map_err(|e| format!("{}: {e}", self.path))
    }

    fn next(&mut self, rows: usize) -> Res<Option<RecordBatch>> {
        let mut values = Vec::new();
        let mut line_nos = Vec::new();
        let mut bytes = 0usize;
        while values.len() < rows && bytes < limits::MAX_BATCH_BYTES && self.lines.next_line(&mut self.buf)? {
            bytes += self.buf.len();
            if let Some(v) = parse_json_line(&self.buf, &self.path, self.lines.line)? {
                values.push(v);
                line_nos.push(self.lines.line);
            }
        }
        if values.is_empty() {
            return Ok(None);
        }
        let mut d = self.decoder(values.len())?;
        let ok = d.serialize(&values).and_then(|_| d.flush());
        match ok {
            Ok(Some(b)) => Ok(Some(b)),
            Ok(None) => Ok(None),
            Err(_) => {
                // Find the line: each alone, with the schema the first lines gave.
                for (v, n) in values.iter().zip(&line_nos) {
                    let mut d = self.decoder(1)?;
                    if let Err(e) = d.serialize(std::slice::from_ref(v)).and_then(|_| d.flush()) {
                        return Err(format!(
                            "{}: line {n} does not fit the columns inferred from the first lines ({}): {e}",
                            self.path,
                            describe(&self.schema)
                        ));
                    }
                }
                Err(format!("{}: lines {}..{} cannot be read together", self.path, line_nos[0], line_nos[line_nos.len() - 1]))
            }
        }
    }
}

fn describe(s: &Schema) -> String {
    s.fields().iter().map(|f| format!("{}: {}", f.name(), crate::cell::type_name(f.data_type()))).collect::<Vec<_>>().join(", ")
}

// ---------------------------------------------------------------------------------------------------------------
// CSV: arrow-csv, its types inferred from the first rows; the reader under it refuses over-long lines.

struct LineGuard<R: Read> {
    inner: R,
    since_newline: usize,
    limit: usize,
    path: String,
}

impl<R: Read> Read for LineGuard<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        for &b in &out[..n] {
            if b == b'\n' {
                self.since_newline = 0;
            } else {
                self.since_newline += 1;
                if self.since_newline > self.limit {
                    return Err(std::io::Error::other(format!(
                        "{}: a line longer than {} bytes (the limit of one record)",
                        self.path, self.limit
                    )));
                }
            }
        }
        Ok(n)
    }
}

fn csv_guarded(path: &str) -> Res<BufReader<LineGuard<File>>> {
    let (file, _) = open_regular(path)?;
    Ok(BufReader::with_capacity(
        1 << 16,
        LineGuard { inner: file, since_newline: 0, limit: limits::MAX_LINE_BYTES, path: path.to_string() },
    ))
}

fn csv_format(o: &Options, path: &str) -> arrow_csv::reader::Format {
    let delim = if o.csv_delimiter != 0 {
        o.csv_delimiter
    } else if path.ends_with(".tsv") {
        b'\t'
    } else {
        b','
    };
    arrow_csv::reader::Format::default().with_header(o.csv_header).with_delimiter(delim)
}

fn csv_schema(path: &str, o: &Options) -> Res<Schema> {
    let (s, _) = csv_format(o, path)
        .infer_schema(csv_guarded(path)?, Some(limits::CSV_INFER_ROWS))
        .map_err(|e| format!("{path}: {e}"))?;
    // pandas (what datasets reads CSV with) leaves dates and times as strings.
    let fields: Vec<Field> = s
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) | DataType::Time32(_) | DataType::Time64(_) => {
                Field::new(f.name(), DataType::Utf8, true)
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    Ok(Schema::new(fields))
}

// ---------------------------------------------------------------------------------------------------------------
// The table.

enum Source {
    Parquet(ParquetSource),
    Ipc(IpcSource),
    Text(String), // JSONL or CSV: read in order
}

enum Stream {
    Jsonl(JsonlStream),
    Csv(arrow_csv::reader::BufReader<BufReader<LineGuard<File>>>),
    // Parquet read in order: one reader over the file's row groups, so that each page is decoded once (rows() of
    // each next batch would decode a row group from its start again).
    Parquet(parquet::arrow::arrow_reader::ParquetRecordBatchReader, u64),
}

pub struct Table {
    pub format: Format,
    files: Vec<Source>,
    pub schema: SchemaRef,                 // the columns read, in the order asked
    file_schema: Vec<SchemaRef>,           // per file: the columns as its reader gives them
    options: Options,
    chunks: Vec<(usize, usize, u64, u64)>, // map-style: (file, chunk in it, first row, rows)
    pub num_rows: Option<u64>,
    // Reading in order.
    pos: u64,
    cur_file: usize,
    stream: Option<Stream>,
    pending: Option<RecordBatch>,
    ipc_cache: Option<(usize, RecordBatch)>, // the last chunk decoded (IPC), for take() in runs
}

fn detect(path: &str) -> Res<Format> {
    let lower = path.to_lowercase();
    let ext = |e: &str| lower.ends_with(e);
    if ext(".jsonl") || ext(".json") || ext(".ndjson") {
        return Ok(Format::Jsonl);
    }
    if ext(".csv") || ext(".tsv") {
        return Ok(Format::Csv);
    }
    if ext(".parquet") || ext(".pq") {
        return Ok(Format::Parquet);
    }
    let (file, len) = open_regular(path)?;
    let n = len.min(8) as usize;
    let head = read_at(&file, path, 0, n, "the first bytes")?;
    if head.starts_with(b"PAR1") {
        return Ok(Format::Parquet);
    }
    if head.starts_with(b"ARROW1") {
        return Ok(Format::ArrowFile);
    }
    if head.starts_with(&[0xff, 0xff, 0xff, 0xff]) || ext(".arrow") || ext(".arrows") || ext(".ipc") || ext(".feather") {
        return Ok(Format::ArrowStream);
    }
    if head.first() == Some(&b'{') {
        return Ok(Format::Jsonl);
    }
    Err(format!(
        "{path}: unknown format (by name and first bytes): dataset files are JSON lines (.jsonl), CSV (.csv, .tsv), \
         Parquet (.parquet) or Arrow IPC (.arrow), or a save_to_disk folder"
    ))
}

/// A folder: a save_to_disk folder (state.json names its shards), else its data files by name.
fn folder_files(dir: &str) -> Res<Vec<String>> {
    let d = dir.trim_end_matches('/');
    if std::path::Path::new(&format!("{d}/dataset_dict.json")).exists() {
        let mut splits: Vec<String> = std::fs::read_dir(d)
            .map_err(|e| format!("{d}: {e}"))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        splits.sort();
        return Err(format!("{d}: a DatasetDict folder; open one of its splits: {}", splits.join(", ")));
    }
    let state = format!("{d}/state.json");
    if std::path::Path::new(&state).exists() {
        let (f, len) = open_regular(&state)?;
        if len > limits::MAX_STATE_JSON {
            return Err(format!("{state}: {len} bytes, more than a state.json has"));
        }
        let v: serde_json::Value =
            serde_json::from_reader(BufReader::new(f)).map_err(|e| format!("{state}: not JSON: {e}"))?;
        let files = v
            .get("_data_files")
            .and_then(|x| x.as_array())
            .ok_or_else(|| format!("{state}: no _data_files list: not a save_to_disk folder"))?;
        let mut out = Vec::new();
        for f in files {
            let name = f
                .get("filename")
                .and_then(|x| x.as_str())
                .ok_or_else(|| format!("{state}: an entry of _data_files without a filename"))?;
            if name.contains('/') || name.contains("..") {
                return Err(format!("{state}: the shard name '{name}' leaves the folder"));
            }
            out.push(format!("{d}/{name}"));
        }
        if out.is_empty() {
            return Err(format!("{state}: _data_files is empty"));
        }
        return Ok(out);
    }
    let mut out: Vec<String> = std::fs::read_dir(d)
        .map_err(|e| format!("{d}: {e}"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            let l = n.to_lowercase();
            [".parquet", ".arrow", ".jsonl", ".json", ".ndjson", ".csv", ".tsv"].iter().any(|e| l.ends_with(e))
        })
        .map(|n| format!("{d}/{n}"))
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(format!("{d}: no state.json and no .parquet, .arrow, .jsonl or .csv files"));
    }
    Ok(out)
}

/// Dictionary-encoded columns decoded to their values (what datasets' Python values are).
fn plain_type(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(_, v) => v.as_ref().clone(),
        other => other.clone(),
    }
}

/// The first name holding a NUL in a field and the fields nested in its type.
fn nul_name(f: &Field) -> Option<String> {
    if f.name().contains('\0') {
        return Some(f.name().clone());
    }
    let mut t = f.data_type();
    while let DataType::Dictionary(_, v) = t {
        t = v;
    }
    match t {
        DataType::Struct(fs) => fs.iter().find_map(|g| nul_name(g)),
        DataType::Union(fs, _) => fs.iter().find_map(|(_, g)| nul_name(g)),
        DataType::List(g) | DataType::LargeList(g) | DataType::ListView(g) | DataType::LargeListView(g)
        | DataType::FixedSizeList(g, _) | DataType::Map(g, _) => nul_name(g),
        _ => None,
    }
}

/// The files named, a folder standing for its dataset files (folder_files).
fn expand_paths(paths: &[String]) -> Res<Vec<String>> {
    if paths.is_empty() {
        return Err("no dataset files given".into());
    }
    let mut files_list = Vec::new();
    for p in paths {
        if std::path::Path::new(p).is_dir() {
            files_list.extend(folder_files(p)?);
        } else {
            files_list.push(p.clone());
        }
    }
    Ok(files_list)
}

/// The table's format: the one asked, or (auto) the first file's, which every file must share (both Arrow IPC
/// formats counting as one).
fn table_format(asked: Format, files_list: &[String]) -> Res<Format> {
    if asked != Format::Auto {
        return Ok(asked);
    }
    let f = detect(&files_list[0])?;
    for p in &files_list[1..] {
        let g = detect(p)?;
        let same = g == f || (matches!(f, Format::ArrowFile | Format::ArrowStream) && matches!(g, Format::ArrowFile | Format::ArrowStream));
        if !same {
            return Err(format!("{p} is {} and {} is {}: one table reads one format", g.name(), files_list[0], f.name()));
        }
    }
    Ok(f)
}

/// The indices of the columns asked in a file's schema (all of them when none is asked).
fn column_projection(cols: &[String], path: &str, s: &Schema) -> Res<Vec<usize>> {
    if cols.is_empty() {
        return Ok((0..s.fields().len()).collect());
    }
    let mut idx = Vec::new();
    for c in cols {
        match s.index_of(c) {
            Ok(i) => idx.push(i),
            Err(_) => {
                let there: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
                return Err(format!("{path}: no column '{c}'; its columns are: {}", there.join(", ")));
            }
        }
    }
    Ok(idx)
}

/// Every file opened in the table's format, with its schema as its reader gives the columns asked.
fn open_sources(files_list: &[String], format: Format, options: &Options) -> Res<(Vec<Source>, Vec<SchemaRef>)> {
    let mut files = Vec::new();
    let mut file_schema = Vec::new();
    for p in files_list {
        let proj = |s: &Schema| column_projection(&options.columns, p, s);
        let (src, schema) = match format {
            Format::Parquet => {
                let (s, sc) = file_read(p, || ParquetSource::open(p, &proj))?;
                (Source::Parquet(s), sc)
            }
            Format::ArrowStream | Format::ArrowFile => {
                let stream = match options.format {
                    Format::Auto => detect(p)? == Format::ArrowStream,
                    f => f == Format::ArrowStream,
                };
                let (s, sc) = file_read(p, || IpcSource::open(p, stream, &proj))?;
                (Source::Ipc(s), sc)
            }
            Format::Jsonl | Format::Csv => {
                let s = if format == Format::Jsonl { jsonl_schema(p)? } else { csv_schema(p, options)? };
                let idx = proj(&s)?;
                (Source::Text(p.clone()), Arc::new(s.project(&idx).map_err(|e| e.to_string())?))
            }
            Format::Auto => unreachable!(),
        };
        files.push(src);
        file_schema.push(schema);
    }
    Ok((files, file_schema))
}

/// The table's columns: the first file's, in the order asked, dictionaries decoded; a column name holding a NUL is
/// refused.
fn table_schema(cols: &[String], first: &SchemaRef, first_path: &str) -> Res<SchemaRef> {
    let names: Vec<String> = if cols.is_empty() { first.fields().iter().map(|f| f.name().clone()).collect() } else { cols.to_vec() };
    let mut fields = Vec::new();
    for n in &names {
        let f = first.field_with_name(n).map_err(|e| e.to_string())?;
        fields.push(Field::new(f.name(), plain_type(f.data_type()), f.is_nullable()));
    }
    let schema = Arc::new(Schema::new(fields));
    // Column names travel as C strings (an acc_batch's names, the reader's info): one holding a NUL, at any depth,
    // is refused naming the file.
    if let Some(n) = schema.fields().iter().find_map(|f| nul_name(f)) {
        return Err(format!("{first_path}: the column name {n:?} holds a NUL character, which libacc's column names cannot"));
    }
    Ok(schema)
}

/// Every file of a map-style table must have the table's columns, of its types.
fn check_one_schema(schema: &SchemaRef, file_schema: &[SchemaRef], files_list: &[String]) -> Res<()> {
    for (k, s) in file_schema.iter().enumerate().skip(1) {
        for f in schema.fields() {
            let theirs = s.field_with_name(f.name()).ok().map(|g| plain_type(g.data_type()));
            if theirs.as_ref() != Some(f.data_type()) {
                return Err(format!(
                    "{}: column '{}' is {} there and {} in {}: the files of one table must have one schema",
                    files_list[k],
                    f.name(),
                    theirs.map(|t| crate::cell::type_name(&t)).unwrap_or_else(|| "missing".into()),
                    crate::cell::type_name(f.data_type()),
                    files_list[0]
                ));
            }
        }
    }
    Ok(())
}

/// A map-style table's chunks, (file, chunk in it, first row, rows), and its rows.
fn row_chunks(files: &[Source]) -> Res<(Vec<(usize, usize, u64, u64)>, u64)> {
    let mut chunks = Vec::new();
    let mut row = 0u64;
    for (fi, src) in files.iter().enumerate() {
        let counts: Vec<u64> = match src {
            Source::Parquet(p) => p.groups.clone(),
            Source::Ipc(s) => s.blocks.iter().map(|b| b.1).collect(),
            Source::Text(_) => unreachable!(),
        };
        for (ci, n) in counts.into_iter().enumerate() {
            chunks.push((fi, ci, row, n));
            row = row.checked_add(n).ok_or("row counts overflow")?;
        }
    }
    Ok((chunks, row))
}

impl Table {
    pub fn open(paths: &[String], options: Options) -> Res<Table> {
        let files_list = expand_paths(paths)?;
        let format = table_format(options.format, &files_list)?;
        let (files, file_schema) = open_sources(&files_list, format, &options)?;
        let schema = table_schema(&options.columns, &file_schema[0], &files_list[0])?;
        let map_style = format != Format::Jsonl && format != Format::Csv;
        if map_style {
            check_one_schema(&schema, &file_schema, &files_list)?;
        }
        let (chunks, num_rows) = if map_style {
            let (chunks, rows) = row_chunks(&files)?;
            (chunks, Some(rows))
        } else {
            (Vec::new(), None)
        };
        Ok(Table {
            format,
            files,
            schema,
            file_schema,
            options,
            chunks,
            num_rows,
            pos: 0,
            cur_file: 0,
            stream: None,
            pending: None,
            ipc_cache: None,
        })
    }

    pub fn num_chunks(&self) -> Option<usize> {
        self.num_rows.map(|_| self.chunks.len())
    }

    /// A file's batch in the table's columns and order, dictionaries decoded.
    fn shape(&self, b: RecordBatch) -> Res<RecordBatch> {
        let mut cols: Vec<ArrayRef> = Vec::new();
        for f in self.schema.fields() {
            let c = b.column_by_name(f.name()).ok_or_else(|| format!("a batch without column '{}'", f.name()))?;
            cols.push(if c.data_type() != f.data_type() {
                arrow_cast::cast(c, f.data_type()).map_err(|e| format!("column '{}': {e}", f.name()))?
            } else {
                c.clone()
            });
        }
        let opts = arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
        RecordBatch::try_new_with_options(self.schema.clone(), cols, &opts).map_err(|e| e.to_string())
    }

    fn concat(&self, parts: &[RecordBatch]) -> Res<RecordBatch> {
        arrow_select::concat::concat_batches(&self.schema, parts).map_err(|e| e.to_string())
    }

    fn need_map(&self) -> Res<()> {
        if self.num_rows.is_none() {
            return Err(format!("{} files are read in order only (they have no row index)", self.format.name()));
        }
        Ok(())
    }

    /// Rows [a, a + n) of chunk k (map-style), in the table's shape.
    fn chunk_rows(&mut self, k: usize, runs: &[(u64, u64)]) -> Res<RecordBatch> {
        let (fi, ci, _, _) = self.chunks[k];
        let b = match &self.files[fi] {
            Source::Parquet(p) => p.read(ci, runs, &self.file_schema[fi])?,
            Source::Ipc(s) => {
                let whole = match &self.ipc_cache {
                    Some((c, b)) if *c == k => b.clone(),
                    _ => {
                        let b = s.batch(ci)?;
                        self.ipc_cache = Some((k, b.clone()));
                        b
                    }
                };
                let parts: Vec<RecordBatch> = runs.iter().map(|&(a, n)| whole.slice(a as usize, n as usize)).collect();
                arrow_select::concat::concat_batches(&whole.schema(), &parts).map_err(|e| e.to_string())?
            }
            Source::Text(_) => unreachable!(),
        };
        self.shape(b)
    }

    fn chunk_of(&self, row: u64) -> usize {
        self.chunks.partition_point(|c| c.2 + c.3 <= row)
    }

    pub fn chunk(&mut self, i: usize) -> Res<(RecordBatch, u64)> {
        self.need_map()?;
        if i >= self.chunks.len() {
            return Err(format!("batch {i} of {}", self.chunks.len()));
        }
        let (_, _, first, n) = self.chunks[i];
        Ok((self.chunk_rows(i, &[(0, n)])?, first))
    }

    pub fn rows(&mut self, first: u64, count: u64) -> Res<RecordBatch> {
        self.need_map()?;
        let total = self.num_rows.unwrap();
        let end = first.saturating_add(count).min(total);
        let mut parts = Vec::new();
        let mut at = first;
        while at < end {
            let k = self.chunk_of(at);
            let (_, _, c0, cn) = self.chunks[k];
            let n = (c0 + cn).min(end) - at;
            // chunk_of skips empty chunks, so n >= 1.
            parts.push(self.chunk_rows(k, &[(at - c0, n)])?);
            at += n;
        }
        if parts.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        self.concat(&parts)
    }

    pub fn take(&mut self, rows: &[i64]) -> Res<RecordBatch> {
        self.need_map()?;
        let total = self.num_rows.unwrap();
        // Per chunk, the distinct rows it gives (ascending), read once.
        let mut by_chunk: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for &r in rows {
            if r < 0 || r as u64 >= total {
                return Err(format!("row {r} is outside the table's {total} rows"));
            }
            let k = self.chunk_of(r as u64);
            by_chunk.entry(k).or_default().push(r as u64 - self.chunks[k].2);
        }
        let mut batches = Vec::new();
        let mut index: BTreeMap<(usize, u64), (usize, usize)> = BTreeMap::new();
        for (k, mut local) in by_chunk {
            local.sort();
            local.dedup();
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for &l in &local {
                match runs.last_mut() {
                    Some((a, n)) if *a + *n == l => *n += 1,
                    _ => runs.push((l, 1)),
                }
            }
            let b = self.chunk_rows(k, &runs)?;
            for (j, &l) in local.iter().enumerate() {
                index.insert((k, l), (batches.len(), j));
            }
            batches.push(b);
        }
        let picks: Vec<(usize, usize)> = rows
            .iter()
            .map(|&r| {
                let k = self.chunk_of(r as u64);
                index[&(k, r as u64 - self.chunks[k].2)]
            })
            .collect();
        if picks.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        arrow_select::interleave::interleave_record_batch(&refs, &picks).map_err(|e| e.to_string())
    }

    pub fn rewind(&mut self) {
        self.pos = 0;
        self.cur_file = 0;
        self.stream = None;
        self.pending = None;
    }

    /// The next piece of a JSONL, CSV or Parquet table in order (at most `rows` rows), or None at the end.
    fn next_piece(&mut self, rows: usize) -> Res<Option<RecordBatch>> {
        loop {
            if self.cur_file >= self.files.len() {
                return Ok(None);
            }
            if self.stream.is_none() {
                if let Source::Parquet(p) = &self.files[self.cur_file] {
                    let r = file_read(&p.path, || {
                        p.builder()?
                            .with_batch_size(rows.clamp(1, limits::PARQUET_READ_ROWS))
                            .build()
                            .map_err(|e| format!("{}: {e}", p.path))
                    })?;
                    self.stream = Some(Stream::Parquet(r, 0));
                }
            }
            if self.stream.is_none() {
                let Source::Text(path) = &self.files[self.cur_file] else { unreachable!() };
                let path = path.clone();
                let fs = self.file_schema[self.cur_file].clone();
                self.stream = Some(if self.format == Format::Jsonl {
                    let (f, _) = open_regular(&path)?;
                    Stream::Jsonl(JsonlStream {
                        lines: Lines::new(BufReader::with_capacity(1 << 16, f), &path, limits::MAX_LINE_BYTES),
                        strict: self.options.columns.is_empty(),
                        path,
                        schema: fs,
                        buf: Vec::new(),
                    })
                } else {
                    // The CSV reader reads every column (a projection by index of the full schema).
                    let full = csv_schema(&path, &self.options)?;
                    let idx: Vec<usize> = fs.fields().iter().map(|f| full.index_of(f.name()).unwrap()).collect();
                    let r = arrow_csv::ReaderBuilder::new(Arc::new(full))
                        .with_format(csv_format(&self.options, &path))
                        .with_batch_size(rows.clamp(1, limits::CSV_READ_ROWS))
                        .with_projection(idx)
                        .build_buffered(csv_guarded(&path)?)
                        .map_err(|e| format!("{path}: {e}"))?;
                    Stream::Csv(r)
                });
            }
            let path = match &self.files[self.cur_file] {
                Source::Text(p) => p.clone(),
                Source::Parquet(p) => p.path.clone(),
                Source::Ipc(s) => s.path.clone(),
            };
            let got = match self.stream.as_mut().unwrap() {
                Stream::Jsonl(j) => j.next(rows)?,
                Stream::Csv(r) => match r.next() {
                    None => None,
                    Some(b) => Some(b.map_err(|e| {
                        let s = e.to_string();
                        if s.contains(&path) { s } else { format!("{path}: {s}") }
                    })?),
                },
                Stream::Parquet(r, seen) => {
                    let got = file_read(&path, || r.next().transpose().map_err(|e| format!("{path}: {e}")))?;
                    let got = match got {
                        Some(b) => Some(validated(&path, b)?),
                        None => None,
                    };
                    let Source::Parquet(p) = &self.files[self.cur_file] else { unreachable!() };
                    let promised: u64 = p.groups.iter().sum();
                    match &got {
                        Some(b) => *seen += b.num_rows() as u64,
                        None if *seen != promised => {
                            return Err(format!(
                                "{path}: corrupt Parquet file: its row groups gave {seen} of the {promised} rows its \
                                 metadata promises"
                            ))
                        }
                        None => {}
                    }
                    got
                }
            };
            match got {
                Some(b) if b.num_rows() > 0 => return Ok(Some(self.shape(b)?)),
                Some(_) => continue,
                None => {
                    self.stream = None;
                    self.cur_file += 1;
                }
            }
        }
    }

    /// The next `max_rows` rows in table order (fewer at the end), or None at the end.
    pub fn next(&mut self, max_rows: usize) -> Res<Option<(RecordBatch, u64)>> {
        let max_rows = max_rows.max(1);
        if let (Some(total), false) = (self.num_rows, self.format == Format::Parquet) {
            if self.pos >= total {
                return Ok(None);
            }
            let first = self.pos;
            let b = self.rows(first, max_rows as u64)?;
            self.pos += b.num_rows() as u64;
            return Ok(Some((b, first)));
        }
        let first = self.pos;
        let mut parts = Vec::new();
        let mut have = 0usize;
        while have < max_rows {
            let piece = match self.pending.take() {
                Some(p) => p,
                None => match self.next_piece(max_rows - have)? {
                    Some(p) => p,
                    None => break,
                },
            };
            let take = piece.num_rows().min(max_rows - have);
            if take < piece.num_rows() {
                self.pending = Some(piece.slice(take, piece.num_rows() - take));
            }
            parts.push(piece.slice(0, take));
            have += take;
        }
        if parts.is_empty() {
            return Ok(None);
        }
        self.pos += have as u64;
        Ok(Some((self.concat(&parts)?, first)))
    }

    pub fn field_list(&self) -> Vec<(String, String, bool)> {
        self.schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), crate::cell::type_name(f.data_type()), f.is_nullable()))
            .collect()
    }
}
