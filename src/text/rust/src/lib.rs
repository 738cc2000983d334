//! libacc's text library: the C side of ../../text_ffi.h over Hugging Face's `tokenizers` and `minijinja`.
#![feature(alloc_error_hook)] // budget.rs: the memory a chat template may take
mod budget;
mod chat;
mod pretok;
mod tokenizer;

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tokenizer::{EncodeOptions, Handle};
use tokenizers::{AddedToken, EncodeInput, Encoding};

/// A string for C: malloc'd, NUL-terminated, the text's own NULs kept (callers that need them take the length).
fn c_string(s: String) -> *mut c_char {
    let p = unsafe { libc::malloc(s.len() + 1) } as *mut u8;
    if p.is_null() {
        return p as *mut c_char;
    }
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        *p.add(s.len()) = 0;
    }
    p as *mut c_char
}

unsafe fn str_in<'a>(p: *const c_char, len: usize, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return if len == 0 { Ok("") } else { Err(format!("{what}: NULL")) };
    }
    std::str::from_utf8(std::slice::from_raw_parts(p as *const u8, len))
        .map_err(|e| format!("{what} is not UTF-8: invalid byte at offset {}", e.valid_up_to()))
}

/// Runs f, turning its error or its panic into *err and 1.
fn guarded<F: FnOnce() -> Result<(), String>>(err: *mut *mut c_char, f: F) -> i32 {
    let message = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(m)) => m,
        Err(p) => format!(
            "internal error in the text library: {}",
            p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default()
        ),
    };
    if !err.is_null() {
        unsafe { *err = c_string(message) };
    }
    1
}

#[no_mangle]
pub extern "C" fn acctext_string_free(s: *mut c_char) {
    unsafe { libc::free(s as *mut libc::c_void) };
}

pub struct AccTextTokenizer(Handle);

