//! The ternary and one- and two-bit types: TQ1_0, TQ2_0, Q1_0, Q2_0.

#![allow(clippy::needless_range_loop)]

use super::*;

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
