//! Quantized weights on the GPU: raw GGUF block bytes (MXFP4's regrouped) uploaded once
//! and read directly by the kernels (`shader-src/shaders/{dequant,get_rows,mul_mat_vec}.comp`,
//! block decoding in `include/quant.glsl`).
//!
//! Mat-vec kernels, fastest first ([`mat_vec_with`] picks by [`MatVecConfig`] and type):
//! block-wise, one subgroup per `rows_per_subgroup` rows with lanes decoding 32-element
//! slices of blocks ([`BLOCK_TYPES`]: `mul_mat_vec_q32.comp`, `mul_mat_vec_k.comp`,
//! `mul_mat_vec_iq.comp`; optionally integer dot, [`DOT_TYPES`]); one workgroup per row
//! with 4 elements per step ([`VEC4_TYPES`], `mul_mat_vec_vec4.comp`); one workgroup per
//! row decoding element by element with `dq()` (every type, `mul_mat_vec.comp`).
//!
//! Layout: a matrix of `rows` rows of `k` elements, GGUF/ggml order (`ne[0] = k` is the
//! contiguous dimension); each row is `k / block_size` blocks, `row_bytes` bytes. MXFP4's
//! blocks are regrouped by 16 in device memory (`mxfp4_layout.rs`); kernels still address
//! them by GGUF byte offset.
//!
//! By concept: the types and their kernels here; [`QMatrix`], dequantize and get_rows in
//! `matrix.rs`; MXFP4's device layout in `mxfp4_layout.rs`; the mat-vecs (with their fused
//! epilogues and norm) in `mat_vec.rs`, the expert-indexed one of a mixture-of-experts
//! step ([`mat_vec_id`]) in `mat_vec_id.rs`; the Q8_1 activation quantizer in `q8_1.rs`;
//! the mat-mats in `mat_mat.rs`, the expert-grouped one of a mixture-of-experts prompt
//! ([`mat_mat_id`]) in `mat_mat_id.rs`; [`linear`], the one entry that picks among them, in
//! `linear.rs`.

mod linear;
mod mat_mat;
mod mat_mat_id;
mod mat_vec;
mod mat_vec_id;
mod matrix;
pub mod mxfp4_layout;
mod q8_1;
mod quantize;

pub use linear::*;
pub use mat_mat::*;
pub use mat_mat_id::*;
pub use mat_vec::*;
pub use mat_vec_id::*;
pub use matrix::*;
pub use q8_1::*;
pub use quantize::*;

use vkml_hal::{BufferArg, Device, MemoryKind, PipelineOptions, Stream};
use vkml_quant::GgmlType;

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};
use crate::nn::GluActivation;
use crate::tuning::{self, MatVecConfig, ELEMENTWISE_WORKGROUP};

/// Types with GPU dequantize, get_rows and mat-vec kernels today.
pub const SUPPORTED: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

/// Types with a vectorised mat-vec kernel (`mul_mat_vec_vec4.comp`, decoders in
/// `include/quant_vec4.glsl`).
pub const VEC4_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// The 32-element types of the block-wise mat-vec kernel `mul_mat_vec_q32.comp` (a lane
/// decodes whole blocks).
pub const Q32_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0];

/// Types with a block-wise mat-vec kernel: one subgroup per `rows_per_subgroup` rows, each
/// lane decoding 32-element slices of blocks with 32-bit loads, subgroup add at the end
/// (see [`MatVecConfig::subgroup_rows`]). The kernel per type ([`block_kernel`]):
/// [`Q32_TYPES`] in `mul_mat_vec_q32.comp`; the K-quants (256-element super-blocks, 8 lanes
/// each) in `mul_mat_vec_k.comp`; the code-book, FP4, ternary/binary and IQ2/IQ3 grid
/// types in `mul_mat_vec_iq.comp` (launch scheme in `include/mul_mat_vec_block.glsl`). The
/// other [`SUPPORTED`] types use the per-workgroup kernels `mul_mat_vec_vec4.comp` /
/// `mul_mat_vec.comp`: F32, F16, BF16, Q8_1, and IQ1_S and IQ1_M, whose 2048-entry grid
/// as an indexed constant array makes lavapipe's compile of an unrolled block kernel take
/// many minutes (a shared-memory copy of the grids needs a workgroup barrier, with which
/// lavapipe compiled the grid kernels far too slowly as well).
pub const BLOCK_TYPES: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
];

