//! CPU dequantization of every [`GgmlType`] to `f32`.
//!
//! Each block function follows the matching `dequantize_row_*` in ggml `src/ggml-quants.c`
//! (same element order, same float operations), so results are bit-identical to ggml's.

// Loops index several parallel arrays the way ggml's C code does; iterator chains would
// obscure the correspondence with the reference.
#![allow(clippy::needless_range_loop)]

use crate::blocks::*;
use crate::tables::*;
use crate::types::{GgmlType, QK_K};
use crate::QuantError;
use half::{bf16, f16};

/// `ggml_e8m0_to_fp32_half`: an E8M0 exponent byte as `2^(x - 128)` (half of E8M0's value,
/// because `KVALUES_FP4` holds doubled E2M1 values). Source: ggml `src/ggml-impl.h`.
pub fn e8m0_to_f32_half(x: u8) -> f32 {
    let bits: u32 = if x < 2 { 0x0020_0000u32 << x } else { (x as u32 - 1) << 23 };
    f32::from_bits(bits)
}

/// `ggml_ue4m3_to_fp32`: an unsigned E4M3 scale byte (bias 7) times 0.5; `0` and `0x7F` map
/// to 0. Source: ggml `src/ggml-impl.h`.
pub fn ue4m3_to_f32(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xF) as i32;
    let man = (x & 0x7) as f32;
    let raw = if exp == 0 { man * 2f32.powi(-9) } else { (1.0 + man / 8.0) * 2f32.powi(exp - 7) };
    raw * 0.5
}

/// Low-level per-block dequantization: writes `B::ELEMS` floats into `y`.
pub trait Dequantize: Block {
    /// Dequantizes this block into `y[..Self::ELEMS]` (`y` must be at least that long).
    fn dequantize(&self, y: &mut [f32]);
}

impl Dequantize for BlockQ4_0 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for j in 0..16 {
            let x0 = (self.qs[j] & 0x0F) as i32 - 8;
            let x1 = (self.qs[j] >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + 16] = x1 as f32 * d;
        }
    }
}

impl Dequantize for BlockQ4_1 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        for j in 0..16 {
            y[j] = (self.qs[j] & 0x0F) as f32 * d + m;
            y[j + 16] = (self.qs[j] >> 4) as f32 * d + m;
        }
    }
}

impl Dequantize for BlockQ5_0 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..16 {
            let xh0 = (((qh >> j) << 4) & 0x10) as i32;
            let xh1 = ((qh >> (j + 12)) & 0x10) as i32;
            let x0 = ((self.qs[j] & 0x0F) as i32 | xh0) - 16;
            let x1 = ((self.qs[j] >> 4) as i32 | xh1) - 16;
            y[j] = x0 as f32 * d;
            y[j + 16] = x1 as f32 * d;
        }
    }
}

impl Dequantize for BlockQ5_1 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..16 {
            let xh0 = (((qh >> j) << 4) & 0x10) as i32;
            let xh1 = ((qh >> (j + 12)) & 0x10) as i32;
            let x0 = (self.qs[j] & 0x0F) as i32 | xh0;
            let x1 = (self.qs[j] >> 4) as i32 | xh1;
            y[j] = x0 as f32 * d + m;
            y[j + 16] = x1 as f32 * d + m;
        }
    }
}

impl Dequantize for BlockQ8_0 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for j in 0..32 {
            y[j] = self.qs[j] as f32 * d;
        }
    }
}

impl Dequantize for BlockQ8_1 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for j in 0..32 {
            y[j] = self.qs[j] as f32 * d;
        }
    }
}

impl Dequantize for BlockQ2K {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        let mut is = 0;
        let mut o = 0;
        for n in 0..2 {
            let q = &self.qs[32 * n..32 * n + 32];
            let mut shift = 0;
            for _ in 0..4 {
                for half in 0..2 {
                    let sc = self.scales[is];
                    is += 1;
                    let dl = d * (sc & 0xF) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for l in 0..16 {
                        y[o] = dl * ((q[l + 16 * half] >> shift) & 3) as f32 - ml;
                        o += 1;
                    }
                }
                shift += 2;
            }
        }
    }
}

