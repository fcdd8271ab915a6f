//! candle-nn's ops on Vulkan tensors (`vkml_candle::nn`) against candle-nn on the CPU, same
//! inputs: softmax, RMS and layer norms (proptest over shapes; f32, f16, bf16), sigmoid,
//! the three ropes, `ConcatKvCache` and `Tensor::cat` (exact: copies).
//!
//! The reference is candle-nn on f32 copies of the same (rounded) inputs, its result rounded
//! to the dtype: candle-nn's CPU kernels accumulate f16 / bf16 inputs in those types (its
//! bf16 `layer_norm` is off by more than the values), vkml's in f32. Tolerances, of the
//! largest |value| of the reference: f32 1e-5 (the kernels reduce in another order; exp and
//! rsqrt are the device's); f16 2e-3 and bf16 1.6e-2 (two roundings to the dtype).

mod common;
use common::{values, vulkan_device};

use candle_core::{DType, Device as Cpu, Tensor as CTensor};
use proptest::prelude::*;
use vkml_candle::front::Tensor;
use vkml_candle::nn::{kv_cache::ConcatKvCache, ops, rotary_emb};
use vkml_candle::vulkan::VulkanStorage;

type VTensor = Tensor<VulkanStorage>;

fn tol(dt: DType) -> f32 {
    match dt {
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 1e-5,
    }
}

/// `f` of the f32 copies of `xs`, rounded to `xs[0]`'s dtype.
fn reference(xs: &[&CTensor], f: impl Fn(&[CTensor]) -> candle_core::Result<CTensor>) -> CTensor {
    let up: Vec<CTensor> = xs.iter().map(|x| x.to_dtype(DType::F32).unwrap()).collect();
    f(&up).unwrap().to_dtype(xs[0].dtype()).unwrap()
}

/// The one Vulkan device of these tests.
fn dev() -> &'static vkml_candle::vulkan::VulkanDevice {
    static DEV: std::sync::OnceLock<vkml_candle::vulkan::VulkanDevice> = std::sync::OnceLock::new();
    DEV.get_or_init(vulkan_device)
}

/// `v` as candle CPU and Vulkan tensors of `dims` in `dt`.
fn both(v: &[f32], dims: &[usize], dt: DType) -> (CTensor, VTensor) {
    let c = CTensor::from_vec(v.to_vec(), dims, &Cpu::Cpu).unwrap().to_dtype(dt).unwrap();
    let g = VTensor::from_candle(&c, dev()).unwrap();
    (c, g)
}

fn check(got: &VTensor, want: &CTensor, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: dims");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let g = got.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let w: Vec<f32> = want.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let top = w.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    let worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= tol(want.dtype()) * top, "{what}: {worst} of {top}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn softmax_and_norms_match_candle_nn(rows in 1usize..6, n in 1usize..300, seed in 0u64..1000, dt in 0usize..3) {
        let dt = [DType::F32, DType::F16, DType::BF16][dt];
        let v: Vec<f32> = values(rows * n, seed).iter().map(|x| 4.0 * x).collect();
        let (c, g) = both(&v, &[rows, n], dt);
        let (ca, ga) = both(&values(n, seed + 1), &[n], dt);
        let (cb, gb) = both(&values(n, seed + 2), &[n], dt);
        let what = format!("{rows} x {n} {dt:?}");
        let want = reference(&[&c], |x| candle_nn::ops::softmax_last_dim(&x[0]));
        check(&ops::softmax_last_dim(&g).unwrap(), &want, &format!("softmax {what}"));
        let want = reference(&[&c, &ca], |x| candle_nn::ops::rms_norm(&x[0], &x[1], 1e-5));
        check(&ops::rms_norm(&g, &ga, 1e-5).unwrap(), &want, &format!("rms_norm {what}"));
        let want = reference(&[&c, &ca, &cb], |x| candle_nn::ops::layer_norm(&x[0], &x[1], &x[2], 1e-5));
        check(&ops::layer_norm(&g, &ga, &gb, 1e-5).unwrap(), &want, &format!("layer_norm {what}"));
        let want = reference(&[&c], |x| candle_nn::ops::sigmoid(&x[0]));
        check(&ops::sigmoid(&g).unwrap(), &want, &format!("sigmoid {what}"));
        let want = reference(&[&c], |x| candle_nn::ops::silu(&x[0]));
        check(&ops::silu(&g).unwrap(), &want, &format!("silu {what}"));
    }
}

