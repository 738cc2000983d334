// Parquet page headers checked before arrow-rs reads a file's pages: arrow-rs allocates (and, for snappy, zero-fills)
// a page's uncompressed size as its header states it, up to 2 GiB (Parquet's int32), before it finds the page corrupt.
// This walks each column chunk's page headers (thrift compact protocol; only their sizes are read) and refuses a page
// larger than limits::MAX_PAGE_BYTES, a chunk outside the file, or headers that do not tile their chunk.
use std::fs::File;
use std::os::unix::fs::FileExt;

use parquet::file::metadata::ParquetMetaData;

use crate::limits;

struct Thrift<'a> {
    buf: &'a [u8],
    pos: usize,
}

const SHORT: &str = "cut short by the end of its column chunk";

impl Thrift<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.buf.get(self.pos).ok_or(SHORT)?;
        self.pos += 1;
        Ok(b)
    }
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift < 64 {
                v |= ((b & 0x7f) as u64) << shift;
            }
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint of more than 10 bytes".into())
    }
    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }
    fn skip(&mut self, n: u64) -> Result<(), String> {
        let end = (self.pos as u64).checked_add(n).ok_or(SHORT)?;
        if end > self.buf.len() as u64 {
            return Err(SHORT.into());
        }
        self.pos = end as usize;
        Ok(())
    }
    /// Skips a value of compact type `t`.
    fn value(&mut self, t: u8, depth: u32) -> Result<(), String> {
        if depth > 32 {
            return Err("nested more than 32 deep".into());
        }
        match t {
            1 | 2 => Ok(()), // booleans: in the type
            3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = if h >> 4 == 15 { self.varint()? } else { (h >> 4) as u64 };
                for _ in 0..n {
                    self.element(h & 15, depth + 1)?;
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.element(kv >> 4, depth + 1)?;
                        self.element(kv & 15, depth + 1)?;
                    }
                }
                Ok(())
            }
            12 => self.fields(depth + 1, &mut |_, _, _| Ok(false)),
            t => Err(format!("unknown thrift type {t}")),
        }
    }
    /// An element of a list, set or map: there a boolean takes a byte of its own (so every element takes one at least,
    /// and a count the bytes cannot hold ends at the end of the buffer).
    fn element(&mut self, t: u8, depth: u32) -> Result<(), String> {
        match t {
            1 | 2 => self.skip(1),
            0 => Err("an element of type 0".into()),
            t => self.value(t, depth),
        }
    }
    /// Reads a struct's fields up to its stop byte; `on(id, type, self)` reads a field itself when it returns true.
    fn fields(
        &mut self,
        depth: u32,
        on: &mut dyn FnMut(i16, u8, &mut Self) -> Result<bool, String>,
    ) -> Result<(), String> {
        let mut id = 0i16;
        loop {
            let h = self.byte()?;
            if h == 0 {
                return Ok(());
            }
            let t = h & 15;
            id = if h >> 4 == 0 { self.zigzag()? as i16 } else { id.wrapping_add((h >> 4) as i16) };
            if !on(id, t, self)? {
                self.value(t, depth)?;
            }
        }
    }
}

/// (header length, uncompressed size, compressed size) of the page header at the start of buf.
fn page_header(buf: &[u8]) -> Result<(usize, i64, i64), String> {
    let mut t = Thrift { buf, pos: 0 };
    let (mut uncompressed, mut compressed) = (None, None);
    t.fields(0, &mut |id, ty, t| {
        if (id == 2 || id == 3) && ty == 5 {
            let v = t.zigzag()?;
            if id == 2 {
                uncompressed = Some(v);
            } else {
                compressed = Some(v);
            }
            return Ok(true);
        }
        Ok(false)
    })?;
    match (uncompressed, compressed) {
        (Some(u), Some(c)) => Ok((t.pos, u, c)),
        _ => Err("a page header without its sizes".into()),
    }
}

pub fn check(path: &str, file: &File, len: u64, meta: &ParquetMetaData) -> Result<(), String> {
    // Column chunks do not overlap: their sizes add up to the file's at most (so that this walk reads each byte of the
    // file once at most, whatever the footer says).
    let mut total = 0u64;
    for (g, rg) in meta.row_groups().iter().enumerate() {
        for (c, col) in rg.columns().iter().enumerate() {
            let start = col.dictionary_page_offset().unwrap_or(col.data_page_offset());
            let size = col.compressed_size();
            let what = format!("{path}: corrupt Parquet file: column chunk {c} of row group {g}");
            if start < 0 || size < 0 || (start as u64).checked_add(size as u64).map_or(true, |e| e > len) {
                return Err(format!("{what} lies at bytes {start} + {size} of a file of {len}"));
            }
            total += size as u64;
            if total > len {
                return Err(format!("{what}: the column chunks add up to more bytes than the file's {len}"));
            }
            let (mut pos, end) = (start as u64, start as u64 + size as u64);
            // A window of the chunk, read once and walked; read anew (larger) where a header is cut at its end.
            let mut buf: Vec<u8> = Vec::new();
            let mut buf_at = pos;
            let mut window = 64u64 << 10;
            while pos < end {
                let header = loop {
                    let have = buf_at + buf.len() as u64;
                    if pos >= buf_at && pos < have {
                        match page_header(&buf[(pos - buf_at) as usize..]) {
                            Ok(h) => break h,
                            Err(e) if e == SHORT && have < end => {}
                            Err(e) => return Err(format!("{what}: a bad page header at byte {pos}: {e}")),
                        }
                        if have - pos >= window {
                            window *= 4; // the header is longer than a window
                            if window > limits::MAX_PAGE_HEADER_BYTES {
                                return Err(format!("{what}: a page header at byte {pos} longer than {} bytes",
                                                   limits::MAX_PAGE_HEADER_BYTES));
                            }
                        }
                    }
                    let n = window.min(end - pos) as usize;
                    buf.resize(n, 0);
                    file.read_exact_at(&mut buf, pos).map_err(|e| format!("{what}: {e}"))?;
                    buf_at = pos;
                };
                let (hlen, uncompressed, compressed) = header;
                if uncompressed < 0 || compressed < 0 || uncompressed as u64 > limits::MAX_PAGE_BYTES {
                    return Err(format!(
                        "{what}: the page at byte {pos} says {uncompressed} bytes ({compressed} compressed); pages of \
                         more than {} bytes are refused",
                        limits::MAX_PAGE_BYTES
                    ));
                }
                pos += hlen as u64 + compressed as u64;
            }
            if pos != end {
                return Err(format!("{what}: its pages run past the chunk's {size} bytes"));
            }
        }
    }
    Ok(())
}
