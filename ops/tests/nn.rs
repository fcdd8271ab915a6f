//! Transformer ops on the GPU against candle-nn 0.11 on candle's CPU backend, driven by
//! proptest over shapes and values. Every case runs each op in f32 and in f16, and each
//! reducing op (norms, softmax) on two devices: one with subgroup reductions and one told
//! it has no subgroup arithmetic (portable shared-memory reductions; see `common`).
//!
//! Reference: candle in f32 on the inputs as the device sees them (rounded to f16 for
//! f16 runs; parameters, i.e. norm weight and bias, mask, cos/sin, stay f32). For
//! `add_rms_norm` the reference is `h = x + r` (rounded to the dtype, as the kernel
//! stores it) then `candle_nn::ops::rms_norm(h)`.
//!
//! Tolerances, max |gpu - cpu| ≤ tol * max(1, |cpu|):
//! - f32: rms_norm / layer_norm / add_rms_norm 2e-5, softmax 2e-6, rope 2e-6, silu 2e-6,
//!   gelu 2e-5, gelu_erf 2e-5 (the GPU erf approximation is accurate to 1.2e-7 absolute);
//!   `h` of add_rms_norm exact.
//! - f16: 1e-3 for every op: the output's own rounding to f16 (≤ 2^-11 ≈ 4.9e-4 relative)
//!   plus the f32 error above, the arithmetic being f32 on both sides; `h` exact.

mod common;

use candle_core::Tensor;
use common::{alloc, download, reduce_devices, round, upload, DTYPES};
use proptest::prelude::*;
use vkml_hal::{Device, Stream};
use vkml_ops::nn::{self, GluActivation, RopeShape, RopeStyle};
use vkml_ops::{Dtype, OpsError};

const CPU: candle_core::Device = candle_core::Device::Cpu;

/// The f16 tolerance (see the module docs).
const F16_TOL: f32 = 1e-3;

fn tol(dt: Dtype, f32_tol: f32) -> f32 {
    if dt == Dtype::F16 {
        F16_TOL
    } else {
        f32_tol
    }
}

fn check(name: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> Result<(), TestCaseError> {
    prop_assert_eq!(gpu.len(), cpu.len());
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        prop_assert!((g - c).abs() <= tol * c.abs().max(1.0), "{} [{}]: gpu {} cpu {}", name, i, g, c);
    }
    let errs = common::device().instance().take_validation_errors();
    prop_assert!(errs.is_empty(), "validation errors: {:?}", errs);
    Ok(())
}

fn run(dev: &Device, f: impl FnOnce(&mut Stream)) {
    let mut s = Stream::new(dev).unwrap();
    f(&mut s);
    s.finish_and_wait().unwrap();
}

fn values(len: impl Into<prop::collection::SizeRange>) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-4.0f32..4.0, len)
}

