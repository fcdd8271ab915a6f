//! CPU quantization, byte-identical to ggml's reference quantizers (`quantize_row_*_ref` in ggml
//! `src/ggml-quants.c`, no importance matrix).
//!
//! Supported: every non-IQ block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q6_K, Q8_K,
//! TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0), IQ4_NL and IQ4_XS, plus the float types F32, F16,
//! BF16 and F64. The other IQ types need ggml's search tables and importance matrices and are
//! not provided; integer types are not quantization targets.
//!
//! Float operations are evaluated in the same order as ggml's C code so that rounding matches.
//! One file per family: `legacy.rs`, `kquants.rs`, `low_bit.rs`, `fp4.rs`, `iq4.rs`; the
//! shared rounding helpers and the entry points here.
//! Inputs may be any finite floats; NaN/inf inputs produce unspecified (but memory-safe,
//! panic-free) blocks, as in ggml.

// Loops index several parallel arrays the way ggml's C code does; iterator chains would
// obscure the correspondence with the reference.
#![allow(clippy::needless_range_loop)]

use crate::blocks::*;
use crate::dequant::{e8m0_to_f32_half, get_scale_min_k4, ue4m3_to_f32};
use crate::tables::{KVALUES_FP4, KVALUES_IQ4NL};
use crate::types::{GgmlType, QK_K};
use crate::QuantError;
use half::f16;

const GROUP_MAX_EPS: f32 = 1e-15;

/// `nearest_int` from ggml-quants.c: round-to-nearest-even through the `1.5 * 2^23` trick.
/// Exact for `|fval| <= 4194303`; garbage (but no panic) beyond.
#[inline]
pub fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12582912.0;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

#[inline]
fn fp16(x: f32) -> f16 {
    f16::from_f32(x)
}

/// ggml `GGML_FP32_TO_BF16` (`ggml_compute_fp32_to_bf16`): round to nearest even, NaN quieted.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// ggml `ggml_fp32_to_ue4m3` (src/ggml-impl.h): positive float to unsigned E4M3 (bias 7).
pub fn f32_to_ue4m3(mut x: f32) -> u8 {
    // `!(x > 0)` also catches NaN.
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    if x > 448.0 {
        x = 448.0;
    }
    let bits = x.to_bits();
    let fp32_exp = ((bits >> 23) & 0xFF) as i32 - 127;
    let fp32_man = ((bits >> 20) & 0x7) as i32;
    let mut e = fp32_exp + 7;
    if e <= 0 {
        let man = (x * 512.0 + 0.5) as i32;
        let man = man.min(7);
        if man < 1 {
            return 0;
        }
        return man as u8;
    }
    if e >= 15 {
        return 0x7E;
    }
    let round_bit = ((bits >> 19) & 1) as i32;
    let mut m = fp32_man + round_bit;
    if m > 7 {
        m = 0;
        e += 1;
        if e >= 15 {
            return 0x7E;
        }
    }
    ((e << 3) | m) as u8
}

/// Per-block reference quantization (`quantize_row_*_ref` for one block).
pub trait Quantize: Block {
    /// Quantizes `x[..Self::ELEMS]` into one block.
    fn quantize(x: &[f32]) -> Self;
}