#[test]
fn softmax_of_a_strided_view_and_sigmoid_of_one() {
    let (c, g) = both(&values(6 * 40, 3), &[6, 40], DType::F32);
    // candle-nn's CPU softmax takes contiguous x only: the reference gets a copy.
    let (ct, gt) = (c.t().unwrap().contiguous().unwrap(), g.t().unwrap());
    check(&ops::softmax_last_dim(&gt).unwrap(), &candle_nn::ops::softmax_last_dim(&ct).unwrap(), "softmax of x^T");
    check(&ops::sigmoid(&gt).unwrap(), &candle_nn::ops::sigmoid(&ct).unwrap(), "sigmoid of x^T");
    let (_, w) = both(&values(7, 4), &[7], DType::F32);
    let e = ops::rms_norm(&g, &w, 1e-5).unwrap_err().to_string();
    assert!(e.contains("alpha of shape [7] for rows of 40"), "{e}");
    // Weights and tables on another device: errors naming the op and the argument.
    let other = vulkan_device();
    let (cw, _) = both(&values(40, 5), &[40], DType::F32);
    let w_other = VTensor::from_candle(&cw, &other).unwrap();
    let e = ops::rms_norm(&g, &w_other, 1e-5).unwrap_err().to_string();
    assert!(e.contains("rms_norm: alpha is on another Vulkan device"), "{e}");
    let e = ops::layer_norm(&g, &w_other, &w_other, 1e-5).unwrap_err().to_string();
    assert!(e.contains("layer_norm: alpha is on another Vulkan device"), "{e}");
    let (cc, _) = both(&values(5 * 4, 6), &[5, 4], DType::F32);
    let (_, gx) = both(&values(2 * 3 * 5 * 8, 7), &[2, 3, 5, 8], DType::F32);
    let c_other = VTensor::from_candle(&cc, &other).unwrap();
    let c_here = VTensor::from_candle(&cc, dev()).unwrap();
    let e = rotary_emb::rope(&gx, &c_other, &c_here).unwrap_err().to_string();
    assert!(e.contains("rope: cos is on another Vulkan device"), "{e}");
}