/// Unpacks the 16 six-bit Q3_K scales (already minus 32). Source: `dequantize_row_q3_K`.
pub(crate) fn q3k_scales(packed: &[u8; 12]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let a0 = u32::from_le_bytes([packed[0], packed[1], packed[2], packed[3]]);
    let a1 = u32::from_le_bytes([packed[4], packed[5], packed[6], packed[7]]);
    let tmp = u32::from_le_bytes([packed[8], packed[9], packed[10], packed[11]]);
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (k, w) in aux.iter().enumerate() {
        for (b, byte) in w.to_le_bytes().iter().enumerate() {
            out[4 * k + b] = (*byte as i8).wrapping_sub(32);
        }
    }
    out
}

impl Dequantize for BlockQ3K {
    fn dequantize(&self, y: &mut [f32]) {
        let d_all = self.d.to_f32();
        let scales = q3k_scales(&self.scales);
        let mut m: u8 = 1;
        let mut is = 0;
        let mut o = 0;
        for n in 0..2 {
            let q = &self.qs[32 * n..32 * n + 32];
            let mut shift = 0;
            for _ in 0..4 {
                for half in 0..2 {
                    let dl = d_all * scales[is] as f32;
                    is += 1;
                    for l in 0..16 {
                        let idx = l + 16 * half;
                        let low = ((q[idx] >> shift) & 3) as i32;
                        let hi = if self.hmask[idx] & m != 0 { 0 } else { 4 };
                        y[o] = dl * (low - hi) as f32;
                        o += 1;
                    }
                }
                shift += 2;
                m = m.wrapping_shl(1);
            }
        }
    }
}

/// `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of Q4_K / Q5_K.
pub(crate) fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

