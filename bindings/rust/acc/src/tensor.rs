use std::ffi::c_void;
use std::ptr::{self, NonNull};

use acc_sys as sys;
use acc_sys::dlpack::{DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor};

use crate::error::{check, Error, ErrorCode, Result};

/// A tensor element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Float32,
    Float64,
    BFloat16,
    Float16,
    Int32,
    Int64,
    UInt8,
    Bool,
}

impl DType {
    /// Every element type.
    pub const ALL: [DType; 8] = [
        DType::Float32,
        DType::Float64,
        DType::BFloat16,
        DType::Float16,
        DType::Int32,
        DType::Int64,
        DType::UInt8,
        DType::Bool,
    ];

    /// The acc.h constant.
    pub fn raw(self) -> sys::acc_dtype {
        match self {
            DType::Float32 => sys::ACC_FLOAT32,
            DType::Float64 => sys::ACC_FLOAT64,
            DType::BFloat16 => sys::ACC_BFLOAT16,
            DType::Float16 => sys::ACC_FLOAT16,
            DType::Int32 => sys::ACC_INT32,
            DType::Int64 => sys::ACC_INT64,
            DType::UInt8 => sys::ACC_UINT8,
            DType::Bool => sys::ACC_BOOL,
        }
    }

    fn from_raw(d: sys::acc_dtype) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|t| t.raw() == d)
            .ok_or_else(|| Error::new(ErrorCode::Internal, format!("unknown dtype {d}")))
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Float64 | DType::Int64 => 8,
            DType::Float32 | DType::Int32 => 4,
            DType::BFloat16 | DType::Float16 => 2,
            DType::UInt8 | DType::Bool => 1,
        }
    }

    fn dlpack(self) -> DLDataType {
        use acc_sys::dlpack::*;
        let (code, bits) = match self {
            DType::Float32 => (DL_FLOAT, 32),
            DType::Float64 => (DL_FLOAT, 64),
            DType::BFloat16 => (DL_BFLOAT, 16),
            DType::Float16 => (DL_FLOAT, 16),
            DType::Int32 => (DL_INT, 32),
            DType::Int64 => (DL_INT, 64),
            DType::UInt8 => (DL_UINT, 8),
            DType::Bool => (DL_BOOL, 8),
        };
        DLDataType { code, bits, lanes: 1 }
    }
}

/// Rust types that are tensor elements (their bytes are the element's bytes).
pub trait Element: Copy + Send + 'static + sealed::Sealed {
    /// The matching element type.
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const DTYPE: DType = DType::$d; }
    )*};
}
element!(f32 => Float32, f64 => Float64, i32 => Int32, i64 => Int64, u8 => UInt8, bool => Bool);

/// A tensor owned by libacc (CPU or device memory), freed on drop.
///
/// `Send` (it may move to another thread) but not `Sync`: libacc lets one thread at a time use a
/// handle.
pub struct Tensor {
    ptr: NonNull<sys::acc_tensor>,
}

// SAFETY: libacc handles may be used from any thread, one thread at a time (acc.h).
unsafe impl Send for Tensor {}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { sys::acc_tensor_destroy(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &self.dtype().ok())
            .field("shape", &self.shape().ok())
            .finish()
    }
}

impl Tensor {
    /// Takes ownership of a handle from libacc (None for NULL).
    pub(crate) fn from_raw(ptr: *mut sys::acc_tensor) -> Option<Tensor> {
        NonNull::new(ptr).map(|ptr| Tensor { ptr })
    }

