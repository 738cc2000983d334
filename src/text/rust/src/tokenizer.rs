//! A tokenizer.json loaded as transformers' fast tokenizers load it, shared by many threads.
use crate::pretok::PreTok;
use std::sync::{Arc, Mutex, RwLock};
use tokenizers::{
    pad_encodings, AddedToken, DecoderWrapper, EncodeInput, Encoding, ModelWrapper, NormalizerWrapper,
    PaddingDirection, PaddingParams, PaddingStrategy, PostProcessorWrapper, TokenizerImpl, TruncationDirection,
    TruncationParams, TruncationStrategy,
};

pub type Tok = TokenizerImpl<ModelWrapper, NormalizerWrapper, PreTok, PostProcessorWrapper, DecoderWrapper>;
pub type Res<T> = std::result::Result<T, String>;

/// The crate keeps truncation inside the tokenizer (transformers sets it before each call); a tokenizer
/// shared by threads cannot be changed per call, so each truncation setting gets its own copy, made once.
pub struct Handle {
    base: RwLock<Arc<Tok>>,
    // (the setting, the base it was copied from, the copy): a copy of an older base is never used.
    truncating: Mutex<Vec<(String, Arc<Tok>, Arc<Tok>)>>,
}

pub struct EncodeOptions {
    pub add_special_tokens: bool,
    pub overflowing: bool,
    pub truncation: Option<TruncationParams>,
    pub padding: Option<PaddingParams>,
    pub threads: usize,
    /// false: encode_fast, which skips the offsets (a sixth of the time of tokenizing a dataset)
    pub offsets: bool,
}

/// Look-around that only a backtracking matcher runs is accepted only where its errors are reported
/// (PreTok's Split); a Replace normalizer or decoder would swallow them, so there the pattern must be linear.
fn check_replace_patterns(v: &serde_json::Value, at: &str) -> Res<()> {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("type").and_then(|t| t.as_str()) == Some("Replace") {
                if let Some(p) = m.get("pattern").and_then(|p| p.get("Regex")).and_then(|r| r.as_str()) {
                    regex::Regex::new(p).map_err(|_| {
                        format!("{at}: the Replace pattern {p:?} needs a backtracking matcher (look-around or back-references), which libacc does not run on data")
                    })?;
                }
            }
            m.iter().try_for_each(|(k, x)| check_replace_patterns(x, &format!("{at}.{k}")))
        }
        serde_json::Value::Array(a) => a.iter().enumerate().try_for_each(|(i, x)| check_replace_patterns(x, &format!("{at}[{i}]"))),
        _ => Ok(()),
    }
}

/// A BPE model's merges checked before the crate builds them: its builder concatenates each pair in a buffer as
/// long as the longest token and slices continuing_subword_prefix's bytes off the second part, so a merge whose
/// result is longer than every token panics there, and a second part shorter than the prefix, or cut by it inside a
/// character, makes invalid UTF-8 (its from_utf8_unchecked). Such a merge's result is never in the vocabulary:
/// refused here, naming it.
fn check_bpe_merges(model: &serde_json::Value) -> Res<()> {
    let (Some(vocab), Some(merges)) = (model.get("vocab").and_then(|v| v.as_object()), model.get("merges").and_then(|m| m.as_array()))
    else {
        return Ok(());
    };
    let prefix = model.get("continuing_subword_prefix").and_then(|p| p.as_str()).unwrap_or("");
    for (i, m) in merges.iter().enumerate() {
        let (a, b) = match m {
            serde_json::Value::Array(p) if p.len() == 2 => match (p[0].as_str(), p[1].as_str()) {
                (Some(a), Some(b)) => (a, b),
                _ => continue,
            },
            serde_json::Value::String(line) => match line.split(' ').collect::<Vec<_>>()[..] {
                [a, b] => (a, b),
                _ => continue,
            },
            _ => continue,
        };
        if !vocab.contains_key(a) || !vocab.contains_key(b) {
            continue; // the crate's own error names the token
        }
        let Some(rest) = b.get(prefix.len()..) else {
            return Err(format!("model.merges[{i}] ({a:?}, {b:?}): {b:?} does not hold the continuing_subword_prefix {prefix:?}"));
        };
        let merged = format!("{a}{rest}");
        if !vocab.contains_key(&merged) {
            return Err(format!("model.merges[{i}] ({a:?}, {b:?}): the merged token {merged:?} is not in the vocabulary"));
        }
    }
    Ok(())
}

