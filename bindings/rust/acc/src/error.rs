use std::backtrace::Backtrace;
use std::ffi::CStr;
use std::fmt;

use acc_sys as sys;

/// A libacc status code. New codes may appear in later libraries; they arrive as [`ErrorCode::Internal`]
/// (the raw number stays available through [`Error::status`]).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A NULL handle or pointer, a bad value, a bad shape.
    InvalidArgument,
    /// Config or options JSON: unknown key, wrong type, bad value.
    InvalidConfig,
    /// Call order: prepared twice, stepped before prepare, ...
    InvalidState,
    /// Valid, but not available in this build or on this machine.
    Unsupported,
    /// A file could not be read or written.
    Io,
    /// Out of host or device memory.
    OutOfMemory,
    /// Rendezvous, a collective, a peer that went away.
    Distributed,
    /// An error raised inside LibTorch.
    Torch,
    /// The loaded libacc does not serve this crate's ABI.
    AbiMismatch,
    /// The handle is in use by another thread.
    Busy,
    /// A callback returned an error or panicked.
    Callback,
    /// A bug in libacc, or a code this crate does not know.
    Internal,
}

impl ErrorCode {
    /// The code for a status number (unknown numbers map to `Internal`).
    pub fn from_status(status: i32) -> ErrorCode {
        match status {
            sys::ACC_ERR_INVALID_ARGUMENT => ErrorCode::InvalidArgument,
            sys::ACC_ERR_INVALID_CONFIG => ErrorCode::InvalidConfig,
            sys::ACC_ERR_INVALID_STATE => ErrorCode::InvalidState,
            sys::ACC_ERR_UNSUPPORTED => ErrorCode::Unsupported,
            sys::ACC_ERR_IO => ErrorCode::Io,
            sys::ACC_ERR_OUT_OF_MEMORY => ErrorCode::OutOfMemory,
            sys::ACC_ERR_DISTRIBUTED => ErrorCode::Distributed,
            sys::ACC_ERR_TORCH => ErrorCode::Torch,
            sys::ACC_ERR_ABI_MISMATCH => ErrorCode::AbiMismatch,
            sys::ACC_ERR_BUSY => ErrorCode::Busy,
            sys::ACC_ERR_CALLBACK => ErrorCode::Callback,
            _ => ErrorCode::Internal,
        }
    }

    /// The status number of acc.h.
    pub fn status(self) -> i32 {
        match self {
            ErrorCode::InvalidArgument => sys::ACC_ERR_INVALID_ARGUMENT,
            ErrorCode::InvalidConfig => sys::ACC_ERR_INVALID_CONFIG,
            ErrorCode::InvalidState => sys::ACC_ERR_INVALID_STATE,
            ErrorCode::Unsupported => sys::ACC_ERR_UNSUPPORTED,
            ErrorCode::Io => sys::ACC_ERR_IO,
            ErrorCode::OutOfMemory => sys::ACC_ERR_OUT_OF_MEMORY,
            ErrorCode::Distributed => sys::ACC_ERR_DISTRIBUTED,
            ErrorCode::Torch => sys::ACC_ERR_TORCH,
            ErrorCode::AbiMismatch => sys::ACC_ERR_ABI_MISMATCH,
            ErrorCode::Busy => sys::ACC_ERR_BUSY,
            ErrorCode::Callback => sys::ACC_ERR_CALLBACK,
            ErrorCode::Internal => sys::ACC_ERR_INTERNAL,
        }
    }
}

/// A failed libacc call: the status code, libacc's message for that call (read right after it, on
/// the same thread), and a backtrace of the Rust caller (captured when `RUST_BACKTRACE` asks for one).
pub struct Error {
    code: ErrorCode,
    status: i32,
    message: String,
    backtrace: Backtrace,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// `Result<T, acc::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error made on the Rust side of the binding.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            status: code.status(),
            message: message.into(),
            backtrace: Backtrace::capture(),
            source: None,
        }
    }

    /// Reads the thread-local record of the call that just returned `status`. Call it right after the
    /// failing call, on the same thread, with no libacc call in between.
    pub(crate) fn last(status: i32) -> Error {
        // SAFETY: acc_last_error_message never returns NULL; the string is valid until the next call.
        let message = unsafe { CStr::from_ptr(sys::acc_last_error_message()) }
            .to_string_lossy()
            .into_owned();
        Error {
            code: ErrorCode::from_status(status),
            status,
            message,
            backtrace: Backtrace::capture(),
            source: None,
        }
    }

    pub(crate) fn with_source(mut self, source: Box<dyn std::error::Error + Send + Sync + 'static>) -> Error {
        self.source = Some(source);
        self
    }

    /// The status code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The raw status number, exactly as libacc returned it.
    pub fn status(&self) -> i32 {
        self.status
    }

    /// libacc's message: what failed and, for configuration errors, the key path and accepted values.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Where the Rust caller was (see [`std::backtrace::Backtrace::capture`]).
    pub fn backtrace(&self) -> &Backtrace {
        &self.backtrace
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.message, self.code)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("code", &self.code)
            .field("status", &self.status)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Turns a status into a `Result`, reading the message of a failure at once.
pub(crate) fn check(status: sys::acc_status) -> Result<()> {
    if status == sys::ACC_OK {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}