impl Dequantize for BlockQ4K {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        for j in 0..4 {
            let q = &self.qs[32 * j..32 * j + 32];
            let (sc, m) = get_scale_min_k4(2 * j, &self.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * j + 1, &self.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            for l in 0..32 {
                y[64 * j + l] = d1 * (q[l] & 0xF) as f32 - m1;
                y[64 * j + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

impl Dequantize for BlockQ5K {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        let mut u1: u8 = 1;
        let mut u2: u8 = 2;
        for j in 0..4 {
            let ql = &self.qs[32 * j..32 * j + 32];
            let (sc, m) = get_scale_min_k4(2 * j, &self.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * j + 1, &self.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            for l in 0..32 {
                let h1 = if self.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if self.qh[l] & u2 != 0 { 16 } else { 0 };
                y[64 * j + l] = d1 * ((ql[l] & 0xF) + h1) as f32 - m1;
                y[64 * j + 32 + l] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
            }
            u1 = u1.wrapping_shl(2);
            u2 = u2.wrapping_shl(2);
        }
    }
}

impl Dequantize for BlockQ6K {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for n in 0..2 {
            let ql = &self.ql[64 * n..64 * n + 64];
            let qh = &self.qh[32 * n..32 * n + 32];
            let sc = &self.scales[8 * n..8 * n + 8];
            let yb = &mut y[128 * n..128 * n + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                yb[l] = d * sc[is] as f32 * q1 as f32;
                yb[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                yb[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                yb[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

impl Dequantize for BlockQ8K {
    fn dequantize(&self, y: &mut [f32]) {
        for j in 0..QK_K {
            y[j] = self.d * self.qs[j] as f32;
        }
    }
}

#[inline]
fn grid_byte_u64(grid: u64, j: usize) -> u8 {
    grid.to_le_bytes()[j]
}

#[inline]
fn sign(signs: u8, j: usize) -> f32 {
    if signs & KMASK_IQ2XS[j] != 0 {
        -1.0
    } else {
        1.0
    }
}

impl Dequantize for BlockIq2Xxs {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        for ib32 in 0..8 {
            let q = &self.qs[4 * ib32..4 * ib32 + 4];
            let aux0 = q[0] as u32 | (q[1] as u32) << 16;
            let aux1 = q[2] as u32 | (q[3] as u32) << 16;
            let aux8 = aux0.to_le_bytes();
            let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
            for l in 0..4 {
                let grid = IQ2XXS_GRID[aux8[l] as usize];
                let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
                for j in 0..8 {
                    y[o + j] = db * grid_byte_u64(grid, j) as f32 * sign(signs, j);
                }
                o += 8;
            }
        }
    }
}

impl Dequantize for BlockIq2Xs {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        for ib32 in 0..8 {
            let db = [
                d * (0.5 + (self.scales[ib32] & 0xf) as f32) * 0.25,
                d * (0.5 + (self.scales[ib32] >> 4) as f32) * 0.25,
            ];
            for l in 0..4 {
                let q = self.qs[4 * ib32 + l];
                let grid = IQ2XS_GRID[(q & 511) as usize];
                let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
                for j in 0..8 {
                    y[o + j] = db[l / 2] * grid_byte_u64(grid, j) as f32 * sign(signs, j);
                }
                o += 8;
            }
        }
    }
}

impl Dequantize for BlockIq2S {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        for ib32 in 0..8 {
            let db = [
                d * (0.5 + (self.scales[ib32] & 0xf) as f32) * 0.25,
                d * (0.5 + (self.scales[ib32] >> 4) as f32) * 0.25,
            ];
            for l in 0..4 {
                let dl = db[l / 2];
                let idx = self.qs[4 * ib32 + l] as usize | (((self.qh[ib32] as usize) << (8 - 2 * l)) & 0x300);
                let grid = IQ2S_GRID[idx];
                let signs = self.qs[32 + 4 * ib32 + l];
                for j in 0..8 {
                    y[o + j] = dl * grid_byte_u64(grid, j) as f32 * sign(signs, j);
                }
                o += 8;
            }
        }
    }
}

impl Dequantize for BlockIq3Xxs {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        for ib32 in 0..8 {
            let qs = &self.qs[8 * ib32..8 * ib32 + 8];
            let g = &self.qs[64 + 4 * ib32..64 + 4 * ib32 + 4];
            let aux32 = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
            let db = d * (0.5 + (aux32 >> 28) as f32) * 0.5;
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((aux32 >> (7 * l)) & 127) as usize];
                let g1 = IQ3XXS_GRID[qs[2 * l] as usize].to_le_bytes();
                let g2 = IQ3XXS_GRID[qs[2 * l + 1] as usize].to_le_bytes();
                for j in 0..4 {
                    y[o + j] = db * g1[j] as f32 * sign(signs, j);
                    y[o + j + 4] = db * g2[j] as f32 * sign(signs, j + 4);
                }
                o += 8;
            }
        }
    }
}

impl Dequantize for BlockIq3S {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        for ib32 in (0..8).step_by(2) {
            let sc = self.scales[ib32 / 2];
            let dbs = [d * (1 + 2 * (sc & 0xf) as i32) as f32, d * (1 + 2 * (sc >> 4) as i32) as f32];
            for (h, db) in dbs.iter().enumerate() {
                let ib = ib32 + h;
                let qs = &self.qs[8 * ib..8 * ib + 8];
                let qh = self.qh[ib] as usize;
                let signs = &self.signs[4 * ib..4 * ib + 4];
                for l in 0..4 {
                    let i1 = qs[2 * l] as usize | ((qh << (8 - 2 * l)) & 256);
                    let i2 = qs[2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256);
                    let g1 = IQ3S_GRID[i1].to_le_bytes();
                    let g2 = IQ3S_GRID[i2].to_le_bytes();
                    for j in 0..4 {
                        y[o + j] = db * g1[j] as f32 * sign(signs[l], j);
                        y[o + j + 4] = db * g2[j] as f32 * sign(signs[l], j + 4);
                    }
                    o += 8;
                }
            }
        }
    }
}

/// `IQ1S_DELTA` / `IQ1M_DELTA` (ggml-common.h).
pub const IQ1S_DELTA: f32 = 0.125;

impl Dequantize for BlockIq1S {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        for ib in 0..8 {
            let qh = self.qh[ib];
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
            for l in 0..4 {
                let idx = self.qs[4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                let grid = IQ1S_GRID[idx].to_le_bytes();
                for j in 0..8 {
                    y[o + j] = dl * (grid[j] as i8 as f32 + delta);
                }
                o += 8;
            }
        }
    }
}

/// The f16 super-block scale of an IQ1_M block, spread over the top nibbles of `scales`.
pub(crate) fn iq1m_scale(scales: &[u8; 8]) -> (f16, [u16; 4]) {
    let sc = [
        u16::from_le_bytes([scales[0], scales[1]]),
        u16::from_le_bytes([scales[2], scales[3]]),
        u16::from_le_bytes([scales[4], scales[5]]),
        u16::from_le_bytes([scales[6], scales[7]]),
    ];
    let u = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    (f16::from_bits(u), sc)
}

impl Dequantize for BlockIq1M {
    fn dequantize(&self, y: &mut [f32]) {
        let (scale, sc) = iq1m_scale(&self.scales);
        let d = scale.to_f32();
        let mut o = 0;
        for ib in 0..8 {
            let s = sc[ib / 2];
            let dl1 = d * (2 * ((s >> (6 * (ib % 2))) & 0x7) + 1) as f32;
            let dl2 = d * (2 * ((s >> (6 * (ib % 2) + 3)) & 0x7) + 1) as f32;
            let qs = &self.qs[4 * ib..4 * ib + 4];
            let qh = &self.qh[2 * ib..2 * ib + 2];
            let idx = [
                qs[0] as usize | ((qh[0] as usize) << 8 & 0x700),
                qs[1] as usize | ((qh[0] as usize) << 4 & 0x700),
                qs[2] as usize | ((qh[1] as usize) << 8 & 0x700),
                qs[3] as usize | ((qh[1] as usize) << 4 & 0x700),
            ];
            let delta = [
                if qh[0] & 0x08 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA },
                if qh[0] & 0x80 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA },
                if qh[1] & 0x08 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA },
                if qh[1] & 0x80 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA },
            ];
            for l in 0..4 {
                let dl = if l < 2 { dl1 } else { dl2 };
                let grid = IQ1S_GRID[idx[l]].to_le_bytes();
                for j in 0..8 {
                    y[o + j] = dl * (grid[j] as i8 as f32 + delta[l]);
                }
                o += 8;
            }
        }
    }
}

