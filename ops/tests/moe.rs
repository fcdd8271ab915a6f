//! MoE routing on the GPU (`vkml_ops::moe::route`) against llama.cpp's definition
//! (`build_moe_ffn`, src/llama-graph.cpp) computed here in f64: gating, top-k with the
//! selection bias, the SoftmaxWeight re-softmax, normalisation with its clamp, scale.

mod common;
use common::device;

use vkml_hal::{MemoryKind, Stream};
use vkml_ops::moe::{route, ExpertGating, Routing, MAX_EXPERTS, MAX_USED};

/// Deterministic distinct logits: a permutation of spaced values per row (no near-ties, so
/// the chosen ids are unambiguous).
fn logits(t: usize, n: usize, seed: u64) -> Vec<f32> {
    let mut st = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(t * n);
    for _ in 0..t {
        // Spread over [-4, 4): sigmoid and softmax keep them apart in f32.
        let mut row: Vec<f32> = (0..n).map(|i| (i as f32 - n as f32 / 2.0) * (8.0 / n as f32)).collect();
        for i in (1..n).rev() {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            row.swap(i, (st % (i as u64 + 1)) as usize);
        }
        out.extend(row);
    }
    out
}

/// `n` deterministic values uniform in `[-scale, scale)` (xorshift64 from `seed`).
fn uniform(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut st = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            scale * (((st >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        })
        .collect()
}

/// llama.cpp's routing of one row, in f64: (ids, weights).
fn reference(l: &[f32], r: Routing, bias: Option<&[f32]>) -> (Vec<u32>, Vec<f64>) {
    let l: Vec<f64> = l.iter().map(|&v| f64::from(v)).collect();
    let probs: Vec<f64> = match r.gating {
        ExpertGating::Softmax => {
            let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = l.iter().map(|v| (v - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        }
        ExpertGating::Sigmoid => l.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
        ExpertGating::SoftmaxWeight => l.clone(),
    };
    let sel: Vec<f64> = probs.iter().enumerate().map(|(i, p)| p + bias.map_or(0.0, |b| f64::from(b[i]))).collect();
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| sel[b].partial_cmp(&sel[a]).unwrap().then(a.cmp(&b)));
    let ids: Vec<u32> = order[..r.k].iter().map(|&i| i as u32).collect();
    let mut w: Vec<f64> = ids.iter().map(|&i| probs[i as usize]).collect();
    if r.gating == ExpertGating::SoftmaxWeight {
        let m = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = w.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        w = e.iter().map(|v| v / s).collect();
    }
    if r.norm_w {
        let s = w.iter().sum::<f64>().max(6.103515625e-5);
        w.iter_mut().for_each(|v| *v /= s);
    }
    if r.w_scale != 0.0 {
        w.iter_mut().for_each(|v| *v *= f64::from(r.w_scale));
    }
    (ids, w)
}

#[test]
fn routing_matches_llama_cpps_definition() {
    let dev = device();
    // (experts, per token, gating, norm, scale, bias): Qwen3-MoE (128, 8, softmax, norm),
    // gpt-oss (32, 4, softmax over the chosen), DeepSeek-like (256, 8, sigmoid, bias,
    // norm, scale 2.5), Mixtral (8, 2, softmax, norm), odd sizes past one pass of 256.
    let cases = [
        (128usize, 8usize, ExpertGating::Softmax, true, 0.0f32, false),
        (32, 4, ExpertGating::SoftmaxWeight, false, 0.0, false),
        (256, 8, ExpertGating::Sigmoid, true, 2.5, true),
        (8, 2, ExpertGating::Softmax, true, 0.0, false),
        (300, 3, ExpertGating::Softmax, false, 0.0, true),
        (MAX_EXPERTS, MAX_USED, ExpertGating::Sigmoid, false, 1.5, false),
        (5, 5, ExpertGating::Softmax, true, 0.0, false),
    ];
    for (n, k, gating, norm_w, w_scale, with_bias) in cases {
        let r = Routing { n_expert: n, k, gating, norm_w, w_scale };
        let t = 7;
        let l = logits(t, n, n as u64 + k as u64);
        let b: Vec<f32> = (0..n).map(|i| if i % 3 == 0 { 0.01 * i as f32 } else { 0.0 }).collect();
        let lb = dev.upload(&l).unwrap();
        let bb = dev.upload(&b).unwrap();
        let ids = dev.alloc(4 * (t * k) as u64, MemoryKind::DeviceLocal).unwrap();
        let w = dev.alloc(4 * (t * k) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(dev).unwrap();
        route(&mut s, &lb, t, r, with_bias.then_some(&bb), &ids, &w).unwrap();
        s.finish_and_wait().unwrap();
        let (ids, w) = (ids.to_vec::<u32>().unwrap(), w.to_vec::<f32>().unwrap());
        for row in 0..t {
            let (want_ids, want_w) = reference(&l[row * n..(row + 1) * n], r, with_bias.then_some(&b[..]));
            let what = format!("{n} experts, {k} per token, {gating:?}, row {row}");
            assert_eq!(&ids[row * k..(row + 1) * k], &want_ids[..], "{what}: ids");
            for (j, (&g, &c)) in w[row * k..(row + 1) * k].iter().zip(&want_w).enumerate() {
                assert!((f64::from(g) - c).abs() <= 2e-6 * c.abs().max(1e-3), "{what}: weight {j}: {g} against {c}");
            }
        }
    }
    // Exact ties rank by the lower id: 16 logits 0, 1, 2, 0, 1, 2, ...; the six largest are
    // the five 2s and then the first 1.
    let l: Vec<f32> = (0..16).map(|i| (i % 3) as f32).collect();
    let r = Routing { n_expert: 16, k: 6, gating: ExpertGating::Softmax, norm_w: true, w_scale: 0.0 };
    let (lb, ids, w) = (
        dev.upload(&l).unwrap(),
        dev.alloc(4 * 6, MemoryKind::DeviceLocal).unwrap(),
        dev.alloc(4 * 6, MemoryKind::DeviceLocal).unwrap(),
    );
    let mut s = Stream::new(dev).unwrap();
    route(&mut s, &lb, 1, r, None, &ids, &w).unwrap();
    s.finish_and_wait().unwrap();
    assert_eq!(ids.to_vec::<u32>().unwrap(), [2, 5, 8, 11, 14, 1], "ties");
    assert_eq!(reference(&l, r, None).0, [2, 5, 8, 11, 14, 1], "the reference's ties");
    let errs = dev.instance().take_validation_errors();
    assert!(errs.is_empty(), "validation errors: {errs:#?}");
}

#[test]
fn bad_routings_are_clear_errors() {
    let dev = device();
    let b = dev.alloc(4 * 64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(dev).unwrap();
    let r = Routing { n_expert: 8, k: 9, gating: ExpertGating::Softmax, norm_w: true, w_scale: 0.0 };
    let e = route(&mut s, &b, 1, r, None, &b, &b).unwrap_err().to_string();
    assert!(e.contains("9 per token"), "{e}");
    let r = Routing { n_expert: 64, k: 4, ..r };
    let e = route(&mut s, &b, 2, r, None, &b, &b).unwrap_err().to_string();
    assert!(e.contains("2 tokens need logits of 512 bytes"), "{e}");
}

/// The expert-indexed mat-vec (`quant::mat_vec_id`, ids on the device) gives, for each slot,
/// the bits of the block-wise mat-vec of its expert's own matrix (`mat_vec_with`, the
/// device's launch), and the CPU's product within the mat-vec tests' bound: shared x (gate,
/// up of one token), x per slot (down) and x per token of two slots each (gate, up of two
/// tokens), a repeated expert, each type family (32-blocks, k-quants, the IQ/FP4 kernel).
/// Matrices that do not split into experts are refused.
#[test]
fn expert_indexed_mat_vec_is_each_experts_mat_vec() {
    use vkml_ops::quant::{self, QMatrix};
    use vkml_quant::GgmlType;
    let dev = device();
    let cfg = vkml_ops::tuning::mat_vec_config(dev.caps());
    if vkml_ops::tuning::row_subgroup_size(dev.caps()).is_none() {
        eprintln!("skipped: no block-wise mat-vec kernels on this device");
        return;
    }
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::MXFP4] {
        let (n_expert, rows) = (5usize, 40usize);
        let k = 2 * ty.block_size().max(32);
        let w = uniform(n_expert * rows * k, 3 + ty as u64, 1.0);
        let bytes = vkml_quant::quantize(ty, &w).unwrap();
        let m = QMatrix::upload(dev, ty, n_expert * rows, k, &bytes).unwrap();
        let slots: [u32; 4] = [3, 0, 3, 1];
        let idb = dev.upload(&slots).unwrap();
        let row_bytes = bytes.len() / (n_expert * rows);
        for x_slots in [0usize, 1, 2] {
            let x_row = |j: usize| j.checked_div(x_slots).unwrap_or(0);
            let x = uniform((x_row(slots.len() - 1) + 1) * k, 9, 1.0);
            let xb = dev.upload(&x).unwrap();
            let y = dev.alloc(4 * (slots.len() * rows) as u64, MemoryKind::DeviceLocal).unwrap();
            let mut s = Stream::new(dev).unwrap();
            quant::mat_vec_id(&mut s, &m, n_expert, &idb, slots.len(), &xb, x_slots, &y).unwrap();
            // Each slot's expert alone, through the dense mat-vec.
            let mut dense = Vec::new();
            for (j, &e) in slots.iter().enumerate() {
                let eb = &bytes[e as usize * rows * row_bytes..(e as usize + 1) * rows * row_bytes];
                let me = QMatrix::upload(dev, ty, rows, k, eb).unwrap();
                let xj = &x[x_row(j) * k..(x_row(j) + 1) * k];
                let (xjb, yj) = (dev.upload(xj).unwrap(), dev.alloc(4 * rows as u64, MemoryKind::DeviceLocal).unwrap());
                let cfg_block = vkml_ops::tuning::MatVecConfig { integer_dot: false, ..cfg };
                quant::mat_vec_with(&mut s, &me, &xjb, 1, &yj, cfg_block).unwrap();
                dense.push((me, xjb, yj));
            }
            s.finish_and_wait().unwrap();
            let got = y.to_vec::<f32>().unwrap();
            for (j, &e) in slots.iter().enumerate() {
                let what = format!("{ty:?} slot {j} (expert {e}), x rows of {x_slots} slots");
                let want = dense[j].2.to_vec::<f32>().unwrap();
                let g = &got[j * rows..(j + 1) * rows];
                assert!(g.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: against its mat-vec");
                let wd = vkml_quant::dequantize_to_vec(
                    ty,
                    &bytes[e as usize * rows * row_bytes..(e as usize + 1) * rows * row_bytes],
                )
                .unwrap();
                let xj = &x[x_row(j) * k..(x_row(j) + 1) * k];
                for r in 0..rows {
                    let (d, mag) = (0..k).fold((0f64, 0f64), |(d, m), c| {
                        let p = f64::from(wd[r * k + c]) * f64::from(xj[c]);
                        (d + p, m + p.abs())
                    });
                    assert!((f64::from(g[r]) - d).abs() <= 1e-5 * mag + 1e-30, "{what} row {r}: {} against {d}", g[r]);
                }
            }
        }
    }
    let m = QMatrix::upload(dev, GgmlType::Q8_0, 10, 32, &vkml_quant::quantize(GgmlType::Q8_0, &[0.5; 320]).unwrap())
        .unwrap();
    let b = dev.alloc(256, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(dev).unwrap();
    let e = vkml_ops::quant::mat_vec_id(&mut s, &m, 3, &b, 1, &b, 0, &b).unwrap_err().to_string();
    assert!(e.contains("not 3 experts"), "{e}");
    let errs = dev.instance().take_validation_errors();
    assert!(errs.is_empty(), "validation errors: {errs:#?}");
}

/// The MoE feed-forward (`moe::ffn`: router, routing, the chosen experts' gate / up / down,
/// SiLU product, weighted sums; gate and up stacked per expert in one dispatch, and split)
/// of 1 and of 5 tokens against llama.cpp's `build_moe_ffn`
/// computed here in f64 on the dequantized weights: Qwen3-MoE's gating (softmax, top k,
/// normalised) and DeepSeek-like sigmoid gating, experts in Q4_0, Q8_0 and MXFP4; the 5
/// tokens' rows equal each token's call alone, bit for bit.
#[test]
fn moe_feed_forward_matches_build_moe_ffn() {
    use vkml_ops::moe::{ffn, ExpertGateUp, MoeWeights};
    use vkml_ops::nn::GluActivation;
    use vkml_ops::quant::QMatrix;
    use vkml_quant::GgmlType;
    let dev = device();
    if vkml_ops::tuning::row_subgroup_size(dev.caps()).is_none() {
        eprintln!("skipped: no block-wise mat-vec kernels on this device");
        return;
    }
    let (n_expert, n_embd, n_ff, t) = (8usize, 64usize, 96usize, 5usize);
    for (ty, gating, k) in [
        (GgmlType::Q4_0, ExpertGating::Softmax, 2usize),
        (GgmlType::Q8_0, ExpertGating::Sigmoid, 3),
        (GgmlType::MXFP4, ExpertGating::Softmax, 4),
    ] {
        let r = Routing { n_expert, k, gating, norm_w: true, w_scale: 0.0 };
        let router_w = uniform(n_expert * n_embd, 1, 0.5);
        let (gate_b, up_b, down_b) = (
            vkml_quant::quantize(ty, &uniform(n_expert * n_ff * n_embd, 2, 0.3)).unwrap(),
            vkml_quant::quantize(ty, &uniform(n_expert * n_ff * n_embd, 3, 0.3)).unwrap(),
            vkml_quant::quantize(ty, &uniform(n_expert * n_embd * n_ff, 4, 0.3)).unwrap(),
        );
        let router_bytes: Vec<u8> = router_w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let router = QMatrix::upload(dev, GgmlType::F32, n_expert, n_embd, &router_bytes).unwrap();
        let gate = QMatrix::upload(dev, ty, n_expert * n_ff, n_embd, &gate_b).unwrap();
        let up = QMatrix::upload(dev, ty, n_expert * n_ff, n_embd, &up_b).unwrap();
        let down = QMatrix::upload(dev, ty, n_expert * n_embd, n_ff, &down_b).unwrap();
        // Each expert's gate rows, then its up rows.
        let eb = gate_b.len() / n_expert;
        let stacked_b: Vec<u8> =
            (0..n_expert).flat_map(|e| [&gate_b[e * eb..(e + 1) * eb], &up_b[e * eb..(e + 1) * eb]].concat()).collect();
        let stacked = QMatrix::upload(dev, ty, n_expert * 2 * n_ff, n_embd, &stacked_b).unwrap();
        let w = MoeWeights { router: &router, gate_up: ExpertGateUp::Stacked(&stacked), down: &down };
        let w_split = MoeWeights { gate_up: ExpertGateUp::Split(&gate, &up), ..w };
        let x = uniform(t * n_embd, 5, 1.0);
        let xb = dev.upload(&x).unwrap();
        let y = dev.alloc(4 * (t * n_embd) as u64, MemoryKind::DeviceLocal).unwrap();
        let y_split = dev.alloc(4 * (t * n_embd) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(dev).unwrap();
        let d0 = s.stats().dispatches;
        ffn(&mut s, w, r, GluActivation::Silu, &xb, t, &y).unwrap();
        assert_eq!(s.stats().dispatches - d0, 5, "{ty:?}: router, routing, gate|up, down, weighted sums");
        ffn(&mut s, w_split, r, GluActivation::Silu, &xb, t, &y_split).unwrap();
        // Each token alone.
        let mut alone = Vec::new();
        for n in 0..t {
            let (xn, yn) = (
                dev.upload(&x[n * n_embd..(n + 1) * n_embd]).unwrap(),
                dev.alloc(4 * n_embd as u64, MemoryKind::DeviceLocal).unwrap(),
            );
            ffn(&mut s, w, r, GluActivation::Silu, &xn, 1, &yn).unwrap();
            alone.push((xn, yn));
        }
        s.finish_and_wait().unwrap();
        let got = y.to_vec::<f32>().unwrap();
        let split = y_split.to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&split).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty:?}: stacked against split");
        // The reference: logits, routing, experts, weighted sum, in f64.
        let (gd, ud, dd) = (
            vkml_quant::dequantize_to_vec(ty, &gate_b).unwrap(),
            vkml_quant::dequantize_to_vec(ty, &up_b).unwrap(),
            vkml_quant::dequantize_to_vec(ty, &down_b).unwrap(),
        );
        let dot = |w: &[f32], x: &[f64]| w.iter().zip(x).map(|(&a, b)| f64::from(a) * b).sum::<f64>();
        for n in 0..t {
            let one = alone[n].1.to_vec::<f32>().unwrap();
            let row = &got[n * n_embd..(n + 1) * n_embd];
            assert!(row.iter().zip(&one).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty:?} token {n}: alone");
            let xd: Vec<f64> = x[n * n_embd..(n + 1) * n_embd].iter().map(|&v| f64::from(v)).collect();
            let logits: Vec<f32> =
                (0..n_expert).map(|e| dot(&router_w[e * n_embd..(e + 1) * n_embd], &xd) as f32).collect();
            let (ids, weights) = reference(&logits, r, None);
            let mut want = vec![0f64; n_embd];
            let mut mag = vec![0f64; n_embd];
            for (&e, &we) in ids.iter().zip(&weights) {
                let e = e as usize;
                let h: Vec<f64> = (0..n_ff)
                    .map(|i| {
                        let row = (e * n_ff + i) * n_embd;
                        let (g, u) = (dot(&gd[row..row + n_embd], &xd), dot(&ud[row..row + n_embd], &xd));
                        g / (1.0 + (-g).exp()) * u
                    })
                    .collect();
                for o in 0..n_embd {
                    let row = (e * n_embd + o) * n_ff;
                    let d = dot(&dd[row..row + n_ff], &h);
                    want[o] += we * d;
                    mag[o] += (we * d).abs() + 1e-3;
                }
            }
            for o in 0..n_embd {
                let g = f64::from(row[o]);
                assert!(
                    (g - want[o]).abs() <= 1e-4 * mag[o],
                    "{ty:?} {gating:?} token {n} output {o}: {g} against {}",
                    want[o]
                );
            }
        }
    }
    let errs = dev.instance().take_validation_errors();
    assert!(errs.is_empty(), "validation errors: {errs:#?}");
}