fn t2(v: &[f32], rows: usize, n: usize) -> Tensor {
    Tensor::from_vec(v.to_vec(), (rows, n), &CPU).unwrap()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn rms_norm_matches_candle((rows, n, x, w) in (1usize..6, 1usize..700).prop_flat_map(|(r, n)| (Just(r), Just(n), values(r * n), values(n))), eps in 1e-6f32..1e-2, with_w in any::<bool>()) {
        let wt = if with_w { Tensor::from_vec(w.clone(), n, &CPU).unwrap() } else { Tensor::ones(n, candle_core::DType::F32, &CPU).unwrap() };
        for dt in DTYPES {
            let xr = round(dt, &x);
            let want = flat(&candle_nn::ops::rms_norm(&t2(&xr, rows, n), &wt, eps).unwrap());
            for (path, dev) in reduce_devices() {
                let (xb, wb, yb) = (upload(dev, dt, &x), dev.upload(&w).unwrap(), alloc(dev, dt, rows * n));
                run(dev, |s| nn::rms_norm(s, dt, &xb, with_w.then_some(&wb), rows, n, eps, &yb).unwrap());
                check(&format!("rms_norm {dt:?} {path}"), &download(dt, &yb), &want, tol(dt, 2e-5))?;
            }
        }
    }

    #[test]
    fn add_rms_norm_matches_candle((rows, n, x, r, w) in (1usize..6, 1usize..700).prop_flat_map(|(rows, n)| (Just(rows), Just(n), values(rows * n), values(rows * n), values(n))), eps in 1e-6f32..1e-2, with_w in any::<bool>()) {
        let wt = if with_w { Tensor::from_vec(w.clone(), n, &CPU).unwrap() } else { Tensor::ones(n, candle_core::DType::F32, &CPU).unwrap() };
        for dt in DTYPES {
            // h as the kernel stores it: the f32 sum of the inputs as the device sees them, rounded to dt.
            let sum = (t2(&round(dt, &x), rows, n) + t2(&round(dt, &r), rows, n)).unwrap();
            let want_h = round(dt, &flat(&sum));
            let want = flat(&candle_nn::ops::rms_norm(&t2(&want_h, rows, n), &wt, eps).unwrap());
            for (path, dev) in reduce_devices() {
                let (xb, rb, wb) = (upload(dev, dt, &x), upload(dev, dt, &r), dev.upload(&w).unwrap());
                let (hb, yb) = (alloc(dev, dt, rows * n), alloc(dev, dt, rows * n));
                run(dev, |s| nn::add_rms_norm(s, dt, &xb, &rb, with_w.then_some(&wb), rows, n, eps, &hb, &yb).unwrap());
                check(&format!("add_rms_norm h {dt:?} {path}"), &download(dt, &hb), &want_h, 0.0)?;
                check(&format!("add_rms_norm y {dt:?} {path}"), &download(dt, &yb), &want, tol(dt, 2e-5))?;
            }
        }
    }

    #[test]
    fn layer_norm_matches_candle((rows, n, x, w, b) in (1usize..6, 2usize..700).prop_flat_map(|(r, n)| (Just(r), Just(n), values(r * n), values(n), values(n))), eps in 1e-6f32..1e-2) {
        let wt = Tensor::from_vec(w.clone(), n, &CPU).unwrap();
        let bt = Tensor::from_vec(b.clone(), n, &CPU).unwrap();
        for dt in DTYPES {
            let want = flat(&candle_nn::ops::layer_norm(&t2(&round(dt, &x), rows, n), &wt, &bt, eps).unwrap());
            for (path, dev) in reduce_devices() {
                let (xb, wb, bb, yb) = (upload(dev, dt, &x), dev.upload(&w).unwrap(), dev.upload(&b).unwrap(), alloc(dev, dt, rows * n));
                run(dev, |s| nn::layer_norm(s, dt, &xb, Some(&wb), Some(&bb), rows, n, eps, &yb).unwrap());
                check(&format!("layer_norm {dt:?} {path}"), &download(dt, &yb), &want, tol(dt, 2e-5))?;
            }
        }
    }

    #[test]
    fn softmax_with_scale_and_mask_matches_candle(
        (reps, mask_rows, n, x, mask_bits) in (1usize..4, 1usize..4, 1usize..600)
            .prop_flat_map(|(k, m, n)| (Just(k), Just(m), Just(n), prop::collection::vec(-30.0f32..30.0, k * m * n), prop::collection::vec(any::<bool>(), m * n))),
        scale in 0.05f32..2.0,
        use_mask in any::<bool>(),
    ) {
        let rows = reps * mask_rows;
        // Causal-style additive mask: 0 or -inf; the first entry of each row stays, so no row is all -inf.
        let mask: Vec<f32> = mask_bits.iter().enumerate().map(|(i, &m)| if m && i % n != 0 { f32::NEG_INFINITY } else { 0.0 }).collect();
        for dt in DTYPES {
            let xt = Tensor::from_vec(round(dt, &x), (reps, mask_rows, n), &CPU).unwrap().affine(f64::from(scale), 0.0).unwrap();
            let logits = if use_mask { xt.broadcast_add(&t2(&mask, mask_rows, n)).unwrap() } else { xt };
            let want = flat(&candle_nn::ops::softmax_last_dim(&logits).unwrap());
            for (path, dev) in reduce_devices() {
                let (xb, mb, yb) = (upload(dev, dt, &x), dev.upload(&mask).unwrap(), alloc(dev, dt, rows * n));
                run(dev, |s| nn::softmax(s, dt, &xb, use_mask.then_some((&mb, mask_rows)), rows, n, scale, &yb).unwrap());
                check(&format!("softmax {dt:?} {path}"), &download(dt, &yb), &want, tol(dt, 2e-6))?;
            }
        }
    }

    #[test]
    fn rope_matches_candle(
        (b, h, t, half_d, half_rot, pos_offset) in (1usize..3, 1usize..4, 1usize..9, 1usize..40, 0usize..40, 0usize..5)
            .prop_map(|(b, h, t, hd, hr, p)| (b, h, t, hd, hr.min(hd).max(1), p)),
        interleaved in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dev = common::device();
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
        let style = if interleaved { RopeStyle::Interleaved } else { RopeStyle::Neox };
        let ct = Tensor::from_vec(cos.clone(), (positions, half_rot), &CPU).unwrap().narrow(0, pos_offset, t).unwrap().contiguous().unwrap();
        let st = Tensor::from_vec(sin.clone(), (positions, half_rot), &CPU).unwrap().narrow(0, pos_offset, t).unwrap().contiguous().unwrap();
        for dt in DTYPES {
            let (xb, cb, sb, yb) = (upload(dev, dt, &x), dev.upload(&cos).unwrap(), dev.upload(&sin).unwrap(), alloc(dev, dt, x.len()));
            let sh = RopeShape { bh: b * h, t, d, rot, pos_offset, positions, token_major: false };
            run(dev, |s| nn::rope(s, dt, style, &xb, &cb, &sb, sh, &yb).unwrap());
            let xt = Tensor::from_vec(round(dt, &x), (b, h, t, d), &CPU).unwrap();
            let xr = xt.narrow(3, 0, rot).unwrap().contiguous().unwrap();
            let rotated = if interleaved { candle_nn::rotary_emb::rope_i(&xr, &ct, &st) } else { candle_nn::rotary_emb::rope(&xr, &ct, &st) }.unwrap();
            let full = if rot < d { Tensor::cat(&[&rotated, &xt.narrow(3, rot, d - rot).unwrap()], 3).unwrap() } else { rotated };
            check(&format!("rope {dt:?}"), &download(dt, &yb), &flat(&full), tol(dt, 2e-6))?;
            // The same vectors token-major, [t, b*h, d], as a QKV projection writes them.
            let x_tm = flat(&xt.reshape((b * h, t, d)).unwrap().transpose(0, 1).unwrap().contiguous().unwrap());
            let (xb, yb) = (upload(dev, dt, &x_tm), alloc(dev, dt, x.len()));
            run(dev, |s| nn::rope(s, dt, style, &xb, &cb, &sb, RopeShape { token_major: true, ..sh }, &yb).unwrap());
            let want_tm = flat(&full.reshape((b * h, t, d)).unwrap().transpose(0, 1).unwrap().contiguous().unwrap());
            check(&format!("rope token-major {dt:?}"), &download(dt, &yb), &want_tm, tol(dt, 2e-6))?;
        }
    }

    #[test]
    fn bias_add_matches_candle_broadcast_add((rows, n) in (1usize..9, 1usize..700), seed in any::<u64>()) {
        let dev = common::device();
        let mut rng = seed | 1;
        let mut next = || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; (rng >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0 };
        let x: Vec<f32> = (0..rows * n).map(|_| next()).collect();
        let b: Vec<f32> = (0..n).map(|_| next()).collect();
        for dt in DTYPES {
            let (xb, bb) = (upload(dev, dt, &x), dev.upload(&b).unwrap());
            run(dev, |s| nn::add_bias(s, dt, &xb, &bb, rows, n).unwrap());
            let xt = Tensor::from_vec(round(dt, &x), (rows, n), &CPU).unwrap();
            let want = flat(&xt.broadcast_add(&Tensor::from_vec(b.clone(), n, &CPU).unwrap()).unwrap());
            check(&format!("add_bias {dt:?}"), &download(dt, &xb), &want, tol(dt, 1e-7))?;
        }
    }

    #[test]
    fn gated_activations_match_candle((g, u) in (1usize..3000).prop_flat_map(|n| (prop::collection::vec(-12.0f32..12.0, n), values(n))), which in 0usize..4) {
        let dev = common::device();
        let n = g.len();
        let act = [GluActivation::Silu, GluActivation::Gelu, GluActivation::GeluErf, GluActivation::SwigluOai][which];
        for dt in DTYPES {
            let (gb, ub, yb) = (upload(dev, dt, &g), upload(dev, dt, &u), alloc(dev, dt, n));
            run(dev, |s| nn::glu(s, dt, act, &gb, &ub, n, &yb).unwrap());
            let gt = Tensor::from_vec(round(dt, &g), n, &CPU).unwrap();
            let ut = Tensor::from_vec(round(dt, &u), n, &CPU).unwrap();
            let want: Vec<f32> = candle_glu(act, &gt, &ut).to_vec1().unwrap();
            let f32_tol = if matches!(act, GluActivation::Silu | GluActivation::SwigluOai) { 2e-6 } else { 2e-5 };
            check(&format!("glu {act:?} {dt:?}"), &download(dt, &yb), &want, tol(dt, f32_tol))?;
        }
    }
}

