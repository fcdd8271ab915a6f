//! Strided element-wise ops on the GPU against candle-core 0.11 on candle's CPU backend,
//! driven by proptest over shapes (rank 0..=5, dims 1..=7 with extra size-1 dims), layouts
//! and values, in f32 and f16.
//!
//! Layouts: each operand is a narrow of a contiguous tensor stored with its dims in a random
//! order (a transposed view with an offset: `narrow` starts on padded dims, plus leading
//! elements before the tensor), and for inputs some dims broadcast (stride 0). The candle
//! reference is built from the same data with `narrow`, `permute` and `broadcast_as`, and
//! the ops get candle's own `Layout` (`start_offset`, `stride`), as a backend would.
//!
//! Reference for the maps: candle in f32 on the inputs as the device sees them (rounded to
//! f16 for f16 runs); the kernels compute in f32 and round once (candle's f16 path rounds
//! every intermediate). For copies: candle's `to_dtype` (the `half` crate), bit for bit.
//! Tolerances: see [`Tol`] and the constants below.

mod common;

use candle_core::{DType, Tensor, WithDType};
use common::{alloc, device, download, round, upload, DTYPES};
use half::f16;
use proptest::prelude::*;
use vkml_hal::{Buffer, Stream};
use vkml_ops::elementwise::{self, contiguous_strides, BinaryOp, UnaryOp, View};
use vkml_ops::{Dtype, OpsError};

const CPU: candle_core::Device = candle_core::Device::Cpu;

/// Allowed error of an f32 result: `|gpu - cpu| <= ulps * ulp(cpu) + abs` (`ulp` of the f32
/// candle result); NaN must match NaN and infinities must be equal. For an f16 result the
/// bound is that plus half an f16 ulp (the one rounding of the f32 result), and an exact
/// op must give the f16 rounding of candle's f32 result bit for bit.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tol {
    ulps: f64,
    abs: f64,
}

// The f32 tolerances. The exact ops are exact on every conformant device; for the others
// Vulkan bounds the device's functions (the bounds quoted), and the tolerances sit between
// what lavapipe shows (worst seen over 400 random cases, quoted) and those bounds: loose
// enough for other GPUs' fast transcendentals, tight enough that a wrong formula or a
// wrong element fails by orders of magnitude.

/// Correctly rounded in f32 as candle computes it: add, sub, mul, maximum, minimum, abs,
/// neg, sqr, relu, floor, ceil, round, sign, and affine (two roundings, no fused
/// multiply-add, as candle); copies are checked bit for bit.
const EXACT: Tol = Tol { ulps: 0.0, abs: 0.0 };
/// div and recip: Vulkan allows 2.5 ulp for division; lavapipe is correctly rounded.
const DIV: Tol = Tol { ulps: 2.5, abs: 0.0 };
/// sqrt: Vulkan's bound is inherited from 1 / inversesqrt (2 + 2.5 ulp); lavapipe is
/// correctly rounded.
const SQRT: Tol = Tol { ulps: 4.5, abs: 0.0 };
/// exp on |x| <= 4: Vulkan allows 3 + 2|x| ulp; lavapipe 6 ulp.
const EXP: Tol = Tol { ulps: 11.0, abs: 0.0 };
/// log: Vulkan allows 3 ulp outside [0.5, 2] and 2^-21 absolute inside (where log is near
/// 0 and ulps mean little); lavapipe reaches the 2^-21.
const LOG: Tol = Tol { ulps: 3.0, abs: 4.8e-7 };
/// sin and cos on |x| <= 4: Vulkan allows 2^-11 absolute (in [-pi, pi]), far too loose to
/// check anything; lavapipe is within 1 ulp. 2^-20 absolute covers fast hardware sin/cos.
const SIN_COS: Tol = Tol { ulps: 4.0, abs: 9.6e-7 };
/// tanh (clamped to +-10), silu, gelu (tanh approximation), elu: formulas over exp, whose
/// error near 1 (a few 2^-24) becomes an absolute error where the result is near 0
/// (`exp(x) - 1`, tanh as `(e^2x - 1) / (e^2x + 1)`); lavapipe: 4.8e-7 absolute, 5 ulp.
const EXP_BASED: Tol = Tol { ulps: 12.0, abs: 1e-6 };
/// erf and gelu_erf: the kernels' erf (activation.glsl) is a rational approximation, within
/// 1.2e-7 in exact arithmetic and about 4e-7 evaluated in f32 near 0 (as 1 - erfc), against
/// libm's erff; lavapipe: 3.8e-7 absolute (erf near -0.13).
const ERF: Tol = Tol { ulps: 4.0, abs: 6e-7 };
/// powf as exp2(e log2|x|): log2's error is scaled by |e log2 x| (here up to 2.5 x 10),
/// then exp2 adds its own; lavapipe: 13 ulp.
const POWF: Tol = Tol { ulps: 32.0, abs: 0.0 };

