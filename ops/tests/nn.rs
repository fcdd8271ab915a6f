//! Transformer ops on the GPU against candle-nn 0.11 on candle's CPU backend, driven by
//! proptest over shapes and values. Tolerances (max |gpu - cpu| ≤ tol * max(1, |cpu|)):
//! rms_norm / layer_norm 2e-5, softmax 2e-6, rope 2e-6, silu 2e-6, gelu 2e-5,
//! gelu_erf 2e-5 (the GPU erf approximation is accurate to 1.2e-7 absolute).

use std::sync::OnceLock;

use candle_core::Tensor;

const CPU: candle_core::Device = candle_core::Device::Cpu;
use proptest::prelude::*;
use vkml_hal::{Device, DeviceSelector, Instance, InstanceOptions, MemoryKind, Stream};
use vkml_ops::nn::{self, GluActivation, RopeShape, RopeStyle};

fn device() -> &'static Device {
    static DEV: OnceLock<Device> = OnceLock::new();
    DEV.get_or_init(|| {
        let validation = std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0");
        let inst = Instance::new(&InstanceOptions { validation }).unwrap();
        inst.create_device(&DeviceSelector::from_env(), Default::default()).unwrap()
    })
}

fn check(name: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> Result<(), TestCaseError> {
    prop_assert_eq!(gpu.len(), cpu.len());
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        prop_assert!((g - c).abs() <= tol * c.abs().max(1.0), "{} [{}]: gpu {} cpu {}", name, i, g, c);
    }
    let errs = device().instance().take_validation_errors();
    prop_assert!(errs.is_empty(), "validation errors: {:?}", errs);
    Ok(())
}

fn run(f: impl FnOnce(&mut Stream)) {
    let mut s = Stream::new(device()).unwrap();
    f(&mut s);
    s.finish_and_wait().unwrap();
}

fn out(n: usize) -> vkml_hal::Buffer {
    device().alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap()
}