    /// Gives the handle up (to libacc, which takes ownership).
    pub(crate) fn into_raw(self) -> *mut sys::acc_tensor {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::acc_tensor {
        self.ptr.as_ptr()
    }

    pub(crate) fn owned(status: sys::acc_status, out: *mut sys::acc_tensor) -> Result<Tensor> {
        check(status)?;
        Tensor::from_raw(out).ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL tensor"))
    }

    /// Copies `data` (row-major, native byte order) into a new CPU tensor. `data.len()` must be the
    /// element count of `shape` times `dtype.size()`; an empty shape is a scalar.
    pub fn from_bytes(data: &[u8], dtype: DType, shape: &[i64]) -> Result<Tensor> {
        crate::check_abi()?;
        let mut out = ptr::null_mut();
        // SAFETY: data and shape are valid for the call; libacc copies them.
        let st = unsafe {
            sys::acc_tensor_from_host(
                data.as_ptr().cast(),
                data.len(),
                dtype.raw(),
                shape.as_ptr(),
                shape.len() as i32,
                &mut out,
            )
        };
        Tensor::owned(st, out)
    }

    /// Copies a slice into a new CPU tensor of the given shape.
    pub fn from_slice<T: Element>(data: &[T], shape: &[i64]) -> Result<Tensor> {
        // SAFETY: Element types are plain bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        Tensor::from_bytes(bytes, T::DTYPE, shape)
    }

    /// A one-element tensor of shape `[]`.
    pub fn scalar<T: Element>(value: T) -> Result<Tensor> {
        Tensor::from_slice(&[value], &[])
    }

    /// Wraps a vector without copying (zero-copy through DLPack): the tensor owns the vector and
    /// drops it when libacc releases the memory.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[i64]) -> Result<Tensor> {
        crate::check_abi()?;
        struct Owner<T> {
            managed: DLManagedTensorVersioned,
            _data: Vec<T>,
            shape: Vec<i64>,
            strides: Vec<i64>,
        }
        unsafe extern "C" fn deleter<T>(m: *mut DLManagedTensorVersioned) {
            // SAFETY: manager_ctx is the Box we leaked below; libacc calls this exactly once.
            let owner = unsafe { Box::from_raw((*m).manager_ctx.cast::<Owner<T>>()) };
            drop(owner);
        }
        let numel: i64 = shape.iter().product();
        if shape.iter().any(|&d| d < 0) || numel as usize != data.len() {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("shape {shape:?} does not hold {} elements", data.len()),
            ));
        }
        let mut strides = vec![1i64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        let mut owner = Box::new(Owner {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: ptr::null_mut(),
                deleter: Some(deleter::<T>),
                flags: 0,
                dl_tensor: DLTensor {
                    data: ptr::null_mut(),
                    device: DLDevice {
                        device_type: acc_sys::dlpack::DL_CPU,
                        device_id: 0,
                    },
                    ndim: shape.len() as i32,
                    dtype: T::DTYPE.dlpack(),
                    shape: ptr::null_mut(),
                    strides: ptr::null_mut(),
                    byte_offset: 0,
                },
            },
            _data: data,
            shape: shape.to_vec(),
            strides,
        });
        owner.managed.dl_tensor.data = owner._data.as_ptr() as *mut c_void;
        owner.managed.dl_tensor.shape = owner.shape.as_mut_ptr();
        owner.managed.dl_tensor.strides = owner.strides.as_mut_ptr();
        let raw = Box::into_raw(owner);
        // SAFETY: raw is a valid, leaked Owner; from here on libacc owns it and calls the deleter
        // exactly once (also when this fails).
        unsafe {
            (*raw).managed.manager_ctx = raw.cast();
            let mut out = ptr::null_mut();
            let st = sys::acc_tensor_from_dlpack(ptr::addr_of_mut!((*raw).managed), &mut out);
            Tensor::owned(st, out)
        }
    }

    /// The dimensions.
    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut nd = 0;
        // SAFETY: valid handle and out-pointers.
        check(unsafe { sys::acc_tensor_ndim(self.as_ptr(), &mut nd) })?;
        let mut shape = vec![0i64; nd as usize];
        if nd > 0 {
            check(unsafe { sys::acc_tensor_shape(self.as_ptr(), shape.as_mut_ptr(), nd) })?;
        }
        Ok(shape)
    }

    /// The element type.
    pub fn dtype(&self) -> Result<DType> {
        let mut d = 0;
        check(unsafe { sys::acc_tensor_dtype(self.as_ptr(), &mut d) })?;
        DType::from_raw(d)
    }

    /// The number of elements.
    pub fn numel(&self) -> Result<i64> {
        let mut n = 0;
        check(unsafe { sys::acc_tensor_numel(self.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// The size of the data in bytes.
    pub fn nbytes(&self) -> Result<usize> {
        let mut n = 0;
        check(unsafe { sys::acc_tensor_nbytes(self.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// The value of a one-element tensor as `f64`.
    pub fn item(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::acc_tensor_item(self.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Copies the data into `dst`, which must be exactly [`nbytes`](Self::nbytes) long.
    pub fn copy_to(&self, dst: &mut [u8]) -> Result<()> {
        // SAFETY: dst is valid for writes of dst.len() bytes.
        check(unsafe { sys::acc_tensor_to_host(self.as_ptr(), dst.as_mut_ptr().cast(), dst.len()) })
    }

    /// A copy of the data (row-major, native byte order).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.nbytes()?];
        self.copy_to(&mut v)?;
        Ok(v)
    }

    /// A copy of the elements; the tensor's dtype must be `T`'s.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let d = self.dtype()?;
        if d != T::DTYPE {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("tensor is {d:?}, not {:?}", T::DTYPE),
            ));
        }
        let bytes = self.to_bytes()?;
        if T::DTYPE == DType::Bool && bytes.iter().any(|&b| b > 1) {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                "a bool tensor holds bytes other than 0 and 1",
            ));
        }
        let n = bytes.len() / std::mem::size_of::<T>();
        let mut v: Vec<T> = Vec::with_capacity(n);
        // SAFETY: Element types are plain bytes (bool checked above); n elements fill the bytes exactly.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                v.as_mut_ptr().cast::<u8>(),
                n * std::mem::size_of::<T>(),
            );
            v.set_len(n);
        }
        Ok(v)
    }

    /// Exports the tensor's memory without a copy (DLPack). The view keeps the memory alive after the
    /// tensor is dropped. The tensor must be in CPU memory and contiguous.
    pub fn view(&self) -> Result<TensorView> {
        let mut m: *mut DLManagedTensorVersioned = ptr::null_mut();
        check(unsafe { sys::acc_tensor_to_dlpack(self.as_ptr(), &mut m) })?;
        let m =
            NonNull::new(m).ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL DLPack tensor"))?;
        let view = TensorView { managed: m };
        let t = &view.tensor();
        if t.device.device_type != acc_sys::dlpack::DL_CPU {
            return Err(Error::new(
                ErrorCode::Unsupported,
                "the tensor is not in CPU memory (use to_bytes)",
            ));
        }
        let shape = view.shape();
        let mut expect = 1i64;
        if !t.strides.is_null() {
            // SAFETY: strides holds ndim entries.
            let strides = unsafe { std::slice::from_raw_parts(t.strides, t.ndim as usize) };
            for i in (0..shape.len()).rev() {
                if shape[i] > 1 && strides[i] != expect {
                    return Err(Error::new(
                        ErrorCode::Unsupported,
                        "the tensor is not contiguous (use to_bytes)",
                    ));
                }
                expect *= shape[i];
            }
        }
        Ok(view)
    }
}

/// A zero-copy view of a tensor's memory (an exported DLPack tensor), released on drop.
pub struct TensorView {
    managed: NonNull<DLManagedTensorVersioned>,
}

// SAFETY: the view owns its DLPack tensor; the deleter may run on any thread.
unsafe impl Send for TensorView {}

impl Drop for TensorView {
    fn drop(&mut self) {
        // SAFETY: we own the DLPack tensor; its deleter is called exactly once.
        unsafe {
            if let Some(d) = (*self.managed.as_ptr()).deleter {
                d(self.managed.as_ptr());
            }
        }
    }
}

impl TensorView {
    fn tensor(&self) -> &DLTensor {
        // SAFETY: valid until drop.
        unsafe { &(*self.managed.as_ptr()).dl_tensor }
    }

    /// The dimensions.
    pub fn shape(&self) -> &[i64] {
        let t = self.tensor();
        if t.ndim == 0 {
            return &[];
        }
        // SAFETY: shape holds ndim entries, valid until drop.
        unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) }
    }

    /// The tensor's bytes, without a copy.
    pub fn as_bytes(&self) -> &[u8] {
        let t = self.tensor();
        let n = self.shape().iter().product::<i64>() as usize
            * (t.dtype.bits as usize * t.dtype.lanes as usize).div_ceil(8);
        if n == 0 {
            return &[];
        }
        // SAFETY: a contiguous CPU tensor of n bytes (checked in Tensor::view), alive until drop.
        unsafe { std::slice::from_raw_parts(t.data.cast::<u8>().add(t.byte_offset as usize), n) }
    }

    /// The tensor's bytes, writable, without a copy (writes show in the tensor).
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let n = self.as_bytes().len();
        let t = self.tensor();
        if n == 0 {
            return &mut [];
        }
        // SAFETY: as above; &mut self makes this the only view through this handle.
        unsafe { std::slice::from_raw_parts_mut(t.data.cast::<u8>().add(t.byte_offset as usize), n) }
    }

    /// The elements as `T`, without a copy (None when the dtype differs, the data is misaligned, or a
    /// bool tensor holds bytes other than 0 and 1).
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        if self.tensor().dtype != T::DTYPE.dlpack() {
            return None;
        }
        let b = self.as_bytes();
        if b.is_empty() {
            return Some(&[]);
        }
        if (b.as_ptr() as usize) % std::mem::align_of::<T>() != 0 {
            return None;
        }
        if T::DTYPE == DType::Bool && b.iter().any(|&x| x > 1) {
            return None; // not valid Rust bools
        }
        // SAFETY: aligned, the right element type and size, valid values.
        Some(unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<T>(), b.len() / std::mem::size_of::<T>()) })
    }
}
