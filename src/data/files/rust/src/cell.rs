// Cells of a record batch as C++ reads them (../../table.hpp's Column): strings borrowed from the batch, numbers,
// integer lists, and any cell as the JSON text Python's json.dumps(value, ensure_ascii=False) writes for the value
// `datasets` gives (pyarrow's to_pylist).
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, Field, IntervalUnit, TimeUnit};

/// pyarrow's name of a type (str(pa.DataType)), the form schema() reports.
pub fn type_name(t: &DataType) -> String {
    fn field(f: &Field) -> String {
        format!("{}: {}{}", f.name(), type_name(f.data_type()), if f.is_nullable() { "" } else { " not null" })
    }
    // A list's item as pyarrow names it: Parquet calls it "element", and pyarrow restores Arrow's "item" from the
    // schema it stored in the file (what datasets reports); arrow-rs keeps Parquet's name.
    fn item(f: &Field) -> String {
        if f.name() == "element" {
            format!("item: {}{}", type_name(f.data_type()), if f.is_nullable() { "" } else { " not null" })
        } else {
            field(f)
        }
    }
    fn unit(u: &TimeUnit) -> &'static str {
        match u {
            TimeUnit::Second => "s",
            TimeUnit::Millisecond => "ms",
            TimeUnit::Microsecond => "us",
            TimeUnit::Nanosecond => "ns",
        }
    }
    match t {
        DataType::Null => "null".into(),
        DataType::Boolean => "bool".into(),
        DataType::Int8 => "int8".into(),
        DataType::Int16 => "int16".into(),
        DataType::Int32 => "int32".into(),
        DataType::Int64 => "int64".into(),
        DataType::UInt8 => "uint8".into(),
        DataType::UInt16 => "uint16".into(),
        DataType::UInt32 => "uint32".into(),
        DataType::UInt64 => "uint64".into(),
        DataType::Float16 => "halffloat".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Utf8 => "string".into(),
        DataType::LargeUtf8 => "large_string".into(),
        DataType::Utf8View => "string_view".into(),
        DataType::Binary => "binary".into(),
        DataType::LargeBinary => "large_binary".into(),
        DataType::BinaryView => "binary_view".into(),
        DataType::FixedSizeBinary(n) => format!("fixed_size_binary[{n}]"),
        DataType::Date32 => "date32[day]".into(),
        DataType::Date64 => "date64[ms]".into(),
        DataType::Timestamp(u, None) => format!("timestamp[{}]", unit(u)),
        DataType::Timestamp(u, Some(tz)) => format!("timestamp[{}, tz={}]", unit(u), tz),
        DataType::Time32(u) => format!("time32[{}]", unit(u)),
        DataType::Time64(u) => format!("time64[{}]", unit(u)),
        DataType::Duration(u) => format!("duration[{}]", unit(u)),
        DataType::Interval(IntervalUnit::MonthDayNano) => "month_day_nano_interval".into(),
        DataType::Decimal128(p, s) => format!("decimal128({p}, {s})"),
        DataType::Decimal256(p, s) => format!("decimal256({p}, {s})"),
        DataType::List(f) => format!("list<{}>", item(f)),
        DataType::LargeList(f) => format!("large_list<{}>", item(f)),
        DataType::ListView(f) => format!("list_view<{}>", item(f)),
        DataType::FixedSizeList(f, n) => format!("fixed_size_list<{}>[{n}]", item(f)),
        DataType::Struct(fs) => format!("struct<{}>", fs.iter().map(|f| field(f)).collect::<Vec<_>>().join(", ")),
        DataType::Map(f, _) => match f.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                format!("map<{}, {}>", type_name(kv[0].data_type()), type_name(kv[1].data_type()))
            }
            other => format!("map<{}>", type_name(other)),
        },
        DataType::Dictionary(k, v) => format!("dictionary<values={}, indices={}, ordered=0>", type_name(v), type_name(k)),
        other => format!("{other}").to_lowercase(),
    }
}