#[test]
fn ropes_match_candle_nn() {
    let (b, h, t, d, t_tab) = (2, 3, 5, 8, 7);
    for dt in [DType::F32, DType::F16] {
        let (cc, gc) = both(&values(t_tab * d / 2, 11), &[t_tab, d / 2], dt);
        let (cs, gs) = both(&values(t_tab * d / 2, 12), &[t_tab, d / 2], dt);
        // candle-nn takes the first t rows of the tables.
        let (cc_t, cs_t) = (cc.narrow(0, 0, t).unwrap(), cs.narrow(0, 0, t).unwrap());
        let (cx, gx) = both(&values(b * h * t * d, 13), &[b, h, t, d], dt);
        let what = format!("{dt:?}");
        let want = reference(&[&cx, &cc_t, &cs_t], |x| candle_nn::rotary_emb::rope(&x[0], &x[1], &x[2]));
        check(&rotary_emb::rope(&gx, &gc, &gs).unwrap(), &want, &format!("rope {what}"));
        let want = reference(&[&cx, &cc_t, &cs_t], |x| candle_nn::rotary_emb::rope_i(&x[0], &x[1], &x[2]));
        check(&rotary_emb::rope_i(&gx, &gc, &gs).unwrap(), &want, &format!("rope_i {what}"));
        for bb in [1, 2] {
            let (cx, gx) = both(&values(bb * t * h * d, 14), &[bb, t, h, d], dt);
            let want = reference(&[&cx, &cc_t, &cs_t], |x| candle_nn::rotary_emb::rope_thd(&x[0], &x[1], &x[2]));
            check(&rotary_emb::rope_thd(&gx, &gc, &gs).unwrap(), &want, &format!("rope_thd b {bb} {what}"));
        }
    }
    // Per-batch tables [b, t, d/2] (candle-nn takes them for rope, rope_i and rope_thd).
    for dt in [DType::F32, DType::F16] {
        let (cc, gc) = both(&values(b * t * d / 2, 15), &[b, t, d / 2], dt);
        let (cs, gs) = both(&values(b * t * d / 2, 16), &[b, t, d / 2], dt);
        let (cx, gx) = both(&values(b * h * t * d, 17), &[b, h, t, d], dt);
        let want = reference(&[&cx, &cc, &cs], |x| candle_nn::rotary_emb::rope(&x[0], &x[1], &x[2]));
        check(&rotary_emb::rope(&gx, &gc, &gs).unwrap(), &want, &format!("rope, per-batch tables, {dt:?}"));
        let want = reference(&[&cx, &cc, &cs], |x| candle_nn::rotary_emb::rope_i(&x[0], &x[1], &x[2]));
        check(&rotary_emb::rope_i(&gx, &gc, &gs).unwrap(), &want, &format!("rope_i, per-batch tables, {dt:?}"));
        let (cx, gx) = both(&values(b * t * h * d, 18), &[b, t, h, d], dt);
        let want = reference(&[&cx, &cc, &cs], |x| candle_nn::rotary_emb::rope_thd(&x[0], &x[1], &x[2]));
        check(&rotary_emb::rope_thd(&gx, &gc, &gs).unwrap(), &want, &format!("rope_thd, per-batch tables, {dt:?}"));
    }
    // Per-batch tables of another batch count.
    let (_, g3) = both(&values(3 * 5 * 4, 1), &[3, 5, 4], DType::F32);
    let (_, gx) = both(&values(2 * 3 * 5 * 8, 2), &[2, 3, 5, 8], DType::F32);
    let e = rotary_emb::rope(&gx, &g3, &g3).unwrap_err().to_string();
    assert!(e.contains("per-batch cos [3, 5, 4]") && e.contains("[2, 5, 4]"), "{e}");
}

#[test]
fn cat_and_the_concat_kv_cache_match_candle() {
    for dim in 0..3 {
        let mut parts = Vec::new();
        for (i, len) in [2usize, 1, 3].into_iter().enumerate() {
            let mut dims = vec![2, 3, 4];
            dims[dim] = len;
            let n: usize = dims.iter().product();
            parts.push(both(&values(n, 20 + i as u64), &dims, DType::F32));
        }
        let c: Vec<&CTensor> = parts.iter().map(|p| &p.0).collect();
        let g: Vec<&VTensor> = parts.iter().map(|p| &p.1).collect();
        let want = CTensor::cat(&c, dim).unwrap();
        let got = VTensor::cat(&g, dim).unwrap();
        assert_eq!(got.dims(), want.dims());
        assert_eq!(
            got.to_vec::<f32>().unwrap(),
            want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            "cat dim {dim}"
        );
    }
    let mut cpu = candle_nn::kv_cache::ConcatKvCache::new(2);
    let mut gpu = ConcatKvCache::new(2);
    for step in 0..3u64 {
        let len = if step == 0 { 4 } else { 1 };
        let (ck, gk) = both(&values(2 * len * 8, 30 + step), &[1, 2, len, 8], DType::F32);
        let (cv, gv) = both(&values(2 * len * 8, 40 + step), &[1, 2, len, 8], DType::F32);
        let (k, v) = cpu.append(&ck, &cv).unwrap();
        let (gk, gv) = gpu.append(&gk, &gv).unwrap();
        assert_eq!(gk.to_vec::<f32>().unwrap(), k.flatten_all().unwrap().to_vec1::<f32>().unwrap(), "keys {step}");
        assert_eq!(gv.to_vec::<f32>().unwrap(), v.flatten_all().unwrap().to_vec1::<f32>().unwrap(), "values {step}");
        assert_eq!(gpu.current_seq_len(), cpu.current_seq_len());
    }
    let (_, bad) = both(&values(8, 1), &[1, 1, 1, 8], DType::F32);
    assert!(gpu.append(&bad, &bad).unwrap_err().to_string().contains("cat along dim 2"));
}
