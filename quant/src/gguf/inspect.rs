//! Text rendering of a GGUF file for `vkml gguf inspect FILE`.

use super::{GgufArray, GgufFile, GgufHeader, GgufValue};
use std::fmt::Write;

/// Longest string value shown in full; longer ones are cut with `…`.
const MAX_STR: usize = 80;
/// Array elements shown before `…`.
const MAX_ELEMS: usize = 8;

fn fmt_str(s: &str) -> String {
    if s.chars().count() > MAX_STR {
        let cut: String = s.chars().take(MAX_STR).collect();
        format!("{cut:?}… ({} bytes)", s.len())
    } else {
        format!("{s:?}")
    }
}

fn fmt_array(a: &GgufArray) -> String {
    fn items<T>(v: &[T], f: impl Fn(&T) -> String) -> String {
        let mut parts: Vec<String> = v.iter().take(MAX_ELEMS).map(f).collect();
        if v.len() > MAX_ELEMS {
            parts.push("…".to_string());
        }
        parts.join(", ")
    }
    let body = match a {
        GgufArray::U8(v) => items(v, |x| x.to_string()),
        GgufArray::I8(v) => items(v, |x| x.to_string()),
        GgufArray::U16(v) => items(v, |x| x.to_string()),
        GgufArray::I16(v) => items(v, |x| x.to_string()),
        GgufArray::U32(v) => items(v, |x| x.to_string()),
        GgufArray::I32(v) => items(v, |x| x.to_string()),
        GgufArray::F32(v) => items(v, |x| x.to_string()),
        GgufArray::U64(v) => items(v, |x| x.to_string()),
        GgufArray::I64(v) => items(v, |x| x.to_string()),
        GgufArray::F64(v) => items(v, |x| x.to_string()),
        GgufArray::Bool(v) => items(v, |x| x.to_string()),
        GgufArray::String(v) => items(v, |s| fmt_str(s)),
        GgufArray::Array(v) => items(v, fmt_array),
    };
    format!("[{}; {}] [{}]", a.elem_type().name(), a.len(), body)
}

/// One metadata value as shown by `inspect` (strings quoted and cut at 80 characters, arrays
/// as `[type; len] [first 8 elements, …]`).
pub fn format_value(v: &GgufValue) -> String {
    match v {
        GgufValue::U8(x) => x.to_string(),
        GgufValue::I8(x) => x.to_string(),
        GgufValue::U16(x) => x.to_string(),
        GgufValue::I16(x) => x.to_string(),
        GgufValue::U32(x) => x.to_string(),
        GgufValue::I32(x) => x.to_string(),
        GgufValue::F32(x) => x.to_string(),
        GgufValue::U64(x) => x.to_string(),
        GgufValue::I64(x) => x.to_string(),
        GgufValue::F64(x) => x.to_string(),
        GgufValue::Bool(x) => x.to_string(),
        GgufValue::String(s) => fmt_str(s),
        GgufValue::Array(a) => fmt_array(a),
    }
}

/// Renders the header of a GGUF file: version, alignment, data offset, every metadata key
/// (`key  type  value`) and a tensor table (`name  type  shape  bytes  offset`), followed by
/// totals. Output ends with a newline.
pub fn render_header(h: &GgufHeader) -> String {
    let mut s = String::new();
    let total: u64 = h.tensors.iter().map(|t| t.n_bytes).sum();
    let _ = writeln!(s, "GGUF version {}", h.version);
    let _ = writeln!(s, "alignment:   {}", h.alignment);
    let _ = writeln!(s, "data offset: {}", h.data_offset);
    let _ = writeln!(s);
    let _ = writeln!(s, "metadata ({} keys):", h.metadata.len());
    let kw = h.metadata.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &h.metadata {
        let _ = writeln!(s, "  {k:<kw$}  {:<4}  {}", v.value_type().name(), format_value(v));
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "tensors ({}, {} bytes):", h.tensors.len(), total);
    let shapes: Vec<String> = h
        .tensors
        .iter()
        .map(|t| format!("[{}]", t.dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")))
        .collect();
    let nw = h.tensors.iter().map(|t| t.name.len()).max().unwrap_or(0).max(4);
    let sw = shapes.iter().map(|x| x.len()).max().unwrap_or(0).max(5);
    let _ = writeln!(s, "  {:<nw$}  {:<7}  {:<sw$}  {:>12}  {:>12}", "name", "type", "shape", "bytes", "offset");
    for (t, shape) in h.tensors.iter().zip(&shapes) {
        let _ = writeln!(
            s,
            "  {:<nw$}  {:<7}  {:<sw$}  {:>12}  {:>12}",
            t.name,
            t.ty.to_string(),
            shape,
            t.n_bytes,
            t.offset
        );
    }
    s
}

/// Renders `gguf inspect` output for an opened file (see [`render_header`]).
pub fn render(file: &GgufFile) -> String {
    render_header(file.header())
}