/// The block-wise mat-vec kernel (`file.variant`) for `ty`, `None` for types not in
/// [`BLOCK_TYPES`].
pub fn block_kernel(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::Q4_0 => "mul_mat_vec_q32.q4_0",
        GgmlType::Q4_1 => "mul_mat_vec_q32.q4_1",
        GgmlType::Q5_0 => "mul_mat_vec_q32.q5_0",
        GgmlType::Q5_1 => "mul_mat_vec_q32.q5_1",
        GgmlType::Q8_0 => "mul_mat_vec_q32.q8_0",
        GgmlType::Q2_K => "mul_mat_vec_k.q2_k",
        GgmlType::Q3_K => "mul_mat_vec_k.q3_k",
        GgmlType::Q4_K => "mul_mat_vec_k.q4_k",
        GgmlType::Q5_K => "mul_mat_vec_k.q5_k",
        GgmlType::Q6_K => "mul_mat_vec_k.q6_k",
        GgmlType::Q8_K => "mul_mat_vec_k.q8_k",
        GgmlType::IQ4_NL => "mul_mat_vec_iq.iq4_nl",
        GgmlType::IQ4_XS => "mul_mat_vec_iq.iq4_xs",
        GgmlType::MXFP4 => "mul_mat_vec_iq.mxfp4",
        GgmlType::NVFP4 => "mul_mat_vec_iq.nvfp4",
        GgmlType::TQ1_0 => "mul_mat_vec_iq.tq1_0",
        GgmlType::TQ2_0 => "mul_mat_vec_iq.tq2_0",
        GgmlType::Q1_0 => "mul_mat_vec_iq.q1_0",
        GgmlType::Q2_0 => "mul_mat_vec_iq.q2_0",
        GgmlType::IQ2_XXS => "mul_mat_vec_iq.iq2_xxs",
        GgmlType::IQ2_XS => "mul_mat_vec_iq.iq2_xs",
        GgmlType::IQ2_S => "mul_mat_vec_iq.iq2_s",
        GgmlType::IQ3_XXS => "mul_mat_vec_iq.iq3_xxs",
        GgmlType::IQ3_S => "mul_mat_vec_iq.iq3_s",
        _ => return None,
    })
}

/// Types with an integer-dot mat-vec kernel (`mul_mat_vec_dot.comp`): Q4_0 and Q8_0, their
/// quants straight into the packed dot products, and MXFP4, its codes' magnitudes by bit
/// arithmetic, negated bytewise by their signs (where
/// [`crate::tuning::MatVecConfig::integer_dot_mxfp4`]).
pub const DOT_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::MXFP4];

/// Most batch columns one mat-vec dispatch handles (`MAX_BATCH` in the shader).
pub const MAX_MAT_VEC_BATCH: usize = 8;

/// The per-type kernels of one GGML type, by the names the shader build gives them
/// (`<file>.<variant>`, the variant the type's lower-case name): [`type_kernels`]. A
/// kernel a type lacks (`mul_mat_vec_vec4` outside [`VEC4_TYPES`], the cooperative-matrix
/// mat-mats outside their types) fails at `Device::kernel`, naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeKernels {
    /// `dequant.comp`.
    pub dequant: &'static str,
    /// `get_rows.comp`: a table in one binding.
    pub get_rows: &'static str,
    /// `get_rows_parts.comp`: a table in up to [`GET_ROWS_PARTS`] bindings.
    pub get_rows_parts: &'static str,
    /// `mul_mat_vec.comp`: one workgroup per row, shared-memory reduction.
    pub mul_mat_vec: &'static str,
    /// `mul_mat_vec.comp` with subgroup reduction.
    pub mul_mat_vec_sg: &'static str,
    /// `mul_mat_vec_vec4.comp`: 4 elements per step, shared-memory reduction.
    pub mul_mat_vec_vec4: &'static str,
    /// `mul_mat_vec_vec4.comp` with subgroup reduction.
    pub mul_mat_vec_vec4_sg: &'static str,
    /// `mul_mat_q.comp` ([`MatMatPath::Scalar`]).
    pub mul_mat_q: &'static str,
    /// `mul_mat_cm.comp` ([`MatMatPath::CoopMat`], 128 rows).
    pub mul_mat_cm: &'static str,
    /// `mul_mat_cm256.comp` ([`MatMatPath::CoopMat`], 256 rows).
    pub mul_mat_cm256: &'static str,
    /// `mul_mat_cm2.comp` ([`MatMatPath::CoopMat2`]).
    pub mul_mat_cm2: &'static str,
    /// `mul_mat_cm_i8.comp` ([`MatMatPath::CoopMatInt8`]).
    pub mul_mat_cm_i8: &'static str,
}

