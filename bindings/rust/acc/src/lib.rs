//! Hugging Face Accelerate as native software: safe Rust bindings of libacc.
//!
//! The same training loop as Accelerate's, through libacc's C ABI: create an [`Accelerator`], build a
//! [`Model`], an [`Optimizer`] (and optionally a [`Scheduler`]) and a [`DataLoader`], hand them to
//! [`Accelerator::prepare`], then loop. Run the program under `acc launch --num_processes N` to train
//! data-parallel across processes.
//!
//! ```no_run
//! use acc::{Accelerator, DataLoader, Dataset, Model, Optimizer, Tensor};
//!
//! fn main() -> acc::Result<()> {
//!     let accel = Accelerator::new(r#"{"seed": 1234}"#)?;
//!     let x = Tensor::from_slice(&[0.0f32, 1.0, 2.0, 3.0], &[4, 1])?;
//!     let y = Tensor::from_slice(&[1.0f32, 3.0, 5.0, 7.0], &[4, 1])?;
//!     let data = Dataset::from_tensors(&x, Some(&y))?;
//!     let loader = DataLoader::new(&data, r#"{"batch_size": 2, "shuffle": true}"#)?;
//!     let model = Model::new(r#"{"type": "mlp", "sizes": [1, 16, 1], "loss": "mse"}"#)?;
//!     let opt = Optimizer::new(&model, r#"{"type": "adamw", "lr": 0.01}"#)?;
//!     accel.prepare(Some(&model), Some(&opt), None, Some(&loader))?;
//!     for _epoch in 0..10 {
//!         while let Some(batch) = loader.next()? {
//!             let loss = model.loss(&batch.input, batch.target.as_ref())?;
//!             accel.backward(&loss)?;
//!             opt.step()?;
//!             opt.zero_grad()?;
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Named batches
//! A [`NamedBatch`] maps names to tensors, as the dicts of Accelerate and Hugging Face models do: build
//! datasets of named columns ([`Dataset::from_batch`]) or named samples ([`Dataset::from_batch_fn`]),
//! take batches with [`DataLoader::next_batch`] and run them with [`Model::forward_batch`], whose
//! outputs are a batch too (`"loss"`, `"logits"` or `"output"`).
//!
//! ```no_run
//! use acc::{NamedBatch, DataLoader, Dataset, Model, Tensor};
//!
//! fn main() -> acc::Result<()> {
//!     let ids = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5], &[4, 3])?;
//!     let data = Dataset::from_batch(&NamedBatch::from_tensors([("input_ids", &ids), ("labels", &ids)])?)?;
//!     let loader = DataLoader::new(&data, r#"{"batch_size": 2}"#)?;
//!     let gpt = Model::new(r#"{"type": "gpt", "vocab_size": 7, "block_size": 3, "n_layer": 1, "n_head": 1, "n_embd": 8}"#)?;
//!     while let Some(batch) = loader.next_batch()? {
//!         let out = gpt.forward_batch(&batch)?;
//!         println!("loss {}", out.get("loss")?.item()?);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Big models
//! [`Model::from_config`] with `{"device": "meta"}` builds a model without weight memory;
//! [`Model::module_sizes`] and [`Model::infer_auto_device_map`] size it and plan where each part goes
//! (JSON text), and [`Model::from_pretrained`] with a `"device_map"` loads a checkpoint onto such a
//! plan. [`set_grad_enabled`] and the [`NoGrad`] guard turn autograd off for inference on this thread.
//!
//! ```no_run
//! # fn main() -> acc::Result<()> {
//! let config = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
//!     "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32}"#;
//! let empty = acc::Model::from_config(config, Some(r#"{"device": "meta", "dtype": "float16"}"#))?;
//! let map = empty.infer_auto_device_map(Some(r#"{"max_memory": {"0": "10GiB", "cpu": "30GB"}}"#))?;
//! println!("{map}"); // {"model.embed_tokens": 0, ..., "lm_head": "cpu"}
//! # Ok(())
//! # }
//! ```
//!
//! # Text
//! [`Tokenizer`] is transformers' `AutoTokenizer` (the `tokenizers` crate inside libacc): encode batches
//! into an [`Encoding`] (padding, truncation, offsets; [`Encoding::to_batch`] makes the named batch a
//! model takes), decode, look up tokens, render chat templates (with the assistant masks of their
//! `{% generation %}` blocks) and train a byte-level BPE. It is `Send + Sync`: data-loader threads share
//! one. [`Model::generate_text`] generates text with a callback for its pieces, and
//! [`Model::generate_text_stream`] as an iterator of pieces.
//!
//! ```no_run
//! # fn main() -> acc::Result<()> {
//! let tok = acc::Tokenizer::from_pretrained("tests/text/tiny/bytebpe")?;
//! let chat = r#"[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]"#;
//! let (text, enc) = tok.apply_chat_template_encoded(chat, None)?;
//! println!("{text}\n{:?}", enc.assistant_masks(0)?);
//! # Ok(())
//! # }
//! ```
//!
//! # Data files
//! [`Dataset::from_files`] reads JSON lines, CSV, Parquet or Arrow files and prepares their rows with a
//! [`Tokenizer`] as datasets and TRL do (tokenize, group_texts, SFT of text, messages or
//! prompt/completion rows, packing); its batches are the collator's padded named batches, for a
//! [`DataLoader`] or [`Dataset::get_batch`]. [`Dataset::from_config`] takes the options from the
//! accelerator's `data.*` settings.
//!
//! ```no_run
//! # fn main() -> acc::Result<()> {
//! let tok = acc::Tokenizer::from_pretrained("tests/text/tiny/bytebpe")?;
//! let ds = acc::Dataset::from_files(Some("tests/data/prep/text.jsonl"), &tok, Some(r#"{"mode": "tokenize"}"#))?;
//! println!("{:?}", ds.get_batch(&[0, 1])?); // input_ids, attention_mask, labels
//! # Ok(())
//! # }
//! ```
//!
//! # Errors, lifetimes, threads
//! * Every fallible call returns [`Result<T, acc::Error>`](Error): the status [`ErrorCode`] and
//!   libacc's message, read right after the failing call on the same thread.
//! * Every handle frees itself on drop. Handles keep what they depend on alive inside libacc, so
//!   dropping them in any order is safe.
//! * Handles are `Send` but not `Sync`: libacc allows one thread at a time per handle ([`Tokenizer`],
//!   thread-safe in libacc, is `Sync` too).
//! * A handle cannot be used after it is dropped, so the C ABI's "NULL handle" errors cannot happen
//!   here:
//!
//! ```compile_fail,E0382
//! let m = acc::Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#).unwrap();
//! drop(m);
//! m.num_parameters(); // error[E0382]: borrow of moved value: `m`
//! ```
//! * No panic crosses the C ABI: a panic in a [`Dataset::from_fn`] or [`Dataset::from_batch_fn`]
//!   callback is caught, the load fails inside libacc, and the panic resumes in the caller of
//!   [`DataLoader::next`] or [`DataLoader::next_batch`]; likewise for the closures of
//!   [`Accelerator::register_for_checkpointing`] and [`Accelerator::save_state`] /
//!   [`Accelerator::load_state`] / [`Accelerator::resume_from_checkpoint`], and for the token
//!   callback of [`Model::generate`] (which stops generating and resumes the panic in its caller).

