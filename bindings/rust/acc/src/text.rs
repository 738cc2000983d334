//! Text: Hugging Face tokenizers and chat templates (acc.h's Text section), and text generation.

use std::any::Any;
use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use acc_sys as sys;

use crate::batch::NamedBatch;
use crate::error::{check, Error, ErrorCode, Result};
use crate::train::Model;
use crate::{check_abi, cstring};

/// A string libacc returned: copied into a `String`, then freed with `acc_text_free`. NULL is `None`.
fn take_text(p: *mut c_char, length: Option<usize>) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: libacc returned p, NUL-terminated; `length` (when given) bytes are valid.
    let bytes = unsafe {
        match length {
            Some(n) => std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec(),
            None => CStr::from_ptr(p).to_bytes().to_vec(),
        }
    };
    // SAFETY: ours to free, once.
    unsafe { sys::acc_text_free(p) };
    Some(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

fn opt_cstring(s: Option<&str>) -> Result<Option<std::ffi::CString>> {
    s.map(cstring).transpose()
}

/// Pointers and lengths of `texts` for the C calls (no copy: the C side takes lengths, not NULs).
fn views<S: AsRef<str>>(texts: &[S]) -> (Vec<*const c_char>, Vec<usize>) {
    texts
        .iter()
        .map(|t| (t.as_ref().as_ptr().cast::<c_char>(), t.as_ref().len()))
        .unzip()
}

/// A tokenizer as transformers' `AutoTokenizer` loads it (the `tokenizers` crate inside libacc):
/// encode, decode, vocabulary look-ups and chat templates.
///
/// `Send` and `Sync`: encode, decode, look-ups and chat templates may run on many threads at once (share
/// it with `Arc` or scoped threads, e.g. among data-loader workers); [`Tokenizer::set_special_token`]
/// takes `&mut self`, so nothing else uses it meanwhile. Freed on drop.
///
/// ```no_run
/// # fn main() -> acc::Result<()> {
/// let tok = acc::Tokenizer::from_pretrained("tests/text/tiny/bytebpe")?;
/// let enc = tok.encode_batch(&["Hello world!", "A longer sentence."], Some(r#"{"padding": true}"#))?;
/// println!("{:?}", enc.input_ids(0)?);
/// let batch = enc.to_batch()?; // "input_ids", "attention_mask": int64 [2, length]
/// println!("{}", tok.decode(enc.input_ids(0)?, Some(r#"{"skip_special_tokens": true}"#))?);
/// # Ok(())
/// # }
/// ```
pub struct Tokenizer {
    ptr: NonNull<sys::acc_tokenizer>,
}

// SAFETY: libacc's tokenizer is thread-safe (acc.h) for every call taking `const acc_tokenizer*`; the one
// that is not (set_special_token) takes `&mut self` here.
unsafe impl Send for Tokenizer {}
unsafe impl Sync for Tokenizer {}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { sys::acc_tokenizer_destroy(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({:p})", self.ptr)
    }
}

impl Tokenizer {
    fn owned(status: sys::acc_status, out: *mut sys::acc_tokenizer) -> Result<Tokenizer> {
        check(status)?;
        NonNull::new(out)
            .map(|ptr| Tokenizer { ptr })
            .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL tokenizer"))
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::acc_tokenizer {
        self.ptr.as_ptr()
    }

    /// `AutoTokenizer.from_pretrained(dir)`: `tokenizer.json` with `tokenizer_config.json`,
    /// `special_tokens_map.json`, the chat templates. A folder with `tokenizer.model` only is
    /// [`ErrorCode::InvalidArgument`], saying how to convert it; a malformed file names itself.
    pub fn from_pretrained(dir: &str) -> Result<Tokenizer> {
        check_abi()?;
        let d = cstring(dir)?;
        let mut out = ptr::null_mut();
        Tokenizer::owned(unsafe { sys::acc_tokenizer_from_pretrained(d.as_ptr(), &mut out) }, out)
    }

    /// A byte-level BPE tokenizer (GPT-2 / Llama-3's kind) trained on `texts` by tokenizers' BpeTrainer.
    /// options: `{"vocab_size": 1000, "min_frequency": 2, "special_tokens": [..], "bos_token",
    /// "eos_token", "pad_token", "unk_token", "chat_template", "model_max_length"}`.
    pub fn train_bpe<S: AsRef<str>>(texts: &[S], options_json: Option<&str>) -> Result<Tokenizer> {
        check_abi()?;
        let (p, n) = views(texts);
        let o = opt_cstring(options_json)?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut out = ptr::null_mut();
        // SAFETY: p[i] points at n[i] bytes of texts[i], alive during the call.
        let st = unsafe { sys::acc_tokenizer_train_bpe(p.as_ptr(), n.as_ptr(), p.len() as i64, o_ptr, &mut out) };
        Tokenizer::owned(st, out)
    }

    /// Writes `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja` into `dir` (created if
    /// missing), which this crate and transformers' `AutoTokenizer` load.
    pub fn save_pretrained(&self, dir: &str) -> Result<()> {
        let d = cstring(dir)?;
        check(unsafe { sys::acc_tokenizer_save_pretrained(self.as_ptr(), d.as_ptr()) })
    }

    /// What the tokenizer is, as JSON: `{"vocab_size", "len" (with added tokens), "model_type",
    /// "special_tokens", "special_token_ids", "all_special_tokens", "all_special_ids", "chat_templates",
    /// "model_max_length", "padding_side", "truncation_side"}`.
    pub fn info(&self) -> Result<String> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::acc_tokenizer_info(self.as_ptr(), &mut out) })?;
        Ok(take_text(out, None).unwrap_or_default())
    }

    /// transformers' `tok.pad_token = "..."`: sets a named special token (`"bos_token"`, `"eos_token"`,
    /// `"unk_token"`, `"sep_token"`, `"pad_token"`, `"cls_token"`, `"mask_token"`); `None` unsets it.
    pub fn set_special_token(&mut self, name: &str, token: Option<&str>) -> Result<()> {
        let n = cstring(name)?;
        let t = opt_cstring(token)?;
        let t_ptr = t.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        check(unsafe { sys::acc_tokenizer_set_special_token(self.as_ptr(), n.as_ptr(), t_ptr) })
    }

    /// The id of a token of the vocabulary (added tokens included), `None` when it has none.
    pub fn token_to_id(&self, token: &str) -> Result<Option<i64>> {
        let t = cstring(token)?;
        let mut id = -1;
        check(unsafe { sys::acc_tokenizer_token_to_id(self.as_ptr(), t.as_ptr(), &mut id) })?;
        Ok((id >= 0).then_some(id))
    }

    /// The token of an id, `None` for an id outside the vocabulary.
    pub fn id_to_token(&self, id: i64) -> Result<Option<String>> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::acc_tokenizer_id_to_token(self.as_ptr(), id, &mut out) })?;
        Ok(take_text(out, None))
    }

    /// Encodes one text: [`Tokenizer::encode_batch`] of one.
    pub fn encode(&self, text: &str, options_json: Option<&str>) -> Result<Encoding> {
        self.encode_batch(&[text], options_json)
    }

    /// transformers' `tok(texts, ...)`: one row per text (more with overflowing windows). options:
    /// `{"add_special_tokens": true, "truncation", "max_length", "stride", "return_overflowing_tokens",
    /// "padding": false | true | "longest" | "max_length", "pad_to_multiple_of", "padding_side",
    /// "truncation_side", "threads": 1}` (acc.h's `acc_tokenizer_encode`).
    pub fn encode_batch<S: AsRef<str>>(&self, texts: &[S], options_json: Option<&str>) -> Result<Encoding> {
        self.encode_raw(texts, None::<&[&str]>, options_json)
    }

    /// `tok(texts, text_pair=pairs, ...)`: as many pairs as texts.
    pub fn encode_pairs<S: AsRef<str>, P: AsRef<str>>(
        &self,
        texts: &[S],
        pairs: &[P],
        options_json: Option<&str>,
    ) -> Result<Encoding> {
        if texts.len() != pairs.len() {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("{} texts but {} pairs", texts.len(), pairs.len()),
            ));
        }
        self.encode_raw(texts, Some(pairs), options_json)
    }

    fn encode_raw<S: AsRef<str>, P: AsRef<str>>(
        &self,
        texts: &[S],
        pairs: Option<&[P]>,
        options_json: Option<&str>,
    ) -> Result<Encoding> {
        let (p, n) = views(texts);
        let (q, m) = pairs.map(views).unwrap_or_default();
        let o = opt_cstring(options_json)?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let (q_ptr, m_ptr) = if pairs.is_some() {
            (q.as_ptr(), m.as_ptr())
        } else {
            (ptr::null(), ptr::null())
        };
        let mut out = ptr::null_mut();
        // SAFETY: the views point into texts and pairs, alive during the call.
        let st = unsafe {
            sys::acc_tokenizer_encode(
                self.as_ptr(),
                p.as_ptr(),
                n.as_ptr(),
                q_ptr,
                m_ptr,
                p.len() as i64,
                o_ptr,
                &mut out,
            )
        };
        Encoding::owned(st, out)
    }

    /// transformers' `decode`: options `{"skip_special_tokens": false, "clean_up_tokenization_spaces"}`.
    /// Ids outside the vocabulary are skipped; a negative one is [`ErrorCode::InvalidArgument`].
    pub fn decode(&self, ids: &[i64], options_json: Option<&str>) -> Result<String> {
        let o = opt_cstring(options_json)?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let (mut out, mut length) = (ptr::null_mut(), 0usize);
        let st = unsafe {
            sys::acc_tokenizer_decode(
                self.as_ptr(),
                ids.as_ptr(),
                ids.len() as i64,
                o_ptr,
                &mut out,
                &mut length,
            )
        };
        check(st)?;
        Ok(take_text(out, Some(length)).unwrap_or_default())
    }

    /// transformers' `apply_chat_template(messages, tokenize=False)`: `messages_json` is
    /// `[{"role", "content", ...}, ...]`; options `{"chat_template": a template or a name,
    /// "add_generation_prompt", "continue_final_message", "tools", "documents", "template_variables",
    /// "now"}`. A template that raises or fails is [`ErrorCode::InvalidArgument`] naming it and the line.
    pub fn apply_chat_template(&self, messages_json: &str, options_json: Option<&str>) -> Result<String> {
        self.chat(messages_json, options_json, false).map(|(text, _)| text)
    }

    /// [`Tokenizer::apply_chat_template`] with the ids too (encoded without special tokens; the template
    /// writes them, and [`Tokenizer::encode_batch`]'s options apply): one row whose `"assistant_masks"`
    /// marks the tokens of the template's `{% generation %}` blocks (transformers'
    /// `return_assistant_tokens_mask`).
    pub fn apply_chat_template_encoded(
        &self,
        messages_json: &str,
        options_json: Option<&str>,
    ) -> Result<(String, Encoding)> {
        self.chat(messages_json, options_json, true)
            .map(|(text, enc)| (text, enc.expect("asked for an encoding")))
    }

    fn chat(
        &self,
        messages_json: &str,
        options_json: Option<&str>,
        encoded: bool,
    ) -> Result<(String, Option<Encoding>)> {
        let msgs = cstring(messages_json)?;
        let o = opt_cstring(options_json)?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let (mut text, mut enc) = (ptr::null_mut(), ptr::null_mut());
        let enc_ptr = if encoded { &mut enc as *mut _ } else { ptr::null_mut() };
        let st =
            unsafe { sys::acc_tokenizer_apply_chat_template(self.as_ptr(), msgs.as_ptr(), o_ptr, &mut text, enc_ptr) };
        check(st)?;
        let text = take_text(text, None).unwrap_or_default();
        let enc = if encoded {
            Some(Encoding::owned(sys::ACC_OK, enc)?)
        } else {
            None
        };
        Ok((text, enc))
    }
}