impl Dequantize for BlockIq4Nl {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for j in 0..16 {
            y[j] = d * KVALUES_IQ4NL[(self.qs[j] & 0xf) as usize] as f32;
            y[j + 16] = d * KVALUES_IQ4NL[(self.qs[j] >> 4) as usize] as f32;
        }
    }
}

/// 6-bit scale of sub-block `ib` (0..8) of an IQ4_XS block, as stored (0..64, bias 32 not removed).
pub(crate) fn iq4xs_ls(b: &BlockIq4Xs, ib: usize) -> i32 {
    (((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) as i32) | ((((b.scales_h >> (2 * ib)) & 3) as i32) << 4)
}

impl Dequantize for BlockIq4Xs {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for ib in 0..8 {
            let dl = d * (iq4xs_ls(self, ib) - 32) as f32;
            let qs = &self.qs[16 * ib..16 * ib + 16];
            for j in 0..16 {
                y[32 * ib + j] = dl * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as f32;
                y[32 * ib + j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
            }
        }
    }
}

/// One base-3 digit of a TQ1_0 byte: `((q * 3^n mod 256) * 3) >> 8` (ggml `dequantize_row_tq1_0`).
#[inline]
pub(crate) fn tq1_trit(q: u8, n: usize) -> i32 {
    const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];
    let q = q.wrapping_mul(POW3[n]);
    ((q as u16 * 3) >> 8) as i32
}