fn unary_tol(op: UnaryOp) -> Tol {
    match op {
        UnaryOp::Abs
        | UnaryOp::Neg
        | UnaryOp::Sqr
        | UnaryOp::Relu
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Sign => EXACT,
        UnaryOp::Recip => DIV,
        UnaryOp::Sqrt => SQRT,
        UnaryOp::Exp => EXP,
        UnaryOp::Log => LOG,
        UnaryOp::Sin | UnaryOp::Cos => SIN_COS,
        UnaryOp::Tanh | UnaryOp::Silu | UnaryOp::Gelu => EXP_BASED,
        UnaryOp::Erf | UnaryOp::GeluErf => ERF,
    }
}

fn binary_tol(op: BinaryOp) -> Tol {
    if op == BinaryOp::Div {
        DIV
    } else {
        EXACT
    }
}

fn ulp32(c: f32) -> f64 {
    let a = c.abs();
    if a < f32::MIN_POSITIVE {
        2f64.powi(-149)
    } else {
        2f64.powi(((a.to_bits() >> 23) as i32) - 127 - 23)
    }
}

fn ulp16(a: f64) -> f64 {
    if a < 2f64.powi(-14) {
        2f64.powi(-24)
    } else {
        2f64.powi(a.log2().floor() as i32 - 10)
    }
}

/// Whether `gpu` (a value of `dt`, widened) matches candle's f32 result `cpu` within `t`.
fn close(dt: Dtype, gpu: f32, cpu: f32, t: Tol) -> Result<(), f64> {
    if cpu.is_nan() || gpu.is_nan() {
        return if cpu.is_nan() && gpu.is_nan() { Ok(()) } else { Err(f64::INFINITY) };
    }
    let (want, half_ulp) = match dt {
        Dtype::F32 => (cpu, 0.0),
        _ => {
            let b = t.ulps * ulp32(cpu) + t.abs;
            (f16::from_f32(cpu).to_f32(), 0.5 * ulp16(f64::from(cpu.abs()) + b))
        }
    };
    if gpu == want {
        return Ok(());
    }
    if t == EXACT || want.is_infinite() || gpu.is_infinite() {
        return Err(f64::INFINITY);
    }
    let err = (f64::from(gpu) - f64::from(cpu)).abs() - half_ulp;
    let ulps = (err - t.abs).max(0.0) / ulp32(cpu);
    if ulps <= t.ulps {
        Ok(())
    } else {
        Err(ulps)
    }
}

fn check(name: &str, dt: Dtype, gpu: &[f32], cpu: &[f32], t: Tol) -> Result<(), TestCaseError> {
    prop_assert_eq!(gpu.len(), cpu.len(), "{}", name);
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        match close(dt, g, c, t) {
            Ok(()) => {}
            Err(u) => {
                prop_assert!(false, "{} {:?} [{}]: gpu {} cpu {} ({} ulp past the bound {:?})", name, dt, i, g, c, u, t)
            }
        }
    }
    no_validation_errors()
}

fn no_validation_errors() -> Result<(), TestCaseError> {
    let errs = device().instance().take_validation_errors();
    prop_assert!(errs.is_empty(), "validation errors: {:?}", errs);
    Ok(())
}

/// SplitMix64: the data of a case from one proptest seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }

    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// Values of every magnitude f16 has and beyond: subnormals, underflow, overflow.
    fn wide(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let m = self.uniform(1.0, 2.0);
                let e = (self.next() % 48) as i32 - 30;
                let s = if self.next() & 1 == 0 { 1.0 } else { -1.0 };
                s * m * 2f32.powi(e)
            })
            .collect()
    }
}

/// How one operand is stored: its dims in the order `perm` (storage dim `k` holds op dim
/// `perm[k]`), each padded by `pad` and narrowed from `start`, `base` elements before the
/// tensor and `tail` after; `bcast` dims are stored with size 1 and broadcast.
#[derive(Debug, Clone)]
struct Spec {
    perm: Vec<usize>,
    pad: Vec<usize>,
    start: Vec<usize>,
    bcast: Vec<bool>,
    base: usize,
    tail: usize,
}

fn spec(rank: usize, bcast: f64) -> impl Strategy<Value = Spec> {
    (
        Just((0..rank).collect::<Vec<usize>>()).prop_shuffle(),
        prop::collection::vec(prop_oneof![3 => Just(0usize), 1 => 1usize..=2], rank),
        prop::collection::vec(0usize..=2, rank),
        prop::collection::vec(prop::bool::weighted(bcast), rank),
        0usize..4,
        0usize..3,
    )
        .prop_map(|(perm, pad, start, bcast, base, tail)| {
            let start = start.iter().zip(&pad).map(|(&s, &p)| s.min(p)).collect();
            Spec { perm, pad, start, bcast, base, tail }
        })
}

fn dims(rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![1 => Just(1usize), 4 => 1usize..=7], rank)
}

impl Spec {
    /// Stored dims.
    fn stored(&self, shape: &[usize]) -> Vec<usize> {
        self.perm.iter().map(|&i| if self.bcast[i] { 1 } else { shape[i] } + self.pad[i]).collect()
    }

