//! CPU quantization, byte-identical to ggml's reference quantizers (`quantize_row_*_ref` in ggml
//! `src/ggml-quants.c`, no importance matrix).
//!
//! Supported: every non-IQ block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q6_K, Q8_K,
//! TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0), IQ4_NL and IQ4_XS, plus the float types F32, F16,
//! BF16 and F64. The other IQ types need ggml's search tables and importance matrices and are
//! not provided; integer types are not quantization targets.
//!
//! Float operations are evaluated in the same order as ggml's C code so that rounding matches.
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

impl Quantize for BlockQ4_0 {
    fn quantize(x: &[f32]) -> Self {
        let (_, max) = absmax_signed(&x[..32]);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 16];
        for j in 0..16 {
            let x0 = x[j] * id;
            let x1 = x[16 + j] * id;
            let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
            qs[j] = xi0 | (xi1 << 4);
        }
        BlockQ4_0 { d: fp16(d), qs }
    }
}

impl Quantize for BlockQ4_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(&x[..32]);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 16];
        for j in 0..16 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[16 + j] - min) * id;
            let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
            qs[j] = xi0 | (xi1 << 4);
        }
        BlockQ4_1 { d: fp16(d), m: fp16(min), qs }
    }
}

impl Quantize for BlockQ5_0 {
    fn quantize(x: &[f32]) -> Self {
        let (_, max) = absmax_signed(&x[..32]);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 16];
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = x[j] * id;
            let x1 = x[16 + j] * id;
            let xi0 = ((x0 + 16.5) as i8).min(31) as u8;
            let xi1 = ((x1 + 16.5) as i8).min(31) as u8;
            qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
        }
        BlockQ5_0 { d: fp16(d), qh: qh.to_le_bytes(), qs }
    }
}

impl Quantize for BlockQ5_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(&x[..32]);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 16];
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[16 + j] - min) * id;
            let xi0 = (x0 + 0.5) as u8;
            let xi1 = (x1 + 0.5) as u8;
            qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
        }
        BlockQ5_1 { d: fp16(d), m: fp16(min), qh: qh.to_le_bytes(), qs }
    }
}

fn q8_common(x: &[f32]) -> (f32, [i8; 32]) {
    let mut amax = 0f32;
    for &v in &x[..32] {
        amax = amax.max(v.abs());
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; 32];
    for j in 0..32 {
        qs[j] = (x[j] * id).round() as i8;
    }
    (d, qs)
}

impl Quantize for BlockQ8_0 {
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = q8_common(x);
        BlockQ8_0 { d: fp16(d), qs }
    }
}

impl Quantize for BlockQ8_1 {
    /// `quantize_row_q8_1_ref`: `s = fp16(sum(qs) * d)` with the f32 `d` (before f16 rounding).
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = q8_common(x);
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        BlockQ8_1 { d: fp16(d), s: fp16(sum as f32 * d), qs }
    }
}

// ---------------------------------------------------------------- k-quant helpers