/// The gated product by candle's ops: `act(g) * u` with candle's silu / gelu / gelu_erf, or
/// ggml's `swiglu_oai` (α 1.702, limit 7) composed: `min(g, 7)`, its sigmoid at 1.702 x,
/// `clamp(u, -7, 7) + 1`.
fn candle_glu(act: GluActivation, g: &Tensor, u: &Tensor) -> Tensor {
    let a = match act {
        GluActivation::Silu => candle_nn::ops::silu(g),
        GluActivation::Gelu => g.gelu(),
        GluActivation::GeluErf => g.gelu_erf(),
        GluActivation::SwigluOai => {
            let x = g.minimum(7f32).unwrap();
            let y = (u.clamp(-7f32, 7f32).unwrap() + 1.0).unwrap();
            let sig = candle_nn::ops::sigmoid(&(&x * 1.702).unwrap()).unwrap();
            return ((x * sig).unwrap() * y).unwrap();
        }
    }
    .unwrap();
    (a * u).unwrap()
}

#[test]
fn all_masked_softmax_row_is_zero_not_nan() {
    for dt in DTYPES {
        for (path, dev) in reduce_devices() {
            let x = upload(dev, dt, &[1.0, 2.0, 3.0]);
            let mask = dev.upload(&[f32::NEG_INFINITY; 3]).unwrap();
            let y = alloc(dev, dt, 3);
            run(dev, |s| nn::softmax(s, dt, &x, Some((&mask, 1)), 1, 3, 1.0, &y).unwrap());
            assert_eq!(download(dt, &y), vec![0.0; 3], "{dt:?} {path}");
        }
    }
}