fn absmax_signed(x: &[f32]) -> (f32, f32) {
    let mut amax = 0f32;
    let mut max = 0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

mod fp4;
mod iq4;
mod kquants;
mod legacy;
mod low_bit;

use iq4::{quantize_row_iq4_nl, quantize_row_iq4_xs};

fn quant_blocks<B: Quantize>(x: &[f32], out: &mut Vec<u8>) {
    for xb in x.chunks_exact(B::ELEMS) {
        out.extend_from_slice(bytemuck::bytes_of(&B::quantize(xb)));
    }
}

fn quant_row_with<B: Block>(x: &[f32], out: &mut Vec<u8>, f: fn(&[f32], &mut [B])) {
    let mut blocks = vec![B::zeroed(); x.len() / B::ELEMS];
    f(x, &mut blocks);
    out.extend_from_slice(bytemuck::cast_slice(&blocks));
}

/// Quantizes `x` (f32, length a multiple of `ty.block_size()`) to `ty`'s bytes, exactly as
/// ggml's `quantize_row_*_ref` does (`ggml_quantize_chunk` without imatrix for IQ4_NL/IQ4_XS).
///
/// Returns `x.len() / block_size * type_size` bytes (little-endian block layout).
///
/// Errors: [`QuantError::PartialBlock`] if `x.len()` is not a multiple of the block size;
/// [`QuantError::Unsupported`] for integer types and the IQ types other than IQ4_NL/IQ4_XS.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Result<Vec<u8>, QuantError> {
    if !x.len().is_multiple_of(ty.block_size()) {
        return Err(QuantError::PartialBlock { ty, n_bytes: x.len() });
    }
    let mut out = Vec::with_capacity(x.len() / ty.block_size() * ty.type_size());
    use GgmlType as T;
    match ty {
        T::F32 => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        T::F16 => x.iter().for_each(|v| out.extend_from_slice(&fp16(*v).to_le_bytes())),
        T::BF16 => x.iter().for_each(|v| out.extend_from_slice(&f32_to_bf16_bits(*v).to_le_bytes())),
        T::F64 => x.iter().for_each(|v| out.extend_from_slice(&(*v as f64).to_le_bytes())),
        T::Q4_0 => quant_blocks::<BlockQ4_0>(x, &mut out),
        T::Q4_1 => quant_blocks::<BlockQ4_1>(x, &mut out),
        T::Q5_0 => quant_blocks::<BlockQ5_0>(x, &mut out),
        T::Q5_1 => quant_blocks::<BlockQ5_1>(x, &mut out),
        T::Q8_0 => quant_blocks::<BlockQ8_0>(x, &mut out),
        T::Q8_1 => quant_blocks::<BlockQ8_1>(x, &mut out),
        T::Q2_K => quant_blocks::<BlockQ2K>(x, &mut out),
        T::Q3_K => quant_blocks::<BlockQ3K>(x, &mut out),
        T::Q4_K => quant_blocks::<BlockQ4K>(x, &mut out),
        T::Q5_K => quant_blocks::<BlockQ5K>(x, &mut out),
        T::Q6_K => quant_blocks::<BlockQ6K>(x, &mut out),
        T::Q8_K => quant_blocks::<BlockQ8K>(x, &mut out),
        T::TQ1_0 => quant_blocks::<BlockTq1_0>(x, &mut out),
        T::TQ2_0 => quant_blocks::<BlockTq2_0>(x, &mut out),
        T::MXFP4 => quant_blocks::<BlockMxfp4>(x, &mut out),
        T::NVFP4 => quant_blocks::<BlockNvfp4>(x, &mut out),
        T::Q1_0 => quant_blocks::<BlockQ1_0>(x, &mut out),
        T::Q2_0 => quant_blocks::<BlockQ2_0>(x, &mut out),
        T::IQ4_NL => quant_row_with::<BlockIq4Nl>(x, &mut out, quantize_row_iq4_nl),
        T::IQ4_XS => quant_row_with::<BlockIq4Xs>(x, &mut out, quantize_row_iq4_xs),
        T::I8 | T::I16 | T::I32 | T::I64 => return Err(QuantError::Unsupported(ty)),
        T::IQ2_XXS | T::IQ2_XS | T::IQ3_XXS | T::IQ1_S | T::IQ3_S | T::IQ2_S | T::IQ1_M => {
            return Err(QuantError::Unsupported(ty))
        }
    }
    Ok(out)
}

/// Quantizes activations to Q8_1 blocks (`quantize_row_q8_1_ref`); `x.len()` must be a
/// multiple of 32.
pub fn quantize_q8_1(x: &[f32]) -> Result<Vec<BlockQ8_1>, QuantError> {
    if !x.len().is_multiple_of(32) {
        return Err(QuantError::PartialBlock { ty: GgmlType::Q8_1, n_bytes: x.len() });
    }
    Ok(x.chunks_exact(32).map(BlockQ8_1::quantize).collect())
}

