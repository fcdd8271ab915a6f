//! The validating GGUF v2/v3 reader.

use super::*;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// One tensor's header entry, validated against the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Tensor name (UTF-8, unique in the file).
    pub name: String,
    /// Dimensions, innermost (row length, `ne[0]`) first, 1..=4 of them.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Byte offset relative to the start of the data section (multiple of the alignment).
    pub offset: u64,
    /// Number of elements (product of `dims`).
    pub n_elements: u64,
    /// Size of the tensor's data in bytes (`row_size(dims[0]) * dims[1] * ...`).
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Row length (`dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows (product of `dims[1..]`).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> u64 {
        self.ty.row_size(self.row_len()).unwrap_or(0)
    }
}

/// Everything in a GGUF file except the tensor data: version, metadata (in file order),
/// tensor infos and the position of the data section.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Metadata key/value pairs in file order (keys unique).
    pub metadata: Vec<(String, GgufValue)>,
    /// Tensor infos in file order (names unique).
    pub tensors: Vec<TensorInfo>,
    /// Alignment in bytes (`general.alignment` or 32).
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
    /// Length of the data section (file length minus `data_offset`).
    pub data_len: u64,
    key_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        let n = n as usize; // n <= remaining <= usize::MAX
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        // Bounded by the remaining bytes before anything is allocated.
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::InvalidUtf8 { what: what() })
    }

    fn count(&mut self, n: u64, min_size: u64, what: &dyn Fn() -> String) -> Result<usize, GgufError> {
        let remaining = self.remaining();
        match n.checked_mul(min_size) {
            Some(need) if need <= remaining => Ok(n as usize),
            _ => Err(GgufError::CountTooLarge { what: what(), count: n, remaining }),
        }
    }

    fn value_type(&mut self, what: &dyn Fn() -> String) -> Result<GgufValueType, GgufError> {
        let id = self.u32(what)?;
        GgufValueType::from_u32(id).ok_or_else(|| GgufError::UnknownValueType { what: what(), type_id: id })
    }

    fn scalar_vec<T, const N: usize>(
        &mut self,
        n: usize,
        what: &dyn Fn() -> String,
        f: fn([u8; N]) -> T,
    ) -> Result<Vec<T>, GgufError> {
        let bytes = self.take(n as u64 * N as u64, what)?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect())
    }

    fn bool(b: u8, what: &dyn Fn() -> String) -> Result<bool, GgufError> {
        match b {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(GgufError::InvalidBool { what: what(), byte }),
        }
    }

    fn array_value(&mut self, depth: usize, what: &dyn Fn() -> String) -> Result<GgufArray, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep { what: what() });
        }
        let et = self.value_type(what)?;
        let n = self.u64(what)?;
        let n = self.count(n, et.min_size(), &|| format!("{} array", what()))?;
        use GgufValueType as V;
        Ok(match et {
            V::U8 => GgufArray::U8(self.take(n as u64, what)?.to_vec()),
            V::I8 => GgufArray::I8(self.scalar_vec::<i8, 1>(n, what, |b| b[0] as i8)?),
            V::U16 => GgufArray::U16(self.scalar_vec(n, what, u16::from_le_bytes)?),
            V::I16 => GgufArray::I16(self.scalar_vec(n, what, i16::from_le_bytes)?),
            V::U32 => GgufArray::U32(self.scalar_vec(n, what, u32::from_le_bytes)?),
            V::I32 => GgufArray::I32(self.scalar_vec(n, what, i32::from_le_bytes)?),
            V::F32 => GgufArray::F32(self.scalar_vec(n, what, f32::from_le_bytes)?),
            V::U64 => GgufArray::U64(self.scalar_vec(n, what, u64::from_le_bytes)?),
            V::I64 => GgufArray::I64(self.scalar_vec(n, what, i64::from_le_bytes)?),
            V::F64 => GgufArray::F64(self.scalar_vec(n, what, f64::from_le_bytes)?),
            V::Bool => {
                let bytes = self.take(n as u64, what)?;
                let mut v = Vec::with_capacity(n);
                for &b in bytes {
                    v.push(Self::bool(b, what)?);
                }
                GgufArray::Bool(v)
            }
            V::String => {
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(self.string(&|| format!("{}[{i}]", what()))?);
                }
                GgufArray::String(v)
            }
            V::Array => {
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(self.array_value(depth + 1, &|| format!("{}[{i}]", what()))?);
                }
                GgufArray::Array(v)
            }
        })
    }

    fn value(&mut self, ty: GgufValueType, what: &dyn Fn() -> String) -> Result<GgufValue, GgufError> {
        use GgufValueType as V;
        Ok(match ty {
            V::U8 => GgufValue::U8(self.array::<1>(what)?[0]),
            V::I8 => GgufValue::I8(self.array::<1>(what)?[0] as i8),
            V::U16 => GgufValue::U16(u16::from_le_bytes(self.array(what)?)),
            V::I16 => GgufValue::I16(i16::from_le_bytes(self.array(what)?)),
            V::U32 => GgufValue::U32(u32::from_le_bytes(self.array(what)?)),
            V::I32 => GgufValue::I32(i32::from_le_bytes(self.array(what)?)),
            V::F32 => GgufValue::F32(f32::from_le_bytes(self.array(what)?)),
            V::U64 => GgufValue::U64(u64::from_le_bytes(self.array(what)?)),
            V::I64 => GgufValue::I64(i64::from_le_bytes(self.array(what)?)),
            V::F64 => GgufValue::F64(f64::from_le_bytes(self.array(what)?)),
            V::Bool => GgufValue::Bool(Self::bool(self.array::<1>(what)?[0], what)?),
            V::String => GgufValue::String(self.string(what)?),
            V::Array => GgufValue::Array(self.array_value(0, what)?),
        })
    }
}

/// Validates a tensor's type/dims and returns `(n_elements, n_bytes)`.
pub(crate) fn tensor_sizes(name: &str, ty: GgmlType, dims: &[u64]) -> Result<(u64, u64), GgufError> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(GgufError::BadDimCount { tensor: name.to_string(), n_dims: dims.len() as u32 });
    }
    for (i, &d) in dims.iter().enumerate() {
        if d > i64::MAX as u64 {
            return Err(GgufError::DimTooLarge { tensor: name.to_string(), dim: i, value: d });
        }
    }
    let ne0 = dims[0];
    if !ne0.is_multiple_of(ty.block_size() as u64) {
        return Err(GgufError::NotBlockMultiple { tensor: name.to_string(), ty, ne0, block_size: ty.block_size() });
    }
    let overflow = || GgufError::SizeOverflow { tensor: name.to_string(), dims: dims.to_vec() };
    let mut n_elements: u64 = 1;
    for &d in dims {
        n_elements = n_elements.checked_mul(d).ok_or_else(overflow)?;
    }
    if n_elements > i64::MAX as u64 {
        return Err(overflow());
    }
    let mut n_bytes = ty.row_size(ne0).ok_or_else(overflow)?;
    for &d in &dims[1..] {
        n_bytes = n_bytes.checked_mul(d).ok_or_else(overflow)?;
    }
    if n_bytes > i64::MAX as u64 {
        return Err(overflow());
    }
    Ok((n_elements, n_bytes))
}

impl GgufHeader {
    /// Parses and validates the header of a complete GGUF file held in `bytes` (the whole file:
    /// tensor bounds are checked against `bytes.len()`). Never panics.
    ///
    /// Errors: any [`GgufError`] describing the first violation found.
    pub fn parse(bytes: &[u8]) -> Result<GgufHeader, GgufError> {
        let mut c = Cursor { buf: bytes, pos: 0 };
        let magic: [u8; 4] = c.array(&|| "magic".to_string())?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic(magic));
        }
        let version = c.u32(&|| "version".to_string())?;
        if version & 0xFFFF == 0 && version != 0 {
            return Err(GgufError::BigEndian(version));
        }
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = c.u64(&|| "tensor count".to_string())?;
        let n_kv = c.u64(&|| "metadata key count".to_string())?;
        // minimum sizes: kv = 8 (key len) + 4 (type) + 1; tensor info = 8 + 4 + 8 + 4 + 8
        let n_kv = c.count(n_kv, 13, &|| "metadata key".to_string())?;
        let mut metadata = Vec::with_capacity(n_kv);
        let mut key_index = HashMap::with_capacity(n_kv);
        for i in 0..n_kv {
            let key = c.string(&|| format!("metadata key #{i}"))?;
            let what = || format!("metadata key {key:?}");
            let ty = c.value_type(&what)?;
            let value = c.value(ty, &what)?;
            if key_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::DuplicateKey(key));
            }
            metadata.push((key, value));
        }
        let alignment = match key_index.get(KEY_ALIGNMENT).map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(GgufValue::U32(a)) if *a != 0 && a.is_power_of_two() => *a as u64,
            Some(GgufValue::U32(a)) => {
                return Err(GgufError::BadAlignment(format!("{a} is not a non-zero power of two")))
            }
            Some(v) => return Err(GgufError::BadAlignment(format!("type {} (must be u32)", v.value_type().name()))),
        };
        let n_tensors = c.count(n_tensors, 32, &|| "tensor".to_string())?;
        let mut tensors = Vec::with_capacity(n_tensors);
        let mut tensor_index = HashMap::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let name = c.string(&|| format!("tensor #{i} name"))?;
            let what = || format!("tensor {name:?}");
            let n_dims = c.u32(&what)?;
            if n_dims == 0 || n_dims as usize > MAX_DIMS {
                return Err(GgufError::BadDimCount { tensor: name, n_dims });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64(&what)?);
            }
            let type_id = c.u32(&what)?;
            let ty = GgmlType::try_from(type_id)
                .map_err(|_| GgufError::UnknownTensorType { tensor: name.clone(), type_id })?;
            let offset = c.u64(&what)?;
            let (n_elements, n_bytes) = tensor_sizes(&name, ty, &dims)?;
            if offset % alignment != 0 {
                return Err(GgufError::MisalignedOffset { tensor: name, offset, alignment });
            }
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return Err(GgufError::DuplicateTensor(name));
            }
            tensors.push(TensorInfo { name, dims, ty, offset, n_elements, n_bytes });
        }
        let header_end = c.pos as u64;
        let file_len = bytes.len() as u64;
        // Data section starts at the next multiple of the alignment. A file without tensors
        // may end before it.
        let data_offset = header_end
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| GgufError::BadAlignment("data offset overflows".to_string()))?;
        let data_len = file_len.saturating_sub(data_offset);
        // With tensors present the file must reach the data section, even if all are empty.
        if let Some(t) = tensors.first() {
            if data_offset > file_len {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    size: t.n_bytes,
                    data_len: 0,
                });
            }
        }
        for t in &tensors {
            let end = t.offset.checked_add(t.n_bytes);
            if end.is_none_or(|e| e > data_len) {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    size: t.n_bytes,
                    data_len,
                });
            }
        }
        // No two non-empty tensors may share bytes.
        let mut order: Vec<usize> = (0..tensors.len()).filter(|&i| tensors[i].n_bytes > 0).collect();
        order.sort_by_key(|&i| tensors[i].offset);
        for w in order.windows(2) {
            let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
            if a.offset + a.n_bytes > b.offset {
                return Err(GgufError::TensorOverlap { tensor: b.name.clone(), other: a.name.clone() });
            }
        }
        Ok(GgufHeader { version, metadata, tensors, alignment, data_offset, data_len, key_index, tensor_index })
    }

    /// Looks up a metadata value by key.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Looks up a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of tensor `t` inside `file` (the same complete file bytes passed to
    /// [`GgufHeader::parse`]); zero-copy. Returns an empty slice if `file` is not that file
    /// (bounds were validated at parse time, so this never panics for the right file).
    pub fn tensor_data<'a>(&self, file: &'a [u8], t: &TensorInfo) -> &'a [u8] {
        let start = self.data_offset.saturating_add(t.offset);
        let end = start.saturating_add(t.n_bytes);
        match (usize::try_from(start), usize::try_from(end)) {
            (Ok(s), Ok(e)) if s <= e && e <= file.len() => &file[s..e],
            _ => &[],
        }
    }
}

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

/// A parsed GGUF file with its bytes (memory-mapped or owned). Tensor data is exposed as
/// zero-copy `&[u8]` views.
pub struct GgufFile {
    header: GgufHeader,
    data: Backing,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.header.version)
            .field("n_kv", &self.header.metadata.len())
            .field("n_tensors", &self.header.tensors.len())
            .field("bytes", &self.bytes().len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses the file at `path` (read-only).
    ///
    /// Errors: [`GgufError::NotAFile`] for a directory, FIFO, socket or device (refused
    /// before opening, which would block on a FIFO); [`GgufError::Io`] if it cannot be
    /// opened or mapped, otherwise as [`GgufHeader::parse`].
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.display().to_string(), source };
        // Checked before opening: opening a FIFO for reading blocks until a writer comes.
        let ft = std::fs::metadata(path).map_err(io)?.file_type();
        if !ft.is_file() {
            let kind = if ft.is_dir() { "a directory" } else { "a FIFO, socket or device" };
            return Err(GgufError::NotAFile { path: path.display().to_string(), kind });
        }
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            // mmap of an empty file fails on some platforms; an empty file is just truncated.
            return Self::from_vec(Vec::new());
        }
        // SAFETY: the mapping is read-only and private to this process. As with any mmap, a
        // concurrent truncation of the file by another process could fault on access; GGUF
        // model files are treated as immutable while open, which is the documented contract
        // of `GgufFile::open`.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let header = GgufHeader::parse(&map)?;
        Ok(GgufFile { header, data: Backing::Mmap(map) })
    }

    /// Parses a file held in memory (takes ownership; no copy).
    pub fn from_vec(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        let header = GgufHeader::parse(&bytes)?;
        Ok(GgufFile { header, data: Backing::Owned(bytes) })
    }

    /// Parses a copy of `bytes`. For zero-copy parsing of a borrowed slice use
    /// [`GgufHeader::parse`] and [`GgufHeader::tensor_data`].
    pub fn from_bytes(bytes: &[u8]) -> Result<GgufFile, GgufError> {
        Self::from_vec(bytes.to_vec())
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }

    /// The parsed header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.header.metadata
    }

    /// Looks up a metadata value.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.header.get(key)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// Alignment of the data section.
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Zero-copy view of a tensor's bytes (`n_bytes` long).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        self.header.tensor_data(self.bytes(), t)
    }

    /// Zero-copy view of the tensor named `name`.
    ///
    /// Errors: [`GgufError::NoSuchTensor`].
    pub fn tensor_data_by_name(&self, name: &str) -> Result<(&TensorInfo, &[u8]), GgufError> {
        let t = self.header.tensor(name).ok_or_else(|| GgufError::NoSuchTensor(name.to_string()))?;
        Ok((t, self.tensor_data(t)))
    }

    /// Dequantizes a whole tensor to `f32` (row-major, `n_elements` values).
    ///
    /// Errors: [`GgufError::NoSuchTensor`]; size errors cannot occur for a parsed file.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, GgufError> {
        let (t, data) = self.tensor_data_by_name(name)?;
        crate::dequant::dequantize_to_vec(t.ty, data).map_err(|_| GgufError::DataSizeMismatch {
            tensor: t.name.clone(),
            expected: t.n_bytes,
            got: data.len() as u64,
        })
    }
}

/// Names seen twice in `names` (helper for writers/tests).
pub(crate) fn first_duplicate<'a>(names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = HashSet::new();
    names.into_iter().find(|n| !seen.insert(*n))
}