#[no_mangle]
pub extern "C" fn acctext_tokenizer_from_json(
    json: *const c_char, len: usize, overrides: *const c_char, overrides_len: usize, out: *mut *mut AccTextTokenizer,
    err: *mut *mut c_char,
) -> i32 {
    guarded(err, || {
        let text = unsafe { str_in(json, len, "tokenizer.json")? };
        let overrides = if overrides.is_null() { "" } else { unsafe { str_in(overrides, overrides_len, "overrides")? } };
        let handle = Handle::from_json(text, overrides)?;
        unsafe { *out = Box::into_raw(Box::new(AccTextTokenizer(handle))) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn acctext_tokenizer_free(tok: *mut AccTextTokenizer) {
    if !tok.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { drop(Box::from_raw(tok)) }));
    }
}

#[no_mangle]
pub extern "C" fn acctext_tokenizer_to_json(tok: *const AccTextTokenizer, out: *mut *mut c_char, err: *mut *mut c_char) -> i32 {
    guarded(err, || {
        let tok = unsafe { &(*tok).0 };
        let text = tok.base().to_string(true).map_err(|e| e.to_string())?;
        unsafe { *out = c_string(text) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn acctext_model_type(tok: *const AccTextTokenizer) -> *const c_char {
    use tokenizers::ModelWrapper;
    let name: &'static [u8] = catch_unwind(AssertUnwindSafe(|| match unsafe { &(*tok).0 }.base().get_model() {
        ModelWrapper::BPE(_) => b"BPE\0".as_slice(),
        ModelWrapper::WordPiece(_) => b"WordPiece\0".as_slice(),
        ModelWrapper::WordLevel(_) => b"WordLevel\0".as_slice(),
        ModelWrapper::Unigram(_) => b"Unigram\0".as_slice(),
    }))
    .unwrap_or(b"\0".as_slice());
    name.as_ptr() as *const c_char
}

#[no_mangle]
pub extern "C" fn acctext_has_post_processor(tok: *const AccTextTokenizer) -> i32 {
    catch_unwind(AssertUnwindSafe(|| unsafe { &(*tok).0 }.base().get_post_processor().is_some() as i32)).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn acctext_set_post_processor(tok: *mut AccTextTokenizer, json: *const c_char, len: usize, err: *mut *mut c_char) -> i32 {
    guarded(err, || {
        let text = unsafe { str_in(json, len, "post-processor")? };
        let pp: tokenizers::PostProcessorWrapper = serde_json::from_str(text).map_err(|e| format!("post-processor: {e}"))?;
        unsafe { &(*tok).0 }.set_post_processor(pp)
    })
}

#[repr(C)]
pub struct EncodeOptionsC {
    add_special_tokens: u8,
    truncate: u8,
    truncation_strategy: u8,
    truncate_left: u8,
    max_length: usize,
    stride: usize,
    padding: u8,
    pad_left: u8,
    pad_length: usize,
    pad_to_multiple_of: usize,
    pad_id: u32,
    pad_type_id: u32,
    pad_token: *const c_char,
    threads: usize,
    return_overflowing: u8,
    without_offsets: u8,
}

pub struct AccTextEncodings {
    encodings: Vec<Encoding>,
    samples: Vec<usize>,
    offsets: Vec<Vec<usize>>,
    sequence_ids: Vec<Vec<i32>>,
}

#[no_mangle]
pub extern "C" fn acctext_encode(
    tok: *const AccTextTokenizer, texts: *const *const c_char, text_lens: *const usize, pairs: *const *const c_char,
    pair_lens: *const usize, n: usize, options: *const EncodeOptionsC, out: *mut *mut AccTextEncodings, err: *mut *mut c_char,
) -> i32 {
    guarded(err, || {
        let tok = unsafe { &(*tok).0 };
        let o = unsafe { &*options };
        let mut inputs: Vec<EncodeInput<'_>> = Vec::with_capacity(n);
        for i in 0..n {
            let text = unsafe { str_in(*texts.add(i), *text_lens.add(i), &format!("text {i}"))? };
            if pairs.is_null() {
                inputs.push(text.into());
            } else {
                let pair = unsafe { str_in(*pairs.add(i), *pair_lens.add(i), &format!("text pair {i}"))? };
                inputs.push((text, pair).into());
            }
        }
        let pad_token = if o.pad_token.is_null() { String::new() } else { unsafe { CStr::from_ptr(o.pad_token) }.to_string_lossy().into_owned() };
        let options = EncodeOptions {
            add_special_tokens: o.add_special_tokens != 0,
            overflowing: o.return_overflowing != 0,
            truncation: (o.truncate != 0).then(|| tokenizer::truncation(o.truncation_strategy, o.truncate_left != 0, o.max_length, o.stride)),
            padding: tokenizer::padding(o.padding, o.pad_left != 0, o.pad_length, o.pad_to_multiple_of, o.pad_id, o.pad_type_id, pad_token),
            threads: o.threads,
            offsets: o.without_offsets == 0,
        };
        let mut encodings = Vec::new();
        let mut samples = Vec::new();
        for (i, mut e) in tok.encode(inputs, &options)?.into_iter().enumerate() {
            let overflowing = e.take_overflowing();
            encodings.push(e);
            samples.push(i);
            if o.return_overflowing != 0 {
                samples.extend(std::iter::repeat(i).take(overflowing.len()));
                encodings.extend(overflowing);
            }
        }
        let offsets = if o.without_offsets != 0 {
            Vec::new()
        } else {
            encodings.iter().map(|e| e.get_offsets().iter().flat_map(|&(a, b)| [a, b]).collect()).collect()
        };
        let sequence_ids = encodings.iter().map(|e| e.get_sequence_ids().iter().map(|s| s.map_or(-1, |x| x as i32)).collect()).collect();
        unsafe { *out = Box::into_raw(Box::new(AccTextEncodings { encodings, samples, offsets, sequence_ids })) };
        Ok(())
    })
}

#[repr(C)]
pub struct EncodingView {
    length: usize,
    ids: *const u32,
    type_ids: *const u32,
    attention_mask: *const u32,
    special_tokens_mask: *const u32,
    offsets: *const usize,
    sequence_ids: *const i32,
    sample: usize,
}

#[no_mangle]
pub extern "C" fn acctext_encodings_count(e: *const AccTextEncodings) -> usize {
    unsafe { (*e).encodings.len() }
}

#[no_mangle]
pub extern "C" fn acctext_encodings_view(e: *const AccTextEncodings, i: usize, view: *mut EncodingView) {
    let e = unsafe { &*e };
    let enc = &e.encodings[i];
    unsafe {
        *view = EncodingView {
            length: enc.len(),
            ids: enc.get_ids().as_ptr(),
            type_ids: enc.get_type_ids().as_ptr(),
            attention_mask: enc.get_attention_mask().as_ptr(),
            special_tokens_mask: enc.get_special_tokens_mask().as_ptr(),
            offsets: e.offsets.get(i).map_or(std::ptr::null(), |o| o.as_ptr()),
            sequence_ids: e.sequence_ids[i].as_ptr(),
            sample: e.samples[i],
        }
    };
}

#[no_mangle]
pub extern "C" fn acctext_encodings_free(e: *mut AccTextEncodings) {
    if !e.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { drop(Box::from_raw(e)) }));
    }
}