/// Encoded rows (transformers' `BatchEncoding`): one per text, more with overflowing windows. Each row has
/// the fields `"input_ids"`, `"attention_mask"`, `"token_type_ids"`, `"special_tokens_mask"`, `"offsets"`
/// (2 per token), `"sequence_ids"`, and `"assistant_masks"` from a chat template. Freed on drop; `Send`.
pub struct Encoding {
    ptr: NonNull<sys::acc_encoding>,
}

// SAFETY: libacc handles may be used from any thread, one thread at a time (acc.h).
unsafe impl Send for Encoding {}

impl Drop for Encoding {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { sys::acc_encoding_destroy(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = f.debug_list();
        for row in 0..self.len() {
            match self.input_ids(row) {
                Ok(ids) => l.entry(&ids),
                Err(e) => l.entry(&e.message()),
            };
        }
        l.finish()
    }
}

impl Encoding {
    fn owned(status: sys::acc_status, out: *mut sys::acc_encoding) -> Result<Encoding> {
        check(status)?;
        NonNull::new(out)
            .map(|ptr| Encoding { ptr })
            .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL encoding"))
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        let mut n = 0;
        // Cannot fail for a live handle.
        let _ = check(unsafe { sys::acc_encoding_count(self.ptr.as_ptr(), &mut n) });
        n.max(0) as usize
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One row's field, borrowed from the encoding. An unknown field or row is
    /// [`ErrorCode::InvalidArgument`] naming it.
    pub fn get(&self, row: usize, field: &str) -> Result<&[i64]> {
        let f = cstring(field)?;
        let (mut data, mut length) = (ptr::null(), 0i64);
        check(unsafe { sys::acc_encoding_get(self.ptr.as_ptr(), row as i64, f.as_ptr(), &mut data, &mut length) })?;
        if data.is_null() || length <= 0 {
            return Ok(&[]);
        }
        // SAFETY: `length` values valid while the encoding lives (acc.h), which the borrow ensures.
        Ok(unsafe { std::slice::from_raw_parts(data, length as usize) })
    }

    /// A row's `"input_ids"`.
    pub fn input_ids(&self, row: usize) -> Result<&[i64]> {
        self.get(row, "input_ids")
    }

    /// A row's `"attention_mask"`.
    pub fn attention_mask(&self, row: usize) -> Result<&[i64]> {
        self.get(row, "attention_mask")
    }

    /// A row's `"assistant_masks"` (an encoding of [`Tokenizer::apply_chat_template_encoded`] only).
    pub fn assistant_masks(&self, row: usize) -> Result<&[i64]> {
        self.get(row, "assistant_masks")
    }

    /// A row's token offsets: `[start, end)` byte offsets into the text of the token's sequence.
    pub fn offsets(&self, row: usize) -> Result<Vec<(usize, usize)>> {
        Ok(self
            .get(row, "offsets")?
            .chunks_exact(2)
            .map(|c| (c[0] as usize, c[1] as usize))
            .collect())
    }

    /// The index of the text a row encodes (transformers' `overflow_to_sample_mapping`).
    pub fn sample(&self, row: usize) -> Result<usize> {
        let mut out = 0;
        check(unsafe { sys::acc_encoding_sample(self.ptr.as_ptr(), row as i64, &mut out) })?;
        Ok(out as usize)
    }

    /// The rows as a batch of int64 tensors `[rows, length]`: `"input_ids"`, `"attention_mask"`,
    /// `"token_type_ids"` (and `"assistant_masks"`). Rows of different lengths (no padding) are
    /// [`ErrorCode::InvalidArgument`].
    pub fn to_batch(&self) -> Result<NamedBatch> {
        let mut out = ptr::null_mut();
        NamedBatch::owned(unsafe { sys::acc_encoding_to_batch(self.ptr.as_ptr(), &mut out) }, out)
    }
}

impl Model {
    /// Text generation (transformers' `generate` with a tokenizer and `TextStreamer`): the prompt is
    /// encoded with `tokenizer` (options `"add_special_tokens": true`; false for a prompt a chat template
    /// rendered), generated with [`Model::generate`]'s options, then `{"stop_strings": [...],
    /// "skip_special_tokens": true}`. Returns the new text only.
    ///
    /// `on_text` (optional) gets the text in pieces on this thread (never half a character) and returns
    /// `false` to stop. A panic in it stops generating and resumes in the caller. For an iterator of pieces
    /// see [`Model::generate_text_stream`].
    pub fn generate_text(
        &self,
        tokenizer: &Tokenizer,
        prompt: &str,
        options_json: Option<&str>,
        on_text: Option<&mut dyn FnMut(&str) -> bool>,
    ) -> Result<String> {
        struct State<'a> {
            f: &'a mut dyn FnMut(&str) -> bool,
            panic: Option<Box<dyn Any + Send>>,
        }
        unsafe extern "C" fn text_fn(user: *mut c_void, piece: *const c_char, length: usize) -> i32 {
            // SAFETY: user is the State on generate_text's stack; libacc calls it during the call only.
            let state = unsafe { &mut *user.cast::<State<'_>>() };
            let bytes: &[u8] = if piece.is_null() || length == 0 {
                &[]
            } else {
                // SAFETY: `length` bytes borrowed for this call.
                unsafe { std::slice::from_raw_parts(piece.cast::<u8>(), length) }
            };
            let text = String::from_utf8_lossy(bytes);
            match panic::catch_unwind(AssertUnwindSafe(|| (state.f)(&text))) {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(payload) => {
                    state.panic = Some(payload);
                    1
                }
            }
        }
        let p = cstring(prompt)?;
        let o = opt_cstring(options_json)?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut state = on_text.map(|f| State { f, panic: None });
        let (callback, user): (sys::acc_text_fn, *mut c_void) = match state.as_mut() {
            Some(s) => (Some(text_fn), (s as *mut State<'_>).cast()),
            None => (None, ptr::null_mut()),
        };
        let mut out = ptr::null_mut();
        // SAFETY: `state` outlives the call; libacc calls text_fn only during it, on this thread.
        let st = unsafe {
            sys::acc_generate_text(
                self.as_ptr(),
                tokenizer.as_ptr(),
                p.as_ptr(),
                o_ptr,
                callback,
                user,
                &mut out,
            )
        };
        let result = check(st).map(|()| take_text(out, None).unwrap_or_default());
        if let Some(payload) = state.and_then(|s| s.panic) {
            drop(result);
            panic::resume_unwind(payload);
        }
        result
    }

    /// [`Model::generate_text`] as an iterator of text pieces: generation runs on a thread of its own
    /// (which owns the model meanwhile) and the pieces arrive as it makes them.
    /// [`TextStream::finish`] returns the whole text and the model; dropping the stream stops generating.
    ///
    /// ```no_run
    /// # fn main() -> acc::Result<()> {
    /// # let model = acc::Model::from_pretrained("model", None)?;
    /// let tok = std::sync::Arc::new(acc::Tokenizer::from_pretrained("model")?);
    /// let mut stream = model.generate_text_stream(tok.clone(), "Hello", Some(r#"{"max_new_tokens": 20}"#))?;
    /// for piece in &mut stream {
    ///     print!("{piece}");
    /// }
    /// let (model, text) = stream.finish();
    /// let text = text?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn generate_text_stream(
        self,
        tokenizer: Arc<Tokenizer>,
        prompt: &str,
        options_json: Option<&str>,
    ) -> Result<TextStream> {
        let prompt = prompt.to_owned();
        let options = options_json.map(str::to_owned);
        let (tx, rx) = mpsc::channel::<String>();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_w = stop.clone();
        let worker = std::thread::Builder::new()
            .name("acc-generate-text".into())
            .spawn(move || {
                let mut send = |piece: &str| !stop_w.load(Ordering::Relaxed) && tx.send(piece.to_owned()).is_ok();
                let text = self.generate_text(&tokenizer, &prompt, options.as_deref(), Some(&mut send));
                (self, text)
            })
            .map_err(|e| Error::new(ErrorCode::Internal, format!("cannot start the generation thread: {e}")))?;
        Ok(TextStream {
            rx,
            stop,
            worker: Some(worker),
        })
    }
}

/// The pieces of [`Model::generate_text_stream`], as they come (an `Iterator<Item = String>`).
/// Dropping it stops generating and waits for the thread.
pub struct TextStream {
    rx: mpsc::Receiver<String>,
    stop: Arc<AtomicBool>,
    worker: Option<JoinHandle<(Model, Result<String>)>>,
}

impl Iterator for TextStream {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        self.rx.recv().ok()
    }
}

impl TextStream {
    /// Waits for generation to end (pieces not taken yet are dropped) and returns the model and the whole
    /// new text (or the error generation ended with).
    pub fn finish(mut self) -> (Model, Result<String>) {
        self.join()
    }

    /// Stops generating at the next piece, then as [`TextStream::finish`].
    pub fn stop(self) -> (Model, Result<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.finish()
    }

    fn join(&mut self) -> (Model, Result<String>) {
        let worker = self.worker.take().expect("joined once");
        match worker.join() {
            Ok(r) => r,
            Err(payload) => panic::resume_unwind(payload),
        }
    }
}

impl Drop for TextStream {
    fn drop(&mut self) {
        if self.worker.is_some() {
            self.stop.store(true, Ordering::Relaxed);
            let _ = self.join();
        }
    }
}