impl Handle {
    pub fn from_json(text: &str, overrides: &str) -> Res<Handle> {
        let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if !overrides.is_empty() {
            let o: serde_json::Value = serde_json::from_str(overrides).map_err(|e| format!("overrides: {e}"))?;
            let (Some(root), Some(o)) = (value.as_object_mut(), o.as_object()) else { return Err("expected a JSON object".into()) };
            for (key, v) in o {
                match (key.as_str(), root.get_mut("model").and_then(|m| m.as_object_mut())) {
                    ("model", Some(model)) => {
                        for (field, x) in v.as_object().into_iter().flatten() {
                            model.insert(field.clone(), x.clone());
                        }
                    }
                    ("model", None) => return Err("no model object".into()),
                    _ => {
                        root.insert(key.clone(), v.clone());
                    }
                }
            }
        }
        if let Some(model) = value.get("model") {
            check_bpe_merges(model)?;
        }
        for key in ["normalizer", "decoder"] {
            if let Some(v) = value.get(key) {
                check_replace_patterns(v, key)?;
            }
        }
        let mut tok: Tok = serde_json::from_value(value).map_err(|e| e.to_string())?;
        // transformers sets truncation and padding on every call, replacing what the file holds.
        tok.with_truncation(None).map_err(|e| e.to_string())?;
        tok.with_padding(None);
        Ok(Handle { base: RwLock::new(Arc::new(tok)), truncating: Mutex::new(Vec::new()) })
    }

    pub fn base(&self) -> Arc<Tok> {
        self.base.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn for_truncation(&self, t: &Option<TruncationParams>) -> Res<Arc<Tok>> {
        let base = self.base();
        let Some(t) = t else { return Ok(base) };
        let key = format!("{t:?}");
        let mut cache = self.truncating.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, copy)) = cache.iter().find(|(k, from, _)| *k == key && Arc::ptr_eq(from, &base)) {
            return Ok(copy.clone());
        }
        let mut copy: Tok = (*base).clone();
        copy.with_truncation(Some(t.clone())).map_err(|e| e.to_string())?;
        let copy = Arc::new(copy);
        cache.retain(|(k, from, _)| *k != key && Arc::ptr_eq(from, &base));
        if cache.len() >= 8 {
            cache.remove(0);
        }
        cache.push((key, base, copy.clone()));
        Ok(copy)
    }

    pub fn encode(&self, inputs: Vec<EncodeInput<'_>>, o: &EncodeOptions) -> Res<Vec<Encoding>> {
        if let (true, Some(t)) = (o.overflowing, &o.truncation) {
            return self.encode_windows(inputs, t, o);
        }
        let tok = self.for_truncation(&o.truncation)?;
        let encode_one = |i: &EncodeInput<'_>| {
            let r = if o.offsets { tok.encode(i.clone(), o.add_special_tokens) } else { tok.encode_fast(i.clone(), o.add_special_tokens) };
            r.map_err(|e| e.to_string())
        };
        let encode_all = |items: &[EncodeInput<'_>]| -> Res<Vec<Encoding>> { items.iter().map(encode_one).collect() };
        let mut out = if o.threads <= 1 || inputs.len() < 2 {
            encode_all(&inputs)?
        } else {
            // rayon's work stealing on a pool kept per thread count (texts differ in length; equal shares left a
            // thread idle, and threads made per call cost more than short batches take).
            use rayon::prelude::*;
            pool(o.threads)?.install(|| {
                inputs.par_iter().map(encode_one).collect::<Res<Vec<_>>>()
            })?
        };
        if let Some(p) = &o.padding {
            pad_encodings(&mut out, p).map_err(|e| e.to_string())?;
        }
        Ok(out)
    }

    /// return_overflowing_tokens. The crate (0.23.2) post-processes a truncated encoding's overflowing windows
    /// wrongly (most are lost in TemplateProcessing), where Python's tokenizers 0.23.3 keeps each; so the
    /// windows are cut here (the crate's own truncate_encodings) and each is post-processed alone, giving the
    /// rows transformers gives: each input's windows in order, a pair's windows after the first sequence's.
    fn encode_windows(&self, inputs: Vec<EncodeInput<'_>>, t: &TruncationParams, o: &EncodeOptions) -> Res<Vec<Encoding>> {
        let base = self.base();
        let mut raw: Tok = (*base).clone();
        raw.with_post_processor(None::<PostProcessorWrapper>);
        let mut out = Vec::new();
        for input in inputs {
            let (first, second) = match input {
                EncodeInput::Single(a) => (a, None),
                EncodeInput::Dual(a, b) => (a, Some(b)),
            };
            let enc = raw.encode(first, false).map_err(|e| e.to_string())?;
            let pair = second.map(|b| raw.encode(b, false)).transpose().map_err(|e| e.to_string())?;
            let added = if o.add_special_tokens {
                base.get_post_processor().map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, pair.is_some()))
            } else {
                0
            };
            let params = TruncationParams { max_length: t.max_length.saturating_sub(added), ..t.clone() };
            let (mut enc, mut pair) = tokenizers::truncate_encodings(enc, pair, &params).map_err(|e| e.to_string())?;
            let mut firsts = vec![];
            let rest = enc.take_overflowing();
            firsts.push(enc);
            firsts.extend(rest);
            let seconds: Vec<Option<Encoding>> = match pair.as_mut() {
                None => vec![None],
                Some(p) => {
                    let rest = p.take_overflowing();
                    std::iter::once(Some(p.clone())).chain(rest.into_iter().map(Some)).collect()
                }
            };
            let mut rows = Vec::new();
            for f in &firsts {
                for s in &seconds {
                    rows.push(base.post_process(f.clone(), s.clone(), o.add_special_tokens).map_err(|e| e.to_string())?);
                }
            }
            let mut rows = rows.into_iter();
            let mut head = rows.next().ok_or("no encoding")?;
            head.set_overflowing(rows.collect());
            out.push(head);
        }
        if let Some(p) = &o.padding {
            pad_encodings(&mut out, p).map_err(|e| e.to_string())?;
        }
        Ok(out)
    }

    pub fn set_post_processor(&self, pp: PostProcessorWrapper) -> Res<()> {
        let mut guard = self.base.write().unwrap_or_else(|e| e.into_inner());
        let mut tok: Tok = (**guard).clone();
        tok.with_post_processor(Some(pp));
        *guard = Arc::new(tok);
        Ok(())
    }

    pub fn add_tokens(&self, tokens: Vec<AddedToken>) -> Res<usize> {
        let mut guard = self.base.write().unwrap_or_else(|e| e.into_inner());
        let mut tok: Tok = (**guard).clone();
        let (special, plain): (Vec<_>, Vec<_>) = tokens.into_iter().partition(|t| t.special);
        let added = tok.add_special_tokens(special).map_err(|e| e.to_string())?
            + tok.add_tokens(plain).map_err(|e| e.to_string())?;
        *guard = Arc::new(tok);
        Ok(added)
    }
}