impl Dequantize for BlockTq1_0 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        // first 32 bytes: 5 x 32 elements
        for n in 0..5 {
            for m in 0..32 {
                y[o] = (tq1_trit(self.qs[m], n) - 1) as f32 * d;
                o += 1;
            }
        }
        // next 16 bytes: 5 x 16 elements
        for n in 0..5 {
            for m in 0..16 {
                y[o] = (tq1_trit(self.qs[32 + m], n) - 1) as f32 * d;
                o += 1;
            }
        }
        for n in 0..4 {
            for j in 0..4 {
                y[o] = (tq1_trit(self.qh[j], n) - 1) as f32 * d;
                o += 1;
            }
        }
    }
}

impl Dequantize for BlockTq2_0 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let mut o = 0;
        for j in (0..64).step_by(32) {
            for l in 0..4 {
                for m in 0..32 {
                    let q = ((self.qs[j + m] >> (l * 2)) & 3) as i32;
                    y[o] = (q - 1) as f32 * d;
                    o += 1;
                }
            }
        }
    }
}

impl Dequantize for BlockMxfp4 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = e8m0_to_f32_half(self.e);
        for j in 0..16 {
            y[j] = KVALUES_FP4[(self.qs[j] & 0x0F) as usize] as f32 * d;
            y[j + 16] = KVALUES_FP4[(self.qs[j] >> 4) as usize] as f32 * d;
        }
    }
}

impl Dequantize for BlockNvfp4 {
    fn dequantize(&self, y: &mut [f32]) {
        for s in 0..4 {
            let d = ue4m3_to_f32(self.d[s]);
            for j in 0..8 {
                let q = self.qs[8 * s + j];
                y[16 * s + j] = KVALUES_FP4[(q & 0x0F) as usize] as f32 * d;
                y[16 * s + j + 8] = KVALUES_FP4[(q >> 4) as usize] as f32 * d;
            }
        }
    }
}

impl Dequantize for BlockQ1_0 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for j in 0..128 {
            let bit = (self.qs[j / 8] >> (j % 8)) & 1;
            y[j] = if bit != 0 { d } else { -d };
        }
    }
}

impl Dequantize for BlockQ2_0 {
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for j in 0..64 {
            let q = (self.qs[j / 4] >> ((j % 4) * 2)) & 3;
            y[j] = (q as i32 - 1) as f32 * d;
        }
    }
}

fn deq_blocks<B: Dequantize>(data: &[u8], out: &mut [f32]) {
    let sz = std::mem::size_of::<B>();
    for (chunk, y) in data.chunks_exact(sz).zip(out.chunks_exact_mut(B::ELEMS)) {
        let b: B = bytemuck::pod_read_unaligned(chunk);
        b.dequantize(y);
    }
}

fn deq_scalar<const N: usize>(data: &[u8], out: &mut [f32], f: impl Fn([u8; N]) -> f32) {
    for (chunk, y) in data.chunks_exact(N).zip(out.iter_mut()) {
        let mut a = [0u8; N];
        a.copy_from_slice(chunk);
        *y = f(a);
    }
}

/// Number of elements stored in `n_bytes` bytes of type `ty`, or an error if `n_bytes` is not a
/// whole number of blocks.
pub fn elements_in(ty: GgmlType, n_bytes: usize) -> Result<usize, QuantError> {
    if !n_bytes.is_multiple_of(ty.type_size()) {
        return Err(QuantError::PartialBlock { ty, n_bytes });
    }
    (n_bytes / ty.type_size()).checked_mul(ty.block_size()).ok_or(QuantError::PartialBlock { ty, n_bytes })
}

