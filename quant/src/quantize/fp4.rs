//! The 4-bit float types: MXFP4 (E8M0 scales) and NVFP4 (UE4M3 scales).

#![allow(clippy::needless_range_loop)]

use super::*;

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
