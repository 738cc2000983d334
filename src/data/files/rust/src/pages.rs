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

const SHORT: &str = "short";

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
                    self.value(h & 15, depth + 1)?;
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.value(kv >> 4, depth + 1)?;
                        self.value(kv & 15, depth + 1)?;
                    }
                }
                Ok(())
            }
            12 => self.fields(depth + 1, &mut |_, _, _| Ok(false)),
            t => Err(format!("unknown thrift type {t}")),
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
    for (g, rg) in meta.row_groups().iter().enumerate() {
        for (c, col) in rg.columns().iter().enumerate() {
            let start = col.dictionary_page_offset().unwrap_or(col.data_page_offset());
            let size = col.compressed_size();
            let what = format!("{path}: corrupt Parquet file: column chunk {c} of row group {g}");
            if start < 0 || size < 0 || (start as u64).checked_add(size as u64).map_or(true, |e| e > len) {
                return Err(format!("{what} lies at bytes {start} + {size} of a file of {len}"));
            }
            let (mut pos, end) = (start as u64, start as u64 + size as u64);
            while pos < end {
                // A header is small unless it carries statistics (min and max values): read more when it is cut.
                let mut window = 4096u64;
                let (hlen, uncompressed, compressed) = loop {
                    let n = window.min(end - pos) as usize;
                    let mut buf = vec![0u8; n];
                    file.read_exact_at(&mut buf, pos).map_err(|e| format!("{what}: {e}"))?;
                    match page_header(&buf) {
                        Ok(h) => break h,
                        Err(e) if e == SHORT && (n as u64) < end - pos && window < limits::MAX_PAGE_HEADER_BYTES => window *= 16,
                        Err(e) => return Err(format!("{what}: a bad page header at byte {pos}: {e}")),
                    }
                };
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
