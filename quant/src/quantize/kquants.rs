//! The k-quants on 256-value super-blocks: Q2_K .. Q6_K and Q8_K, with ggml's scale
//! searches (`make_qx_quants`, `make_q3_quants`, `make_qkx2_quants`).

#![allow(clippy::needless_range_loop)]

use half::f16;

use super::*;

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
