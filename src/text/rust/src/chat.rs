//! Chat templates rendered as transformers' apply_chat_template renders them (its Jinja environment:
//! trim_blocks, lstrip_blocks, loop controls, Python's methods, its own tojson, raise_exception,
//! strftime_now, and the {% generation %} blocks of return_assistant_tokens_mask).
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, Value};
use std::sync::OnceLock;

use crate::budget;

// {% generation %} is transformers' own tag (its AssistantTracker extension); minijinja has none, so it
// becomes a filter block whose output is wrapped in two noncharacters, removed after rendering.
const GEN_START: char = '\u{FDD0}';
const GEN_END: char = '\u{FDD1}';

fn generation_tags() -> &'static (regex::Regex, regex::Regex) {
    static TAGS: OnceLock<(regex::Regex, regex::Regex)> = OnceLock::new();
    TAGS.get_or_init(|| {
        (
            regex::Regex::new(r"\{%([-+]?)\s*generation\s*([-+]?)%\}").unwrap(),
            regex::Regex::new(r"\{%([-+]?)\s*endgeneration\s*([-+]?)%\}").unwrap(),
        )
    })
}

pub struct Rendered {
    pub text: String,
    pub spans: Vec<usize>,
}

/// A template compiled once into its own environment (transformers compiles each template once too): the
/// latest few are kept, keyed by their text and fuel. strftime_now reads the time of the render in progress.
struct Compiled {
    source: String,
    fuel: u64,
    env: Environment<'static>,
}

const CACHED_TEMPLATES: usize = 16;

thread_local! {
    static NOW_UNIX: std::cell::Cell<i64> = const { std::cell::Cell::new(-1) };
}

fn compile(source: String, fuel: u64) -> Result<Compiled, String> {
    let mut env = Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build().map_err(|e| e.to_string())?,
    );
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(python_formatter);
    if fuel > 0 {
        env.set_fuel(Some(fuel));
    }
    env.add_filter("tojson", tojson);
    env.add_filter("__acc_generation", |s: String| format!("{GEN_START}{s}{GEN_END}"));
    env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {message}")))
    });
    env.add_function("strftime_now", |format: String| -> Result<String, Error> {
        strftime(&format, NOW_UNIX.with(|n| n.get()))
            .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, format!("strftime_now({format:?})")))
    });
    env.add_template_owned("chat", source.clone()).map_err(describe)?;
    Ok(Compiled { source, fuel, env })
}

fn compiled(source: &str, fuel: u64) -> Result<std::sync::Arc<Compiled>, String> {
    use std::sync::{Arc, Mutex};
    static CACHE: OnceLock<Mutex<Vec<Arc<Compiled>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    if let Some(c) = cache.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|c| c.fuel == fuel && c.source == source) {
        return Ok(c.clone());
    }
    let c = Arc::new(compile(source.to_string(), fuel)?);
    let mut guard = cache.lock().unwrap_or_else(|e| e.into_inner());
    if guard.len() >= CACHED_TEMPLATES {
        guard.remove(0);
    }
    guard.push(c.clone());
    Ok(c)
}