#[test]
fn rope_shape_errors() {
    let dev = common::device();
    let b = alloc(dev, Dtype::F32, 64);
    let mut s = Stream::new(dev).unwrap();
    let sh = RopeShape { bh: 1, t: 4, d: 8, rot: 8, pos_offset: 3, positions: 6, token_major: false };
    let e = nn::rope(&mut s, Dtype::F32, RopeStyle::Neox, &b, &b, &b, sh, &b).unwrap_err();
    assert!(e.to_string().contains("exceed the 6-row cos/sin tables"), "{e}");
    let e = nn::rope(&mut s, Dtype::F32, RopeStyle::Neox, &b, &b, &b, RopeShape { rot: 10, ..sh }, &b).unwrap_err();
    assert!(e.to_string().contains("rot <= d"), "{e}");
}

#[test]
fn f16_buffers_are_sized_in_f16_elements() {
    let dev = common::device();
    // 7 f16 elements fit in 14 bytes, 7 f32 do not.
    let (x, y) = (alloc(dev, Dtype::F16, 7), alloc(dev, Dtype::F16, 7));
    let mut s = Stream::new(dev).unwrap();
    nn::rms_norm(&mut s, Dtype::F16, &x, None, 1, 7, 1e-6, &y).unwrap();
    let e = nn::rms_norm(&mut s, Dtype::F32, &x, None, 1, 7, 1e-6, &y).unwrap_err();
    assert!(e.to_string().contains("needs 7 f32 (28 bytes)"), "{e}");
    s.finish_and_wait().unwrap();
}

