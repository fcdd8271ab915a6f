//! Flash attention over the f16 KV cache against candle on the CPU
//! (softmax(q kᵀ · scale + causal mask) v with K and V rounded to f16 as the cache stores
//! them), for prefill and decode, grouped-query heads, and split-KV decode.
//! Tolerance: |gpu − cpu| ≤ 2e-5 · max(1, |cpu|).

use std::sync::OnceLock;

use candle_core::Tensor;
use proptest::prelude::*;
use vkml_hal::{Device, DeviceSelector, Instance, InstanceOptions, MemoryKind, Stream};
use vkml_ops::attention::{self, AttnShape, KvCache};

const CPU: candle_core::Device = candle_core::Device::Cpu;

fn device() -> &'static Device {
    static DEV: OnceLock<Device> = OnceLock::new();
    DEV.get_or_init(|| {
        let validation = std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0");
        Instance::new(&InstanceOptions { validation })
            .unwrap()
            .create_device(&DeviceSelector::from_env(), Default::default())
            .unwrap()
    })
}

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

/// candle reference: q [t, h, d]; k, v [kv_len, n_kv, d] (token-major as appended).
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
    scale: f32,
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
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..kv_len).map(move |j| if causal && j > q_pos0 + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    let scores = scores.broadcast_add(&Tensor::from_vec(mask, (t, kv_len), &CPU).unwrap()).unwrap();
    let probs = candle_nn::ops::softmax_last_dim(&scores).unwrap();
    probs.matmul(&vt).unwrap().transpose(0, 1).unwrap().contiguous().unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn flash_attention_matches_candle(
        n_kv in 1usize..3, group in 1usize..4, half_d in 1usize..65, kv_len in 1usize..90,
        t_q in 1usize..6, causal in any::<bool>(), n_splits in 1usize..5, split_at in 0usize..90, seed in any::<u64>(),
    ) {
        let dev = device();
        let (h, d) = (n_kv * group, 2 * half_d);
        let t_q = t_q.min(kv_len);
        let q_pos0 = kv_len - t_q; // the queries are the last t_q positions
        let ctx = kv_len + 7;
        let mut seed = seed | 1;
        let q = rand_vec(t_q * h * d, &mut seed);
        let k = rand_vec(kv_len * n_kv * d, &mut seed);
        let v = rand_vec(kv_len * n_kv * d, &mut seed);
        let kc = KvCache::new(dev, n_kv, ctx, d).unwrap();
        let vc = KvCache::new(dev, n_kv, ctx, d).unwrap();
        // Fill the caches in two appends (a prompt, then later tokens).
        let cut = split_at.min(kv_len);
        let row = n_kv * d;
        let parts = [(0, cut), (cut, kv_len)];
        let bufs: Vec<_> = parts.iter().flat_map(|&(a, b)| [dev.upload(&k[a * row..b * row]).unwrap(), dev.upload(&v[a * row..b * row]).unwrap()]).collect();
        let qb = dev.upload(&q).unwrap();
        let out = dev.alloc(4 * (t_q * h * d) as u64, MemoryKind::DeviceLocal).unwrap();
        let sh = AttnShape { t_q, n_heads: h, kv_len, q_pos0, causal, scale: 1.0 / (d as f32).sqrt(), n_splits };
        let (po_len, ml_len) = attention::split_scratch_len(&sh, d);
        let po = dev.alloc(4 * po_len.max(1) as u64, MemoryKind::DeviceLocal).unwrap();
        let ml = dev.alloc(4 * ml_len.max(1) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(dev).unwrap();
        for (i, &(a, b)) in parts.iter().enumerate() {
            attention::kv_append(&mut s, &bufs[2 * i], b - a, a, &kc).unwrap();
            attention::kv_append(&mut s, &bufs[2 * i + 1], b - a, a, &vc).unwrap();
        }
        attention::flash_attn(&mut s, &qb, &kc, &vc, sh, &out, Some((&po, &ml))).unwrap();
        s.finish_and_wait().unwrap();
        let got = out.to_vec::<f32>().unwrap();
        let want = reference(&q, &k, &v, t_q, h, n_kv, d, kv_len, q_pos0, causal, sh.scale);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert!((g - w).abs() <= 2e-5 * w.abs().max(1.0), "[{}]: gpu {} cpu {} ({:?})", i, g, w, sh);
        }
        let errs = dev.instance().take_validation_errors();
        prop_assert!(errs.is_empty(), "validation errors: {:?}", errs);
    }
}

#[test]
fn cache_overflow_and_bad_heads_are_errors() {
    let dev = device();
    let kc = KvCache::new(dev, 2, 8, 4).unwrap();
    let x = dev.upload(&[0.0f32; 64]).unwrap();
    let mut s = Stream::new(dev).unwrap();
    let e = attention::kv_append(&mut s, &x, 4, 6, &kc).unwrap_err();
    assert!(e.to_string().contains("exceed the cache's 8 positions"), "{e}");
    let sh = AttnShape { t_q: 1, n_heads: 3, kv_len: 2, q_pos0: 1, causal: true, scale: 0.5, n_splits: 1 };
    let e = attention::flash_attn(&mut s, &x, &kc, &kc, sh, &x, None).unwrap_err();
    assert!(e.to_string().contains("not a multiple of 2 KV heads"), "{e}");
    assert!(KvCache::new(dev, 1, 4, 3).is_err());
}
