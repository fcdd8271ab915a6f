//! GGUF file format: a validating reader for versions 2 and 3 and a writer for version 3.
//!
//! Source: the GGUF specification (ggml `docs/gguf.md`, sections "File Structure",
//! "Standardized key-value pairs" for `general.alignment`) and ggml `src/gguf.cpp`.
//!
//! Layout (all integers little-endian):
//! `magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count | kv* | tensor_info* |
//! padding to alignment | tensor data`. Tensor offsets are relative to the start of the
//! data section and must be multiples of the alignment (`general.alignment`, default 32).
//!
//! Every structural violation is reported as a [`GgufError`] naming the key or tensor; the
//! parser never panics and never allocates more than a small multiple of the input size.

pub mod inspect;
mod reader;
pub mod writer;

pub use reader::{GgufFile, GgufHeader, TensorInfo};
pub use writer::{alignment_of, header_bytes, GgufWriter, WriterTensor};

use crate::types::GgmlType;

/// `"GGUF"` as the first four bytes of a file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Maximum number of tensor dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Maximum nesting depth accepted for arrays of arrays.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// The metadata key giving the alignment (must be a non-zero power of two `u32`).
pub const KEY_ALIGNMENT: &str = "general.alignment";

/// Metadata value type ids (`gguf_metadata_value_type` in the GGUF spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgufValueType {
    /// 0: `u8`.
    U8 = 0,
    /// 1: `i8`.
    I8 = 1,
    /// 2: `u16`.
    U16 = 2,
    /// 3: `i16`.
    I16 = 3,
    /// 4: `u32`.
    U32 = 4,
    /// 5: `i32`.
    I32 = 5,
    /// 6: `f32`.
    F32 = 6,
    /// 7: `bool` (one byte, 0 or 1).
    Bool = 7,
    /// 8: string (`u64` length + UTF-8 bytes).
    String = 8,
    /// 9: array (`u32` element type + `u64` count + elements).
    Array = 9,
    /// 10: `u64`.
    U64 = 10,
    /// 11: `i64`.
    I64 = 11,
    /// 12: `f64`.
    F64 = 12,
}

impl GgufValueType {
    /// Maps a type id to the type, `None` if unknown.
    pub fn from_u32(v: u32) -> Option<Self> {
        use GgufValueType as V;
        Some(match v {
            0 => V::U8,
            1 => V::I8,
            2 => V::U16,
            3 => V::I16,
            4 => V::U32,
            5 => V::I32,
            6 => V::F32,
            7 => V::Bool,
            8 => V::String,
            9 => V::Array,
            10 => V::U64,
            11 => V::I64,
            12 => V::F64,
            _ => return None,
        })
    }

    /// Short name as gguf.cpp prints it (`"u8"`, `"str"`, `"arr"`, ...).
    pub fn name(self) -> &'static str {
        use GgufValueType as V;
        match self {
            V::U8 => "u8",
            V::I8 => "i8",
            V::U16 => "u16",
            V::I16 => "i16",
            V::U32 => "u32",
            V::I32 => "i32",
            V::F32 => "f32",
            V::Bool => "bool",
            V::String => "str",
            V::Array => "arr",
            V::U64 => "u64",
            V::I64 => "i64",
            V::F64 => "f64",
        }
    }

    /// Minimum encoded size of one value of this type in bytes (fixed size for scalars,
    /// 8 for a string's length, 12 for an array's header).
    pub fn min_size(self) -> u64 {
        use GgufValueType as V;
        match self {
            V::U8 | V::I8 | V::Bool => 1,
            V::U16 | V::I16 => 2,
            V::U32 | V::I32 | V::F32 => 4,
            V::U64 | V::I64 | V::F64 | V::String => 8,
            V::Array => 12,
        }
    }
}

/// A typed GGUF array. Arrays of arrays carry their own element types.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufArray {
    /// Array of `u8`.
    U8(Vec<u8>),
    /// Array of `i8`.
    I8(Vec<i8>),
    /// Array of `u16`.
    U16(Vec<u16>),
    /// Array of `i16`.
    I16(Vec<i16>),
    /// Array of `u32`.
    U32(Vec<u32>),
    /// Array of `i32`.
    I32(Vec<i32>),
    /// Array of `f32`.
    F32(Vec<f32>),
    /// Array of `bool`.
    Bool(Vec<bool>),
    /// Array of strings.
    String(Vec<String>),
    /// Array of arrays (nested; each inner array may have its own element type).
    Array(Vec<GgufArray>),
    /// Array of `u64`.
    U64(Vec<u64>),
    /// Array of `i64`.
    I64(Vec<i64>),
    /// Array of `f64`.
    F64(Vec<f64>),
}

