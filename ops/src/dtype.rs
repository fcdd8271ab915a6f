//! [`Dtype`]: the element type of the buffers an op reads and writes.

use vkml_hal::Device;

use crate::error::{OpsError, Result};

/// The kernel of a per-dtype shader variant as a literal: `dtype_kernel!("unary.", dt)` is
/// `"unary.f32"` for [`Dtype::F32`], `"unary.f16"` for [`Dtype::F16`], ... (the shader
/// build's `<file>.<variant>` names, one variant per dtype); `dtype_kernel!("strided_copy.",
/// a, "_", b)` names a variant per pair of dtypes.
macro_rules! dtype_kernel {
    ($prefix:literal, $dt:expr) => {
        match $dt {
            $crate::Dtype::F32 => concat!($prefix, "f32"),
            $crate::Dtype::F16 => concat!($prefix, "f16"),
            $crate::Dtype::BF16 => concat!($prefix, "bf16"),
            $crate::Dtype::F64 => concat!($prefix, "f64"),
            $crate::Dtype::U8 => concat!($prefix, "u8"),
            $crate::Dtype::U32 => concat!($prefix, "u32"),
            $crate::Dtype::I64 => concat!($prefix, "i64"),
        }
    };
    ($prefix:literal, $a:expr, $sep:literal, $b:expr) => {
        match $a {
            $crate::Dtype::F32 => $crate::dtype::dtype_kernel!(@then $prefix "f32" $sep, $b),
            $crate::Dtype::F16 => $crate::dtype::dtype_kernel!(@then $prefix "f16" $sep, $b),
            $crate::Dtype::BF16 => $crate::dtype::dtype_kernel!(@then $prefix "bf16" $sep, $b),
            $crate::Dtype::F64 => $crate::dtype::dtype_kernel!(@then $prefix "f64" $sep, $b),
            $crate::Dtype::U8 => $crate::dtype::dtype_kernel!(@then $prefix "u8" $sep, $b),
            $crate::Dtype::U32 => $crate::dtype::dtype_kernel!(@then $prefix "u32" $sep, $b),
            $crate::Dtype::I64 => $crate::dtype::dtype_kernel!(@then $prefix "i64" $sep, $b),
        }
    };
    (@then $prefix:literal $a:literal $sep:literal, $b:expr) => {
        match $b {
            $crate::Dtype::F32 => concat!($prefix, $a, $sep, "f32"),
            $crate::Dtype::F16 => concat!($prefix, $a, $sep, "f16"),
            $crate::Dtype::BF16 => concat!($prefix, $a, $sep, "bf16"),
            $crate::Dtype::F64 => concat!($prefix, $a, $sep, "f64"),
            $crate::Dtype::U8 => concat!($prefix, $a, $sep, "u8"),
            $crate::Dtype::U32 => concat!($prefix, $a, $sep, "u32"),
            $crate::Dtype::I64 => concat!($prefix, $a, $sep, "i64"),
        }
    };
}
pub(crate) use dtype_kernel;

/// Element type of an op's buffers: candle's dtypes F32, F16, BF16, F64, U8, U32, I64.
///
/// The transformer ops (`nn`, `attention`) and the activations of the quantized kernels
/// take [`Dtype::F32`] or [`Dtype::F16`] only ([`OpsError::Shape`] otherwise); the
/// element-wise, reduction, indexing and matmul ops take every dtype (see each op).
/// Kernels compute f16 and bf16 in f32: values are widened exactly on load and rounded
/// to nearest even on store (the `half` crate's bits). Parameter buffers of the
/// transformer ops (norm weight and bias, the softmax mask, rope cos/sin tables) stay
/// f32; the KV cache is always f16 ([`crate::attention::KvCache`]).
///
/// Device features each dtype needs (`Capabilities::types`), else
/// [`OpsError::MissingFeature`]: F16 and BF16 `storageBuffer16BitAccess` (not for
/// [`crate::attention::kv_append`]); U8 `storageBuffer8BitAccess`; I64 `shaderInt64`;
/// F64 `shaderFloat64` and `shaderInt64`. `shaderFloat16` is never needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dtype {
    /// IEEE 754 binary32, 4 bytes.
    #[default]
    F32,
    /// IEEE 754 binary16, 2 bytes (`half::f16`).
    F16,
    /// bfloat16 (the top half of an f32), 2 bytes (`half::bf16`).
    BF16,
    /// IEEE 754 binary64, 8 bytes.
    F64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 => 1,
            Dtype::F16 | Dtype::BF16 => 2,
            Dtype::F32 | Dtype::U32 => 4,
            Dtype::F64 | Dtype::I64 => 8,
        }
    }

    /// Lower-case name (`f32`, `bf16`, `u8`, ...), as in kernel variant names.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::BF16 => "bf16",
            Dtype::F64 => "f64",
            Dtype::U8 => "u8",
            Dtype::U32 => "u32",
            Dtype::I64 => "i64",
        }
    }

    /// Every dtype.
    pub const ALL: [Dtype; 7] = [Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::F64, Dtype::U8, Dtype::U32, Dtype::I64];

    /// Whether this is a floating-point type (F32, F16, BF16, F64).
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64)
    }

    /// `v` rounded to this dtype as candle's `T::from_f64` does (the `half` crate for F16
    /// and BF16, `as f32` for F32), returned as f64; unchanged for F64 and the integers.
    pub fn round_f64(self, v: f64) -> f64 {
        match self {
            Dtype::F16 => half::f16::from_f64(v).to_f64(),
            Dtype::BF16 => half::bf16::from_f64(v).to_f64(),
            Dtype::F32 => f64::from(v as f32),
            _ => v,
        }
    }

    /// Checks that `dev` can load and store this type in storage buffers (the features
    /// in the type's docs).
    pub(crate) fn require(self, dev: &Device, op: &'static str) -> Result<()> {
        let t = &dev.caps().types;
        let missing = |feature, needed_for| Err(OpsError::MissingFeature { op, feature, needed_for });
        match self {
            Dtype::F16 if !t.storage_buffer_16bit => missing("storageBuffer16BitAccess", "f16 buffers"),
            Dtype::BF16 if !t.storage_buffer_16bit => missing("storageBuffer16BitAccess", "bf16 buffers"),
            Dtype::U8 if !t.storage_buffer_8bit => missing("storageBuffer8BitAccess", "u8 buffers"),
            Dtype::I64 if !t.int64 => missing("shaderInt64", "i64 buffers"),
            Dtype::F64 if !t.float64 => missing("shaderFloat64", "f64 buffers"),
            Dtype::F64 if !t.int64 => missing("shaderInt64", "f64 buffers (conversions on the bits)"),
            _ => Ok(()),
        }
    }

    /// As [`Dtype::require`], for the ops whose kernels exist for F32 and F16 only (the
    /// transformer ops and the activations of the quantized kernels).
    pub(crate) fn require_activation(self, dev: &Device, op: &'static str) -> Result<()> {
        if !matches!(self, Dtype::F32 | Dtype::F16) {
            return Err(OpsError::Shape {
                op,
                reason: format!("{} activations are not supported (f32 or f16)", self.name()),
            });
        }
        self.require(dev, op)
    }
}