/// A rayon pool of `threads` threads, made once per count (at most a few counts are ever asked for).
fn pool(threads: usize) -> Res<Arc<rayon::ThreadPool>> {
    static POOLS: std::sync::OnceLock<Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>>> = std::sync::OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(Vec::new()));
    let mut guard = pools.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = guard.iter().find(|(n, _)| *n == threads) {
        return Ok(p.clone());
    }
    let p = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| e.to_string())?);
    if guard.len() >= 8 {
        guard.remove(0);
    }
    guard.push((threads, p.clone()));
    Ok(p)
}

pub fn truncation(strategy: u8, left: bool, max_length: usize, stride: usize) -> TruncationParams {
    TruncationParams {
        direction: if left { TruncationDirection::Left } else { TruncationDirection::Right },
        max_length,
        strategy: match strategy {
            1 => TruncationStrategy::OnlyFirst,
            2 => TruncationStrategy::OnlySecond,
            _ => TruncationStrategy::LongestFirst,
        },
        stride,
    }
}

pub fn padding(mode: u8, left: bool, length: usize, multiple: usize, pad_id: u32, pad_type_id: u32, pad_token: String) -> Option<PaddingParams> {
    let strategy = match mode {
        1 => PaddingStrategy::BatchLongest,
        2 => PaddingStrategy::Fixed(length),
        _ => return None,
    };
    Some(PaddingParams {
        strategy,
        direction: if left { PaddingDirection::Left } else { PaddingDirection::Right },
        pad_to_multiple_of: (multiple > 0).then_some(multiple),
        pad_id,
        pad_type_id,
        pad_token,
    })
}