    /// Elements of the whole buffer.
    fn len(&self, shape: &[usize]) -> usize {
        self.base + self.stored(shape).iter().product::<usize>() + self.tail
    }

    /// The view as a candle tensor over `data` (the whole buffer's values).
    fn tensor<T: WithDType>(&self, shape: &[usize], data: &[T]) -> Tensor {
        let stored = self.stored(shape);
        let n: usize = stored.iter().product();
        let mut t = Tensor::from_vec(data[self.base..self.base + n].to_vec(), stored, &CPU).unwrap();
        for (k, &i) in self.perm.iter().enumerate() {
            t = t.narrow(k, self.start[i], if self.bcast[i] { 1 } else { shape[i] }).unwrap();
        }
        if !shape.is_empty() {
            let pos: Vec<usize> = (0..shape.len()).map(|i| self.perm.iter().position(|&p| p == i).unwrap()).collect();
            t = t.permute(pos).unwrap();
        }
        if self.bcast.iter().any(|&b| b) {
            t = t.broadcast_as(shape).unwrap();
        }
        assert_eq!(t.dims(), shape);
        t
    }
}

/// The operand's view as a backend gets it: candle's layout, shifted by `base`.
fn view<'a>(buffer: &'a Buffer, spec: &Spec, t: &'a Tensor) -> View<'a> {
    View { buffer, offset: spec.base + t.layout().start_offset(), strides: t.layout().stride() }
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn stream() -> Stream {
    Stream::new(device()).unwrap()
}

fn shape_and_specs(n: usize, bcast: f64) -> impl Strategy<Value = (Vec<usize>, Vec<Spec>)> {
    (0usize..=5).prop_flat_map(move |r| (dims(r), prop::collection::vec(spec(r, bcast), n)))
}

fn candle_unary(op: UnaryOp, t: &Tensor) -> Tensor {
    match op {
        UnaryOp::Exp => t.exp(),
        UnaryOp::Log => t.log(),
        UnaryOp::Sin => t.sin(),
        UnaryOp::Cos => t.cos(),
        UnaryOp::Abs => t.abs(),
        UnaryOp::Neg => t.neg(),
        UnaryOp::Recip => t.recip(),
        UnaryOp::Sqr => t.sqr(),
        UnaryOp::Sqrt => t.sqrt(),
        UnaryOp::Gelu => t.gelu(),
        UnaryOp::GeluErf => t.gelu_erf(),
        UnaryOp::Erf => t.erf(),
        UnaryOp::Relu => t.relu(),
        UnaryOp::Silu => t.silu(),
        UnaryOp::Tanh => t.tanh(),
        UnaryOp::Floor => t.floor(),
        UnaryOp::Ceil => t.ceil(),
        UnaryOp::Round => t.round(),
        UnaryOp::Sign => t.sign(),
    }
    .unwrap()
}

fn candle_binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Tensor {
    match op {
        BinaryOp::Add => a.add(b),
        BinaryOp::Sub => a.sub(b),
        BinaryOp::Mul => a.mul(b),
        BinaryOp::Div => a.div(b),
        BinaryOp::Maximum => a.maximum(b),
        BinaryOp::Minimum => a.minimum(b),
    }
    .unwrap()
}

/// A unary op of the test: one of candle's, or affine / powf / elu with their parameter.
#[derive(Debug, Clone, Copy)]
enum Map {
    Op(UnaryOp),
    Affine(f32, f32),
    Powf(f32),
    Elu(f32),
}

impl Map {
    fn name(self) -> String {
        match self {
            Map::Op(op) => op.name().to_string(),
            Map::Affine(..) => "affine".into(),
            Map::Powf(..) => "powf".into(),
            Map::Elu(..) => "elu".into(),
        }
    }

    fn tol(self) -> Tol {
        match self {
            Map::Op(op) => unary_tol(op),
            Map::Affine(..) => EXACT,
            Map::Powf(..) => POWF,
            Map::Elu(..) => EXP_BASED,
        }
    }

    fn record(self, s: &mut Stream, dt: Dtype, shape: &[usize], x: View<'_>, y: &Buffer) -> vkml_ops::Result<()> {
        match self {
            Map::Op(op) => elementwise::unary(s, op, dt, shape, x, y),
            Map::Affine(m, a) => elementwise::affine(s, dt, shape, x, f64::from(m), f64::from(a), y),
            Map::Powf(e) => elementwise::powf(s, dt, shape, x, f64::from(e), y),
            Map::Elu(a) => elementwise::elu(s, dt, shape, x, f64::from(a), y),
        }
    }

    fn candle(self, t: &Tensor) -> Tensor {
        match self {
            Map::Op(op) => candle_unary(op, t),
            Map::Affine(m, a) => t.affine(f64::from(m), f64::from(a)).unwrap(),
            Map::Powf(e) => t.powf(f64::from(e)).unwrap(),
            Map::Elu(a) => t.elu(f64::from(a)).unwrap(),
        }
    }

    /// Whether the op gets positive inputs (its candle formula is NaN below 0).
    fn positive(self) -> bool {
        match self {
            Map::Op(op) => matches!(op, UnaryOp::Log | UnaryOp::Sqrt),
            Map::Powf(e) => e.fract() != 0.0,
            _ => false,
        }
    }
}

fn exponent() -> impl Strategy<Value = f32> {
    prop_oneof![Just(2.0f32), Just(3.0), Just(-1.0), Just(0.5), -2.5f32..2.5]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn unary_ops_match_candle((shape, specs) in shape_and_specs(1, 0.15), seed in any::<u64>(), mul in -3f32..3.0, add in -3f32..3.0, e in exponent(), alpha in 0.1f32..2.0) {
        let sp = &specs[0];
        let mut rng = Rng(seed);
        let signed = rng.vec(sp.len(&shape), -4.0, 4.0);
        let positive: Vec<f32> = signed.iter().map(|v| v.abs() / 2.0 + 1e-3).collect();
        let numel: usize = shape.iter().product();
        let dev = device();
        for dt in DTYPES {
            // candle rounds powf's exponent and elu's alpha to the dtype (`T::from_f64`).
            let maps: Vec<Map> = UnaryOp::ALL.iter().map(|&op| Map::Op(op))
                .chain([Map::Affine(mul, add), Map::Powf(round(dt, &[e])[0]), Map::Elu(round(dt, &[alpha])[0])]).collect();
            let (xs, xp) = (round(dt, &signed), round(dt, &positive));
            let (bs, bp) = (upload(dev, dt, &signed), upload(dev, dt, &positive));
            let (ts, tp) = (sp.tensor(&shape, &xs), sp.tensor(&shape, &xp));
            let ys: Vec<Buffer> = maps.iter().map(|_| alloc(dev, dt, numel)).collect();
            let mut s = stream();
            for (m, y) in maps.iter().zip(&ys) {
                let (b, t) = if m.positive() { (&bp, &tp) } else { (&bs, &ts) };
                m.record(&mut s, dt, &shape, view(b, sp, t), y).unwrap();
            }
            s.finish_and_wait().unwrap();
            for (m, y) in maps.iter().zip(&ys) {
                let t = if m.positive() { &tp } else { &ts };
                check(&m.name(), dt, &download(dt, y), &flat(&m.candle(t)), m.tol())?;
            }
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn binary_ops_match_candle((shape, specs) in shape_and_specs(2, 0.3), seed in any::<u64>(), one_buffer in any::<bool>()) {
        let (sa, mut sb) = (specs[0].clone(), specs[1].clone());
        let mut rng = Rng(seed);
        let a = rng.vec(sa.len(&shape), -4.0, 4.0);
        let mut b = rng.vec(sb.len(&shape), -4.0, 4.0);
        if one_buffer {
            // b's data after a's, in the same buffer.
            sb.base += a.len();
            b = a.iter().copied().chain(b).collect();
        }
        let numel: usize = shape.iter().product();
        let dev = device();
        for dt in DTYPES {
            let (ar, br) = (round(dt, &a), round(dt, &b));
            let bb = upload(dev, dt, &b);
            let ab = if one_buffer { bb.clone() } else { upload(dev, dt, &a) };
            let (ta, tb) = (sa.tensor(&shape, &ar), sb.tensor(&shape, &br));
            let ys: Vec<Buffer> = BinaryOp::ALL.iter().map(|_| alloc(dev, dt, numel)).collect();
            let mut s = stream();
            for (&op, y) in BinaryOp::ALL.iter().zip(&ys) {
                elementwise::binary(&mut s, op, dt, &shape, view(&ab, &sa, &ta), view(&bb, &sb, &tb), y).unwrap();
            }
            s.finish_and_wait().unwrap();
            for (&op, y) in BinaryOp::ALL.iter().zip(&ys) {
                check(op.name(), dt, &download(dt, y), &flat(&candle_binary(op, &ta, &tb)), binary_tol(op))?;
            }
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn copy_matches_candle((shape, sp, dsp) in (0usize..=5).prop_flat_map(|r| (dims(r), spec(r, 0.3), spec(r, 0.0))), seed in any::<u64>(), src_dt in prop::sample::select(DTYPES.to_vec()), dst_dt in prop::sample::select(DTYPES.to_vec())) {
        let rank = shape.len();
        let sp = &sp;
        let mut rng = Rng(seed);
        let src = rng.wide(sp.len(&shape));
        let init = rng.vec(dsp.len(&shape), -1.0, 1.0);
        let dev = device();
        let (sb, db) = (upload(dev, src_dt, &src), upload(dev, dst_dt, &init));
        // Reference: candle's strided view of the source in its dtype, converted by to_dtype,
        // written into the destination's view positions.
        let ts = match src_dt { Dtype::F32 => sp.tensor(&shape, &src), _ => sp.tensor(&shape, &to16(&src)) };
        let (want_bits, init_bits) = match dst_dt {
            Dtype::F32 => (bits_f32(&ts), bits32(&init)),
            _ => (bits_f16(&ts), bits16(&init)),
        };
        let td = dsp.tensor(&shape, &init);
        let dview = view(&db, &dsp, &td);
        let mut want = init_bits;
        for (j, w) in want_bits.iter().enumerate() {
            let mut r = j;
            let mut at = dview.offset;
            for d in (0..rank).rev() {
                at += (r % shape[d]) * dview.strides[d];
                r /= shape[d];
            }
            want[at] = *w;
        }
        let mut s = stream();
        elementwise::copy(&mut s, &shape, src_dt, view(&sb, sp, &ts), dst_dt, dview).unwrap();
        s.finish_and_wait().unwrap();
        let got: Vec<u32> = match dst_dt {
            Dtype::F32 => db.to_vec::<u32>().unwrap(),
            _ => db.to_vec::<u16>().unwrap().into_iter().map(u32::from).collect(),
        };
        prop_assert_eq!(got, want, "copy {:?} -> {:?} over {:?}", src_dt, dst_dt, shape);
        no_validation_errors()?;
    }
}

fn to16(v: &[f32]) -> Vec<f16> {
    v.iter().map(|&x| f16::from_f32(x)).collect()
}

fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn bits16(v: &[f32]) -> Vec<u32> {
    v.iter().map(|&x| u32::from(f16::from_f32(x).to_bits())).collect()
}

fn bits_f32(t: &Tensor) -> Vec<u32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

fn bits_f16(t: &Tensor) -> Vec<u32> {
    let v = t.to_dtype(DType::F16).unwrap().flatten_all().unwrap().to_vec1::<f16>().unwrap();
    v.iter().map(|x| u32::from(x.to_bits())).collect()
}

/// Inputs where candle's special cases show: signed zeros, ties of `round`, infinities,
/// NaN, f32 subnormals, the largest finite values, and ordinary values.
const SPECIAL: [f32; 26] = [
    0.0,
    -0.0,
    0.5,
    -0.5,
    1.5,
    2.5,
    -2.5,
    0.499_999_97,
    -0.499_999_97,
    1.0,
    -1.0,
    8_388_609.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    1e-40,
    -1e-40,
    f32::MAX,
    f32::MIN,
    100.0,
    -100.0,
    20.0,
    -20.0,
    1e-3,
    -3.7,
    0.3,
];

#[test]
fn special_values_match_candle() {
    let dev = device();
    let x = dev.upload(&SPECIAL).unwrap();
    let t = Tensor::new(&SPECIAL, &CPU).unwrap();
    let n = SPECIAL.len();
    let shape = [n];
    let v = View { buffer: &x, offset: 0, strides: &[1] };
    // The maps whose special cases the kernels spell out (the transcendental functions on
    // huge or subnormal inputs are the device's: not compared here).
    let mut maps: Vec<Map> = [
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Sqr,
        UnaryOp::Relu,
        UnaryOp::Sign,
        UnaryOp::Round,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Tanh,
    ]
    .into_iter()
    .map(Map::Op)
    .collect();
    maps.extend([Map::Affine(-1.5, 0.25), Map::Elu(0.7)]);
    let exps = [0.0f32, 1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 0.5, -0.5, 2.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    maps.extend(exps.iter().map(|&e| Map::Powf(e)));
    let ys: Vec<Buffer> = maps.iter().map(|_| alloc(dev, Dtype::F32, n)).collect();
    let mut s = stream();
    for (m, y) in maps.iter().zip(&ys) {
        m.record(&mut s, Dtype::F32, &shape, v, y).unwrap();
    }
    // Both operand orders of every pair of specials for maximum / minimum, and the
    // division special cases.
    let a: Vec<f32> = SPECIAL.iter().flat_map(|&p| SPECIAL.map(|_| p)).collect();
    let b: Vec<f32> = SPECIAL.iter().flat_map(|_| SPECIAL).collect();
    let (ab, bb) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
    let (ta, tb) = (Tensor::new(a.as_slice(), &CPU).unwrap(), Tensor::new(b.as_slice(), &CPU).unwrap());
    let ops = [BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Add, BinaryOp::Mul];
    let yb: Vec<Buffer> = ops.iter().map(|_| alloc(dev, Dtype::F32, a.len())).collect();
    let st = [1usize];
    for (&op, y) in ops.iter().zip(&yb) {
        let (va, vb) = (View { buffer: &ab, offset: 0, strides: &st }, View { buffer: &bb, offset: 0, strides: &st });
        elementwise::binary(&mut s, op, Dtype::F32, &[a.len()], va, vb, y).unwrap();
    }
    s.finish_and_wait().unwrap();
    for (m, y) in maps.iter().zip(&ys) {
        let (got, want) = (y.to_vec::<f32>().unwrap(), flat(&m.candle(&t)));
        for i in 0..n {
            // Subnormal inputs and results: a Vulkan device may flush them to zero in
            // arithmetic (the inputs are there for the copies, which work on the bits).
            if SPECIAL[i].is_subnormal() || want[i].is_subnormal() {
                continue;
            }
            // powf at large |e log2 x|: Vulkan's exp2 bound, 3 + 2|e log2 x| ulp, exceeds
            // POWF (the H100 is 43 ulp off at f32::MAX^0.5, where it allows 131).
            let tol = match m {
                Map::Powf(e) => {
                    let spec = 3.0 + 2.0 * f64::from((e * SPECIAL[i].abs().log2()).abs());
                    Tol { ulps: if spec.is_finite() { POWF.ulps.max(spec) } else { POWF.ulps }, ..POWF }
                }
                _ => m.tol(),
            };
            let ok = close(Dtype::F32, got[i], want[i], tol).is_ok();
            assert!(ok, "{:?}({}): gpu {} candle {}", m, SPECIAL[i], got[i], want[i]);
        }
    }
    for (&op, y) in ops.iter().zip(&yb) {
        let (got, want) = (y.to_vec::<f32>().unwrap(), flat(&candle_binary(op, &ta, &tb)));
        for i in 0..a.len() {
            if a[i].is_subnormal() || b[i].is_subnormal() {
                continue;
            }
            assert!(
                close(Dtype::F32, got[i], want[i], EXACT).is_ok(),
                "{op:?}({}, {}): gpu {} candle {}",
                a[i],
                b[i],
                got[i],
                want[i]
            );
        }
    }
    assert!(no_validation_errors().is_ok());
}

/// f32 -> f16 -> f32 through the copy kernels equals `half`'s conversions bit for bit, on
/// specials, ties at every f16 exponent, and random bit patterns (NaN included); and f16 ->
/// f32 for every f16.
#[test]
fn f32_f16_f32_round_trip_matches_half() {
    let dev = device();
    let mut xs: Vec<f32> = SPECIAL.to_vec();
    xs.extend([65504.0, 65519.996, 65520.0, -65520.0, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1.0e-8]);
    xs.push(f32::from_bits(0x7f80_0001)); // signalling NaN, payload in the low bits only
    xs.push(f32::from_bits(0xffc1_2345)); // negative quiet NaN with payload
                                          // Exactly half-way between neighbouring f16 values (ties to even), and one f32 ulp on
                                          // either side, for every f16 exponent (subnormals included).
    for h in (0u16..0x7c00).step_by(97) {
        let lo = f16::from_bits(h).to_f32();
        let hi = f16::from_bits(h + 1).to_f32();
        let mid = (f64::from(lo) + f64::from(hi)) / 2.0;
        let mid = mid as f32;
        xs.extend([mid, -mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits() - 1)]);
    }
    let mut rng = Rng(7);
    xs.extend((0..20_000).map(|_| f32::from_bits(rng.next() as u32)));
    let n = xs.len();
    let src = dev.upload(&xs).unwrap();
    let mid = alloc(dev, Dtype::F16, n);
    let back = alloc(dev, Dtype::F32, n);
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let every = dev.upload(&all).unwrap();
    let widened = alloc(dev, Dtype::F32, all.len());
    let st = [1usize];
    let v = |b| View { buffer: b, offset: 0, strides: &st };
    let mut s = stream();
    elementwise::copy(&mut s, &[n], Dtype::F32, v(&src), Dtype::F16, v(&mid)).unwrap();
    elementwise::copy(&mut s, &[n], Dtype::F16, v(&mid), Dtype::F32, v(&back)).unwrap();
    elementwise::copy(&mut s, &[all.len()], Dtype::F16, v(&every), Dtype::F32, v(&widened)).unwrap();
    s.finish_and_wait().unwrap();
    let (mid, back) = (mid.to_vec::<u16>().unwrap(), back.to_vec::<u32>().unwrap());
    for (i, &x) in xs.iter().enumerate() {
        let h = f16::from_f32(x);
        assert_eq!(mid[i], h.to_bits(), "f32 {x:e} ({:#010x}) -> f16", x.to_bits());
        assert_eq!(back[i], h.to_f32().to_bits(), "f32 {x:e} ({:#010x}) -> f16 -> f32", x.to_bits());
    }
    for (h, w) in all.iter().zip(widened.to_vec::<u32>().unwrap()) {
        assert_eq!(w, f16::from_bits(*h).to_f32().to_bits(), "f16 {h:#06x} -> f32");
    }
    assert!(no_validation_errors().is_ok());
}

#[test]
fn zero_elements_record_nothing() {
    let dev = device();
    let empty = dev.alloc(0, vkml_hal::MemoryKind::DeviceLocal).unwrap();
    let shape = [3, 0, 2];
    let st = [0usize, 0, 0];
    let v = View { buffer: &empty, offset: 0, strides: &st };
    let mut s = stream();
    for dt in DTYPES {
        elementwise::unary(&mut s, UnaryOp::Exp, dt, &shape, v, &empty).unwrap();
        elementwise::affine(&mut s, dt, &shape, v, 2.0, 1.0, &empty).unwrap();
        elementwise::powf(&mut s, dt, &shape, v, 2.0, &empty).unwrap();
        elementwise::elu(&mut s, dt, &shape, v, 1.0, &empty).unwrap();
        elementwise::binary(&mut s, BinaryOp::Add, dt, &shape, v, v, &empty).unwrap();
        elementwise::copy(&mut s, &shape, dt, v, Dtype::F32, v).unwrap();
    }
    let stats = s.stats();
    assert_eq!((stats.dispatches, stats.transfers), (0, 0));
    s.finish_and_wait().unwrap();
}

/// Rank 7 after merging is refused, naming the op and the rank; rank 8 that merges runs.
#[test]
fn rank_above_six_after_merging() {
    let dev = device();
    let shape = [2usize; 7];
    // Fully transposed: no two dims merge.
    let transposed: Vec<usize> = (0..7).map(|i| 1 << i).collect();
    let x = dev.upload(&(0..128).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
    let y = alloc(dev, Dtype::F32, 256);
    let mut s = stream();
    let v = View { buffer: &x, offset: 0, strides: &transposed };
    match elementwise::unary(&mut s, UnaryOp::Neg, Dtype::F32, &shape, v, &y) {
        Err(OpsError::Shape { op, reason }) => {
            assert_eq!(op, "neg");
            assert!(reason.contains("rank 7"), "{reason}");
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    let c = contiguous_strides(&shape);
    let err = elementwise::copy(&mut s, &shape, Dtype::F32, v, Dtype::F32, View { buffer: &y, offset: 0, strides: &c });
    assert!(matches!(err, Err(OpsError::Shape { op: "copy", .. })), "{err:?}");
    // Rank 9 with size-1 dims and a contiguous layout merges to rank 1.
    let shape8 = [2usize, 1, 2, 2, 1, 2, 2, 2, 2];
    let c8 = contiguous_strides(&shape8);
    let v8 = View { buffer: &x, offset: 0, strides: &c8 };
    elementwise::unary(&mut s, UnaryOp::Neg, Dtype::F32, &shape8, v8, &y).unwrap();
    s.finish_and_wait().unwrap();
    let got = y.to_vec::<f32>().unwrap();
    assert!((0..128).all(|i| got[i] == -(i as f32)));
    assert!(no_validation_errors().is_ok());
}

fn shape_err(r: vkml_ops::Result<()>, what: &str) {
    match r {
        Err(OpsError::Shape { reason, .. }) => eprintln!("{what}: {reason}"),
        other => panic!("{what}: expected a shape error, got {other:?}"),
    }
}

/// Bad views are errors, never out-of-bounds accesses or panics; the stream stays usable.
#[test]
fn bad_views_are_errors() {
    let dev = device();
    let x = dev.upload(&[1.0f32; 10]).unwrap();
    let y = alloc(dev, Dtype::F32, 10);
    let mut s = stream();
    let neg = |s: &mut Stream, shape: &[usize], v: View<'_>, y: &Buffer| {
        elementwise::unary(s, UnaryOp::Neg, Dtype::F32, shape, v, y)
    };
    shape_err(neg(&mut s, &[6], View { buffer: &x, offset: 5, strides: &[1] }, &y), "view past the end");
    shape_err(neg(&mut s, &[2, 3], View { buffer: &x, offset: 0, strides: &[5, 3] }, &y), "strided past the end");
    shape_err(neg(&mut s, &[2], View { buffer: &x, offset: 0, strides: &[usize::MAX] }, &y), "stride overflow");
    shape_err(neg(&mut s, &[2], View { buffer: &x, offset: usize::MAX, strides: &[1] }, &y), "offset overflow");
    shape_err(neg(&mut s, &[2], View { buffer: &x, offset: 0, strides: &[1 << 33] }, &y), "index past u32");
    shape_err(neg(&mut s, &[2, 5], View { buffer: &x, offset: 0, strides: &[5] }, &y), "stride count");
    let big = [1usize << 20, 1 << 13];
    shape_err(neg(&mut s, &big, View { buffer: &x, offset: 0, strides: &[0, 0] }, &y), "more than 2^32 elements");
    shape_err(neg(&mut s, &[11], View { buffer: &x, offset: 0, strides: &[0] }, &y), "y too small");
    let f16x = upload(dev, Dtype::F16, &[1.0; 10]);
    shape_err(
        elementwise::unary(
            &mut s,
            UnaryOp::Neg,
            Dtype::F16,
            &[6],
            View { buffer: &f16x, offset: 5, strides: &[1] },
            &y,
        ),
        "f16 view past the end",
    );
    let one = [1usize];
    shape_err(
        elementwise::binary(
            &mut s,
            BinaryOp::Add,
            Dtype::F32,
            &[10],
            View { buffer: &x, offset: 0, strides: &one },
            View { buffer: &x, offset: 1, strides: &one },
            &y,
        ),
        "b past the end",
    );
    // y overlapping an input other than in place.
    shape_err(neg(&mut s, &[5], View { buffer: &y, offset: 1, strides: &[1] }, &y), "y overlaps x");
    // Copies: a destination written twice, or overlapping the source.
    shape_err(
        elementwise::copy(
            &mut s,
            &[2, 3],
            Dtype::F32,
            View { buffer: &x, offset: 0, strides: &[3, 1] },
            Dtype::F32,
            View { buffer: &y, offset: 0, strides: &[0, 1] },
        ),
        "dst broadcast",
    );
    shape_err(
        elementwise::copy(
            &mut s,
            &[4],
            Dtype::F32,
            View { buffer: &y, offset: 0, strides: &one },
            Dtype::F32,
            View { buffer: &y, offset: 2, strides: &one },
        ),
        "copy overlap",
    );
    assert_eq!(s.stats().dispatches + s.stats().transfers, 0);
    // In place is fine: y = -y, then y = y + y.
    let ys = [1usize];
    let mut s = stream();
    s.copy(&x, 0, &y, 0, 40).unwrap();
    neg(&mut s, &[10], View { buffer: &y, offset: 0, strides: &ys }, &y).unwrap();
    let vy = View { buffer: &y, offset: 0, strides: &ys };
    elementwise::binary(&mut s, BinaryOp::Add, Dtype::F32, &[10], vy, vy, &y).unwrap();
    s.finish_and_wait().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![-2.0; 10]);
    assert!(no_validation_errors().is_ok());
}

#[test]
fn f16_needs_16bit_storage() {
    let dev = common::no_f16_device();
    let x = dev.upload(&[0u16; 4]).unwrap();
    let y = dev.alloc(16, vkml_hal::MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let v = View { buffer: &x, offset: 0, strides: &[1] };
    let r = elementwise::unary(&mut s, UnaryOp::Exp, Dtype::F16, &[4], v, &y);
    assert!(matches!(r, Err(OpsError::MissingFeature { .. })), "{r:?}");
    let r = elementwise::copy(&mut s, &[4], Dtype::F16, v, Dtype::F32, View { buffer: &y, offset: 0, strides: &[1] });
    assert!(matches!(r, Err(OpsError::MissingFeature { .. })), "{r:?}");
}

/// Past 65535 x 256 elements the launch grid goes 2D: a transposed f16 read of 4097 x 4097.
#[test]
fn large_grid_is_2d() {
    let dev = device();
    let n = 4097usize;
    // 2D wherever maxComputeWorkGroupCount[0] is 65535 (lavapipe, most GPUs): 1D only past
    // that.
    let xs: Vec<f32> = (0..n * n).map(|i| (i % 2039) as f32).collect();
    let x = upload(dev, Dtype::F16, &xs);
    let y = alloc(dev, Dtype::F16, n * n);
    let mut s = stream();
    elementwise::unary(&mut s, UnaryOp::Neg, Dtype::F16, &[n, n], View { buffer: &x, offset: 0, strides: &[1, n] }, &y)
        .unwrap();
    s.finish_and_wait().unwrap();
    let got = y.to_vec::<f16>().unwrap();
    for i in 0..n {
        for j in 0..n {
            assert_eq!(got[i * n + j].to_f32(), -xs[j * n + i], "[{i}, {j}]");
        }
    }
    assert!(no_validation_errors().is_ok());
}

/// `softcap` (Gemma 2's final logit soft-capping in one pass) gives the f32 values of
/// `affine(1 / cap, 0)`, `tanh`, `affine(cap, 0)` one after another, bit for bit up to the
/// sign of zeros, on a strided view, NaN and infinities included; F64 is refused by name.
#[test]
fn softcap_equals_affine_tanh_affine() {
    let dev = device();
    let cap = 30.0f32;
    let mut x: Vec<f32> = (0..257).map(|i| (i as f32 - 128.0) * 0.9).collect();
    x.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e-30]);
    let n = x.len();
    let xb = upload(dev, Dtype::F32, &x);
    let (a, b, c, fused) =
        (alloc(dev, Dtype::F32, n), alloc(dev, Dtype::F32, n), alloc(dev, Dtype::F32, n), alloc(dev, Dtype::F32, n));
    let strides = [1usize];
    let v = |buffer| View { buffer, offset: 0, strides: &strides };
    let mut s = stream();
    let shape = [n];
    elementwise::affine(&mut s, Dtype::F32, &shape, v(&xb), 1.0 / f64::from(cap), 0.0, &a).unwrap();
    elementwise::unary(&mut s, UnaryOp::Tanh, Dtype::F32, &shape, v(&a), &b).unwrap();
    elementwise::affine(&mut s, Dtype::F32, &shape, v(&b), f64::from(cap), 0.0, &c).unwrap();
    elementwise::softcap(&mut s, Dtype::F32, &shape, v(&xb), cap, &fused).unwrap();
    s.finish_and_wait().unwrap();
    let (want, got) = (download(Dtype::F32, &c), download(Dtype::F32, &fused));
    for i in 0..n {
        let same = want[i].to_bits() == got[i].to_bits() || (want[i] == 0.0 && got[i] == 0.0);
        assert!(same || (want[i].is_nan() && got[i].is_nan()), "x {}: {} vs {}", x[i], got[i], want[i]);
    }
    assert!(got[..257].iter().all(|v| v.abs() <= cap) && got[257].is_nan() && got[258] == cap);
    let e = elementwise::softcap(&mut s, Dtype::F64, &shape, v(&xb), cap, &fused).unwrap_err();
    assert!(e.to_string().contains("softcap"), "{e}");
}