#[test]
fn f16_without_16bit_storage_is_a_clear_error() {
    let dev = common::no_f16_device();
    let b = alloc(&dev, Dtype::F32, 64);
    let mut s = Stream::new(&dev).unwrap();
    let sh = RopeShape { bh: 1, t: 1, d: 8, rot: 8, pos_offset: 0, positions: 1, token_major: false };
    let errs = [
        nn::rms_norm(&mut s, Dtype::F16, &b, None, 1, 8, 1e-6, &b).unwrap_err(),
        nn::add_rms_norm(&mut s, Dtype::F16, &b, &b, None, 1, 8, 1e-6, &b, &b).unwrap_err(),
        nn::layer_norm(&mut s, Dtype::F16, &b, None, None, 1, 8, 1e-6, &b).unwrap_err(),
        nn::softmax(&mut s, Dtype::F16, &b, None, 1, 8, 1.0, &b).unwrap_err(),
        nn::rope(&mut s, Dtype::F16, RopeStyle::Neox, &b, &b, &b, sh, &b).unwrap_err(),
        nn::glu(&mut s, Dtype::F16, GluActivation::Silu, &b, &b, 8, &b).unwrap_err(),
    ];
    for e in errs {
        assert!(matches!(e, OpsError::MissingFeature { feature: "storageBuffer16BitAccess", .. }), "{e}");
        assert!(e.to_string().contains("lacks storageBuffer16BitAccess, needed for f16"), "{e}");
    }
    // f32 still works there.
    nn::rms_norm(&mut s, Dtype::F32, &b, None, 1, 8, 1e-6, &b).unwrap();
    s.finish_and_wait().unwrap();
}

/// `glu_halves` (one pass over the halves of `[t, 2n]` rows) against candle-nn's
/// `silu(gate) * up` and the GELU variants on the narrowed halves, and bit-identical to
/// `glu` on the halves copied apart.
#[test]
fn glu_halves_matches_candle_and_glu() {
    let dev = common::device();
    let (t, n) = (5usize, 301usize);
    let both: Vec<f32> = (0..t * 2 * n).map(|i| ((i * 7919) % 2003) as f32 / 100.0 - 10.0).collect();
    let bb = dev.upload(&both).unwrap();
    let cpu = Tensor::from_vec(both.clone(), (t, 2 * n), &CPU).unwrap();
    let (g, u) = (cpu.narrow(1, 0, n).unwrap(), cpu.narrow(1, n, n).unwrap());
    let (gv, uv) = (flat(&g.contiguous().unwrap()), flat(&u.contiguous().unwrap()));
    let (gb, ub) = (dev.upload(&gv).unwrap(), dev.upload(&uv).unwrap());
    for act in [GluActivation::Silu, GluActivation::Gelu, GluActivation::GeluErf, GluActivation::SwigluOai] {
        let (y, y2) = (alloc(dev, Dtype::F32, t * n), alloc(dev, Dtype::F32, t * n));
        run(dev, |s| nn::glu_halves(s, act, &bb, t, n, &y).unwrap());
        run(dev, |s| nn::glu(s, Dtype::F32, act, &gb, &ub, t * n, &y2).unwrap());
        let got = download(Dtype::F32, &y);
        assert_eq!(got, download(Dtype::F32, &y2), "{act:?}");
        let want = flat(&candle_glu(act, &g, &u));
        check(&format!("glu_halves {act:?}"), &got, &want, 2e-5).unwrap();
    }
}

/// `rms_norm_f16_out` writes exactly the f16 rounding (nearest even) of `rms_norm`'s f32
/// output, with and without a weight, on both reduction paths; an odd row length is an
/// error naming it.
#[test]
fn rms_norm_f16_out_is_rms_norm_rounded_to_f16() {
    for (label, dev) in reduce_devices() {
        let (rows, n) = (7usize, 1030usize);
        let x: Vec<f32> = (0..rows * n).map(|i| ((i * 7919) % 4001) as f32 / 400.0 - 5.0).collect();
        let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 13) as f32 / 10.0).collect();
        let (xb, wb) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap());
        for weight in [Some(&wb), None] {
            let y32 = alloc(dev, Dtype::F32, rows * n);
            let y16 = alloc(dev, Dtype::F16, rows * n);
            run(dev, |s| nn::rms_norm(s, Dtype::F32, &xb, weight, rows, n, 1e-5, &y32).unwrap());
            run(dev, |s| nn::rms_norm_f16_out(s, &xb, weight, rows, n, 1e-5, &y16).unwrap());
            let want: Vec<u16> = download(Dtype::F32, &y32).iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
            let got: Vec<u16> = y16.to_vec::<u16>().unwrap()[..rows * n].to_vec();
            assert_eq!(got, want, "{label}, weight {}", weight.is_some());
        }
        let mut s = Stream::new(dev).unwrap();
        let e = nn::rms_norm_f16_out(&mut s, &xb, None, 1, 5, 1e-5, &xb).unwrap_err().to_string();
        assert!(e.contains("rows of 5"), "{e}");
    }
}
