//! IQ4_NL and IQ4_XS: the non-linear 4-bit code book with ggml's scale search
//! (`quantize_row_iq4_nl_impl`).

#![allow(clippy::needless_range_loop)]

use half::f16;

use super::*;

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
pub(super) fn quantize_row_iq4_nl(x: &[f32], out: &mut [BlockIq4Nl]) {
    let mut l = [0u8; 32];
    for (xb, y) in x.chunks_exact(32).zip(out.iter_mut()) {
        let mut sh = 0u16;
        y.d = iq4_nl_impl(xb, &mut l, -1, &mut y.qs, &mut sh, &mut []);
    }
}

/// `quantize_row_iq4_xs_ref` (= `quantize_iq4_xs` without importance weights, ntry 7).
pub(super) fn quantize_row_iq4_xs(x: &[f32], out: &mut [BlockIq4Xs]) {
    let mut l = [0u8; QK_K];
    for (xb, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut sh = 0u16;
        let mut sl = [0u8; 4];
        y.d = iq4_nl_impl(xb, &mut l, 7, &mut y.qs, &mut sh, &mut sl);
        y.scales_h = sh;
        y.scales_l = sl;
    }
}
