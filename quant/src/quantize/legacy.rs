//! The 32-value block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (`quantize_row_q*_ref`).

#![allow(clippy::needless_range_loop)]

use super::*;

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