mod batch;
mod error;
mod tensor;
mod text;
mod train;

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

pub use acc_sys as sys;
pub use batch::{BatchIter, NamedBatch};
pub use error::{Error, ErrorCode, Result};
pub use tensor::{DType, Element, Tensor, TensorView};
pub use text::{Encoding, TextStream, Tokenizer};
pub use train::{Accelerator, Batch, DataLoader, Dataset, Model, Optimizer, Profile, ReduceOp, Scheduler};

/// The ABI this crate was generated for.
pub const ABI_VERSION: i32 = sys::ACC_ABI_VERSION;

/// Checks once that the loaded libacc serves [`ABI_VERSION`]; every constructor calls it, so a
/// mismatch fails the first call with a message naming both versions and the library's path.
pub fn check_abi() -> Result<()> {
    static ABI: OnceLock<std::result::Result<(), (i32, String)>> = OnceLock::new();
    ABI.get_or_init(|| {
        // SAFETY: a plain call; the message is read at once on this thread.
        error::check(unsafe { sys::acc_abi_check(ABI_VERSION) }).map_err(|e| (e.status(), e.message().to_string()))
    })
    .clone()
    .map_err(|(status, message)| Error::new(ErrorCode::from_status(status), message))
}

/// Checks a given ABI version against the loaded library (for tests of the mismatch path).
pub fn check_abi_version(abi: i32) -> Result<()> {
    error::check(unsafe { sys::acc_abi_check(abi) })
}

/// The loaded library's version, "MAJOR.MINOR.PATCH".
pub fn version() -> String {
    // SAFETY: static storage.
    unsafe { CStr::from_ptr(sys::acc_version()) }
        .to_string_lossy()
        .into_owned()
}

/// The loaded library's build facts as JSON (torch version, compiler, CUDA, git revision).
pub fn build_info() -> String {
    unsafe { CStr::from_ptr(sys::acc_build_info()) }
        .to_string_lossy()
        .into_owned()
}

/// The C name of a status code, e.g. "ACC_ERR_INVALID_CONFIG".
pub fn status_name(status: i32) -> String {
    unsafe { CStr::from_ptr(sys::acc_status_name(status)) }
        .to_string_lossy()
        .into_owned()
}

/// PyTorch's `torch.set_grad_enabled` for the calling thread: with `false`, forward passes record no
/// autograd graph (evaluation and inference: less memory and time; backward of such a loss fails),
/// with `true` they do again (the default). Returns the setting before, to restore it. Thread-local,
/// as in PyTorch: other threads keep their own. [`NoGrad`] restores it on drop.
pub fn set_grad_enabled(enabled: bool) -> Result<bool> {
    let mut previous = 0;
    // SAFETY: a plain call with a valid out-pointer.
    error::check(unsafe { sys::acc_set_grad_enabled(enabled as i32, &mut previous) })?;
    Ok(previous != 0)
}

/// PyTorch's `torch.no_grad()`: gradients off on this thread while the guard lives, the previous
/// setting restored on drop. Not `Send`: the setting belongs to the thread that made the guard.
///
/// ```no_run
/// # fn main() -> acc::Result<()> {
/// # let model = acc::Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#)?;
/// # let x = acc::Tensor::from_slice(&[1.0f32, 2.0], &[1, 2])?;
/// let y = {
///     let _guard = acc::NoGrad::new()?;
///     model.predict(&x)? // no autograd graph
/// };
/// # Ok(())
/// # }
/// ```
#[must_use = "gradients are re-enabled when the guard is dropped"]
#[derive(Debug)]
pub struct NoGrad {
    previous: bool,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl NoGrad {
    /// Turns gradients off on this thread until the guard is dropped.
    pub fn new() -> Result<NoGrad> {
        check_abi()?;
        Ok(NoGrad {
            previous: set_grad_enabled(false)?,
            _thread_bound: std::marker::PhantomData,
        })
    }
}

impl Drop for NoGrad {
    fn drop(&mut self) {
        // Cannot fail for a valid setting; nothing to report from a destructor.
        let _ = set_grad_enabled(self.previous);
    }
}

pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(ErrorCode::InvalidArgument, "string contains a NUL byte"))
}