fn values(len: impl Into<prop::collection::SizeRange>) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-4.0f32..4.0, len)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn rms_norm_matches_candle((rows, n, x, w) in (1usize..6, 1usize..700).prop_flat_map(|(r, n)| (Just(r), Just(n), values(r * n), values(n))), eps in 1e-6f32..1e-2, with_w in any::<bool>()) {
        let dev = device();
        let (xb, wb, yb) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap(), out(rows * n));
        run(|s| nn::rms_norm(s, &xb, with_w.then_some(&wb), rows, n, eps, &yb).unwrap());
        let xt = Tensor::from_vec(x.clone(), (rows, n), &CPU).unwrap();
        let wt = if with_w { Tensor::from_vec(w.clone(), n, &CPU).unwrap() } else { Tensor::ones(n, candle_core::DType::F32, &CPU).unwrap() };
        let want: Vec<f32> = candle_nn::ops::rms_norm(&xt, &wt, eps).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        check("rms_norm", &yb.to_vec::<f32>().unwrap(), &want, 2e-5)?;
    }

    #[test]
    fn layer_norm_matches_candle((rows, n, x, w, b) in (1usize..6, 2usize..700).prop_flat_map(|(r, n)| (Just(r), Just(n), values(r * n), values(n), values(n))), eps in 1e-6f32..1e-2) {
        let dev = device();
        let (xb, wb, bb, yb) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap(), dev.upload(&b).unwrap(), out(rows * n));
        run(|s| nn::layer_norm(s, &xb, Some(&wb), Some(&bb), rows, n, eps, &yb).unwrap());
        let xt = Tensor::from_vec(x.clone(), (rows, n), &CPU).unwrap();
        let wt = Tensor::from_vec(w.clone(), n, &CPU).unwrap();
        let bt = Tensor::from_vec(b.clone(), n, &CPU).unwrap();
        let want: Vec<f32> = candle_nn::ops::layer_norm(&xt, &wt, &bt, eps).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        check("layer_norm", &yb.to_vec::<f32>().unwrap(), &want, 2e-5)?;
    }

    #[test]
    fn softmax_with_scale_and_mask_matches_candle(
        (reps, mask_rows, n, x, mask_bits) in (1usize..4, 1usize..4, 1usize..600)
            .prop_flat_map(|(k, m, n)| (Just(k), Just(m), Just(n), prop::collection::vec(-30.0f32..30.0, k * m * n), prop::collection::vec(any::<bool>(), m * n))),
        scale in 0.05f32..2.0,
        use_mask in any::<bool>(),
    ) {
        let dev = device();
        let rows = reps * mask_rows;
        // Causal-style additive mask: 0 or -inf; the first entry of each row stays, so no row is all -inf.
        let mask: Vec<f32> = mask_bits.iter().enumerate().map(|(i, &m)| if m && i % n != 0 { f32::NEG_INFINITY } else { 0.0 }).collect();
        let (xb, mb, yb) = (dev.upload(&x).unwrap(), dev.upload(&mask).unwrap(), out(rows * n));
        run(|s| nn::softmax(s, &xb, use_mask.then_some((&mb, mask_rows)), rows, n, scale, &yb).unwrap());
        let xt = Tensor::from_vec(x.clone(), (reps, mask_rows, n), &CPU).unwrap().affine(f64::from(scale), 0.0).unwrap();
        let logits = if use_mask { xt.broadcast_add(&Tensor::from_vec(mask.clone(), (mask_rows, n), &CPU).unwrap()).unwrap() } else { xt };
        let want: Vec<f32> = candle_nn::ops::softmax_last_dim(&logits).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        check("softmax", &yb.to_vec::<f32>().unwrap(), &want, 2e-6)?;
    }

    #[test]
    fn rope_matches_candle(
        (b, h, t, half_d, half_rot, pos_offset) in (1usize..3, 1usize..4, 1usize..9, 1usize..40, 0usize..40, 0usize..5)
            .prop_map(|(b, h, t, hd, hr, p)| (b, h, t, hd, hr.min(hd).max(1), p)),
        interleaved in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dev = device();
        let (d, rot) = (2 * half_d, 2 * half_rot);
        let positions = pos_offset + t + 2;
        let mut rng = seed | 1;
        let mut next = || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; (rng >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0 };
        let x: Vec<f32> = (0..b * h * t * d).map(|_| next()).collect();
        // Real rope tables: theta_i = 10000^(-2i/rot), angle = pos * theta_i.
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for p in 0..positions {
            for i in 0..half_rot {
                let a = p as f32 * 10000f32.powf(-2.0 * i as f32 / rot as f32);
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let (xb, cb, sb, yb) = (dev.upload(&x).unwrap(), dev.upload(&cos).unwrap(), dev.upload(&sin).unwrap(), out(x.len()));
        let style = if interleaved { RopeStyle::Interleaved } else { RopeStyle::Neox };
        run(|s| nn::rope(s, style, &xb, &cb, &sb, RopeShape { bh: b * h, t, d, rot, pos_offset, positions }, &yb).unwrap());
        let xt = Tensor::from_vec(x.clone(), (b, h, t, d), &CPU).unwrap();
        let ct = Tensor::from_vec(cos.clone(), (positions, half_rot), &CPU).unwrap().narrow(0, pos_offset, t).unwrap().contiguous().unwrap();
        let st = Tensor::from_vec(sin.clone(), (positions, half_rot), &CPU).unwrap().narrow(0, pos_offset, t).unwrap().contiguous().unwrap();
        let xr = xt.narrow(3, 0, rot).unwrap().contiguous().unwrap();
        let rotated = if interleaved { candle_nn::rotary_emb::rope_i(&xr, &ct, &st) } else { candle_nn::rotary_emb::rope(&xr, &ct, &st) }.unwrap();
        let full = if rot < d { Tensor::cat(&[&rotated, &xt.narrow(3, rot, d - rot).unwrap()], 3).unwrap() } else { rotated };
        let want: Vec<f32> = full.flatten_all().unwrap().to_vec1().unwrap();
        check("rope", &yb.to_vec::<f32>().unwrap(), &want, 2e-6)?;
    }

    #[test]
    fn gated_activations_match_candle((g, u) in (1usize..3000).prop_flat_map(|n| (prop::collection::vec(-12.0f32..12.0, n), values(n))), which in 0usize..3) {
        let dev = device();
        let n = g.len();
        let (gb, ub, yb) = (dev.upload(&g).unwrap(), dev.upload(&u).unwrap(), out(n));
        let act = [GluActivation::Silu, GluActivation::Gelu, GluActivation::GeluErf][which];
        run(|s| nn::glu(s, act, &gb, &ub, n, &yb).unwrap());
        let gt = Tensor::from_vec(g.clone(), n, &CPU).unwrap();
        let ut = Tensor::from_vec(u.clone(), n, &CPU).unwrap();
        let a = match act { GluActivation::Silu => candle_nn::ops::silu(&gt), GluActivation::Gelu => gt.gelu(), GluActivation::GeluErf => gt.gelu_erf() }.unwrap();
        let want: Vec<f32> = (a * ut).unwrap().to_vec1().unwrap();
        let tol = if act == GluActivation::Silu { 2e-6 } else { 2e-5 };
        check("glu", &yb.to_vec::<f32>().unwrap(), &want, tol)?;
    }
}

#[test]
fn all_masked_softmax_row_is_zero_not_nan() {
    let dev = device();
    let x = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
    let mask = dev.upload(&[f32::NEG_INFINITY; 3]).unwrap();
    let y = out(3);
    run(|s| nn::softmax(s, &x, Some((&mask, 1)), 1, 3, 1.0, &y).unwrap());
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0; 3]);
}

#[test]
fn rope_shape_errors() {
    let dev = device();
    let b = out(64);
    let mut s = Stream::new(dev).unwrap();
    let sh = RopeShape { bh: 1, t: 4, d: 8, rot: 8, pos_offset: 3, positions: 6 };
    let e = nn::rope(&mut s, RopeStyle::Neox, &b, &b, &b, sh, &b).unwrap_err();
    assert!(e.to_string().contains("exceed the 6-row cos/sin tables"), "{e}");
    let e = nn::rope(&mut s, RopeStyle::Neox, &b, &b, &b, RopeShape { rot: 10, ..sh }, &b).unwrap_err();
    assert!(e.to_string().contains("rot <= d"), "{e}");
}
