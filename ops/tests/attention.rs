//! Flash attention over the f16 KV cache against candle on the CPU
//! (softmax(q kᵀ · scale + causal mask) v with K and V rounded to f16 as the cache stores
//! them), for prefill and decode, grouped-query heads, and split-KV decode. Every case
//! runs with f32 and with f16 queries, new K/V and output, on a device with subgroup
//! reductions and on one told it has none (portable reductions; see `common`). The
//! reference takes q rounded to f16 for the f16 runs.
//! Tolerance: |gpu − cpu| ≤ tol · max(1, |cpu|), tol 2e-5 for f32 and 1e-3 for f16 (the
//! output's rounding to f16, ≤ 2^-11 relative, plus the f32 error).

mod common;

use candle_core::Tensor;
use common::{alloc, download, reduce_devices, round, upload, DTYPES};
use proptest::prelude::*;
use vkml_hal::{MemoryKind, Stream};
use vkml_ops::attention::{self, AttnShape, KvCache, SplitMerge};
use vkml_ops::{Dtype, OpsError};

const CPU: candle_core::Device = candle_core::Device::Cpu;

fn rand_vec(n: usize, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn f16_round(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

/// candle reference: q [t, h, d]; k, v [kv_len, n_kv, d] (token-major as appended); query
/// i (at position q_pos0 + i) sees key j where `j <= q_pos0 + i` if causal and
/// `q_pos0 + i - j < window` if window > 0 (llama.cpp's standard sliding window); scores
/// soft-capped to `softcap · tanh(s / softcap)` if softcap > 0; with `sinks` (one logit per
/// head, gpt-oss) a column of each head's sink joins the softmax and is dropped before the
/// values (llama.cpp's `ggml_soft_max_add_sinks`).
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    h: usize,
    n_kv: usize,
    d: usize,
    kv_len: usize,
    q_pos0: usize,
    causal: bool,
    window: usize,
    softcap: f32,
    scale: f32,
    sinks: Option<&[f32]>,
) -> Vec<f32> {
    let g = h / n_kv;
    let qt = Tensor::from_vec(q.to_vec(), (t, h, d), &CPU).unwrap().transpose(0, 1).unwrap().contiguous().unwrap();
    let expand = |x: &[f32]| {
        Tensor::from_vec(f16_round(x), (kv_len, n_kv, d), &CPU)
            .unwrap()
            .transpose(0, 1)
            .unwrap() // [n_kv, L, d]
            .unsqueeze(1)
            .unwrap()
            .expand((n_kv, g, kv_len, d))
            .unwrap()
            .reshape((h, kv_len, d))
            .unwrap()
            .contiguous()
            .unwrap()
    };
    let (kt, vt) = (expand(k), expand(v));
    let scores = (qt.matmul(&kt.transpose(1, 2).unwrap().contiguous().unwrap()).unwrap() * f64::from(scale)).unwrap();
    let scores = if softcap > 0.0 {
        ((scores / f64::from(softcap)).unwrap().tanh().unwrap() * f64::from(softcap)).unwrap()
    } else {
        scores
    };
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..kv_len).map(move |j| {
                let hidden = (causal && j > q_pos0 + i) || (window > 0 && j + window <= q_pos0 + i);
                if hidden {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    let scores = scores.broadcast_add(&Tensor::from_vec(mask, (t, kv_len), &CPU).unwrap()).unwrap();
    let probs = match sinks {
        Some(sk) => {
            let col = Tensor::from_vec(sk.to_vec(), (h, 1, 1), &CPU).unwrap().broadcast_as((h, t, 1)).unwrap();
            let all = Tensor::cat(&[&scores, &col.contiguous().unwrap()], 2).unwrap();
            candle_nn::ops::softmax_last_dim(&all).unwrap().narrow(2, 0, kv_len).unwrap().contiguous().unwrap()
        }
        None => candle_nn::ops::softmax_last_dim(&scores).unwrap(),
    };
    probs.matmul(&vt).unwrap().transpose(0, 1).unwrap().contiguous().unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn flash_attention_matches_candle(
        n_kv in 1usize..3, group in 1usize..4, half_d in 1usize..65, kv_len in 1usize..90,
        t_q in 1usize..6, causal in any::<bool>(), n_splits in 1usize..5, split_at in 0usize..90, seed in any::<u64>(),
        window in prop_oneof![Just(0usize), 1usize..40], softcap in prop_oneof![Just(0f32), 0.5f32..3.0],
        ring in any::<bool>(), ring_spare in 0usize..3, with_sinks in any::<bool>(),
    ) {
        let (h, d) = (n_kv * group, 2 * half_d);
        let t_q = t_q.min(kv_len);
        let q_pos0 = kv_len - t_q; // the queries are the last t_q positions
        // A window only with the causal mask (as models use it): every query then sees a key.
        let window = if causal { window } else { 0 };
        // With a window, a ring of just the slots the queries' visible keys need (plus a
        // spare few): older positions are overwritten as later ones wrap around.
        let ring = ring && window > 0;
        let ctx = if ring { (window + t_q - 1 + ring_spare).min(kv_len + 7) } else { kv_len + 7 };
        let mut seed = seed | 1;
        let q = rand_vec(t_q * h * d, &mut seed);
        let k = rand_vec(kv_len * n_kv * d, &mut seed);
        let v = rand_vec(kv_len * n_kv * d, &mut seed);
        let sinks = with_sinks.then(|| rand_vec(h, &mut seed).iter().map(|x| 4.0 * x).collect::<Vec<f32>>());
        let sh0 = AttnShape { t_q, n_heads: h, kv_len, q_pos0, causal, window, softcap, scale: 1.0 / (d as f32).sqrt(), n_splits, sinks: None };
        let (po_len, ml_len) = attention::split_scratch_len(&sh0, d);
        for dt in DTYPES {
            // K and V reach the cache as f16 either way.
            let want = reference(&round(dt, &q), &k, &v, t_q, h, n_kv, d, kv_len, q_pos0, causal, window, softcap, sh0.scale, sinks.as_deref());
            let tol = if dt == Dtype::F16 { 1e-3 } else { 2e-5 };
            for (path, dev) in reduce_devices() {
                let sink_buf = sinks.as_ref().map(|sk| upload(dev, Dtype::F32, sk));
                let sh = AttnShape { sinks: sink_buf.as_ref(), ..sh0 };
                let kc = KvCache::new(dev, n_kv, ctx, d).unwrap();
                let vc = KvCache::new(dev, n_kv, ctx, d).unwrap();
                // Fill the caches in two appends (a prompt, then later tokens); a ring in
                // appends of at most its slots.
                let cut = split_at.min(kv_len);
                let row = n_kv * d;
                let parts: Vec<(usize, usize)> = if ring {
                    (0..kv_len).step_by(ctx).map(|a| (a, (a + ctx).min(kv_len))).collect()
                } else {
                    vec![(0, cut), (cut, kv_len)]
                };
                let bufs: Vec<_> = parts.iter().flat_map(|&(a, b)| [upload(dev, dt, &k[a * row..b * row]), upload(dev, dt, &v[a * row..b * row])]).collect();
                let qb = upload(dev, dt, &q);
                let out = alloc(dev, dt, t_q * h * d);
                let po = alloc(dev, Dtype::F32, po_len.max(1));
                let ml = alloc(dev, Dtype::F32, ml_len.max(1));
                let mut s = Stream::new(dev).unwrap();
                for (i, &(a, b)) in parts.iter().enumerate() {
                    attention::kv_append(&mut s, dt, &bufs[2 * i], b - a, a, &kc).unwrap();
                    attention::kv_append(&mut s, dt, &bufs[2 * i + 1], b - a, a, &vc).unwrap();
                }
                attention::flash_attn(&mut s, dt, &qb, &kc, &vc, sh, &out, Some((&po, &ml))).unwrap();
                s.finish_and_wait().unwrap();
                let got = download(dt, &out);
                prop_assert_eq!(got.len(), want.len());
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    prop_assert!((g - w).abs() <= tol * w.abs().max(1.0), "{:?} {} [{}]: gpu {} cpu {} ({:?})", dt, path, i, g, w, sh);
                }
                // Splits merged by a second dispatch give the same bits as merged in place
                // (the default), and so does a second in-place run (its split counts reset
                // by the first).
                let (o2, o3) = (alloc(dev, dt, t_q * h * d), alloc(dev, dt, t_q * h * d));
                attention::flash_attn_with(&mut s, dt, &qb, &kc, &vc, sh, &o2, Some((&po, &ml)), SplitMerge::Dispatch).unwrap();
                attention::flash_attn(&mut s, dt, &qb, &kc, &vc, sh, &o3, Some((&po, &ml))).unwrap();
                s.finish_and_wait().unwrap();
                for (which, o) in [("merge dispatch", &o2), ("second in-place run", &o3)] {
                    let other = download(dt, o);
                    prop_assert!(got.iter().zip(&other).all(|(a, b)| a.to_bits() == b.to_bits()), "{:?} {} {}: {:?}", dt, path, which, sh);
                }
                let errs = dev.instance().take_validation_errors();
                prop_assert!(errs.is_empty(), "validation errors: {:?}", errs);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Prompts of 16 tokens and more at head dims 64, 96 and 128: on a device with f16
    /// cooperative matrices they run on the tensor-core kernel (`flash_attn_cm.comp`,
    /// [`attention::tensor_core_prefill`]), which rounds q and the softmax weights to f16;
    /// its reference then takes q rounded to f16, and its tolerance adds the weights'
    /// rounding (≤ 2^-11 relative each, so ≤ 2^-11 · max|v| on the output): 1.5e-3 for f32,
    /// 2e-3 for f16. Elsewhere the per-token kernel runs, with the tolerances above.
    #[test]
    fn prefill_attention_matches_candle(
        d in prop_oneof![Just(64usize), Just(96), Just(128)], n_kv in 1usize..3, group in 1usize..4, t_q in 16usize..150,
        q_pos0 in 0usize..40, causal in any::<bool>(), seed in any::<u64>(),
        window in prop_oneof![Just(0usize), 1usize..100], softcap in prop_oneof![Just(0f32), 0.5f32..3.0],
        with_sinks in any::<bool>(),
    ) {
        let h = n_kv * group;
        let kv_len = q_pos0 + t_q;
        let ctx = kv_len + 5;
        let mut seed = seed | 1;
        let q = rand_vec(t_q * h * d, &mut seed);
        let k = rand_vec(kv_len * n_kv * d, &mut seed);
        let v = rand_vec(kv_len * n_kv * d, &mut seed);
        let window = if causal { window } else { 0 };
        let sinks = with_sinks.then(|| rand_vec(h, &mut seed).iter().map(|x| 4.0 * x).collect::<Vec<f32>>());
        let sh0 = AttnShape { t_q, n_heads: h, kv_len, q_pos0, causal, window, softcap, scale: 1.0 / (d as f32).sqrt(), n_splits: 1, sinks: None };
        for dt in DTYPES {
            for (path, dev) in reduce_devices() {
                let sink_buf = sinks.as_ref().map(|sk| upload(dev, Dtype::F32, sk));
                let sh = AttnShape { sinks: sink_buf.as_ref(), ..sh0 };
                let tensor = attention::tensor_core_prefill(dev.caps(), d, &sh);
                let qr = if tensor { round(Dtype::F16, &q) } else { round(dt, &q) };
                let want = reference(&qr, &k, &v, t_q, h, n_kv, d, kv_len, q_pos0, causal, window, softcap, sh.scale, sinks.as_deref());
                let tol = match (tensor, dt) {
                    (true, Dtype::F16) => 2e-3,
                    (true, _) => 1.5e-3,
                    (false, Dtype::F16) => 1e-3,
                    (false, _) => 2e-5,
                };
                let kc = KvCache::new(dev, n_kv, ctx, d).unwrap();
                let vc = KvCache::new(dev, n_kv, ctx, d).unwrap();
                let (kb, vb, qb) = (upload(dev, dt, &k), upload(dev, dt, &v), upload(dev, dt, &q));
                let out = alloc(dev, dt, t_q * h * d);
                let mut s = Stream::new(dev).unwrap();
                attention::kv_append(&mut s, dt, &kb, kv_len, 0, &kc).unwrap();
                attention::kv_append(&mut s, dt, &vb, kv_len, 0, &vc).unwrap();
                attention::flash_attn(&mut s, dt, &qb, &kc, &vc, sh, &out, None).unwrap();
                s.finish_and_wait().unwrap();
                let got = download(dt, &out);
                prop_assert_eq!(got.len(), want.len());
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    prop_assert!((g - w).abs() <= tol * w.abs().max(1.0), "{:?} {} tensor {} [{}]: gpu {} cpu {} ({:?})", dt, path, tensor, i, g, w, sh);
                }
                // The f16 output of an f32 q (the o-projection's x): the f32 output's bits
                // rounded to f16, on the tensor-core kernel; refused where that does not run.
                if dt == Dtype::F32 {
                    let o16 = alloc(dev, Dtype::F16, t_q * h * d);
                    let r = attention::flash_attn_f16_out(&mut s, &qb, &kc, &vc, sh, &o16);
                    if tensor {
                        r.unwrap();
                        s.finish_and_wait().unwrap();
                        let got16 = download(Dtype::F16, &o16);
                        for (i, (g16, g)) in got16.iter().zip(&got).enumerate() {
                            prop_assert_eq!(g16.to_bits(), half::f16::from_f32(*g).to_f32().to_bits(), "f16 out [{}] ({:?})", i, sh);
                        }
                    } else {
                        let e = r.unwrap_err().to_string();
                        prop_assert!(e.contains("tensor-core prefill kernel only"), "{}", e);
                    }
                }
                let errs = dev.instance().take_validation_errors();
                prop_assert!(errs.is_empty(), "validation errors: {:?}", errs);
            }
        }
    }
}

#[test]
fn cache_overflow_and_bad_heads_are_errors() {
    let dev = common::device();
    let kc = KvCache::new(dev, 2, 8, 4).unwrap();
    let x = dev.upload(&[0.0f32; 64]).unwrap();
    let mut s = Stream::new(dev).unwrap();
    let e = attention::kv_append(&mut s, Dtype::F32, &x, 9, 6, &kc).unwrap_err();
    assert!(e.to_string().contains("exceed the cache's 8 positions"), "{e}");
    let sh = AttnShape {
        t_q: 1,
        n_heads: 3,
        kv_len: 2,
        q_pos0: 1,
        causal: true,
        window: 0,
        softcap: 0.0,
        scale: 0.5,
        n_splits: 1,
        sinks: None,
    };
    let e = attention::flash_attn(&mut s, Dtype::F32, &x, &kc, &kc, sh, &x, None).unwrap_err();
    assert!(e.to_string().contains("not a multiple of 2 KV heads"), "{e}");
    // Past its 8 slots, a cache is a ring: a window of 8 fits, a window of 9 or none does not.
    let at = |window| AttnShape { t_q: 1, n_heads: 2, kv_len: 20, q_pos0: 19, window, ..sh };
    let out = dev.upload(&[0.0f32; 8]).unwrap();
    attention::flash_attn(&mut s, Dtype::F32, &x, &kc, &kc, at(8), &out, None).unwrap();
    for window in [9, 0] {
        let e = attention::flash_attn(&mut s, Dtype::F32, &x, &kc, &kc, at(window), &out, None).unwrap_err();
        assert!(e.to_string().contains("kv_len 20 exceeds the cache's 8 positions"), "window {window}: {e}");
    }
    s.finish_and_wait().unwrap();
    assert!(KvCache::new(dev, 1, 4, 3).is_err());
}

#[test]
fn f16_attention_without_16bit_storage_is_a_clear_error() {
    let dev = common::no_f16_device();
    let kc = KvCache::new(&dev, 1, 8, 4).unwrap();
    let x = dev.upload(&[0.5f32; 16]).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let sh = AttnShape {
        t_q: 1,
        n_heads: 1,
        kv_len: 2,
        q_pos0: 1,
        causal: true,
        window: 0,
        softcap: 0.0,
        scale: 0.5,
        n_splits: 1,
        sinks: None,
    };
    let e = attention::flash_attn(&mut s, Dtype::F16, &x, &kc, &kc, sh, &x, None).unwrap_err();
    assert!(matches!(e, OpsError::MissingFeature { feature: "storageBuffer16BitAccess", .. }), "{e}");
    // Appending f16 keys copies packed words: no 16-bit storage needed.
    attention::kv_append(&mut s, Dtype::F16, &x, 2, 0, &kc).unwrap();
    s.finish_and_wait().unwrap();
}

#[test]
fn kv_append_from_stacked_rows_equals_contiguous_append() {
    // Stacked rows [q (3 heads) | k (2 heads) | v (2 heads)] of d = 4 for 3 tokens: the K
    // part appended in place equals the K rows gathered on the host and appended whole.
    let dev = common::device();
    let (t, d, hq, hkv) = (3usize, 4usize, 3usize, 2usize);
    let stride = (hq + 2 * hkv) * d;
    let rows: Vec<f32> = (0..t * stride).map(|i| i as f32 * 0.25 - 7.0).collect();
    let k: Vec<f32> = (0..t).flat_map(|i| rows[i * stride + hq * d..i * stride + (hq + hkv) * d].to_vec()).collect();
    for dt in common::DTYPES {
        let (a, b) = (KvCache::new(dev, hkv, 8, d).unwrap(), KvCache::new(dev, hkv, 8, d).unwrap());
        let (xs, xk) = (common::upload(dev, dt, &rows), common::upload(dev, dt, &k));
        let mut s = Stream::new(dev).unwrap();
        attention::kv_append_from(&mut s, dt, &xs, hq * d, stride, t, 2, &a).unwrap();
        attention::kv_append(&mut s, dt, &xk, t, 2, &b).unwrap();
        s.finish_and_wait().unwrap();
        let (va, vb) = (a.buffer().to_vec::<u32>().unwrap(), b.buffer().to_vec::<u32>().unwrap());
        assert_eq!(va, vb, "{dt:?}");
        assert!(va.iter().any(|&w| w != 0), "{dt:?}: nothing appended");
        let e = attention::kv_append_from(&mut s, dt, &xs, 0, d, t, 0, &a).unwrap_err();
        assert!(e.to_string().contains("cannot hold"), "{e}");
        // Keys and values in one dispatch equal the two single appends: K from the stacked
        // rows, V from its own contiguous buffer.
        let v: Vec<f32> = (0..t * hkv * d).map(|i| 3.0 - i as f32 * 0.5).collect();
        let xv = common::upload(dev, dt, &v);
        let (kc, vc, vb) = (
            KvCache::new(dev, hkv, 8, d).unwrap(),
            KvCache::new(dev, hkv, 8, d).unwrap(),
            KvCache::new(dev, hkv, 8, d).unwrap(),
        );
        let d0 = s.stats().dispatches;
        attention::kv_append_pair_from(&mut s, dt, (&xs, hq * d, stride), (&xv, 0, hkv * d), t, 2, &kc, &vc).unwrap();
        assert_eq!(s.stats().dispatches, d0 + 1);
        attention::kv_append(&mut s, dt, &xv, t, 2, &vb).unwrap();
        s.finish_and_wait().unwrap();
        assert_eq!(kc.buffer().to_vec::<u32>().unwrap(), va, "{dt:?}: keys");
        assert_eq!(vc.buffer().to_vec::<u32>().unwrap(), vb.buffer().to_vec::<u32>().unwrap(), "{dt:?}: values");
        let short = KvCache::new(dev, hkv, 4, d).unwrap();
        let e = attention::kv_append_pair_from(&mut s, dt, (&xs, hq * d, stride), (&xv, 0, hkv * d), t, 2, &kc, &short)
            .unwrap_err();
        assert!(e.to_string().contains("differ in shape"), "{e}");
    }
}

/// The fused attention prologue (`rope_kv_append`) equals its composition: `nn::rope` of
/// the query and key heads, then `kv_append_pair_from` of the rotated keys and the values,
/// bit for bit, for both pairings, partial and full rotary dims, several tokens at an
/// offset into a ring of slots, from the stacked Q|K|V rows of one mat-vec and from
/// buffers of their own; one dispatch instead of three.
#[test]
fn rope_kv_append_equals_rope_then_append() {
    use vkml_ops::attention::{HeadRows, RopeTables};
    use vkml_ops::nn::{self, RopeShape, RopeStyle};
    let dev = common::device();
    let mut seed = 0x5EED_0001u64;
    for (style, d, rot, hq, hkv, t, pos0, ctx) in [
        (RopeStyle::Neox, 8usize, 8usize, 4usize, 2usize, 1usize, 5usize, 16usize),
        (RopeStyle::Interleaved, 8, 8, 4, 2, 1, 5, 16),
        (RopeStyle::Neox, 16, 10, 3, 1, 3, 6, 7),
        (RopeStyle::Interleaved, 64, 32, 9, 3, 2, 0, 4),
    ] {
        let positions = pos0 + t + 2;
        let cos = rand_vec(positions * rot / 2, &mut seed);
        let sin = rand_vec(positions * rot / 2, &mut seed);
        let (cb, sb) = (upload(dev, Dtype::F32, &cos), upload(dev, Dtype::F32, &sin));
        let stride = (hq + 2 * hkv) * d;
        let rows = rand_vec(t * stride, &mut seed);
        let xs = upload(dev, Dtype::F32, &rows);
        let part = |h0: usize, n: usize| -> Vec<f32> {
            (0..t).flat_map(|i| rows[i * stride + h0 * d..i * stride + (h0 + n) * d].to_vec()).collect()
        };
        let (q, k, v) = (part(0, hq), part(hq, hkv), part(hq + hkv, hkv));
        // The composition, from buffers of their own.
        let mut s = Stream::new(dev).unwrap();
        let rope = |s: &mut Stream, x: &[f32], heads: usize| {
            let (xb, yb) = (upload(dev, Dtype::F32, x), alloc(dev, Dtype::F32, x.len()));
            let sh = RopeShape { bh: heads, t, d, rot, pos_offset: pos0, positions, token_major: true };
            nn::rope(s, Dtype::F32, style, &xb, &cb, &sb, sh, &yb).unwrap();
            yb
        };
        let (qr, kr) = (rope(&mut s, &q, hq), rope(&mut s, &k, hkv));
        let vb = upload(dev, Dtype::F32, &v);
        let (kc0, vc0) = (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
        attention::kv_append_pair_from(&mut s, Dtype::F32, (&kr, 0, hkv * d), (&vb, 0, hkv * d), t, pos0, &kc0, &vc0)
            .unwrap();
        s.finish_and_wait().unwrap();
        let want_q = download(Dtype::F32, &qr);
        let want = (kc0.buffer().to_vec::<u32>().unwrap(), vc0.buffer().to_vec::<u32>().unwrap());
        assert!(want.0.iter().any(|&w| w != 0) && want.1.iter().any(|&w| w != 0));
        let tables = RopeTables { cos: &cb, sin: &sb, positions, rot, style };
        let (qb, kb) = (upload(dev, Dtype::F32, &q), upload(dev, Dtype::F32, &k));
        let stacked = |off: usize| HeadRows { buffer: &xs, off, stride };
        let own = |b, heads: usize| HeadRows { buffer: b, off: 0, stride: heads * d };
        for (what, srcs) in [
            ("stacked rows", (stacked(0), stacked(hq * d), stacked((hq + hkv) * d))),
            ("own buffers", (own(&qb, hq), own(&kb, hkv), own(&vb, hkv))),
        ] {
            let (kc, vc) = (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
            let q_out = alloc(dev, Dtype::F32, t * hq * d);
            let d0 = s.stats().dispatches;
            attention::rope_kv_append(&mut s, tables, srcs, hq, t, pos0, (&kc, &vc), &q_out, Default::default())
                .unwrap();
            assert_eq!(s.stats().dispatches, d0 + 1);
            s.finish_and_wait().unwrap();
            let case = format!("{style:?} d {d} rot {rot} t {t} at {pos0}, {what}");
            let got_q = download(Dtype::F32, &q_out);
            assert!(got_q.iter().zip(&want_q).all(|(a, b)| a.to_bits() == b.to_bits()), "{case}: queries");
            assert_eq!(kc.buffer().to_vec::<u32>().unwrap(), want.0, "{case}: keys");
            assert_eq!(vc.buffer().to_vec::<u32>().unwrap(), want.1, "{case}: values");
        }
        // Positions past the tables are refused.
        let (kc, vc) = (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
        let q_out = alloc(dev, Dtype::F32, t * hq * d);
        let srcs = (stacked(0), stacked(hq * d), stacked((hq + hkv) * d));
        let e =
            attention::rope_kv_append(&mut s, tables, srcs, hq, t, positions, (&kc, &vc), &q_out, Default::default())
                .unwrap_err();
        assert!(e.to_string().contains("cos/sin tables"), "{e}");
    }
}

/// The decode step's attention with its prologue in the same dispatch
/// (`flash_attn_rope_decode`) equals `rope_kv_append` then `flash_attn`, bit for bit: the
/// output and every word of both caches, for both pairings, partial rotary dims, grouped
/// heads (G of 1, 3 and 4), one split and several (merged in place), a sliding window over
/// a ring of slots and a soft-cap; one dispatch instead of two. Shapes it does not take
/// are refused.
#[test]
fn flash_attn_rope_decode_equals_rope_kv_then_attention() {
    use vkml_ops::attention::{HeadRows, RopeTables};
    use vkml_ops::nn::RopeStyle;
    let (mut wide_cases, mut split_groups) = (0, 0);
    for (form, dev) in [("as tuned", common::device()), ("narrow", common::narrow_attention_device())] {
        let mut seed = 0x5EED_0002u64;
        for (style, d, rot, hq, hkv, pos, ctx, window, softcap, splits) in [
            (RopeStyle::Neox, 64usize, 64usize, 9usize, 3usize, 37usize, 64usize, 0usize, 0f32, 1usize),
            (RopeStyle::Neox, 64, 64, 9, 3, 37, 64, 0, 0.0, 4),
            (RopeStyle::Interleaved, 128, 64, 4, 4, 20, 32, 0, 0.0, 3),
            (RopeStyle::Interleaved, 32, 32, 8, 2, 0, 8, 0, 0.0, 1),
            (RopeStyle::Neox, 16, 10, 4, 1, 25, 10, 8, 5.0, 2),
            // A group of 512 query values (llama-8b's): the wide512 form where shared memory holds it.
            (RopeStyle::Neox, 128, 128, 8, 2, 70, 96, 0, 0.0, 5),
        ] {
            if !attention::decode_fuses_rope(dev.caps(), &shape(hq, pos, window, softcap, splits), d, hkv) {
                eprintln!("skipped: the grouped-query kernel does not run here");
                return;
            }
            // Sinks (gpt-oss) where the position is odd: both forms take them.
            let sinks = (pos % 2 == 1).then(|| upload(dev, Dtype::F32, &rand_vec(hq, &mut seed)));
            let sh = AttnShape { sinks: sinks.as_ref(), ..shape(hq, pos, window, softcap, splits) };
            let positions = pos + 3;
            let cos = rand_vec(positions * rot / 2, &mut seed);
            let sin = rand_vec(positions * rot / 2, &mut seed);
            let (cb, sb) = (upload(dev, Dtype::F32, &cos), upload(dev, Dtype::F32, &sin));
            let stride = (hq + 2 * hkv) * d;
            let rows = rand_vec(stride, &mut seed);
            let xs = upload(dev, Dtype::F32, &rows);
            // Caches already holding earlier keys and values (random f16 words).
            let words: Vec<u32> = rand_vec(hkv * ctx * d, &mut seed)
                .chunks(2)
                .map(|p| {
                    u32::from(half::f16::from_f32(p[0]).to_bits())
                        | u32::from(half::f16::from_f32(p[1]).to_bits()) << 16
                })
                .collect();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let caches = || {
                let (kc, vc) = (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
                // The values: the keys' words the other way round.
                let (lo, hi) = bytes.split_at(bytes.len() / 2);
                kc.buffer().write(0, &bytes).unwrap();
                vc.buffer().write(0, hi).unwrap();
                vc.buffer().write(hi.len() as u64, lo).unwrap();
                (kc, vc)
            };
            let tables = RopeTables { cos: &cb, sin: &sb, positions, rot, style };
            let srcs = (
                HeadRows { buffer: &xs, off: 0, stride },
                HeadRows { buffer: &xs, off: hq * d, stride },
                HeadRows { buffer: &xs, off: (hq + hkv) * d, stride },
            );
            let (po_len, ml_len) = attention::split_scratch_len(&sh, d);
            let scratch = (alloc(dev, Dtype::F32, po_len.max(1)), alloc(dev, Dtype::F32, ml_len.max(1)));
            let sc = (splits > 1).then_some((&scratch.0, &scratch.1));
            let mut s = Stream::new(dev).unwrap();
            // The composition.
            let (kc0, vc0) = caches();
            let q_rot = alloc(dev, Dtype::F32, hq * d);
            let want_out = alloc(dev, Dtype::F32, hq * d);
            let d0 = s.stats().dispatches;
            attention::rope_kv_append(&mut s, tables, srcs, hq, 1, pos, (&kc0, &vc0), &q_rot, Default::default())
                .unwrap();
            attention::flash_attn(&mut s, Dtype::F32, &q_rot, &kc0, &vc0, sh, &want_out, sc).unwrap();
            let composed = s.stats().dispatches - d0;
            // The fused form.
            let (kc, vc) = caches();
            let out = alloc(dev, Dtype::F32, hq * d);
            let d1 = s.stats().dispatches;
            attention::flash_attn_rope_decode(&mut s, tables, srcs, (&kc, &vc), sh, &out, sc, Default::default(), None)
                .unwrap();
            assert_eq!(s.stats().dispatches - d1, 1);
            assert_eq!(composed, 2);
            s.finish_and_wait().unwrap();
            let fused = attention::decode_attn_form(dev.caps(), d, hq / hkv);
            let wide = fused.wide;
            wide_cases += usize::from(wide);
            split_groups += usize::from(fused.heads_per_workgroup < hq / hkv);
            let case = format!(
            "{form} (wide {wide}): {style:?} d {d} rot {rot} heads {hq}/{hkv} at {pos}, ctx {ctx}, window {window}, {splits} splits, sinks {}",
            sinks.is_some()
        );
            let (want, got) = (download(Dtype::F32, &want_out), download(Dtype::F32, &out));
            assert!(want.iter().any(|&v| v != 0.0), "{case}: zero output");
            assert_attention_output(&got, &want, !wide, &case);
            assert_eq!(kc.buffer().to_vec::<u32>().unwrap(), kc0.buffer().to_vec::<u32>().unwrap(), "{case}: keys");
            assert_eq!(vc.buffer().to_vec::<u32>().unwrap(), vc0.buffer().to_vec::<u32>().unwrap(), "{case}: values");
            // Not a decode step: two queries, or a query before the last position.
            let (kc, vc) = caches();
            let two = AttnShape { t_q: 2, q_pos0: pos.saturating_sub(1), ..sh };
            let e = attention::flash_attn_rope_decode(
                &mut s,
                tables,
                srcs,
                (&kc, &vc),
                two,
                &out,
                sc,
                Default::default(),
                None,
            )
            .unwrap_err();
            assert!(e.to_string().contains("one causal query"), "{e}");
            // More splits than the in-place merge holds.
            let many = AttnShape { n_splits: vkml_ops::tuning::MAX_ATTN_SPLITS + 1, ..sh };
            let e = attention::flash_attn_rope_decode(
                &mut s,
                tables,
                srcs,
                (&kc, &vc),
                many,
                &out,
                sc,
                Default::default(),
                None,
            )
            .unwrap_err();
            assert!(e.to_string().contains("splits"), "{e}");
            let early = AttnShape { kv_len: pos + 2, ..sh };
            let e = attention::flash_attn_rope_decode(
                &mut s,
                tables,
                srcs,
                (&kc, &vc),
                early,
                &out,
                sc,
                Default::default(),
                None,
            )
            .unwrap_err();
            assert!(e.to_string().contains("last position"), "{e}");
        }
    }
    if vkml_ops::tuning::decode_attn_wide(common::device().caps()) {
        assert!(wide_cases > 0, "the wide decode attention never ran");
        assert!(split_groups > 0, "no KV head's group was split over workgroups");
    }
}

/// A replayed decode step's attention (`flash_attn_rope_decode` with a step buffer), one
/// recording submitted at many positions written between submissions, gives at each the
/// bits of the dispatch recorded at that position: output and both caches, across the
/// split counts (one per 8 keys seen, the grid's cap), a sliding window over a ring of
/// slots with a soft-cap, and grouped heads.
#[test]
fn flash_attn_rope_decode_replayed_from_a_step_buffer_equals_recorded_positions() {
    use vkml_ops::attention::{HeadRows, RopeTables};
    use vkml_ops::nn::RopeStyle;
    for (form, dev) in [("as tuned", common::device()), ("narrow", common::narrow_attention_device())] {
        let mut seed = 0x5EED_0004u64;
        for (style, d, hq, hkv, ctx, max_pos, window, softcap, positions) in [
            (
                RopeStyle::Neox,
                64usize,
                9usize,
                3usize,
                300usize,
                299usize,
                0usize,
                0f32,
                &[0usize, 7, 8, 9, 64, 255, 256, 299][..],
            ),
            (RopeStyle::Interleaved, 32, 8, 2, 20, 60, 13, 5.0, &[3, 12, 13, 19, 20, 47, 60][..]),
        ] {
            let top = shape(hq, max_pos, window, softcap, 1);
            if !attention::decode_fuses_rope(dev.caps(), &top, d, hkv) {
                eprintln!("skipped: the grouped-query kernel does not run here");
                return;
            }
            let cfg = attention::decode_attn_config(dev.caps(), d, hq / hkv);
            let grid = AttnShape { n_splits: cfg.splits(top.visible_len()), ..top };
            let n_pos = max_pos + 1;
            let cos = rand_vec(n_pos * d / 2, &mut seed);
            let sin = rand_vec(n_pos * d / 2, &mut seed);
            let (cb, sb) = (upload(dev, Dtype::F32, &cos), upload(dev, Dtype::F32, &sin));
            let stride = (hq + 2 * hkv) * d;
            let xs = upload(dev, Dtype::F32, &rand_vec(stride, &mut seed));
            let bytes: Vec<u8> = rand_vec(hkv * ctx * d, &mut seed)
                .chunks(2)
                .flat_map(|p| {
                    (u32::from(half::f16::from_f32(p[0]).to_bits())
                        | u32::from(half::f16::from_f32(p[1]).to_bits()) << 16)
                        .to_le_bytes()
                })
                .collect();
            let fill = |kc: &KvCache, vc: &KvCache| {
                kc.buffer().write(0, &bytes).unwrap();
                vc.buffer().write(0, &bytes.iter().rev().copied().collect::<Vec<u8>>()).unwrap();
            };
            let tables = RopeTables { cos: &cb, sin: &sb, positions: n_pos, rot: d, style };
            let srcs = (
                HeadRows { buffer: &xs, off: 0, stride },
                HeadRows { buffer: &xs, off: hq * d, stride },
                HeadRows { buffer: &xs, off: (hq + hkv) * d, stride },
            );
            let (po_len, ml_len) = attention::split_scratch_len(&grid, d);
            let scratch = (alloc(dev, Dtype::F32, po_len.max(1)), alloc(dev, Dtype::F32, ml_len.max(1)));
            // The recording's own split outputs, NaN before each submission: a merge that read
            // a split before its write, or the wrong one, cannot find the recorded dispatch's.
            let scratch_r = (alloc(dev, Dtype::F32, po_len.max(1)), alloc(dev, Dtype::F32, ml_len.max(1)));
            let sc = (grid.n_splits > 1).then_some((&scratch_r.0, &scratch_r.1));
            // The recording, its position in `step`.
            let step = dev.alloc(4, MemoryKind::Upload).unwrap();
            let (kr, vr) = (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
            let out_r = alloc(dev, Dtype::F32, hq * d);
            let mut s = Stream::new(dev).unwrap();
            attention::flash_attn_rope_decode(
                &mut s,
                tables,
                srcs,
                (&kr, &vr),
                grid,
                &out_r,
                sc,
                Default::default(),
                Some(&step),
            )
            .unwrap();
            let mut rec = s.into_recording().unwrap();
            assert_eq!(rec.commands(), 1);
            let mut s = Stream::new(dev).unwrap();
            for &pos in positions {
                let case =
                    format!("{form}: {style:?} d {d} heads {hq}/{hkv} ctx {ctx} window {window}: position {pos}");
                let sh = shape(hq, pos, window, softcap, cfg.splits(shape(hq, pos, window, softcap, 1).visible_len()));
                let (kc, vc) = (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
                fill(&kc, &vc);
                let out = alloc(dev, Dtype::F32, hq * d);
                let sc1 = (sh.n_splits > 1).then_some((&scratch.0, &scratch.1));
                attention::flash_attn_rope_decode(
                    &mut s,
                    tables,
                    srcs,
                    (&kc, &vc),
                    sh,
                    &out,
                    sc1,
                    Default::default(),
                    None,
                )
                .unwrap();
                s.finish_and_wait().unwrap();
                fill(&kr, &vr);
                for b in [&scratch_r.0, &scratch_r.1] {
                    b.write(0, &vec![0xFFu8; b.size() as usize]).unwrap();
                }
                step.write(0, &(pos as u32).to_le_bytes()).unwrap();
                rec.submit().unwrap().wait().unwrap();
                let (want, got) = (download(Dtype::F32, &out), download(Dtype::F32, &out_r));
                assert!(want.iter().any(|&v| v != 0.0), "{case}: zero output");
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{case} ({} splits): output {i}: {a} vs {b}", sh.n_splits);
                }
                assert_eq!(kr.buffer().to_vec::<u32>().unwrap(), kc.buffer().to_vec::<u32>().unwrap(), "{case}: keys");
                assert_eq!(
                    vr.buffer().to_vec::<u32>().unwrap(),
                    vc.buffer().to_vec::<u32>().unwrap(),
                    "{case}: values"
                );
            }
        }
    }
}

/// The fused decode attention's output `got` against the composition's `want`: the same
/// bits where `exact` (the narrow form, which sums the keys in the composition's order);
/// else (the wide form spreads a split's keys over 16 subgroups, another order of the
/// online softmax) within 1e-5 of the largest output.
fn assert_attention_output(got: &[f32], want: &[f32], exact: bool, case: &str) {
    let top = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        if exact {
            assert_eq!(a.to_bits(), b.to_bits(), "{case}: output {i}: {a} vs {b}");
        } else {
            assert!((a - b).abs() <= 1e-5 * top, "{case}: output {i}: {a} vs {b}");
        }
    }
}

/// A decode step's attention shape: one query at position `pos` over `pos + 1` keys.
fn shape(n_heads: usize, pos: usize, window: usize, softcap: f32, n_splits: usize) -> AttnShape<'static> {
    AttnShape {
        t_q: 1,
        n_heads,
        kv_len: pos + 1,
        q_pos0: pos,
        causal: true,
        window,
        softcap,
        scale: 0.3,
        n_splits,
        sinks: None,
    }
}

/// The attention prologue on the host, token by token over `rows` of stacked Q|K|V heads
/// (`hq` query and `hkv` KV heads of `d`): the bias added, then each query (key) head
/// normalised as norm.comp does, `(x * (1 / sqrt(mean(x²) + eps))) * w`.
fn host_prologue(
    rows: &[f32],
    (hq, hkv, d): (usize, usize, usize),
    bias: Option<&Vec<f32>>,
    norms: Option<(&Vec<f32>, &Vec<f32>, f32)>,
) -> Vec<f32> {
    let mut pre = rows.to_vec();
    for tok in pre.chunks_mut((hq + 2 * hkv) * d) {
        if let Some(b) = bias {
            tok.iter_mut().zip(b).for_each(|(x, bi)| *x += bi);
        }
        if let Some((qw, kw, eps)) = norms {
            for h in 0..hq + hkv {
                let w = if h < hq { qw } else { kw };
                let head = &mut tok[h * d..(h + 1) * d];
                let scale = 1.0 / (head.iter().map(|x| x * x).sum::<f32>() / d as f32 + eps).sqrt();
                head.iter_mut().zip(w).for_each(|(x, wi)| *x = *x * scale * wi);
            }
        }
    }
    pre
}

/// The query, key and value heads of stacked Q|K|V rows in `x` (`hq` and `hkv` heads of
/// `d` per token).
fn stacked_heads(
    x: &vkml_hal::Buffer,
    (hq, hkv, d): (usize, usize, usize),
) -> (attention::HeadRows<'_>, attention::HeadRows<'_>, attention::HeadRows<'_>) {
    use attention::HeadRows;
    let stride = (hq + 2 * hkv) * d;
    (
        HeadRows { buffer: x, off: 0, stride },
        HeadRows { buffer: x, off: hq * d, stride },
        HeadRows { buffer: x, off: (hq + hkv) * d, stride },
    )
}

/// The decode attention's prologue (`QkvPrologue`): the QKV bias (Qwen2) gives the bits
/// of adding it first and then `rope_kv_append` + `flash_attn`; the q/k RMS norms (Qwen3,
/// Gemma 3) agree with normalising first within the rounding of the norm's sum of squares
/// (output 1e-5 relative to its largest value; cached keys within one f16 step).
#[test]
fn flash_attn_rope_decode_prologue_equals_bias_and_norms_first() {
    use vkml_ops::attention::{QkvPrologue, RopeTables};
    use vkml_ops::nn::RopeStyle;
    let (d, hq, hkv, pos, ctx, eps) = (64usize, 8usize, 2usize, 21usize, 32usize, 1e-6f32);
    for (form, dev) in [("as tuned", common::device()), ("narrow", common::narrow_attention_device())] {
        let mut seed = 0x5EED_0003u64;
        for (style, bias, norms, splits) in [
            (RopeStyle::Interleaved, true, false, 2usize),
            (RopeStyle::Neox, false, true, 1),
            (RopeStyle::Neox, true, true, 3),
        ] {
            let sh = shape(hq, pos, 0, 0.0, splits);
            if !attention::decode_fuses_rope(dev.caps(), &sh, d, hkv) {
                eprintln!("skipped: the grouped-query kernel does not run here");
                return;
            }
            let positions = pos + 1;
            let cos = rand_vec(positions * d / 2, &mut seed);
            let sin = rand_vec(positions * d / 2, &mut seed);
            let (cb, sb) = (upload(dev, Dtype::F32, &cos), upload(dev, Dtype::F32, &sin));
            let n = (hq + 2 * hkv) * d;
            let rows: Vec<f32> = rand_vec(n, &mut seed).iter().map(|v| 3.0 * v).collect();
            let b: Vec<f32> = rand_vec(n, &mut seed);
            let (qw, kw): (Vec<f32>, Vec<f32>) = (rand_vec(d, &mut seed), rand_vec(d, &mut seed));
            let pre = host_prologue(&rows, (hq, hkv, d), bias.then_some(&b), norms.then_some((&qw, &kw, eps)));
            let (raw, prepped) = (upload(dev, Dtype::F32, &rows), upload(dev, Dtype::F32, &pre));
            let (bb, qwb, kwb) =
                (upload(dev, Dtype::F32, &b), upload(dev, Dtype::F32, &qw), upload(dev, Dtype::F32, &kw));
            let tables = RopeTables { cos: &cb, sin: &sb, positions, rot: d, style };
            let srcs = |x| stacked_heads(x, (hq, hkv, d));
            let (po_len, ml_len) = attention::split_scratch_len(&sh, d);
            let scratch = (alloc(dev, Dtype::F32, po_len.max(1)), alloc(dev, Dtype::F32, ml_len.max(1)));
            let sc = (splits > 1).then_some((&scratch.0, &scratch.1));
            let mut s = Stream::new(dev).unwrap();
            let caches = || (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
            let (kc0, vc0) = caches();
            let (q_rot, want_out) = (alloc(dev, Dtype::F32, hq * d), alloc(dev, Dtype::F32, hq * d));
            attention::rope_kv_append(
                &mut s,
                tables,
                srcs(&prepped),
                hq,
                1,
                pos,
                (&kc0, &vc0),
                &q_rot,
                Default::default(),
            )
            .unwrap();
            attention::flash_attn(&mut s, Dtype::F32, &q_rot, &kc0, &vc0, sh, &want_out, sc).unwrap();
            let (kc, vc) = caches();
            let out = alloc(dev, Dtype::F32, hq * d);
            let prologue = QkvPrologue {
                bias: bias.then_some(&bb),
                q_norm: norms.then_some((&qwb, eps)),
                k_norm: norms.then_some((&kwb, eps)),
            };
            attention::flash_attn_rope_decode(&mut s, tables, srcs(&raw), (&kc, &vc), sh, &out, sc, prologue, None)
                .unwrap();
            s.finish_and_wait().unwrap();
            let wide = attention::decode_attn_form(dev.caps(), d, hq / hkv).wide;
            let case = format!("{form} (wide {wide}): {style:?} bias {bias} norms {norms} {splits} splits");
            let (want, got) = (download(Dtype::F32, &want_out), download(Dtype::F32, &out));
            let (kw0, kw1) = (kc0.buffer().to_vec::<u32>().unwrap(), kc.buffer().to_vec::<u32>().unwrap());
            assert_eq!(vc.buffer().to_vec::<u32>().unwrap(), vc0.buffer().to_vec::<u32>().unwrap(), "{case}: values");
            if !norms {
                assert_attention_output(&got, &want, !wide, &case);
                assert_eq!(kw1, kw0, "{case}: keys");
                continue;
            }
            common::assert_normed_close(&case, (&got, &want), (&kw1, &kw0));
        }
    }
}

/// `rope_kv_append`'s prologue (`QkvPrologue`, prompts and the mat-vec rows): the QKV bias
/// gives the bits of adding it first; the q/k RMS norms agree with normalising first
/// within the rounding of the norm's sum of squares (queries 1e-5 relative to the largest,
/// cached keys within one f16 step), with subgroup arithmetic and without, for heads of
/// one workgroup (64) and of two (256: each workgroup reduces the whole head).
#[test]
fn rope_kv_prologue_equals_bias_and_norms_first() {
    use vkml_ops::attention::{HeadRows, QkvPrologue, RopeTables};
    use vkml_ops::nn::RopeStyle;
    let (hq, hkv, t, pos0, ctx, eps) = (4usize, 2usize, 5usize, 3usize, 16usize, 1e-6f32);
    for (form, dev) in reduce_devices() {
        let mut seed = 0x5EED_0004u64;
        for (d, style, bias, norms) in [
            (64usize, RopeStyle::Neox, true, false),
            (64, RopeStyle::Interleaved, false, true),
            (256, RopeStyle::Neox, true, true),
        ] {
            let positions = pos0 + t;
            let cos = rand_vec(positions * d / 2, &mut seed);
            let sin = rand_vec(positions * d / 2, &mut seed);
            let (cb, sb) = (upload(dev, Dtype::F32, &cos), upload(dev, Dtype::F32, &sin));
            let n = (hq + 2 * hkv) * d;
            let rows: Vec<f32> = rand_vec(t * n, &mut seed).iter().map(|v| 3.0 * v).collect();
            let b: Vec<f32> = rand_vec(n, &mut seed);
            let (qw, kw): (Vec<f32>, Vec<f32>) = (rand_vec(d, &mut seed), rand_vec(d, &mut seed));
            let pre = host_prologue(&rows, (hq, hkv, d), bias.then_some(&b), norms.then_some((&qw, &kw, eps)));
            let (raw, prepped) = (upload(dev, Dtype::F32, &rows), upload(dev, Dtype::F32, &pre));
            let (bb, qwb, kwb) =
                (upload(dev, Dtype::F32, &b), upload(dev, Dtype::F32, &qw), upload(dev, Dtype::F32, &kw));
            let tables = RopeTables { cos: &cb, sin: &sb, positions, rot: d, style };
            let srcs = |x| stacked_heads(x, (hq, hkv, d));
            let caches = || (KvCache::new(dev, hkv, ctx, d).unwrap(), KvCache::new(dev, hkv, ctx, d).unwrap());
            let ((kc0, vc0), (kc, vc)) = (caches(), caches());
            let (want_q, got_q) = (alloc(dev, Dtype::F32, t * hq * d), alloc(dev, Dtype::F32, t * hq * d));
            let prologue = QkvPrologue {
                bias: bias.then_some(&bb),
                q_norm: norms.then_some((&qwb, eps)),
                k_norm: norms.then_some((&kwb, eps)),
            };
            let mut s = Stream::new(dev).unwrap();
            let none = QkvPrologue::default();
            attention::rope_kv_append(&mut s, tables, srcs(&prepped), hq, t, pos0, (&kc0, &vc0), &want_q, none)
                .unwrap();
            attention::rope_kv_append(&mut s, tables, srcs(&raw), hq, t, pos0, (&kc, &vc), &got_q, prologue).unwrap();
            s.finish_and_wait().unwrap();
            let case = format!("{form}: d {d} {style:?} bias {bias} norms {norms}");
            let (want, got) = (download(Dtype::F32, &want_q), download(Dtype::F32, &got_q));
            let (kw0, kw1) = (kc0.buffer().to_vec::<u32>().unwrap(), kc.buffer().to_vec::<u32>().unwrap());
            assert_eq!(vc.buffer().to_vec::<u32>().unwrap(), vc0.buffer().to_vec::<u32>().unwrap(), "{case}: values");
            if !norms {
                assert_eq!(got, want, "{case}: queries");
                assert_eq!(kw1, kw0, "{case}: keys");
                continue;
            }
            common::assert_normed_close(&case, (&got, &want), (&kw1, &kw0));
        }
    }
    // A norm weight shorter than the head is refused, naming it.
    let dev = common::device();
    let (d, n) = (64usize, 4 * 64);
    let x = upload(dev, Dtype::F32, &vec![0.5; n]);
    let short = upload(dev, Dtype::F32, &[1.0; 8]);
    let tables = RopeTables { cos: &x, sin: &x, positions: 1, rot: d, style: RopeStyle::Neox };
    let at = |off| HeadRows { buffer: &x, off, stride: n };
    let (kc, vc) = (KvCache::new(dev, 1, 4, d).unwrap(), KvCache::new(dev, 1, 4, d).unwrap());
    let q_out = alloc(dev, Dtype::F32, 2 * d);
    let pro = QkvPrologue { bias: None, q_norm: Some((&short, 1e-6)), k_norm: None };
    let mut s = Stream::new(dev).unwrap();
    let e = attention::rope_kv_append(&mut s, tables, (at(0), at(2 * d), at(3 * d)), 2, 1, 0, (&kc, &vc), &q_out, pro)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the q norm needs a weight of 64 f32"), "{e}");
}