/// Quantizes activations to Q8_K blocks (`quantize_row_q8_K_ref`); `x.len()` must be a
/// multiple of 256.
pub fn quantize_q8_k(x: &[f32]) -> Result<Vec<BlockQ8K>, QuantError> {
    if !x.len().is_multiple_of(QK_K) {
        return Err(QuantError::PartialBlock { ty: GgmlType::Q8_K, n_bytes: x.len() });
    }
    Ok(x.chunks_exact(QK_K).map(BlockQ8K::quantize).collect())
}

/// Documented accuracy of [`quantize`] followed by dequantization, per type.
///
/// Returns `(group, factor, floor)`: for every group of `group` consecutive elements with
/// largest magnitude `A`, every element satisfies `|x - dequant(quant(x))| <= factor * A +
/// floor`, provided the inputs are finite with `|x| <= 1e3` (so that f16 / UE4M3 / E8M0 scales
/// neither overflow nor, for NVFP4, underflow below the floor). The factors are the format's
/// half-step (or clamp) error plus the f16 rounding of the scales, with margin; measured
/// worst cases on random data are a few percent below them. One exception: under Q2_K an
/// exact zero is unbounded within its 16-element sub-block's range, because ggml's Q2_K fit
/// (ggml-quants.c `quantize_row_q2_K_ref`, reproduced here) weights each element by `|x|`.
/// The floors cover scales that f16 stores as subnormals (below 2^-14, so groups with `A`
/// below about 2^-14 times the largest code): such a scale is rounded to a multiple of
/// 2^-24, an absolute error of up to 2^-25 that the codes multiply.
/// `None` for types without a quantizer. Checked by the proptests in
/// `quant/tests/roundtrip.rs`.
pub fn error_bound(ty: GgmlType) -> Option<(usize, f32, f32)> {
    use GgmlType as T;
    let b = ty.block_size();
    Some(match ty {
        T::F32 => (1, 0.0, 0.0),
        T::F64 => (1, 0.0, 0.0),
        T::F16 => (1, 1.0 / 2048.0, 1e-7),
        T::BF16 => (1, 1.0 / 256.0, 1e-30),
        // Floors: the largest code times scale (and min) product, times the f16 rounding
        // of a subnormal scale (`f16_scale_floor`).
        T::Q4_0 => (b, 0.13, f16_scale_floor(8)),
        T::Q4_1 => (b, 0.07, f16_scale_floor(15 + 1)),
        T::Q5_0 => (b, 0.065, f16_scale_floor(16)),
        T::Q5_1 => (b, 0.035, f16_scale_floor(31 + 1)),
        T::Q8_0 | T::Q8_1 => (b, 0.0085, f16_scale_floor(128)),
        T::Q8_K => (b, 0.0045, 0.0),
        T::Q2_K => (b, 0.45, f16_scale_floor(15 * 3 + 15)),
        T::Q3_K => (b, 0.30, f16_scale_floor(32 * 4)),
        T::Q4_K => (b, 0.13, f16_scale_floor(63 * 15 + 63)),
        T::Q5_K => (b, 0.11, f16_scale_floor(63 * 31 + 63)),
        T::Q6_K => (b, 0.08, f16_scale_floor(128 * 32)),
        T::IQ4_NL => (b, 0.15, f16_scale_floor(127)),
        T::IQ4_XS => (b, 0.23, f16_scale_floor(32 * 127)),
        T::TQ1_0 | T::TQ2_0 => (b, 0.51, f16_scale_floor(1)),
        T::Q2_0 => (b, 0.51, f16_scale_floor(2)),
        // E8M0 scales are powers of two: no rounding, only the FP4 grid's.
        T::MXFP4 => (b, 0.26, 1e-6),
        T::NVFP4 => (16, 0.26, 6.0 / 1024.0),
        T::Q1_0 => (b, 1.001, f16_scale_floor(1)),
        _ => return None,
    })
}

/// Absolute error an f16 scale multiplied by codes of magnitude up to `levels` carries where
/// the scale is subnormal: half the subnormal spacing, 2^-25, per level, plus 1e-7 for the
/// f32 arithmetic of the decode.
fn f16_scale_floor(levels: u32) -> f32 {
    levels as f32 * 2f32.powi(-25) + 1e-7
}