/// Dequantizes `data` (whole blocks of type `ty`, little-endian, any alignment) into `out`.
///
/// `out.len()` must equal `data.len() / ty.type_size() * ty.block_size()`. Integer types
/// (I8..I64) and F64 are converted with `as f32`. Never panics.
///
/// Errors: [`QuantError::PartialBlock`] if `data` is not a whole number of blocks,
/// [`QuantError::LengthMismatch`] if `out` has the wrong length.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let n = elements_in(ty, data.len())?;
    if out.len() != n {
        return Err(QuantError::LengthMismatch { expected: n, got: out.len() });
    }
    use GgmlType as T;
    match ty {
        T::F32 => deq_scalar::<4>(data, out, f32::from_le_bytes),
        T::F16 => deq_scalar::<2>(data, out, |b| f16::from_le_bytes(b).to_f32()),
        T::BF16 => deq_scalar::<2>(data, out, |b| bf16::from_le_bytes(b).to_f32()),
        T::F64 => deq_scalar::<8>(data, out, |b| f64::from_le_bytes(b) as f32),
        T::I8 => deq_scalar::<1>(data, out, |b| b[0] as i8 as f32),
        T::I16 => deq_scalar::<2>(data, out, |b| i16::from_le_bytes(b) as f32),
        T::I32 => deq_scalar::<4>(data, out, |b| i32::from_le_bytes(b) as f32),
        T::I64 => deq_scalar::<8>(data, out, |b| i64::from_le_bytes(b) as f32),
        T::Q4_0 => deq_blocks::<BlockQ4_0>(data, out),
        T::Q4_1 => deq_blocks::<BlockQ4_1>(data, out),
        T::Q5_0 => deq_blocks::<BlockQ5_0>(data, out),
        T::Q5_1 => deq_blocks::<BlockQ5_1>(data, out),
        T::Q8_0 => deq_blocks::<BlockQ8_0>(data, out),
        T::Q8_1 => deq_blocks::<BlockQ8_1>(data, out),
        T::Q2_K => deq_blocks::<BlockQ2K>(data, out),
        T::Q3_K => deq_blocks::<BlockQ3K>(data, out),
        T::Q4_K => deq_blocks::<BlockQ4K>(data, out),
        T::Q5_K => deq_blocks::<BlockQ5K>(data, out),
        T::Q6_K => deq_blocks::<BlockQ6K>(data, out),
        T::Q8_K => deq_blocks::<BlockQ8K>(data, out),
        T::IQ2_XXS => deq_blocks::<BlockIq2Xxs>(data, out),
        T::IQ2_XS => deq_blocks::<BlockIq2Xs>(data, out),
        T::IQ3_XXS => deq_blocks::<BlockIq3Xxs>(data, out),
        T::IQ1_S => deq_blocks::<BlockIq1S>(data, out),
        T::IQ4_NL => deq_blocks::<BlockIq4Nl>(data, out),
        T::IQ3_S => deq_blocks::<BlockIq3S>(data, out),
        T::IQ2_S => deq_blocks::<BlockIq2S>(data, out),
        T::IQ4_XS => deq_blocks::<BlockIq4Xs>(data, out),
        T::IQ1_M => deq_blocks::<BlockIq1M>(data, out),
        T::TQ1_0 => deq_blocks::<BlockTq1_0>(data, out),
        T::TQ2_0 => deq_blocks::<BlockTq2_0>(data, out),
        T::MXFP4 => deq_blocks::<BlockMxfp4>(data, out),
        T::NVFP4 => deq_blocks::<BlockNvfp4>(data, out),
        T::Q1_0 => deq_blocks::<BlockQ1_0>(data, out),
        T::Q2_0 => deq_blocks::<BlockQ2_0>(data, out),
    }
    Ok(())
}

/// Like [`dequantize`] but allocates the output vector.
pub fn dequantize_to_vec(ty: GgmlType, data: &[u8]) -> Result<Vec<f32>, QuantError> {
    let n = elements_in(ty, data.len())?;
    let mut out = vec![0f32; n];
    dequantize(ty, data, &mut out)?;
    Ok(out)
}
