//! Reference dot products of a quantized row with quantized activations, in the integer
//! arithmetic of ggml's scalar `ggml_vec_dot_*_generic` (ggml `src/ggml-cpu/quants.c`).
//!
//! * 32-element (and Q1_0 / Q2_0 / NVFP4) types dot with [`BlockQ8_1`] activations: the
//!   integer products `sum(q_x * q_y)` use Q8_1's `qs`, the float scale Q8_1's `d`, and the
//!   types with a min (Q4_1, Q5_1) add `m * s`. For the types that ggml pairs with Q8_0
//!   (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4, NVFP4, Q1_0, Q2_0) this equals ggml's `x . q8_0` on the
//!   same `d`/`qs`, which is what GPU integer paths (MMVQ) compute.
//! * k-quants, ternary and i-quants dot with [`BlockQ8K`] activations.
//!
//! These are meant as the oracle for GPU integer kernels; intermediate sums are 32-bit with
//! wrapping arithmetic (never panics on hostile blocks), as in C with in-range inputs.

// Loops index several parallel arrays the way ggml's C code does; iterator chains would
// obscure the correspondence with the reference.
#![allow(clippy::needless_range_loop)]

use crate::blocks::*;
use crate::dequant::{
    e8m0_to_f32_half, get_scale_min_k4, iq1m_scale, iq4xs_ls, q3k_scales, tq1_trit, ue4m3_to_f32, IQ1S_DELTA,
};
use crate::tables::*;
use crate::types::{GgmlType, QK_K};
use crate::QuantError;

fn blocks<B: Block>(data: &[u8]) -> impl Iterator<Item = B> + '_ {
    data.chunks_exact(std::mem::size_of::<B>()).map(bytemuck::pod_read_unaligned)
}

fn check(ty: GgmlType, x: &[u8], y_blocks: usize, y_block: usize) -> Result<(), QuantError> {
    let n = crate::dequant::elements_in(ty, x.len())?;
    let expected = n / y_block;
    if n % y_block != 0 || y_blocks != expected {
        return Err(QuantError::LengthMismatch { expected, got: y_blocks });
    }
    Ok(())
}

/// `h` as f32, bit for bit as `half::f16::to_f32` converts it (NaNs quieted), in plain
/// integer and float operations that inline and vectorise (half's own conversion calls
/// out to a run-time-detected F16C path on builds without F16C): the magnitude's bits
/// moved into f32's place and scaled by 2^112, which is exact for normal and subnormal
/// values; infinities and NaNs set apart.
#[inline(always)]
pub(crate) fn h2f(h: half::f16) -> f32 {
    let h = u32::from(h.to_bits());
    let sign = (h & 0x8000) << 16;
    let mag = h & 0x7fff;
    let v = if mag >= 0x7c00 {
        0x7f80_0000 | ((mag & 0x03ff) << 13) | if mag > 0x7c00 { 0x0040_0000 } else { 0 }
    } else {
        (f32::from_bits(mag << 13) * f32::from_bits(0x7780_0000)).to_bits()
    };
    f32::from_bits(sign | v)
}

#[inline]
fn wsum(a: i32, b: i32) -> i32 {
    a.wrapping_add(b)
}

/// The activations rows of `ty` dot with, as ggml pairs them: Q8_1 (32-element types,
/// [`vec_dot_q8_1`]) or Q8_K (k-quants, ternary and i-quants, [`vec_dot_q8_k`]); `None`
/// for types without a block dot product (floats, integers, the Q8 types themselves).
pub fn dot_activations(ty: GgmlType) -> Option<GgmlType> {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::Q8_0 | T::IQ4_NL | T::MXFP4 | T::NVFP4 | T::Q1_0 | T::Q2_0 => {
            Some(T::Q8_1)
        }
        T::Q2_K
        | T::Q3_K
        | T::Q4_K
        | T::Q5_K
        | T::Q6_K
        | T::TQ1_0
        | T::TQ2_0
        | T::IQ2_XXS
        | T::IQ2_XS
        | T::IQ2_S
        | T::IQ3_XXS
        | T::IQ3_S
        | T::IQ1_S
        | T::IQ1_M
        | T::IQ4_XS => Some(T::Q8_K),
        _ => None,
    }
}

