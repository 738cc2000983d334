use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use acc_sys as sys;

use crate::error::{check, Error, ErrorCode, Result};
use crate::tensor::Tensor;
use crate::{check_abi, cstring};

/// A named batch: an ordered mapping name -> tensor (`"input_ids"`, `"attention_mask"`, `"labels"`,
/// ...), the dict Accelerate hands to a model. Datasets hold such samples ([`Dataset::from_batch`],
/// [`Dataset::from_batch_fn`]), loaders yield them ([`DataLoader::next_batch`]) and a model takes one
/// and returns its outputs as one ([`Model::forward_batch`]: `"loss"`, `"logits"` or `"output"`).
///
/// A batch shares its tensors' data with the tensors put in and taken out (no copy). Freed on drop;
/// `Send` but not `Sync`.
///
/// [`Dataset::from_batch`]: crate::Dataset::from_batch
/// [`Dataset::from_batch_fn`]: crate::Dataset::from_batch_fn
/// [`DataLoader::next_batch`]: crate::DataLoader::next_batch
/// [`Model::forward_batch`]: crate::Model::forward_batch
pub struct NamedBatch {
    ptr: NonNull<sys::acc_batch>,
}

// SAFETY: libacc handles may be used from any thread, one thread at a time (acc.h).
unsafe impl Send for NamedBatch {}

impl Drop for NamedBatch {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { sys::acc_batch_destroy(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for NamedBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for entry in self {
            match entry {
                Ok((name, t)) => m.entry(&name, &t),
                Err(e) => m.entry(&"<error>", &e.message()),
            };
        }
        m.finish()
    }
}

impl NamedBatch {
    /// An empty batch.
    pub fn new() -> Result<NamedBatch> {
        check_abi()?;
        let mut out = ptr::null_mut();
        NamedBatch::owned(unsafe { sys::acc_batch_create(&mut out) }, out)
    }

    /// A batch of the given entries, in order (a later entry of the same name replaces the earlier).
    ///
    /// ```no_run
    /// # fn main() -> acc::Result<()> {
    /// let ids = acc::Tensor::from_slice(&[1i64, 2, 3], &[1, 3])?;
    /// let batch = acc::NamedBatch::from_tensors([("input_ids", &ids), ("labels", &ids)])?;
    /// # Ok(()) }
    /// ```
    pub fn from_tensors<'a>(entries: impl IntoIterator<Item = (&'a str, &'a Tensor)>) -> Result<NamedBatch> {
        let mut b = NamedBatch::new()?;
        for (name, t) in entries {
            b.set(name, t)?;
        }
        Ok(b)
    }

    pub(crate) fn owned(status: sys::acc_status, out: *mut sys::acc_batch) -> Result<NamedBatch> {
        check(status)?;
        NonNull::new(out)
            .map(|ptr| NamedBatch { ptr })
            .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL batch"))
    }

    /// Takes ownership of a handle from libacc (None for NULL).
    pub(crate) fn from_raw(ptr: *mut sys::acc_batch) -> Option<NamedBatch> {
        NonNull::new(ptr).map(|ptr| NamedBatch { ptr })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::acc_batch {
        self.ptr.as_ptr()
    }

    /// Adds `name` -> `tensor`, or replaces the tensor of `name` in its place. The batch shares the
    /// tensor's data; `tensor` stays the caller's. `name` must not be empty.
    pub fn set(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let c = cstring(name)?;
        check(unsafe { sys::acc_batch_set(self.as_ptr(), c.as_ptr(), tensor.as_ptr()) })
    }

    /// The tensor of `name` (sharing its data). A missing name is [`ErrorCode::InvalidArgument`], whose
    /// message lists the names present.
    pub fn get(&self, name: &str) -> Result<Tensor> {
        let c = cstring(name)?;
        let mut out = ptr::null_mut();
        Tensor::owned(unsafe { sys::acc_batch_get(self.as_ptr(), c.as_ptr(), &mut out) }, out)
    }

    /// Whether the batch has a tensor named `name`.
    pub fn contains(&self, name: &str) -> Result<bool> {
        let c = cstring(name)?;
        let mut v = 0;
        check(unsafe { sys::acc_batch_contains(self.as_ptr(), c.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }

    /// The number of tensors.
    pub fn len(&self) -> Result<usize> {
        let mut n = 0;
        check(unsafe { sys::acc_batch_count(self.as_ptr(), &mut n) })?;
        Ok(n as usize)
    }

    /// Whether the batch has no tensors.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The `index`-th name, borrowed from the batch (valid until it changes).
    fn name_ptr(&self, index: usize) -> Result<*const c_char> {
        let mut p = ptr::null();
        check(unsafe { sys::acc_batch_name(self.as_ptr(), index as i64, &mut p) })?;
        if p.is_null() {
            return Err(Error::new(ErrorCode::Internal, "libacc returned a NULL name"));
        }
        Ok(p)
    }

    fn name(&self, index: usize) -> Result<String> {
        // SAFETY: a NUL-terminated string borrowed from the batch, copied at once.
        Ok(unsafe { CStr::from_ptr(self.name_ptr(index)?) }
            .to_string_lossy()
            .into_owned())
    }

    /// The names, in insertion order.
    pub fn names(&self) -> Result<Vec<String>> {
        (0..self.len()?).map(|i| self.name(i)).collect()
    }

    /// The entries `(name, tensor)` in insertion order (each tensor shares the batch's data).
    pub fn iter(&self) -> BatchIter<'_> {
        let (len, error) = match self.len() {
            Ok(n) => (n, None),
            Err(e) => (0, Some(e)),
        };
        BatchIter {
            batch: self,
            next: 0,
            len,
            error,
        }
    }

    /// Puts every entry of this batch into `dst`, a batch libacc owns (sharing the tensors).
    pub(crate) fn copy_into_raw(&self, dst: *mut sys::acc_batch) -> Result<()> {
        for i in 0..self.len()? {
            let name = self.name_ptr(i)?;
            let mut t = ptr::null_mut();
            let t = Tensor::owned(unsafe { sys::acc_batch_get(self.as_ptr(), name, &mut t) }, t)?;
            check(unsafe { sys::acc_batch_set(dst, name, t.as_ptr()) })?;
        }
        Ok(())
    }
}

/// The entries of a [`NamedBatch`], in order: `Result<(name, tensor)>`.
pub struct BatchIter<'a> {
    batch: &'a NamedBatch,
    next: usize,
    len: usize,
    error: Option<Error>,
}

impl Iterator for BatchIter<'_> {
    type Item = Result<(String, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        if self.next >= self.len {
            return None;
        }
        let i = self.next;
        self.next += 1;
        Some(self.batch.name(i).and_then(|name| {
            let t = self.batch.get(&name)?;
            Ok((name, t))
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.len - self.next + usize::from(self.error.is_some());
        (n, Some(n))
    }
}

impl<'a> IntoIterator for &'a NamedBatch {
    type Item = Result<(String, Tensor)>;
    type IntoIter = BatchIter<'a>;

    fn into_iter(self) -> BatchIter<'a> {
        self.iter()
    }
}
