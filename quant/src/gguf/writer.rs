//! GGUF v3 writer (metadata + tensors, with alignment padding).
//!
//! Layout as in the GGUF spec "File Structure": header, metadata, tensor infos, zero padding
//! to the alignment, then each tensor's bytes, each padded with zeros to the alignment.

use super::reader::{first_duplicate, tensor_sizes};
use super::*;
use std::path::Path;

/// A tensor to write: name, type, dims (innermost first) and its raw bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterTensor {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub ty: GgmlType,
    /// Dimensions, innermost first (1..=4).
    pub dims: Vec<u64>,
    /// Raw data: exactly `row_size(dims[0]) * dims[1] * ...` bytes.
    pub data: Vec<u8>,
}

/// Builds a GGUF v3 file in memory.
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    /// Metadata in the order it will be written. If it contains `general.alignment` (u32, a
    /// power of two), that alignment is used; otherwise 32.
    pub metadata: Vec<(String, GgufValue)>,
    /// Tensors in the order they will be written.
    pub tensors: Vec<WriterTensor>,
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_array(out: &mut Vec<u8>, a: &GgufArray) {
    out.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        GgufArray::U8(v) => out.extend_from_slice(v),
        GgufArray::I8(v) => v.iter().for_each(|x| out.push(*x as u8)),
        GgufArray::U16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::I16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::U32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::I32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::U64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::I64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::F64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgufArray::Bool(v) => v.iter().for_each(|x| out.push(*x as u8)),
        GgufArray::String(v) => v.iter().for_each(|s| put_string(out, s)),
        GgufArray::Array(v) => v.iter().for_each(|a| put_array(out, a)),
    }
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(*x as u8),
        GgufValue::String(s) => put_string(out, s),
        GgufValue::Array(a) => put_array(out, a),
    }
}

fn array_depth(a: &GgufArray) -> usize {
    match a {
        GgufArray::Array(v) => 1 + v.iter().map(array_depth).max().unwrap_or(0),
        _ => 1,
    }
}

fn pad_to(out: &mut Vec<u8>, alignment: u64) {
    let len = out.len() as u64;
    let target = len.div_ceil(alignment) * alignment;
    out.resize(target as usize, 0);
}

impl GgufWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer holding `f`'s metadata and tensors (their data copied), in `f`'s order:
    /// a file to change in a few keys or tensors ([`GgufWriter::set_kv`], `tensors`) and
    /// write again.
    pub fn from_file(f: &GgufFile) -> Self {
        let mut w = Self::new();
        w.metadata = f.metadata().to_vec();
        for t in f.tensors() {
            w.push_tensor(t.name.clone(), t.ty, t.dims.clone(), f.tensor_data(t).to_vec());
        }
        w
    }

    /// Sets metadata entry `key` to `value` in its place (appended if it is new), or
    /// removes it with `None`.
    pub fn set_kv(&mut self, key: &str, value: Option<GgufValue>) -> &mut Self {
        let at = self.metadata.iter().position(|(k, _)| k == key);
        match (at, value) {
            (Some(i), Some(v)) => self.metadata[i].1 = v,
            (Some(i), None) => {
                self.metadata.remove(i);
            }
            (None, Some(v)) => self.metadata.push((key.to_string(), v)),
            (None, None) => {}
        }
        self
    }

    /// Appends a metadata entry.
    pub fn push_kv(&mut self, key: impl Into<String>, value: GgufValue) -> &mut Self {
        self.metadata.push((key.into(), value));
        self
    }

    /// Appends a tensor.
    pub fn push_tensor(&mut self, name: impl Into<String>, ty: GgmlType, dims: Vec<u64>, data: Vec<u8>) -> &mut Self {
        self.tensors.push(WriterTensor { name: name.into(), ty, dims, data });
        self
    }

    /// Alignment that will be used (validated `general.alignment` or 32).
    pub fn alignment(&self) -> Result<u64, GgufError> {
        alignment_of(&self.metadata)
    }

    /// Serializes to GGUF v3 bytes.
    ///
    /// Errors: duplicate keys or tensor names, bad alignment, invalid dims/type combinations,
    /// data of the wrong size, arrays nested deeper than [`MAX_ARRAY_DEPTH`] — everything the
    /// reader would reject.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        for t in &self.tensors {
            let (_, n_bytes) = tensor_sizes(&t.name, t.ty, &t.dims)?;
            if n_bytes != t.data.len() as u64 {
                return Err(GgufError::DataSizeMismatch {
                    tensor: t.name.clone(),
                    expected: n_bytes,
                    got: t.data.len() as u64,
                });
            }
        }
        let infos: Vec<(&str, GgmlType, &[u64])> =
            self.tensors.iter().map(|t| (t.name.as_str(), t.ty, t.dims.as_slice())).collect();
        let mut out = header_bytes(&self.metadata, &infos)?;
        let alignment = self.alignment()?;
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad_to(&mut out, alignment);
        }
        Ok(out)
    }

    /// Writes the file to `path`.
    ///
    /// Errors: as [`GgufWriter::to_bytes`], plus [`GgufError::Io`].
    pub fn write_to(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path.as_ref(), bytes)
            .map_err(|source| GgufError::Io { path: path.as_ref().display().to_string(), source })
    }
}