/// Dot product of one row of type `ty` (`x`: whole blocks, little-endian bytes) with Q8_1
/// activations `y` (`y.len() == elements / 32`).
///
/// Supported `ty`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, NVFP4, Q1_0, Q2_0.
/// Errors: [`QuantError::Unsupported`] for other types, [`QuantError::PartialBlock`] /
/// [`QuantError::LengthMismatch`] on size mismatches.
pub fn vec_dot_q8_1(ty: GgmlType, x: &[u8], y: &[BlockQ8_1]) -> Result<f32, QuantError> {
    dot_q8_1(ty, x, y)
}

/// [`vec_dot_q8_1`]'s body, inlined where it is compiled for a wider instruction set.
#[inline(always)]
fn dot_q8_1(ty: GgmlType, x: &[u8], y: &[BlockQ8_1]) -> Result<f32, QuantError> {
    use GgmlType as T;
    if dot_activations(ty) != Some(T::Q8_1) {
        return Err(QuantError::Unsupported(ty));
    }
    check(ty, x, y.len(), 32)?;
    let mut sumf = 0f32;
    match ty {
        T::Q4_0 => {
            for (b, yb) in blocks::<BlockQ4_0>(x).zip(y) {
                let (mut s0, mut s1) = (0i32, 0i32);
                for j in 0..16 {
                    let v0 = (b.qs[j] & 0x0F) as i32 - 8;
                    let v1 = (b.qs[j] >> 4) as i32 - 8;
                    s0 = wsum(s0, v0 * yb.qs[j] as i32);
                    s1 = wsum(s1, v1 * yb.qs[j + 16] as i32);
                }
                sumf += wsum(s0, s1) as f32 * h2f(b.d) * h2f(yb.d);
            }
        }
        T::Q4_1 => {
            for (b, yb) in blocks::<BlockQ4_1>(x).zip(y) {
                let (mut s0, mut s1) = (0i32, 0i32);
                for j in 0..16 {
                    s0 = wsum(s0, (b.qs[j] & 0x0F) as i32 * yb.qs[j] as i32);
                    s1 = wsum(s1, (b.qs[j] >> 4) as i32 * yb.qs[j + 16] as i32);
                }
                sumf += (h2f(b.d) * h2f(yb.d)) * wsum(s0, s1) as f32 + h2f(b.m) * h2f(yb.s);
            }
        }
        T::Q5_0 => {
            for (b, yb) in blocks::<BlockQ5_0>(x).zip(y) {
                let qh = u32::from_le_bytes(b.qh);
                let (mut s0, mut s1) = (0i32, 0i32);
                for j in 0..16 {
                    let xh0 = (((qh >> j) & 1) << 4) as i32;
                    let xh1 = (((qh >> (j + 16)) & 1) << 4) as i32;
                    let x0 = ((b.qs[j] & 0x0F) as i32 | xh0) - 16;
                    let x1 = ((b.qs[j] >> 4) as i32 | xh1) - 16;
                    s0 = wsum(s0, x0 * yb.qs[j] as i32);
                    s1 = wsum(s1, x1 * yb.qs[j + 16] as i32);
                }
                sumf += (h2f(b.d) * h2f(yb.d)) * wsum(s0, s1) as f32;
            }
        }
        T::Q5_1 => {
            for (b, yb) in blocks::<BlockQ5_1>(x).zip(y) {
                let qh = u32::from_le_bytes(b.qh);
                let (mut s0, mut s1) = (0i32, 0i32);
                for j in 0..16 {
                    let xh0 = (((qh >> j) << 4) & 0x10) as i32;
                    let xh1 = ((qh >> (j + 12)) & 0x10) as i32;
                    let x0 = (b.qs[j] & 0xF) as i32 | xh0;
                    let x1 = (b.qs[j] >> 4) as i32 | xh1;
                    s0 = wsum(s0, x0 * yb.qs[j] as i32);
                    s1 = wsum(s1, x1 * yb.qs[j + 16] as i32);
                }
                sumf += (h2f(b.d) * h2f(yb.d)) * wsum(s0, s1) as f32 + h2f(b.m) * h2f(yb.s);
            }
        }
        T::Q8_0 => {
            for (b, yb) in blocks::<BlockQ8_0>(x).zip(y) {
                let mut s = 0i32;
                for j in 0..32 {
                    s = wsum(s, b.qs[j] as i32 * yb.qs[j] as i32);
                }
                sumf += s as f32 * (h2f(b.d) * h2f(yb.d));
            }
        }
        T::IQ4_NL => {
            for (b, yb) in blocks::<BlockIq4Nl>(x).zip(y) {
                let d = h2f(yb.d) * h2f(b.d);
                let (mut s1, mut s2) = (0i32, 0i32);
                for j in 0..16 {
                    s1 = wsum(s1, yb.qs[j] as i32 * KVALUES_IQ4NL[(b.qs[j] & 0xf) as usize] as i32);
                    s2 = wsum(s2, yb.qs[j + 16] as i32 * KVALUES_IQ4NL[(b.qs[j] >> 4) as usize] as i32);
                }
                sumf += d * wsum(s1, s2) as f32;
            }
        }
        T::MXFP4 => {
            for (b, yb) in blocks::<BlockMxfp4>(x).zip(y) {
                let d = h2f(yb.d) * e8m0_to_f32_half(b.e);
                let (mut s1, mut s2) = (0i32, 0i32);
                for j in 0..16 {
                    s1 = wsum(s1, yb.qs[j] as i32 * KVALUES_FP4[(b.qs[j] & 0xf) as usize] as i32);
                    s2 = wsum(s2, yb.qs[j + 16] as i32 * KVALUES_FP4[(b.qs[j] >> 4) as usize] as i32);
                }
                sumf += d * wsum(s1, s2) as f32;
            }
        }
        T::NVFP4 => {
            for (b, ys) in blocks::<BlockNvfp4>(x).zip(y.chunks_exact(2)) {
                for s in 0..4 {
                    let d = ue4m3_to_f32(b.d[s]);
                    let yb = &ys[s / 2];
                    let off = (s % 2) * 16;
                    let dy = h2f(yb.d);
                    let (mut lo, mut hi) = (0i32, 0i32);
                    for j in 0..8 {
                        let q = b.qs[8 * s + j];
                        lo = wsum(lo, yb.qs[off + j] as i32 * KVALUES_FP4[(q & 0xf) as usize] as i32);
                        hi = wsum(hi, yb.qs[off + j + 8] as i32 * KVALUES_FP4[(q >> 4) as usize] as i32);
                    }
                    sumf += dy * d * wsum(lo, hi) as f32;
                }
            }
        }
        T::Q1_0 => {
            for (b, ys) in blocks::<BlockQ1_0>(x).zip(y.chunks_exact(4)) {
                let d0 = h2f(b.d);
                let mut sumi = 0f32;
                for (k, yb) in ys.iter().enumerate() {
                    let mut s = 0i32;
                    for j in 0..32 {
                        let bit = (b.qs[4 * k + j / 8] >> (j % 8)) & 1;
                        let q = yb.qs[j] as i32;
                        s = wsum(s, if bit != 0 { q } else { -q });
                    }
                    sumi += h2f(yb.d) * s as f32;
                }
                sumf += d0 * sumi;
            }
        }
        T::Q2_0 => {
            for (b, ys) in blocks::<BlockQ2_0>(x).zip(y.chunks_exact(2)) {
                let d0 = h2f(b.d);
                let mut sumi = 0f32;
                for (k, yb) in ys.iter().enumerate() {
                    let mut s = 0i32;
                    for j in 0..32 {
                        let q = ((b.qs[8 * k + j / 4] >> ((j % 4) * 2)) & 3) as i32 - 1;
                        s = wsum(s, q * yb.qs[j] as i32);
                    }
                    sumi += h2f(yb.d) * s as f32;
                }
                sumf += d0 * sumi;
            }
        }
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(sumf)
}

/// Per-block parts of a Q3_K..Q6_K dot: (d * y.d, sub-block scales, sub-block length,
/// optional (dmin * y.d, mins)).
type KQuantParts = (f32, [i32; 16], usize, Option<(f32, [i32; 8])>);

/// Accumulates `scale * (q8 * a)` into 8 lanes the way ggml's scalar k-quant dots do.
fn lanes_accumulate(aux32: &mut [i32; 8], q8: &[i8], a: &[i8], scale: i32) {
    for l in 0..8 {
        let p = q8[l] as i32 * a[l] as i32; // fits i16 in ggml for valid blocks
        aux32[l] = aux32[l].wrapping_add(scale.wrapping_mul(p as i16 as i32));
    }
}

/// Dot product of one row of type `ty` (`x`: whole blocks) with Q8_K activations `y`
/// (`y.len() == elements / 256`).
///
/// Supported `ty`: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, TQ1_0, TQ2_0, IQ2_XXS, IQ2_XS, IQ2_S,
/// IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_XS.
/// Errors: [`QuantError::Unsupported`] for other types, size mismatches as in [`vec_dot_q8_1`].
pub fn vec_dot_q8_k(ty: GgmlType, x: &[u8], y: &[BlockQ8K]) -> Result<f32, QuantError> {
    dot_q8_k(ty, x, y)
}

/// [`vec_dot_q8_k`]'s body, inlined where it is compiled for a wider instruction set.
#[inline(always)]
fn dot_q8_k(ty: GgmlType, x: &[u8], y: &[BlockQ8K]) -> Result<f32, QuantError> {
    use GgmlType as T;
    if dot_activations(ty) != Some(T::Q8_K) {
        return Err(QuantError::Unsupported(ty));
    }
    check(ty, x, y.len(), QK_K)?;
    let sign = |s: u8, j: usize| -> i32 {
        if s & KMASK_IQ2XS[j] != 0 {
            -1
        } else {
            1
        }
    };
    let mut sumf = 0f32;
    match ty {
        T::Q2_K => {
            for (b, yb) in blocks::<BlockQ2K>(x).zip(y) {
                let mut summs = 0i32;
                for j in 0..16 {
                    summs = wsum(summs, yb.bsums[j] as i32 * (b.scales[j] >> 4) as i32);
                }
                let dall = yb.d * h2f(b.d);
                let dmin = yb.d * h2f(b.dmin);
                let mut isum = 0i32;
                let mut is = 0;
                let mut q8o = 0;
                for k in 0..2 {
                    let q2 = &b.qs[32 * k..32 * k + 32];
                    let mut shift = 0;
                    for _ in 0..4 {
                        for half in 0..2 {
                            let d = (b.scales[is] & 0xF) as i32;
                            is += 1;
                            let mut isuml = 0i32;
                            for l in 16 * half..16 * half + 16 {
                                isuml = wsum(isuml, yb.qs[q8o + l] as i32 * ((q2[l] >> shift) & 3) as i32);
                            }
                            isum = wsum(isum, d.wrapping_mul(isuml));
                        }
                        shift += 2;
                        q8o += 32;
                    }
                }
                sumf += dall * isum as f32 - dmin * summs as f32;
            }
        }
        T::Q3_K | T::Q4_K | T::Q5_K | T::Q6_K => {
            let mut sums = [0f32; 8];
            for (bi, yb) in y.iter().enumerate() {
                let bytes = &x[bi * ty.type_size()..(bi + 1) * ty.type_size()];
                let mut aux8 = [0i8; QK_K];
                let mut aux32 = [0i32; 8];
                let (d, sub_scales, sub_len, mins): KQuantParts = match ty {
                    T::Q3_K => {
                        let b: BlockQ3K = bytemuck::pod_read_unaligned(bytes);
                        let mut m: u8 = 1;
                        let mut a = 0;
                        for j in 0..2 {
                            let q3 = &b.qs[32 * j..32 * j + 32];
                            for shift in [0, 2, 4, 6] {
                                for l in 0..32 {
                                    let v = ((q3[l] >> shift) & 3) as i8;
                                    aux8[a + l] = v - if b.hmask[l] & m != 0 { 0 } else { 4 };
                                }
                                a += 32;
                                m = m.wrapping_shl(1);
                            }
                        }
                        let sc = q3k_scales(&b.scales);
                        let mut s = [0i32; 16];
                        for j in 0..16 {
                            s[j] = sc[j] as i32;
                        }
                        (h2f(b.d) * yb.d, s, 16, None)
                    }
                    T::Q4_K | T::Q5_K => {
                        let (dd, dmin, scales, qs, qh) = if ty == T::Q4_K {
                            let b: BlockQ4K = bytemuck::pod_read_unaligned(bytes);
                            (b.d, b.dmin, b.scales, b.qs, None)
                        } else {
                            let b: BlockQ5K = bytemuck::pod_read_unaligned(bytes);
                            (b.d, b.dmin, b.scales, b.qs, Some(b.qh))
                        };
                        let mut m: u8 = 1;
                        for j in 0..4 {
                            for l in 0..32 {
                                let q = qs[32 * j + l];
                                let (mut lo, mut hi) = ((q & 0xF) as i8, (q >> 4) as i8);
                                if let Some(h) = qh {
                                    lo += if h[l] & m != 0 { 16 } else { 0 };
                                    hi += if h[l] & m.wrapping_shl(1) != 0 { 16 } else { 0 };
                                }
                                aux8[64 * j + l] = lo;
                                aux8[64 * j + 32 + l] = hi;
                            }
                            m = m.wrapping_shl(2);
                        }
                        let mut s = [0i32; 16];
                        let mut mn = [0i32; 8];
                        for j in 0..8 {
                            let (sc, mm) = get_scale_min_k4(j, &scales);
                            s[j] = sc as i32;
                            mn[j] = mm as i32;
                        }
                        (h2f(dd) * yb.d, s, 32, Some((h2f(dmin) * yb.d, mn)))
                    }
                    _ => {
                        let b: BlockQ6K = bytemuck::pod_read_unaligned(bytes);
                        for n in 0..2 {
                            let q4 = &b.ql[64 * n..64 * n + 64];
                            let qh = &b.qh[32 * n..32 * n + 32];
                            let a = &mut aux8[128 * n..128 * n + 128];
                            for l in 0..32 {
                                a[l] = ((q4[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                                a[l + 32] = ((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                                a[l + 64] = ((q4[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                                a[l + 96] = ((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                            }
                        }
                        let mut s = [0i32; 16];
                        for j in 0..16 {
                            s[j] = b.scales[j] as i32;
                        }
                        (h2f(b.d) * yb.d, s, 16, None)
                    }
                };
                let nsub = QK_K / sub_len;
                for j in 0..nsub {
                    for k in (0..sub_len).step_by(8) {
                        let o = sub_len * j + k;
                        lanes_accumulate(&mut aux32, &yb.qs[o..o + 8], &aux8[o..o + 8], sub_scales[j]);
                    }
                }
                for l in 0..8 {
                    sums[l] += d * aux32[l] as f32;
                }
                if let Some((dmin, mn)) = mins {
                    let mut sumi = 0i32;
                    for j in 0..16 {
                        sumi = wsum(sumi, (yb.bsums[j] as i32).wrapping_mul(mn[j / 2]));
                    }
                    sumf -= dmin * sumi as f32;
                }
            }
            for s in sums {
                sumf += s;
            }
        }
        T::TQ1_0 => {
            for (b, yb) in blocks::<BlockTq1_0>(x).zip(y) {
                let mut sum = 0i32;
                for l in 0..5 {
                    for m in 0..32 {
                        sum = wsum(sum, (tq1_trit(b.qs[m], l) - 1) * yb.qs[l * 32 + m] as i32);
                    }
                }
                for l in 0..5 {
                    for m in 0..16 {
                        sum = wsum(sum, (tq1_trit(b.qs[32 + m], l) - 1) * yb.qs[160 + l * 16 + m] as i32);
                    }
                }
                for l in 0..4 {
                    for j in 0..4 {
                        sum = wsum(sum, (tq1_trit(b.qh[j], l) - 1) * yb.qs[240 + l * 4 + j] as i32);
                    }
                }
                sumf += sum as f32 * (h2f(b.d) * yb.d);
            }
        }
        T::TQ2_0 => {
            for (b, yb) in blocks::<BlockTq2_0>(x).zip(y) {
                let mut sumi = 0i32;
                for j in (0..64).step_by(32) {
                    for l in 0..4 {
                        for k in 0..32 {
                            let q = ((b.qs[j + k] >> (l * 2)) & 3) as i32 - 1;
                            sumi = wsum(sumi, yb.qs[j * 4 + l * 32 + k] as i32 * q);
                        }
                    }
                }
                let d = yb.d * h2f(b.d);
                sumf += sumi as f32 * d;
            }
        }
        T::IQ2_XXS => {
            for (b, yb) in blocks::<BlockIq2Xxs>(x).zip(y) {
                let d = h2f(b.d) * yb.d;
                let mut bsum = 0i32;
                let mut q8 = 0;
                for ib32 in 0..8 {
                    let q = &b.qs[4 * ib32..4 * ib32 + 4];
                    let aux0 = q[0] as u32 | (q[1] as u32) << 16;
                    let aux1 = q[2] as u32 | (q[3] as u32) << 16;
                    let ls = (2 * (aux1 >> 28) + 1) as i32;
                    let mut sumi = 0i32;
                    for l in 0..4 {
                        let grid = IQ2XXS_GRID[aux0.to_le_bytes()[l] as usize].to_le_bytes();
                        let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
                        for j in 0..8 {
                            sumi = wsum(sumi, grid[j] as i32 * yb.qs[q8 + j] as i32 * sign(signs, j));
                        }
                        q8 += 8;
                    }
                    bsum = wsum(bsum, sumi.wrapping_mul(ls));
                }
                sumf += d * bsum as f32;
            }
            sumf *= 0.125;
        }
        T::IQ2_XS => {
            for (b, yb) in blocks::<BlockIq2Xs>(x).zip(y) {
                let d = h2f(b.d) * yb.d;
                let mut bsum = 0i32;
                let mut q8 = 0;
                for ib32 in 0..8 {
                    let ls = [2 * (b.scales[ib32] & 0xf) as i32 + 1, 2 * (b.scales[ib32] >> 4) as i32 + 1];
                    for h in 0..2 {
                        let mut sumi = 0i32;
                        for l in 2 * h..2 * h + 2 {
                            let q = b.qs[4 * ib32 + l];
                            let grid = IQ2XS_GRID[(q & 511) as usize].to_le_bytes();
                            let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
                            for j in 0..8 {
                                sumi = wsum(sumi, grid[j] as i32 * yb.qs[q8 + j] as i32 * sign(signs, j));
                            }
                            q8 += 8;
                        }
                        bsum = wsum(bsum, sumi.wrapping_mul(ls[h]));
                    }
                }
                sumf += d * bsum as f32;
            }
            sumf *= 0.125;
        }
        T::IQ2_S => {
            for (b, yb) in blocks::<BlockIq2S>(x).zip(y) {
                let d = h2f(b.d) * yb.d;
                let mut bsum = 0i32;
                let mut q8 = 0;
                for ib32 in 0..8 {
                    let ls = [1 + 2 * (b.scales[ib32] & 0xf) as i32, 1 + 2 * (b.scales[ib32] >> 4) as i32];
                    let mut s = [0i32; 2];
                    for l in 0..4 {
                        let idx = b.qs[4 * ib32 + l] as usize | (((b.qh[ib32] as usize) << (8 - 2 * l)) & 0x300);
                        let grid = IQ2S_GRID[idx].to_le_bytes();
                        let signs = b.qs[32 + 4 * ib32 + l];
                        for j in 0..8 {
                            s[l / 2] = wsum(s[l / 2], yb.qs[q8 + j] as i32 * grid[j] as i32 * sign(signs, j));
                        }
                        q8 += 8;
                    }
                    bsum = wsum(bsum, wsum(ls[0].wrapping_mul(s[0]), ls[1].wrapping_mul(s[1])));
                }
                sumf += d * bsum as f32;
            }
            sumf *= 0.125;
        }
        T::IQ3_XXS => {
            for (b, yb) in blocks::<BlockIq3Xxs>(x).zip(y) {
                let d = h2f(b.d) * yb.d;
                let mut bsum = 0i32;
                let mut q8 = 0;
                for ib32 in 0..8 {
                    let q3 = &b.qs[8 * ib32..8 * ib32 + 8];
                    let g = &b.qs[64 + 4 * ib32..64 + 4 * ib32 + 4];
                    let aux32 = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
                    let ls = (2 * (aux32 >> 28) + 1) as i32;
                    let mut sumi = 0i32;
                    for l in 0..4 {
                        let g1 = IQ3XXS_GRID[q3[2 * l] as usize].to_le_bytes();
                        let g2 = IQ3XXS_GRID[q3[2 * l + 1] as usize].to_le_bytes();
                        let signs = KSIGNS_IQ2XS[((aux32 >> (7 * l)) & 127) as usize];
                        for j in 0..4 {
                            sumi = wsum(sumi, g1[j] as i32 * yb.qs[q8 + j] as i32 * sign(signs, j));
                            sumi = wsum(sumi, g2[j] as i32 * yb.qs[q8 + j + 4] as i32 * sign(signs, j + 4));
                        }
                        q8 += 8;
                    }
                    bsum = wsum(bsum, sumi.wrapping_mul(ls));
                }
                sumf += d * bsum as f32;
            }
            sumf *= 0.25;
        }
        T::IQ3_S => {
            for (b, yb) in blocks::<BlockIq3S>(x).zip(y) {
                let d = h2f(b.d) * yb.d;
                let mut bsum = 0i32;
                let mut q8 = 0;
                for ib in 0..8 {
                    let sc = b.scales[ib / 2];
                    let ls = if ib % 2 == 0 { 2 * (sc & 0xf) as i32 + 1 } else { 2 * (sc >> 4) as i32 + 1 };
                    let qs = &b.qs[8 * ib..8 * ib + 8];
                    let qh = b.qh[ib] as usize;
                    let signs = &b.signs[4 * ib..4 * ib + 4];
                    let mut sumi = 0i32;
                    for l in 0..4 {
                        let g1 = IQ3S_GRID[qs[2 * l] as usize | ((qh << (8 - 2 * l)) & 256)].to_le_bytes();
                        let g2 = IQ3S_GRID[qs[2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256)].to_le_bytes();
                        for j in 0..4 {
                            sumi = wsum(sumi, g1[j] as i32 * yb.qs[q8 + j] as i32 * sign(signs[l], j));
                            sumi = wsum(sumi, g2[j] as i32 * yb.qs[q8 + j + 4] as i32 * sign(signs[l], j + 4));
                        }
                        q8 += 8;
                    }
                    bsum = wsum(bsum, sumi.wrapping_mul(ls));
                }
                sumf += d * bsum as f32;
            }
        }
        T::IQ1_S => {
            for (b, yb) in blocks::<BlockIq1S>(x).zip(y) {
                let (mut sumi, mut sumi1) = (0i32, 0i32);
                let mut q8 = 0;
                for ib in 0..8 {
                    let qh = b.qh[ib];
                    let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
                    let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
                    let mut lsum = 0i32;
                    for l in 0..4 {
                        let idx = b.qs[4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                        let grid = IQ1S_GRID[idx].to_le_bytes();
                        for j in 0..8 {
                            lsum = wsum(lsum, yb.qs[q8 + j] as i32 * grid[j] as i8 as i32);
                        }
                        q8 += 8;
                    }
                    sumi = wsum(sumi, ls.wrapping_mul(lsum));
                    let bs = yb.bsums[2 * ib] as i32 + yb.bsums[2 * ib + 1] as i32;
                    sumi1 = wsum(sumi1, (ls * delta).wrapping_mul(bs));
                }
                sumf += h2f(b.d) * yb.d * (sumi as f32 + IQ1S_DELTA * sumi1 as f32);
            }
        }
        T::IQ1_M => {
            for (b, yb) in blocks::<BlockIq1M>(x).zip(y) {
                let (scale, sc) = iq1m_scale(&b.scales);
                let (mut sumi1, mut sumi2) = (0i32, 0i32);
                let mut q8 = 0;
                for ib in 0..8 {
                    let qs = &b.qs[4 * ib..4 * ib + 4];
                    let qh = &b.qh[2 * ib..2 * ib + 2];
                    let delta = [
                        if qh[0] & 0x08 != 0 { -1 } else { 1 },
                        if qh[0] & 0x80 != 0 { -1 } else { 1 },
                        if qh[1] & 0x08 != 0 { -1 } else { 1 },
                        if qh[1] & 0x80 != 0 { -1 } else { 1 },
                    ];
                    let mut sum1 = [0i32; 2];
                    let mut sum2 = [0i32; 2];
                    for l in 0..4 {
                        let idx = qs[l] as usize | (((qh[l / 2] as usize) << (8 - 4 * (l % 2))) & 0x700);
                        let grid = IQ1S_GRID[idx].to_le_bytes();
                        let (mut lsum1, mut lsum2) = (0i32, 0i32);
                        for j in 0..8 {
                            lsum1 = wsum(lsum1, yb.qs[q8 + j] as i32 * grid[j] as i8 as i32);
                            lsum2 = wsum(lsum2, yb.qs[q8 + j] as i32);
                        }
                        q8 += 8;
                        sum1[l / 2] = wsum(sum1[l / 2], lsum1);
                        sum2[l / 2] = wsum(sum2[l / 2], lsum2 * delta[l]);
                    }
                    let s = sc[ib / 2];
                    let ls1 = 2 * ((s >> (6 * (ib % 2))) & 0x7) as i32 + 1;
                    let ls2 = 2 * ((s >> (6 * (ib % 2) + 3)) & 0x7) as i32 + 1;
                    sumi1 = wsum(sumi1, wsum(sum1[0].wrapping_mul(ls1), sum1[1].wrapping_mul(ls2)));
                    sumi2 = wsum(sumi2, wsum(sum2[0].wrapping_mul(ls1), sum2[1].wrapping_mul(ls2)));
                }
                sumf += h2f(scale) * yb.d * (sumi1 as f32 + IQ1S_DELTA * sumi2 as f32);
            }
        }
        T::IQ4_XS => {
            for (b, yb) in blocks::<BlockIq4Xs>(x).zip(y) {
                let d4d8 = h2f(b.d) * yb.d;
                for ib in 0..8 {
                    let dl = d4d8 * (iq4xs_ls(&b, ib) - 32) as f32;
                    let qs = &b.qs[16 * ib..16 * ib + 16];
                    let q8 = &yb.qs[32 * ib..32 * ib + 32];
                    let (mut s1, mut s2) = (0i32, 0i32);
                    for j in 0..16 {
                        s1 = wsum(s1, q8[j] as i32 * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as i32);
                        s2 = wsum(s2, q8[j + 16] as i32 * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as i32);
                    }
                    sumf += dl * wsum(s1, s2) as f32;
                }
            }
        }
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(sumf)
}

/// The dot products of consecutive rows `x` (each `x.len() / out.len()` bytes of type `ty`)
/// with the same Q8_1 activations `y`, into `out` (one per row): a CPU mat-vec's inner
/// loop. The same arithmetic as [`vec_dot_q8_1`], compiled for AVX2 and FMA where the CPU
/// has them (checked at run time), so that the integer loops are vectorised.
///
/// # Errors
/// As [`vec_dot_q8_1`]; [`QuantError::LengthMismatch`] when `x` is not `out.len()` rows.
pub fn vec_dot_q8_1_rows(ty: GgmlType, x: &[u8], y: &[BlockQ8_1], out: &mut [f32]) -> Result<(), QuantError> {
    if out.is_empty() || !x.len().is_multiple_of(out.len()) {
        return Err(QuantError::LengthMismatch { expected: out.len(), got: x.len() });
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        if crate::dot_x86::handles(ty) {
            check(ty, &x[..x.len() / out.len()], y.len(), 32)?;
            // SAFETY: the CPU has AVX2 and FMA (checked just above), the target features
            // the function is compiled with; the lengths are checked (whole blocks, one
            // activation block per block of a row).
            if unsafe { crate::dot_x86::rows_q8_1(ty, x, y, out) }.is_some() {
                return Ok(());
            }
        }
        // SAFETY: the CPU has AVX2 and FMA (checked just above), the target features the
        // function is compiled with; it has no other precondition.
        return unsafe { rows_q8_1_avx2(ty, x, y, out) };
    }
    rows_q8_1(ty, x, y, out)
}

/// As [`vec_dot_q8_1_rows`], for the types that dot with Q8_K activations
/// ([`vec_dot_q8_k`]).
///
/// # Errors
/// As [`vec_dot_q8_k`]; [`QuantError::LengthMismatch`] when `x` is not `out.len()` rows.
pub fn vec_dot_q8_k_rows(ty: GgmlType, x: &[u8], y: &[BlockQ8K], out: &mut [f32]) -> Result<(), QuantError> {
    if out.is_empty() || !x.len().is_multiple_of(out.len()) {
        return Err(QuantError::LengthMismatch { expected: out.len(), got: x.len() });
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: as in `vec_dot_q8_1_rows`: AVX2 and FMA are present.
        return unsafe { rows_q8_k_avx2(ty, x, y, out) };
    }
    rows_q8_k(ty, x, y, out)
}

#[inline(always)]
fn rows_q8_1(ty: GgmlType, x: &[u8], y: &[BlockQ8_1], out: &mut [f32]) -> Result<(), QuantError> {
    let n = x.len() / out.len();
    for (row, o) in x.chunks_exact(n).zip(out) {
        *o = dot_q8_1(ty, row, y)?;
    }
    Ok(())
}

#[inline(always)]
fn rows_q8_k(ty: GgmlType, x: &[u8], y: &[BlockQ8K], out: &mut [f32]) -> Result<(), QuantError> {
    let n = x.len() / out.len();
    for (row, o) in x.chunks_exact(n).zip(out) {
        *o = dot_q8_k(ty, row, y)?;
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_q8_1_avx2(ty: GgmlType, x: &[u8], y: &[BlockQ8_1], out: &mut [f32]) -> Result<(), QuantError> {
    rows_q8_1(ty, x, y, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_q8_k_avx2(ty: GgmlType, x: &[u8], y: &[BlockQ8K], out: &mut [f32]) -> Result<(), QuantError> {
    rows_q8_k(ty, x, y, out)
}

#[cfg(test)]
mod h2f_tests {
    /// Every f16 converts to the f32 `half` gives, bit for bit.
    #[test]
    fn h2f_matches_half_for_every_value() {
        for bits in 0..=u16::MAX {
            let h = half::f16::from_bits(bits);
            assert_eq!(super::h2f(h).to_bits(), h.to_f32().to_bits(), "{bits:#06x}");
        }
    }
}
