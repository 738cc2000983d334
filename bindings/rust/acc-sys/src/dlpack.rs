//! DLPack 1.x structures (the layout up to `flags` is frozen by the DLPack ABI), for
//! `acc_tensor_from_dlpack` and `acc_tensor_to_dlpack`. Written from the DLPack specification.
use std::os::raw::c_void;

/// `DLDeviceType::kDLCPU`.
pub const DL_CPU: i32 = 1;
/// `DLDataTypeCode` values.
pub const DL_INT: u8 = 0;
pub const DL_UINT: u8 = 1;
pub const DL_FLOAT: u8 = 2;
pub const DL_BFLOAT: u8 = 4;
pub const DL_BOOL: u8 = 6;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
pub const DLPACK_FLAG_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`.
pub const DLPACK_FLAG_IS_COPIED: u64 = 1 << 1;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    /// In elements; NULL means compact row-major.
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(self_: *mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

#[cfg(test)]
mod layout {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn matches_the_dlpack_abi() {
        assert_eq!(size_of::<DLDevice>(), 8);
        assert_eq!(size_of::<DLDataType>(), 4);
        assert_eq!(size_of::<DLTensor>(), 48);
        assert_eq!(offset_of!(DLManagedTensorVersioned, manager_ctx), 8);
        assert_eq!(offset_of!(DLManagedTensorVersioned, deleter), 16);
        assert_eq!(offset_of!(DLManagedTensorVersioned, flags), 24);
        assert_eq!(offset_of!(DLManagedTensorVersioned, dl_tensor), 32);
    }
}