#[no_mangle]
pub extern "C" fn acctext_decode(
    tok: *const AccTextTokenizer, ids: *const u32, n: usize, skip_special_tokens: u8, out: *mut *mut c_char, out_len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    guarded(err, || {
        let tok = unsafe { &(*tok).0 };
        let ids = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(ids, n) } };
        let text = tok.base().decode(ids, skip_special_tokens != 0).map_err(|e| e.to_string())?;
        unsafe {
            *out_len = text.len();
            *out = c_string(text);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn acctext_token_to_id(tok: *const AccTextTokenizer, token: *const c_char, len: usize, id: *mut u32) -> i32 {
    catch_unwind(AssertUnwindSafe(|| {
        let Ok(token) = (unsafe { str_in(token, len, "token") }) else { return 0 };
        match unsafe { &(*tok).0 }.base().token_to_id(token) {
            Some(x) => {
                unsafe { *id = x };
                1
            }
            None => 0,
        }
    }))
    .unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn acctext_id_to_token(tok: *const AccTextTokenizer, id: u32) -> *mut c_char {
    catch_unwind(AssertUnwindSafe(|| unsafe { &(*tok).0 }.base().id_to_token(id).map(c_string).unwrap_or(std::ptr::null_mut())))
        .unwrap_or(std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn acctext_vocab_size(tok: *const AccTextTokenizer, with_added_tokens: u8) -> usize {
    catch_unwind(AssertUnwindSafe(|| unsafe { &(*tok).0 }.base().get_vocab_size(with_added_tokens != 0))).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn acctext_added_tokens(tok: *const AccTextTokenizer, out_json: *mut *mut c_char, err: *mut *mut c_char) -> i32 {
    guarded(err, || {
        let decoder = unsafe { &(*tok).0 }.base().get_added_tokens_decoder();
        let mut ids: Vec<&u32> = decoder.keys().collect();
        ids.sort();
        let list: Vec<serde_json::Value> = ids
            .into_iter()
            .map(|id| {
                let t = &decoder[id];
                serde_json::json!({"id": id, "content": t.content, "special": t.special, "lstrip": t.lstrip,
                    "rstrip": t.rstrip, "normalized": t.normalized, "single_word": t.single_word})
            })
            .collect();
        unsafe { *out_json = c_string(serde_json::Value::Array(list).to_string()) };
        Ok(())
    })
}

#[derive(serde::Deserialize)]
struct TokenSpec {
    content: String,
    #[serde(default)]
    special: bool,
    #[serde(default)]
    lstrip: bool,
    #[serde(default)]
    rstrip: bool,
    normalized: Option<bool>,
    #[serde(default)]
    single_word: bool,
}

#[no_mangle]
pub extern "C" fn acctext_add_tokens(tok: *mut AccTextTokenizer, tokens_json: *const c_char, len: usize, added: *mut usize, err: *mut *mut c_char) -> i32 {
    guarded(err, || {
        let text = unsafe { str_in(tokens_json, len, "tokens")? };
        let specs: Vec<TokenSpec> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let tokens = specs
            .into_iter()
            .map(|s| {
                let mut t = AddedToken::from(s.content, s.special).lstrip(s.lstrip).rstrip(s.rstrip).single_word(s.single_word);
                if let Some(n) = s.normalized {
                    t = t.normalized(n);
                }
                t
            })
            .collect();
        let n = unsafe { &(*tok).0 }.add_tokens(tokens)?;
        unsafe { *added = n };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn acctext_train_byte_level_bpe(
    texts: *const *const c_char, text_lens: *const usize, n: usize, vocab_size: usize, min_frequency: usize,
    special_tokens_json: *const c_char, special_len: usize, out_json: *mut *mut c_char, err: *mut *mut c_char,
) -> i32 {
    use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{NormalizerWrapper, TokenizerBuilder, TokenizerImpl};
    guarded(err, || {
        let mut corpus = Vec::with_capacity(n);
        for i in 0..n {
            corpus.push(unsafe { str_in(*texts.add(i), *text_lens.add(i), &format!("text {i}"))? });
        }
        let specials: Vec<String> = serde_json::from_str(unsafe { str_in(special_tokens_json, special_len, "special tokens")? })
            .map_err(|e| format!("special tokens: {e}"))?;
        let mut trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(min_frequency as u64)
            .show_progress(false)
            .special_tokens(specials.into_iter().map(|s| AddedToken::from(s, true)).collect())
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build();
        // GPT-2's layout: no prefix space, offsets trimmed, its split pattern.
        let byte_level = ByteLevel::new(false, true, true);
        let mut tok: TokenizerImpl<BPE, NormalizerWrapper, ByteLevel, ByteLevel, ByteLevel> = TokenizerBuilder::new()
            .with_model(BPE::default())
            .with_normalizer(None)
            .with_pre_tokenizer(Some(byte_level))
            .with_post_processor(Some(byte_level))
            .with_decoder(Some(byte_level))
            .build()
            .map_err(|e| e.to_string())?;
        tok.train(&mut trainer, corpus.into_iter()).map_err(|e| e.to_string())?;
        let text = tok.to_string(true).map_err(|e| e.to_string())?;
        unsafe { *out_json = c_string(text) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn acctext_render_template(
    source: *const c_char, source_len: usize, context_json: *const c_char, context_len: usize, now_unix: i64, fuel: u64,
    out: *mut *mut c_char, out_len: *mut usize, spans: *mut *mut usize, n_spans: *mut usize, err: *mut *mut c_char,
) -> i32 {
    guarded(err, || {
        let source = unsafe { str_in(source, source_len, "the chat template")? };
        let context = unsafe { str_in(context_json, context_len, "the template's variables")? };
        let r = chat::render(source, context, now_unix, fuel)?;
        let n = r.spans.len() / 2;
        let boxed = r.spans.into_boxed_slice();
        unsafe {
            *out_len = r.text.len();
            *out = c_string(r.text);
            *n_spans = n;
            *spans = Box::into_raw(boxed) as *mut usize;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn acctext_spans_free(spans: *mut usize, n_spans: usize) {
    if !spans.is_null() {
        unsafe { drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(spans, 2 * n_spans))) };
    }
}