/// The alignment `metadata` asks for: a valid `general.alignment` (u32, a power of two),
/// else [`DEFAULT_ALIGNMENT`].
///
/// # Errors
/// [`GgufError::BadAlignment`] for a `general.alignment` of another type, zero, or not a
/// power of two.
pub fn alignment_of(metadata: &[(String, GgufValue)]) -> Result<u64, GgufError> {
    match metadata.iter().find(|(k, _)| k == KEY_ALIGNMENT).map(|(_, v)| v) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(GgufValue::U32(a)) if *a != 0 && a.is_power_of_two() => Ok(*a as u64),
        Some(v) => Err(GgufError::BadAlignment(format!("{v:?}"))),
    }
}

/// Everything of a GGUF v3 file before its data section (GGUF spec "File Structure"):
/// magic, version, counts, `metadata`, the tensor infos of `tensors` (name, type, dims
/// innermost first) with offsets for their data in that order, each padded to the
/// alignment ([`alignment_of`]), and zero padding to that alignment. A streaming writer
/// follows it with each tensor's `row_size(dims[0]) * dims[1] * ...` bytes, each padded
/// with zeros to the alignment; [`GgufWriter::to_bytes`] does the same in memory.
///
/// # Errors
/// Duplicate keys or tensor names, a bad alignment, invalid dims/type combinations, arrays
/// nested deeper than [`MAX_ARRAY_DEPTH`].
pub fn header_bytes(
    metadata: &[(String, GgufValue)],
    tensors: &[(&str, GgmlType, &[u64])],
) -> Result<Vec<u8>, GgufError> {
    if let Some(k) = first_duplicate(metadata.iter().map(|(k, _)| k.as_str())) {
        return Err(GgufError::DuplicateKey(k.to_string()));
    }
    if let Some(n) = first_duplicate(tensors.iter().map(|t| t.0)) {
        return Err(GgufError::DuplicateTensor(n.to_string()));
    }
    for (k, v) in metadata {
        if let GgufValue::Array(a) = v {
            if array_depth(a) > MAX_ARRAY_DEPTH {
                return Err(GgufError::NestingTooDeep { what: format!("metadata key {k:?}") });
            }
        }
    }
    let alignment = alignment_of(metadata)?;
    let mut out = Vec::new();
    out.extend_from_slice(&GGUF_MAGIC);
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_string(&mut out, k);
        out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offset = 0u64;
    for &(name, ty, dims) in tensors {
        let (_, n_bytes) = tensor_sizes(name, ty, dims)?;
        put_string(&mut out, name);
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ty.id().to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset += n_bytes.div_ceil(alignment) * alignment;
    }
    pad_to(&mut out, alignment);
    Ok(out)
}
