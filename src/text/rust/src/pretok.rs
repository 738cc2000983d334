//! The pre-tokenizer of a loaded tokenizer.json, with one difference from the crate's own: a `Split` on a
//! regular expression reports the matcher's errors instead of silently ending the split. fancy-regex runs
//! a pattern without look-around wholly on the linear-time `regex` crate; look-around (GPT-2 and Llama-3's
//! `\s+(?!\S)`) runs on its backtracking matcher, bounded by a step limit. The crate's `SysRegex` stops at
//! that limit and keeps the rest of the text as one piece (a wrong encoding, quietly); here it is an error.
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::sync::Arc;
use tokenizers::pattern::Invert;
use tokenizers::{PreTokenizedString, PreTokenizer, PreTokenizerWrapper, Result, SplitDelimiterBehavior};

#[derive(Clone)]
pub enum PreTok {
    Crate(PreTokenizerWrapper),
    Split { regex: Arc<fancy_regex::Regex>, behavior: SplitDelimiterBehavior, invert: bool, json: Value },
    Sequence(Vec<PreTok>),
}

impl PreTok {
    fn from_value(v: Value) -> std::result::Result<PreTok, String> {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "Sequence" {
            let items = v.get("pretokenizers").and_then(Value::as_array).ok_or("Sequence without pretokenizers")?;
            return Ok(PreTok::Sequence(items.iter().cloned().map(PreTok::from_value).collect::<std::result::Result<_, _>>()?));
        }
        if kind == "Split" {
            if let Some(pattern) = v.get("pattern").and_then(|p| p.get("Regex")).and_then(Value::as_str) {
                let behavior: SplitDelimiterBehavior = serde_json::from_value(v.get("behavior").cloned().unwrap_or(Value::Null))
                    .map_err(|e| format!("Split behavior: {e}"))?;
                let invert = v.get("invert").and_then(Value::as_bool).ok_or("Split without invert")?;
                bounded_lookaround(pattern).map_err(|e| format!("Split pattern {pattern:?}: {e}"))?;
                let regex = fancy_regex::Regex::new(pattern).map_err(|e| format!("Split pattern {pattern:?}: {e}"))?;
                return Ok(PreTok::Split { regex: Arc::new(regex), behavior, invert, json: v });
            }
        }
        serde_json::from_value::<PreTokenizerWrapper>(v).map(PreTok::Crate).map_err(|e| e.to_string())
    }
}

/// The step limit bounds backtracking, not the work inside a look-around: `(?=(a+)+$)b` rescans the rest of
/// the text at every position (quadratic: minutes on a long run of 'a'). So each look-around's body must match
/// a bounded length (GPT-2's `(?!\S)` matches one character), which keeps it O(1) per position.
fn bounded_lookaround(pattern: &str) -> std::result::Result<(), String> {
    let b = pattern.as_bytes();
    let (mut i, mut class) = (0, 0usize);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' => class += 1,
            b']' if class > 0 => class -= 1,
            b'(' if class == 0 => {
                let rest = &pattern[i..];
                let head = ["(?=", "(?!", "(?<=", "(?<!"].into_iter().find(|h| rest.starts_with(h));
                if let Some(head) = head {
                    let start = i + head.len();
                    let end = group_end(b, start).ok_or("a look-around is not closed")?;
                    let body = &pattern[start..end];
                    let hir = regex_syntax::Parser::new()
                        .parse(body)
                        .map_err(|_| format!("the look-around body {body:?} is not a plain regular expression (nested look-around or back-reference)"))?;
                    if hir.properties().maximum_len().is_none() {
                        return Err(format!(
                            "the look-around body {body:?} can match unboundedly long text, which would rescan the text at every position; libacc accepts look-arounds of bounded length only (as GPT-2's (?!\\S))"
                        ));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The index of the ')' closing a group whose body starts at `start`, escapes and classes skipped.
fn group_end(b: &[u8], start: usize) -> Option<usize> {
    let (mut depth, mut class, mut i) = (0usize, 0usize, start);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' => class += 1,
            b']' if class > 0 => class -= 1,
            b'(' if class == 0 => depth += 1,
            b')' if class == 0 && depth == 0 => return Some(i),
            b')' if class == 0 => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

impl<'de> Deserialize<'de> for PreTok {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        PreTok::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Serialize for PreTok {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            PreTok::Crate(w) => w.serialize(s),
            PreTok::Split { json, .. } => json.serialize(s),
            PreTok::Sequence(items) => {
                serde_json::json!({"type": "Sequence", "pretokenizers": items.iter()
                    .map(|p| serde_json::to_value(p).unwrap_or(Value::Null)).collect::<Vec<_>>()}).serialize(s)
            }
        }
    }
}

impl PreTokenizer for PreTok {
    fn pre_tokenize(&self, pretokenized: &mut PreTokenizedString) -> Result<()> {
        match self {
            PreTok::Crate(w) => w.pre_tokenize(pretokenized),
            PreTok::Split { regex, behavior, invert, .. } => {
                let regex: &fancy_regex::Regex = regex;
                if *invert {
                    pretokenized.split(|_, s| s.split(Invert(regex), *behavior))
                } else {
                    pretokenized.split(|_, s| s.split(regex, *behavior))
                }
            }
            PreTok::Sequence(items) => items.iter().try_for_each(|p| p.pre_tokenize(pretokenized)),
        }
    }
}