pub fn render(source: &str, context: &str, now_unix: i64, fuel: u64) -> Result<Rendered, String> {
    let (start, end) = generation_tags();
    let has_generation = start.is_match(source);
    let source = if has_generation {
        let s = start.replace_all(source, "{%${1} filter __acc_generation ${2}%}");
        end.replace_all(&s, "{%${1} endfilter ${2}%}").into_owned()
    } else {
        source.to_string()
    };
    if has_generation && (context.contains(GEN_START) || context.contains(GEN_END)) {
        return Err("the conversation contains U+FDD0 or U+FDD1, which mark {% generation %} blocks".into());
    }
    let context_len = context.len();
    let context: serde_json::Value = serde_json::from_str(context).map_err(|e| format!("the template's variables: {e}"))?;
    let compiled = compiled(&source, fuel)?;
    let template = compiled.env.get_template("chat").map_err(describe)?;
    NOW_UNIX.with(|n| n.set(now_unix));
    // The fuel charges what the template writes (a unit per 64 bytes); the output has its own bound as well, so that
    // a large budget (a long conversation) cannot write 64 times its fuel before running out.
    let limit = MAX_OUTPUT_BASE + 4 * context_len;
    let mut out = BoundedOutput { text: Vec::new(), limit, exceeded: false };
    // The fuel charges one unit per 64 bytes of the values a template makes, but not every allocation (budget.rs): the
    // memory a rendering may take is bounded as well: what its fuel pays for, its output, and 64 MiB.
    let budget = (64usize << 20)
        .saturating_add(usize::try_from(fuel.saturating_mul(64)).unwrap_or(usize::MAX))
        .saturating_add(limit);
    let rendered = budget::within(budget, || {
        template.render_captured_to(Value::from(minijinja::value::Serde(&context)), &mut out).map(|_| ())
    })
    .map_err(|()| format!("the rendering needs more memory than its budget of {budget} bytes"))?;
    if out.exceeded {
        return Err(format!("the chat template's output exceeds {limit} bytes (64 MiB and 4 bytes per byte of the conversation)"));
    }
    rendered.map_err(describe)?;
    let out = String::from_utf8(out.text).map_err(|_| "the chat template's output is not UTF-8".to_string())?;

    let mut text = String::with_capacity(out.len());
    let mut spans = Vec::new();
    for c in out.chars() {
        match c {
            GEN_START => spans.push(text.len()),
            GEN_END => spans.push(text.len()),
            _ => text.push(c),
        }
    }
    if spans.len() % 2 != 0 {
        return Err("a {% generation %} block is not closed".into());
    }
    Ok(Rendered { text, spans })
}

const MAX_OUTPUT_BASE: usize = 64 << 20;

/// The rendering's output, refusing to grow past `limit` bytes.
struct BoundedOutput {
    text: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.text.len() + buf.len() > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn describe(e: Error) -> String {
    let mut msg = match e.kind() {
        ErrorKind::InvalidOperation => e.detail().map(str::to_string).unwrap_or_else(|| e.to_string()),
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        msg = format!("{msg} (template line {line})");
    }
    msg
}

fn strftime(format: &str, now_unix: i64) -> Option<String> {
    let fmt = std::ffi::CString::new(format).ok()?;
    let t: libc::time_t = if now_unix >= 0 { now_unix as libc::time_t } else { unsafe { libc::time(std::ptr::null_mut()) } };
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    let mut buf = vec![0u8; 256 + format.len() * 8];
    let n = unsafe { libc::strftime(buf.as_mut_ptr() as *mut libc::c_char, buf.len(), fmt.as_ptr(), &tm) };
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

/// What Python's str() prints: Jinja2 renders {{ x }} as str(x).
fn python_formatter(out: &mut minijinja::Output, state: &mut State, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::String | ValueKind::Undefined => minijinja::escape_formatter(out, state, value),
        _ => out.write_str(&python_repr(value, false)).map_err(Error::from),
    }
}

fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's {:e} is the shortest round-trip form, as Python's repr; Python writes it positionally
    // for exponents -4..16 and otherwise as d.ddde+XX.
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

fn python_repr(v: &Value, quoted: bool) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True".into() } else { "False".into() },
        ValueKind::Number => {
            if v.is_integer() { v.to_string() } else { f64::try_from(v.clone()).map(python_float).unwrap_or_else(|_| v.to_string()) }
        }
        ValueKind::String => {
            let s = v.as_str().unwrap_or("");
            if !quoted {
                return s.to_string();
            }
            let q = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
            let mut o = String::from(q);
            for c in s.chars() {
                match c {
                    '\\' => o.push_str("\\\\"),
                    '\n' => o.push_str("\\n"),
                    '\r' => o.push_str("\\r"),
                    '\t' => o.push_str("\\t"),
                    c if c == q => { o.push('\\'); o.push(c) }
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => o.push_str(&format!("\\x{:02x}", c as u32)),
                    c => o.push(c),
                }
            }
            o.push(q);
            o
        }
        ValueKind::Map => {
            let items: Vec<String> = v.try_iter().map(|it| it.map(|k| {
                let val = v.get_item(&k).unwrap_or(Value::UNDEFINED);
                format!("{}: {}", python_repr(&k, true), python_repr(&val, true))
            }).collect()).unwrap_or_default();
            format!("{{{}}}", items.join(", "))
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = v.try_iter().map(|it| it.map(|x| python_repr(&x, true)).collect()).unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        _ => v.to_string(),
    }
}

/// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
/// sort_keys=sort_keys), not Jinja's HTML-safe one.
fn tojson(v: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(i) if i.is_none() => None,
        Some(i) => match i.as_i64() {
            Some(n) => Some(" ".repeat(n.max(0) as usize)),
            None => Some(i.as_str().unwrap_or("").to_string()),
        },
    };
    let (item_sep, key_sep) = match separators {
        Some(s) if !s.is_none() => {
            let a = s.get_item_by_index(0)?.as_str().unwrap_or(",").to_string();
            let b = s.get_item_by_index(1)?.as_str().unwrap_or(":").to_string();
            (a, b)
        }
        _ => (if indent.is_some() { ",".to_string() } else { ", ".to_string() }, ": ".to_string()),
    };
    let d = Dumper { indent, item_sep, key_sep, ensure_ascii: ensure_ascii.unwrap_or(false), sort_keys: sort_keys.unwrap_or(false) };
    let mut out = String::new();
    d.dump(v, 0, &mut out)?;
    Ok(Value::from(out))
}

struct Dumper {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

impl Dumper {
    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c if self.ensure_ascii && (c as u32) > 0x7e => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        out.push_str(&format!("\\u{:04x}", unit));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }

    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(ind) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    }

    fn dump(&self, v: &Value, depth: usize, out: &mut String) -> Result<(), Error> {
        if depth > 256 {
            return Err(Error::new(ErrorKind::InvalidOperation, "tojson: nested too deeply"));
        }
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Undefined => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: an undefined value is not JSON serializable")),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if v.is_integer() {
                    out.push_str(&v.to_string())
                } else {
                    let f = f64::try_from(v.clone())?;
                    out.push_str(&if f.is_nan() { "NaN".into() } else if f.is_infinite() { if f > 0.0 { "Infinity".into() } else { "-Infinity".into() } } else { python_float(f) });
                }
            }
            ValueKind::String => self.string(v.as_str().unwrap_or(""), out),
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.sort_keys {
                    keys.sort_by(|a, b| a.to_string().cmp(&b.to_string()));
                }
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    let key = match k.kind() {
                        ValueKind::String => k.as_str().unwrap_or("").to_string(),
                        _ => python_repr(k, false).to_lowercase_if_keyword(),
                    };
                    self.string(&key, out);
                    out.push_str(&self.key_sep);
                    self.dump(&v.get_item(k)?, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push('}');
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    self.dump(x, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push(']');
            }
            _ => return Err(Error::new(ErrorKind::InvalidOperation, format!("tojson: a {} is not JSON serializable", v.kind()))),
        }
        Ok(())
    }
}

// json.dumps writes the keys True/False/None as "true"/"false"/"null".
trait KeywordKey {
    fn to_lowercase_if_keyword(self) -> String;
}
impl KeywordKey for String {
    fn to_lowercase_if_keyword(self) -> String {
        match self.as_str() {
            "True" => "true".into(),
            "False" => "false".into(),
            "None" => "null".into(),
            _ => self,
        }
    }
}