/// `make_qx_quants` with `qw == NULL` (rmse_type 1 as used by Q6_K). `l` gets values in 0..2*nmax.
fn make_qx_quants(n: usize, nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32) -> f32 {
    let (amax, max) = absmax_signed(&x[..n]);
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = -(nmax as f32) / max;
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let weight = |v: f32| -> f32 {
        match rmse_type {
            1 => v * v,
            2 => 1.0,
            3 => v.abs(),
            _ => v.abs().sqrt(),
        }
    };
    if rmse_type == 0 {
        for i in 0..n {
            let l = nearest_int(iscale * x[i]);
            l_out[i] = (nmax + clamp(l)) as i8;
        }
        return 1.0 / iscale;
    }
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = clamp(nearest_int(iscale * x[i]));
        l_out[i] = (l + nmax) as i8;
        let w = weight(x[i]);
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = clamp(nearest_int(iscale * x[i]));
            let w = weight(x[i]);
            sumlx += w * x[i] * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + clamp(l)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants(n, nmax, x, L, do_rmse = true)`. `l_out` gets values in 0..2*nmax.
fn make_q3_quants(x: &[f32], nmax: i32, l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let (amax, max) = absmax_signed(x);
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l_cur = [0i32; 16];
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_cur[i] = l;
        let w = x[i] * x[i];
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let mut slx = sumlx - w * x[i] * l_cur[i] as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * l_cur[i] as f32 * l_cur[i] as f32;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l_cur[i] {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_cur[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for i in 0..n {
        l_out[i] = (l_cur[i] + nmax) as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// `make_qkx2_quants`: returns `(scale, the_min)` where `x ~ scale * L - the_min`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut laux = [0u8; 32];
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let mut diff = scale * l_out[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0f32;
        let mut sum_l2 = 0f32;
        let mut sum_xl = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let dd = sum_w * sum_l2 - sum_l * sum_l;
        if dd > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / dd;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / dd;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let mut diff = this_scale * laux[i] as f32 + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

impl Quantize for BlockQ2K {
    fn quantize(x: &[f32]) -> Self {
        let mut l = [0u8; QK_K];
        let mut weights = [0f32; 16];
        let mut mins = [0f32; 16];
        let mut scales = [0f32; 16];
        const Q4SCALE: f32 = 15.0;
        let mut max_scale = 0f32;
        let mut max_min = 0f32;
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(3, xs, &weights, &mut l[16 * j..16 * j + 16], -0.5, 0.1, 15, true);
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let mut y = BlockQ2K { scales: [0; 16], qs: [0; 64], d: fp16(0.0), dmin: fp16(0.0) };
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                y.scales[j] = nearest_int(iscale * scales[j]) as u8;
            }
            y.d = fp16(max_scale / Q4SCALE);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                let lm = nearest_int(iscale * mins[j]);
                y.scales[j] = (y.scales[j] as i32 | lm.wrapping_shl(4)) as u8;
            }
            y.dmin = fp16(max_min / Q4SCALE);
        }
        for j in 0..16 {
            let d = y.d.to_f32() * (y.scales[j] & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = y.dmin.to_f32() * (y.scales[j] >> 4) as f32;
            for ii in 0..16 {
                l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
            }
        }
        for j in (0..QK_K).step_by(128) {
            for k in 0..32 {
                y.qs[j / 4 + k] = l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
            }
        }
        y
    }
}

impl Quantize for BlockQ3K {
    fn quantize(x: &[f32]) -> Self {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let mut max_scale = 0f32;
        let mut amax = 0f32;
        for j in 0..16 {
            scales[j] = make_q3_quants(&x[16 * j..16 * j + 16], 4, &mut l[16 * j..16 * j + 16]);
            let s = scales[j].abs();
            if s > amax {
                amax = s;
                max_scale = scales[j];
            }
        }
        let mut y = BlockQ3K { hmask: [0; 32], qs: [0; 64], scales: [0; 12], d: fp16(0.0) };
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let lv = nearest_int(iscale * scales[j]) as i8;
                let lv = lv.clamp(-32, 31) + 32;
                if j < 8 {
                    y.scales[j] = (lv & 0xF) as u8;
                } else {
                    y.scales[j - 8] |= ((lv & 0xF) << 4) as u8;
                }
                let lv = lv >> 4;
                y.scales[j % 4 + 8] |= (lv << (2 * (j / 4))) as u8;
            }
            y.d = fp16(1.0 / iscale);
        }
        for j in 0..16 {
            let sc = if j < 8 { y.scales[j] & 0xF } else { y.scales[j - 8] >> 4 };
            let sc = (sc | (((y.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
            let d = y.d.to_f32() * sc as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let lv = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
                l[16 * j + ii] = (lv + 4) as i8;
            }
        }
        let mut m = 0;
        let mut hm: u8 = 1;
        for lj in l.iter_mut() {
            if *lj > 3 {
                y.hmask[m] |= hm;
                *lj -= 4;
            }
            m += 1;
            if m == QK_K / 8 {
                m = 0;
                hm = hm.wrapping_shl(1);
            }
        }
        for j in (0..QK_K).step_by(128) {
            for k in 0..32 {
                y.qs[j / 4 + k] = (l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6)) as u8;
            }
        }
        y
    }
}

/// Shared scale search of Q4_K/Q5_K ref: returns (L, packed scales, d, dmin).
fn q45k_common(x: &[f32], nmax: i32, rmin: f32, nstep: i32) -> ([u8; QK_K], [u8; 12], f16, f16) {
    let mut l = [0u8; QK_K];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    let mut weights = [0f32; 32];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(nmax, xs, &weights, &mut l[32 * j..32 * j + 32], rmin, 0.1, nstep, false);
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = fp16(max_scale / 63.0);
    let dmin = fp16(max_min / 63.0);
    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, &sc);
        let dd = d.to_f32() * s as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dd).clamp(0, nmax) as u8;
        }
    }
    (l, sc, d, dmin)
}

impl Quantize for BlockQ4K {
    fn quantize(x: &[f32]) -> Self {
        let (l, scales, d, dmin) = q45k_common(x, 15, -1.0, 20);
        let mut qs = [0u8; 128];
        for (k, j) in (0..QK_K).step_by(64).enumerate() {
            for i in 0..32 {
                qs[32 * k + i] = l[j + i] | (l[j + i + 32] << 4);
            }
        }
        BlockQ4K { d, dmin, scales, qs }
    }
}

impl Quantize for BlockQ5K {
    fn quantize(x: &[f32]) -> Self {
        let (l, scales, d, dmin) = q45k_common(x, 31, -0.5, 15);
        let mut qh = [0u8; 32];
        let mut qs = [0u8; 128];
        let mut m1: u8 = 1;
        let mut m2: u8 = 2;
        for (k, n) in (0..QK_K).step_by(64).enumerate() {
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                qs[32 * k + j] = l1 | (l2 << 4);
            }
            m1 = m1.wrapping_shl(2);
            m2 = m2.wrapping_shl(2);
        }
        BlockQ5K { d, dmin, scales, qh, qs }
    }
}

impl Quantize for BlockQ6K {
    fn quantize(x: &[f32]) -> Self {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let mut max_scale = 0f32;
        let mut max_abs_scale = 0f32;
        for ib in 0..16 {
            let s = make_qx_quants(16, 32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16], 1);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        let mut y = BlockQ6K { ql: [0; 128], qh: [0; 64], scales: [0; 16], d: fp16(0.0) };
        if max_abs_scale < GROUP_MAX_EPS {
            return y;
        }
        let iscale = -128.0 / max_scale;
        y.d = fp16(1.0 / iscale);
        for ib in 0..16 {
            y.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        for j in 0..16 {
            let d = y.d.to_f32() * y.scales[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let lv = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (lv + 32) as i8;
            }
        }
        let l: [u8; QK_K] = bytemuck::cast(l);
        for (k, j) in (0..QK_K).step_by(128).enumerate() {
            let ql = &mut y.ql[64 * k..64 * k + 64];
            let qh = &mut y.qh[32 * k..32 * k + 32];
            for i in 0..32 {
                let q1 = l[j + i] & 0xF;
                let q2 = l[j + i + 32] & 0xF;
                let q3 = l[j + i + 64] & 0xF;
                let q4 = l[j + i + 96] & 0xF;
                ql[i] = q1 | (q3 << 4);
                ql[i + 32] = q2 | (q4 << 4);
                qh[i] = (l[j + i] >> 4)
                    | ((l[j + i + 32] >> 4) << 2)
                    | ((l[j + i + 64] >> 4) << 4)
                    | ((l[j + i + 96] >> 4) << 6);
            }
        }
        y
    }
}

impl Quantize for BlockQ8K {
    /// `quantize_row_q8_K_ref`. For an all-zero block ggml leaves `bsums` untouched; here they
    /// are set to zero.
    fn quantize(x: &[f32]) -> Self {
        let (amax, max) = absmax_signed(&x[..QK_K]);
        let mut y = BlockQ8K { d: 0.0, qs: [0; QK_K], bsums: [0; 16] };
        if amax == 0.0 {
            return y;
        }
        let iscale = -127.0 / max;
        for j in 0..QK_K {
            y.qs[j] = nearest_int(iscale * x[j]).min(127) as i8;
        }
        for j in 0..16 {
            let sum: i32 = y.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
            y.bsums[j] = sum as i16;
        }
        y.d = 1.0 / iscale;
        y
    }
}

impl Quantize for BlockTq1_0 {
    fn quantize(x: &[f32]) -> Self {
        let mut amax = 0f32;
        for &v in &x[..QK_K] {
            amax = amax.max(v.abs());
        }
        let d = amax;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let trit = |v: f32| -> u8 { ((v * id).round() as i32).wrapping_add(1) as u8 };
        // ceiling division by 243 = 3^5, as in ggml
        let ceil_div = |q: u8| -> u8 { (q as u16 * 256).div_ceil(243) as u8 };
        let mut y = BlockTq1_0 { qs: [0; 48], qh: [0; 4], d: fp16(d) };
        let mut xo = 0;
        for m in 0..32 {
            let mut q: u8 = 0;
            for n in 0..5 {
                q = q.wrapping_mul(3).wrapping_add(trit(x[xo + m + n * 32]));
            }
            y.qs[m] = ceil_div(q);
        }
        xo += 160;
        for m in 0..16 {
            let mut q: u8 = 0;
            for n in 0..5 {
                q = q.wrapping_mul(3).wrapping_add(trit(x[xo + m + n * 16]));
            }
            y.qs[32 + m] = ceil_div(q);
        }
        xo += 80;
        for j in 0..4 {
            let mut q: u8 = 0;
            for m in 0..4 {
                q = q.wrapping_mul(3).wrapping_add(trit(x[xo + j + m * 4]));
            }
            q = q.wrapping_mul(3);
            y.qh[j] = ceil_div(q);
        }
        y
    }
}

impl Quantize for BlockTq2_0 {
    fn quantize(x: &[f32]) -> Self {
        let mut amax = 0f32;
        for &v in &x[..QK_K] {
            amax = amax.max(v.abs());
        }
        let d = amax;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut y = BlockTq2_0 { qs: [0; 64], d: fp16(d) };
        for j in (0..64).step_by(32) {
            for m in 0..32 {
                let mut q: u8 = 0;
                for n in 0..4 {
                    let xi = ((x[4 * j + m + n * 32] * id).round() as i32).wrapping_add(1);
                    q = q.wrapping_add(((xi & 3) << (2 * n)) as u8);
                }
                y.qs[j + m] = q;
            }
        }
        y
    }
}

fn best_index_fp4(x: f32, e: f32) -> u8 {
    let mut best_index = 0;
    let mut best_err = (KVALUES_FP4[0] as f32 * e - x).abs();
    for (i, &v) in KVALUES_FP4.iter().enumerate().skip(1) {
        let err = (v as f32 * e - x).abs();
        if err < best_err {
            best_index = i;
            best_err = err;
        }
    }
    best_index as u8
}

impl Quantize for BlockMxfp4 {
    fn quantize(x: &[f32]) -> Self {
        let mut amax = 0f32;
        for &v in &x[..32] {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 { (amax.log2().floor() - 2.0 + 127.0) as u8 } else { 0 };
        let d = e8m0_to_f32_half(e);
        let mut qs = [0u8; 16];
        for j in 0..16 {
            qs[j] = best_index_fp4(x[j], d) | (best_index_fp4(x[16 + j], d) << 4);
        }
        BlockMxfp4 { e, qs }
    }
}

impl Quantize for BlockNvfp4 {
    fn quantize(x: &[f32]) -> Self {
        let mut y = BlockNvfp4 { d: [0; 4], qs: [0; 32] };
        for s in 0..4 {
            let xb = &x[16 * s..16 * s + 16];
            let mut amax = 0f32;
            for &v in xb {
                if amax < v.abs() {
                    amax = v.abs();
                }
            }
            let ue = f32_to_ue4m3(amax / 6.0);
            y.d[s] = ue;
            let d = ue4m3_to_f32(ue);
            for j in 0..8 {
                y.qs[8 * s + j] = best_index_fp4(xb[j], d) | (best_index_fp4(xb[8 + j], d) << 4);
            }
        }
        y
    }
}

impl Quantize for BlockQ1_0 {
    fn quantize(x: &[f32]) -> Self {
        let mut sum_abs = 0f32;
        for &v in &x[..128] {
            sum_abs += v.abs();
        }
        let d = sum_abs / 128.0;
        let mut qs = [0u8; 16];
        for j in 0..128 {
            if x[j] >= 0.0 {
                qs[j / 8] |= 1 << (j % 8);
            }
        }
        BlockQ1_0 { d: fp16(d), qs }
    }
}

impl Quantize for BlockQ2_0 {
    fn quantize(x: &[f32]) -> Self {
        let mut amax = 0f32;
        for &v in &x[..64] {
            let a = v.abs();
            if a > amax {
                amax = a;
            }
        }
        let d = amax;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 16];
        for j in 0..64 {
            let q = ((x[j] * id).round() as i32).wrapping_add(1).clamp(0, 3);
            qs[j / 4] |= (q as u8) << ((j % 4) * 2);
        }
        BlockQ2_0 { d: fp16(d), qs }
    }
}

// ---------------------------------------------------------------- IQ4_NL / IQ4_XS

/// `best_index_int8(16, values, x)`: index of the code-book value nearest to `x`.
fn best_index_int8(values: &[i8; 16], x: f32) -> u8 {
    if x <= values[0] as f32 {
        return 0;
    }
    if x >= values[15] as f32 {
        return 15;
    }
    let mut ml = 0usize;
    let mut mu = 15usize;
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < values[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (values[mu - 1] as f32) < values[mu] as f32 - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// `quantize_row_iq4_nl_impl` without importance weights. `l` is the caller's scratch buffer,
/// which (as in ggml) keeps stale values for all-zero sub-blocks of IQ4_NL.
/// Returns the f16 super-block scale; fills `q4`, and for super-blocks of 256 the scales.
fn iq4_nl_impl(x: &[f32], l: &mut [u8], ntry: i32, q4: &mut [u8], scales_h: &mut u16, scales_l: &mut [u8]) -> f16 {
    let values = &KVALUES_IQ4NL;
    let super_block_size = x.len();
    let nblk = super_block_size / 32;
    q4.fill(0);
    let mut scales = [0f32; 8];
    let mut weight = [0f32; 32];
    let mut max_scale = 0f32;
    let mut amax_scale = 0f32;
    for ib in 0..nblk {
        let xb = &x[32 * ib..32 * ib + 32];
        let lb = &mut l[32 * ib..32 * ib + 32];
        for (w, v) in weight.iter_mut().zip(xb) {
            *w = v * v;
        }
        let (amax, max) = absmax_signed(xb);
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let mut d = if ntry > 0 { -max / values[0] as f32 } else { max / values[0] as f32 };
        let mut id = 1.0 / d;
        let mut sumqx = 0f32;
        let mut sumq2 = 0f32;
        for j in 0..32 {
            let al = id * xb[j];
            let li = best_index_int8(values, al);
            lb[j] = li;
            let q = values[li as usize] as f32;
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            id = (itry + values[0] as i32) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..32 {
                let al = id * xb[j];
                let li = best_index_int8(values, al);
                let q = values[li as usize] as f32;
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if d.abs() > amax_scale {
            amax_scale = d.abs();
            max_scale = d;
        }
    }
    let dh;
    if nblk > 1 {
        *scales_h = 0;
        let d = -max_scale / 32.0;
        dh = fp16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nblk {
            let li = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * li as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let xb = &x[32 * ib..32 * ib + 32];
            for j in 0..32 {
                l[32 * ib + j] = best_index_int8(values, idl * xb[j]);
            }
            let li = (li + 32) as u8;
            let l_l = li & 0xf;
            let l_h = li >> 4;
            if ib % 2 == 0 {
                scales_l[ib / 2] = l_l;
            } else {
                scales_l[ib / 2] |= l_l << 4;
            }
            *scales_h |= (l_h as u16) << (2 * (ib % 8));
        }
    } else {
        dh = fp16(scales[0]);
        if ntry > 0 {
            let id = if scales[0] != 0.0 { 1.0 / scales[0] } else { 0.0 };
            for j in 0..super_block_size {
                l[j] = best_index_int8(values, id * x[j]);
            }
        }
    }
    for i in 0..super_block_size / 32 {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
    dh
}

/// `quantize_row_iq4_nl_ref` over a whole row: blocks share the scratch `L` buffer as in ggml
/// (it only matters for all-zero blocks, whose scale is 0 so the values decode to 0 anyway;
/// the buffer starts zeroed here, where ggml's is uninitialized).
fn quantize_row_iq4_nl(x: &[f32], out: &mut [BlockIq4Nl]) {
    let mut l = [0u8; 32];
    for (xb, y) in x.chunks_exact(32).zip(out.iter_mut()) {
        let mut sh = 0u16;
        y.d = iq4_nl_impl(xb, &mut l, -1, &mut y.qs, &mut sh, &mut []);
    }
}

/// `quantize_row_iq4_xs_ref` (= `quantize_iq4_xs` without importance weights, ntry 7).
fn quantize_row_iq4_xs(x: &[f32], out: &mut [BlockIq4Xs]) {
    let mut l = [0u8; QK_K];
    for (xb, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut sh = 0u16;
        let mut sl = [0u8; 4];
        y.d = iq4_nl_impl(xb, &mut l, 7, &mut y.qs, &mut sh, &mut sl);
        y.scales_h = sh;
        y.scales_l = sl;
    }
}

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