fn check(a: &dyn Array, i: usize) -> Result<(), String> {
    if i >= a.len() {
        return Err(format!("row {i} is past the batch's {} rows", a.len()));
    }
    if a.is_null(i) {
        return Err(format!("row {i} is null"));
    }
    Ok(())
}

pub fn str_cell(a: &dyn Array, i: usize) -> Result<&str, String> {
    check(a, i)?;
    match a.data_type() {
        DataType::Utf8 => Ok(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Ok(a.as_string::<i64>().value(i)),
        DataType::Utf8View => Ok(a.as_string_view().value(i)),
        t => Err(format!("is of type {}, not a string", type_name(t))),
    }
}

pub fn i64_cell(a: &dyn Array, i: usize) -> Result<i64, String> {
    check(a, i)?;
    Ok(match a.data_type() {
        DataType::Int8 => a.as_primitive::<Int8Type>().value(i) as i64,
        DataType::Int16 => a.as_primitive::<Int16Type>().value(i) as i64,
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i) as i64,
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i),
        DataType::UInt8 => a.as_primitive::<UInt8Type>().value(i) as i64,
        DataType::UInt16 => a.as_primitive::<UInt16Type>().value(i) as i64,
        DataType::UInt32 => a.as_primitive::<UInt32Type>().value(i) as i64,
        DataType::UInt64 => {
            let v = a.as_primitive::<UInt64Type>().value(i);
            i64::try_from(v).map_err(|_| format!("row {i} holds {v}, above the int64 range"))?
        }
        DataType::Boolean => a.as_boolean().value(i) as i64,
        t => return Err(format!("is of type {}, not an integer", type_name(t))),
    })
}

pub fn f64_cell(a: &dyn Array, i: usize) -> Result<f64, String> {
    check(a, i)?;
    Ok(match a.data_type() {
        DataType::Float16 => a.as_primitive::<Float16Type>().value(i).to_f64(),
        DataType::Float32 => a.as_primitive::<Float32Type>().value(i) as f64,
        DataType::Float64 => a.as_primitive::<Float64Type>().value(i),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i) as f64,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::UInt8 | DataType::UInt16
        | DataType::UInt32 => i64_cell(a, i)? as f64,
        t => return Err(format!("is of type {}, not a number", type_name(t))),
    })
}

pub fn bool_cell(a: &dyn Array, i: usize) -> Result<bool, String> {
    check(a, i)?;
    match a.data_type() {
        DataType::Boolean => Ok(a.as_boolean().value(i)),
        t => Err(format!("is of type {}, not bool", type_name(t))),
    }
}

/// The list at row i (list, large_list, fixed_size_list): its values as one array.
fn list_values(a: &dyn Array, i: usize) -> Option<ArrayRef> {
    match a.data_type() {
        DataType::List(_) => Some(a.as_list::<i32>().value(i)),
        DataType::LargeList(_) => Some(a.as_list::<i64>().value(i)),
        DataType::FixedSizeList(_, _) => Some(a.as_fixed_size_list().value(i)),
        _ => None,
    }
}

pub fn int_list_cell(a: &dyn Array, i: usize) -> Result<Vec<i64>, String> {
    check(a, i)?;
    let v = list_values(a, i).ok_or_else(|| format!("is of type {}, not a list of integers", type_name(a.data_type())))?;
    if v.null_count() > 0 {
        return Err(format!("row {i} has a null in its list"));
    }
    macro_rules! ints {
        ($t:ty) => {
            v.as_primitive::<$t>().values().iter().map(|&x| x as i64).collect()
        };
    }
    Ok(match v.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => v.as_primitive::<Int64Type>().values().to_vec(),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => {
            let mut out = Vec::with_capacity(v.len());
            for &x in v.as_primitive::<UInt64Type>().values().iter() {
                out.push(i64::try_from(x).map_err(|_| format!("row {i} holds {x}, above the int64 range"))?);
            }
            out
        }
        _ => return Err(format!("is of type {}, not a list of integers", type_name(a.data_type()))),
    })
}