impl GgufArray {
    /// Element type.
    pub fn elem_type(&self) -> GgufValueType {
        use GgufValueType as V;
        match self {
            GgufArray::U8(_) => V::U8,
            GgufArray::I8(_) => V::I8,
            GgufArray::U16(_) => V::U16,
            GgufArray::I16(_) => V::I16,
            GgufArray::U32(_) => V::U32,
            GgufArray::I32(_) => V::I32,
            GgufArray::F32(_) => V::F32,
            GgufArray::Bool(_) => V::Bool,
            GgufArray::String(_) => V::String,
            GgufArray::Array(_) => V::Array,
            GgufArray::U64(_) => V::U64,
            GgufArray::I64(_) => V::I64,
            GgufArray::F64(_) => V::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::String(v) => v.len(),
            GgufArray::Array(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F64(v) => v.len(),
        }
    }

    /// True if the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Typed array.
    Array(GgufArray),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl GgufValue {
    /// The value's type id.
    pub fn value_type(&self) -> GgufValueType {
        use GgufValueType as V;
        match self {
            GgufValue::U8(_) => V::U8,
            GgufValue::I8(_) => V::I8,
            GgufValue::U16(_) => V::U16,
            GgufValue::I16(_) => V::I16,
            GgufValue::U32(_) => V::U32,
            GgufValue::I32(_) => V::I32,
            GgufValue::F32(_) => V::F32,
            GgufValue::Bool(_) => V::Bool,
            GgufValue::String(_) => V::String,
            GgufValue::Array(_) => V::Array,
            GgufValue::U64(_) => V::U64,
            GgufValue::I64(_) => V::I64,
            GgufValue::F64(_) => V::F64,
        }
    }

    /// The string, if this is a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// Any unsigned or non-negative signed integer value as `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v as u64),
            GgufValue::U16(v) => Some(v as u64),
            GgufValue::U32(v) => Some(v as u64),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

/// Everything that can be wrong with a GGUF file or a GGUF write request.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Opening, mapping or writing the file failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The path names something other than a regular file (a directory, a FIFO, a
    /// device), which would block or not map.
    #[error("{path} is not a regular file ({kind})")]
    NotAFile {
        /// The path.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: magic is {0:02x?}, expected \"GGUF\"")]
    BadMagic([u8; 4]),
    /// The file is a big-endian GGUF (version field byte-swapped); not supported.
    #[error("big-endian GGUF files are not supported (version field {0:#010x})")]
    BigEndian(u32),
    /// Version other than 2 or 3.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends inside a structure.
    #[error("truncated file: {what} needs {needed} bytes at offset {offset}, only {available} left")]
    Truncated {
        /// What was being read (names the key or tensor).
        what: String,
        /// Byte offset in the file.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// A count in the header cannot fit in the rest of the file.
    #[error("{what} count {count} cannot fit in the {remaining} remaining bytes")]
    CountTooLarge {
        /// `"tensor"`, `"metadata key"` or an array context naming the key.
        what: String,
        /// The declared count.
        count: u64,
        /// Bytes left in the file.
        remaining: u64,
    },
    /// A string is not valid UTF-8.
    #[error("{what}: string is not valid UTF-8")]
    InvalidUtf8 {
        /// Which key / tensor name / value.
        what: String,
    },
    /// A bool byte other than 0 or 1.
    #[error("{what}: invalid bool byte {byte}")]
    InvalidBool {
        /// Which key.
        what: String,
        /// The byte.
        byte: u8,
    },
    /// Unknown metadata value type id.
    #[error("{what}: unknown metadata value type {type_id}")]
    UnknownValueType {
        /// Which key.
        what: String,
        /// The id.
        type_id: u32,
    },
    /// Arrays nested deeper than [`MAX_ARRAY_DEPTH`].
    #[error("{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}")]
    NestingTooDeep {
        /// Which key.
        what: String,
    },
    /// The same key appears twice.
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    /// The same tensor name appears twice.
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    /// `general.alignment` is not a `u32` non-zero power of two.
    #[error("invalid general.alignment: {0}")]
    BadAlignment(String),
    /// More than [`MAX_DIMS`] dimensions or zero dimensions.
    #[error("tensor {tensor:?}: {n_dims} dimensions (must be 1..={MAX_DIMS})")]
    BadDimCount {
        /// The tensor.
        tensor: String,
        /// Declared dimension count.
        n_dims: u32,
    },
    /// The tensor type id is not a ggml type.
    #[error("tensor {tensor:?}: unknown ggml type id {type_id}")]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The id.
        type_id: u32,
    },
    /// A dimension is larger than `i64::MAX` (ggml stores dims as `int64_t`).
    #[error("tensor {tensor:?}: dimension {dim} = {value} exceeds i64::MAX")]
    DimTooLarge {
        /// The tensor.
        tensor: String,
        /// Dimension index.
        dim: usize,
        /// Value.
        value: u64,
    },
    /// The row length (`dims[0]`) is not a multiple of the type's block size.
    #[error("tensor {tensor:?}: row length {ne0} is not a multiple of the {ty} block size {block_size}")]
    NotBlockMultiple {
        /// The tensor.
        tensor: String,
        /// Its type.
        ty: GgmlType,
        /// `dims[0]`.
        ne0: u64,
        /// The block size.
        block_size: usize,
    },
    /// Element count or byte size overflows 64 bits (or `i64::MAX` elements).
    #[error("tensor {tensor:?}: element count or byte size overflows (dims {dims:?})")]
    SizeOverflow {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<u64>,
    },
    /// Offset not a multiple of the alignment.
    #[error("tensor {tensor:?}: offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedOffset {
        /// The tensor.
        tensor: String,
        /// Offset relative to the data section.
        offset: u64,
        /// The alignment.
        alignment: u64,
    },
    /// Tensor bytes extend past the end of the file.
    #[error("tensor {tensor:?}: bytes {offset}..{offset}+{size} lie outside the {data_len}-byte data section")]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Offset relative to the data section.
        offset: u64,
        /// Size in bytes.
        size: u64,
        /// Length of the data section.
        data_len: u64,
    },
    /// Two tensors share bytes.
    #[error("tensor {tensor:?} overlaps tensor {other:?}")]
    TensorOverlap {
        /// The tensor.
        tensor: String,
        /// The tensor it overlaps.
        other: String,
    },
    /// Writer: the data length does not match the type and dims.
    #[error("tensor {tensor:?}: {got} data bytes, expected {expected}")]
    DataSizeMismatch {
        /// The tensor.
        tensor: String,
        /// Expected bytes.
        expected: u64,
        /// Given bytes.
        got: u64,
    },
    /// A tensor looked up by name does not exist.
    #[error("no tensor named {0:?}")]
    NoSuchTensor(String),
}