macro_rules! type_kernels {
    ($v:literal) => {
        TypeKernels {
            dequant: concat!("dequant.", $v),
            get_rows: concat!("get_rows.", $v),
            get_rows_parts: concat!("get_rows_parts.", $v),
            mul_mat_vec: concat!("mul_mat_vec.", $v),
            mul_mat_vec_sg: concat!("mul_mat_vec.", $v, "_sg"),
            mul_mat_vec_vec4: concat!("mul_mat_vec_vec4.", $v),
            mul_mat_vec_vec4_sg: concat!("mul_mat_vec_vec4.", $v, "_sg"),
            mul_mat_q: concat!("mul_mat_q.", $v),
            mul_mat_cm: concat!("mul_mat_cm.", $v),
            mul_mat_cm256: concat!("mul_mat_cm256.", $v),
            mul_mat_cm2: concat!("mul_mat_cm2.", $v),
            mul_mat_cm_i8: concat!("mul_mat_cm_i8.", $v),
        }
    };
}

/// The kernels of `ty` ([`TypeKernels`]).
///
/// # Errors
/// [`OpsError::UnsupportedType`] (naming `op` and the [`SUPPORTED`] types) for a type
/// without kernels.
pub fn type_kernels(op: &'static str, ty: GgmlType) -> Result<TypeKernels> {
    Ok(match ty {
        GgmlType::F32 => type_kernels!("f32"),
        GgmlType::F16 => type_kernels!("f16"),
        GgmlType::BF16 => type_kernels!("bf16"),
        GgmlType::Q4_0 => type_kernels!("q4_0"),
        GgmlType::Q4_1 => type_kernels!("q4_1"),
        GgmlType::Q5_0 => type_kernels!("q5_0"),
        GgmlType::Q5_1 => type_kernels!("q5_1"),
        GgmlType::Q8_0 => type_kernels!("q8_0"),
        GgmlType::Q8_1 => type_kernels!("q8_1"),
        GgmlType::Q2_K => type_kernels!("q2_k"),
        GgmlType::Q3_K => type_kernels!("q3_k"),
        GgmlType::Q4_K => type_kernels!("q4_k"),
        GgmlType::Q5_K => type_kernels!("q5_k"),
        GgmlType::Q6_K => type_kernels!("q6_k"),
        GgmlType::Q8_K => type_kernels!("q8_k"),
        GgmlType::IQ4_NL => type_kernels!("iq4_nl"),
        GgmlType::IQ4_XS => type_kernels!("iq4_xs"),
        GgmlType::MXFP4 => type_kernels!("mxfp4"),
        GgmlType::NVFP4 => type_kernels!("nvfp4"),
        GgmlType::TQ1_0 => type_kernels!("tq1_0"),
        GgmlType::TQ2_0 => type_kernels!("tq2_0"),
        GgmlType::Q1_0 => type_kernels!("q1_0"),
        GgmlType::Q2_0 => type_kernels!("q2_0"),
        GgmlType::IQ2_XXS => type_kernels!("iq2_xxs"),
        GgmlType::IQ2_XS => type_kernels!("iq2_xs"),
        GgmlType::IQ2_S => type_kernels!("iq2_s"),
        GgmlType::IQ3_XXS => type_kernels!("iq3_xxs"),
        GgmlType::IQ3_S => type_kernels!("iq3_s"),
        GgmlType::IQ1_S => type_kernels!("iq1_s"),
        GgmlType::IQ1_M => type_kernels!("iq1_m"),
        ty => {
            let supported = SUPPORTED.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
            return Err(OpsError::UnsupportedType { op, ty, supported });
        }
    })
}