/// Python's repr of a float (the shortest text that reads back, fixed notation for 1e-4 <= |x| < 1e16),
/// as json.dumps writes it; NaN and the infinities as json.dumps writes them by default.
pub fn py_float(x: f64, out: &mut String) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    // Rust's {:e} is the shortest round-trip form too: "-1.25e-5". Only the layout differs from Python's.
    let s = format!("{x:e}");
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let n = digits.len() as i32;
    let decpt = exp + 1; // x = 0.DIGITS * 10^decpt
    if neg {
        out.push('-');
    }
    if decpt > -4 && decpt <= 16 {
        if decpt <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat('0').take((-decpt) as usize));
            out.push_str(&digits);
        } else if decpt >= n {
            out.push_str(&digits);
            out.extend(std::iter::repeat('0').take((decpt - n) as usize));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        out.push_str(&format!("e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs()));
    }
}

/// A JSON string as json.dumps(ensure_ascii=False) writes it.
pub fn py_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_list(v: &ArrayRef, out: &mut String) -> Result<(), String> {
    out.push('[');
    for j in 0..v.len() {
        if j > 0 {
            out.push_str(", ");
        }
        json_value(v.as_ref(), j, out)?;
    }
    out.push(']');
    Ok(())
}

/// Row i of `a` as json.dumps(ensure_ascii=False) of pyarrow's to_pylist value.
pub fn json_value(a: &dyn Array, i: usize, out: &mut String) -> Result<(), String> {
    if i >= a.len() {
        return Err(format!("row {i} is past the batch's {} rows", a.len()));
    }
    if a.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    match a.data_type() {
        DataType::Null => out.push_str("null"),
        DataType::Boolean => out.push_str(if a.as_boolean().value(i) { "true" } else { "false" }),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::UInt8 | DataType::UInt16
        | DataType::UInt32 => out.push_str(&i64_cell(a, i)?.to_string()),
        DataType::UInt64 => out.push_str(&a.as_primitive::<UInt64Type>().value(i).to_string()),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => py_float(f64_cell(a, i)?, out),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => py_str(str_cell(a, i)?, out),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            json_list(&list_values(a, i).expect("a list type"), out)?
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            out.push('{');
            for (k, f) in fields.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                py_str(f.name(), out);
                out.push_str(": ");
                json_value(s.column(k).as_ref(), i, out)?;
            }
            out.push('}');
        }
        // pyarrow gives a map as a list of (key, value) tuples: json.dumps writes [[key, value], ...].
        DataType::Map(_, _) => {
            let entries = a.as_map().value(i);
            out.push('[');
            for j in 0..entries.len() {
                if j > 0 {
                    out.push_str(", ");
                }
                out.push('[');
                json_value(entries.column(0).as_ref(), j, out)?;
                out.push_str(", ");
                json_value(entries.column(1).as_ref(), j, out)?;
                out.push(']');
            }
            out.push(']');
        }
        DataType::Dictionary(_, _) => {
            let d = a.as_any_dictionary();
            let key = d.normalized_keys()[i];
            json_value(d.values().as_ref(), key, out)?
        }
        t => {
            return Err(format!(
                "is of type {}, which has no JSON form (json.dumps cannot write the Python value datasets gives)",
                type_name(t)
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: f64) -> String {
        let mut s = String::new();
        py_float(x, &mut s);
        s
    }

    #[test]
    fn floats_as_python_repr() {
        assert_eq!(f(0.0), "0.0");
        assert_eq!(f(-0.0), "-0.0");
        assert_eq!(f(1.0), "1.0");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(0.0001), "0.0001");
        assert_eq!(f(0.00001), "1e-05");
        assert_eq!(f(1e15), "1000000000000000.0");
        assert_eq!(f(1e16), "1e+16");
        assert_eq!(f(1.5e16), "1.5e+16");
        assert_eq!(f(123.456), "123.456");
        assert_eq!(f(0.1f32 as f64), "0.10000000149011612");
        assert_eq!(f(1e-300), "1e-300");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(f64::NEG_INFINITY), "-Infinity");
    }
}
