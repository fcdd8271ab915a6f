//! Quantized bytes vs candle-core 0.11's CPU quantizers (`QTensor::quantize`, which runs
//! `k_quants::Block*::from_float`), an independent Rust port of ggml's reference quantizers,
//! and candle's dequantizer as an independent decoder of our k-quant bytes.

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use vkml_quant::{quantize, GgmlType};

/// Small deterministic PRNG (xorshift64*), so that failures reproduce.
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// Roughly normal (sum of uniforms).
    fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() * 0.87
    }
}

/// Rows of test data: random normal/uniform rows at several magnitudes plus extreme rows.
pub fn test_rows(row_len: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng(seed | 1);
    let mut rows = Vec::new();
    for &scale in &[1.0f32, 1e-3, 37.5, 1e-6, 3e3] {
        for _ in 0..12 {
            rows.push((0..row_len).map(|_| rng.normal() * scale).collect());
        }
        rows.push((0..row_len).map(|_| rng.unit() * scale).collect());
        // all positive / all negative
        rows.push((0..row_len).map(|_| rng.unit().abs() * scale + scale * 0.01).collect());
        rows.push((0..row_len).map(|_| -rng.unit().abs() * scale - scale * 0.01).collect());
    }
    rows.push(vec![0.0; row_len]);
    rows.push(vec![1.0; row_len]);
    rows.push(vec![-2.5; row_len]);
    // one outlier in otherwise small values, at several positions
    for pos in [0, 7, row_len / 2 + 3, row_len - 1] {
        let mut r: Vec<f32> = (0..row_len).map(|_| rng.normal() * 0.01).collect();
        r[pos] = 100.0;
        rows.push(r.clone());
        r[pos] = -100.0;
        rows.push(r);
    }
    // one non-zero value, the rest zero
    let mut r = vec![0.0; row_len];
    r[5] = 0.75;
    rows.push(r);
    // huge and tiny magnitudes (still finite after f16 scale rounding for most types)
    rows.push((0..row_len).map(|_| rng.normal() * 6.0e4).collect());
    rows.push((0..row_len).map(|_| rng.normal() * 1e-30).collect());
    rows.push((0..row_len).map(|i| if i % 2 == 0 { 1e-8 } else { -3e4 }).collect());
    // sub-blocks of wildly different scale
    rows.push((0..row_len).map(|i| rng.normal() * if (i / 16) % 3 == 0 { 1e-4 } else { 10.0 }).collect());
    rows
}

fn candle_bytes(rows: &[Vec<f32>], dtype: GgmlDType) -> Vec<u8> {
    let flat: Vec<f32> = rows.concat();
    let t = Tensor::from_vec(flat, (rows.len(), rows[0].len()), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&t, dtype).unwrap();
    q.data().unwrap().into_owned()
}

/// candle's dequantizer (`to_float`) applied to raw block bytes.
fn candle_dequantize(bytes: &[u8], dtype: GgmlDType, n: usize) -> Vec<f32> {
    let q = qtensor_from_ggml(dtype, bytes, vec![n], &Device::Cpu).unwrap();
    q.dequantize(&Device::Cpu).unwrap().to_vec1::<f32>().unwrap()
}

const ROW_LEN: usize = 1024;

fn ours_and_theirs(ty: GgmlType, dtype: GgmlDType) -> (Vec<Vec<f32>>, Vec<u8>, Vec<u8>) {
    let rows = test_rows(ROW_LEN, 0x5eed ^ ty.id() as u64);
    let theirs = candle_bytes(&rows, dtype);
    let mut ours = Vec::new();
    for r in &rows {
        ours.extend(quantize(ty, r).unwrap());
    }
    assert_eq!(ours.len(), theirs.len(), "{ty}: size differs");
    (rows, ours, theirs)
}

/// Byte-for-byte equality with candle, restricted to the byte ranges `mask` of each block.
fn compare(ty: GgmlType, dtype: GgmlDType, mask: &[std::ops::Range<usize>]) -> Vec<String> {
    let (_, ours, theirs) = ours_and_theirs(ty, dtype);
    let ts = ty.type_size();
    let mut diffs = Vec::new();
    for (i, (a, b)) in ours.chunks(ts).zip(theirs.chunks(ts)).enumerate() {
        if mask.iter().any(|r| a[r.clone()] != b[r.clone()]) {
            diffs.push(format!(
                "{ty} block {i} (row {}): ours {:02x?}\n theirs {:02x?}",
                i * ty.block_size() / ROW_LEN,
                a,
                b
            ));
        }
    }
    diffs
}

macro_rules! same_as_candle {
    ($name:ident, $ty:expr, $dt:expr) => {
        same_as_candle!($name, $ty, $dt, &[0..$ty.type_size()]);
    };
    ($name:ident, $ty:expr, $dt:expr, $mask:expr) => {
        #[test]
        fn $name() {
            let d = compare($ty, $dt, $mask);
            assert!(d.is_empty(), "{} of the blocks differ from candle:\n{}", d.len(), d[..d.len().min(3)].join("\n"));
        }
    };
}

// candle's quantizers for these types are ports of ggml's current reference: bytes must match.
same_as_candle!(q4_0, GgmlType::Q4_0, GgmlDType::Q4_0);
same_as_candle!(q4_1, GgmlType::Q4_1, GgmlDType::Q4_1);
same_as_candle!(q5_0, GgmlType::Q5_0, GgmlDType::Q5_0);
same_as_candle!(q5_1, GgmlType::Q5_1, GgmlDType::Q5_1);
same_as_candle!(q8_0, GgmlType::Q8_0, GgmlDType::Q8_0);
same_as_candle!(q8_k, GgmlType::Q8_K, GgmlDType::Q8K);
same_as_candle!(f16, GgmlType::F16, GgmlDType::F16);
same_as_candle!(bf16, GgmlType::BF16, GgmlDType::BF16);
same_as_candle!(f32, GgmlType::F32, GgmlDType::F32);
// Q8_1: `d` and `qs` match; candle computes `s` as f16(sum) * f16(d), ggml (and we) as
// f16(sum * d) with the unrounded d, so `s` (bytes 2..4) is checked against ggml's formula.
same_as_candle!(q8_1_d_and_qs, GgmlType::Q8_1, GgmlDType::Q8_1, &[0..2, 4..36]);

#[test]
fn q8_1_s_is_ggml_formula() {
    let rows = test_rows(ROW_LEN, 77);
    for r in &rows {
        let bytes = quantize(GgmlType::Q8_1, r).unwrap();
        for (blk, x) in bytes.chunks(36).zip(r.chunks(32)) {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let sum: i32 = blk[4..].iter().map(|&q| q as i8 as i32).sum();
            let s = half::f16::from_f32(sum as f32 * d);
            assert_eq!(&blk[2..4], &s.to_le_bytes());
        }
    }
}

// k-quants: candle 0.11 implements older ggml algorithms (Q2_K via make_qkx1_quants, Q4_K/Q5_K
// without the weighted search, Q6_K/Q3_K with different tie and zero-scale handling), so bytes
// differ by design (our bytes equal ggml's, see tests/ggml_quantize.rs). Here candle is used as
// an independent decoder of our bytes and as a quality baseline.
fn kquant_checks(ty: GgmlType, dtype: GgmlDType, tolerance: f64) {
    let (rows, ours, theirs) = ours_and_theirs(ty, dtype);
    let n = rows.len() * ROW_LEN;
    let flat: Vec<f32> = rows.concat();
    let ours_deq = vkml_quant::dequantize_to_vec(ty, &ours).unwrap();
    // 1. candle decodes our bytes to exactly our values (layout + dequantizer agree).
    let candle_deq_of_ours = candle_dequantize(&ours, dtype, n);
    for (i, (a, b)) in ours_deq.iter().zip(&candle_deq_of_ours).enumerate() {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{ty}: element {i}: ours {a} candle {b}");
    }
    // 2. our quantization error is no worse than candle's (per row, summed over rows with
    //    moderate magnitudes where both are finite).
    let theirs_deq = vkml_quant::dequantize_to_vec(ty, &theirs).unwrap();
    let (mut e_ours, mut e_theirs) = (0f64, 0f64);
    for ((x, a), b) in flat.iter().zip(&ours_deq).zip(&theirs_deq) {
        if x.abs() < 1e4 && x.abs() > 1e-20 && a.is_finite() && b.is_finite() {
            e_ours += ((x - a) as f64).powi(2) / (*x as f64).abs().max(1e-3);
            e_theirs += ((x - b) as f64).powi(2) / (*x as f64).abs().max(1e-3);
        }
    }
    assert!(e_ours <= e_theirs * tolerance, "{ty}: error ours {e_ours} vs candle {e_theirs}");
}

#[test]
fn q2_k_decoded_by_candle_and_not_worse() {
    // ggml's Q2_K reference minimizes |x|-weighted absolute error (make_qkx2_quants with
    // use_mad), candle's the squared error, so allow a larger margin in this squared metric.
    kquant_checks(GgmlType::Q2_K, GgmlDType::Q2K, 1.35);
}
#[test]
fn q3_k_decoded_by_candle_and_not_worse() {
    kquant_checks(GgmlType::Q3_K, GgmlDType::Q3K, 1.05);
}
#[test]
fn q4_k_decoded_by_candle_and_not_worse() {
    kquant_checks(GgmlType::Q4_K, GgmlDType::Q4K, 1.05);
}
#[test]
fn q5_k_decoded_by_candle_and_not_worse() {
    kquant_checks(GgmlType::Q5_K, GgmlDType::Q5K, 1.05);
}
#[test]
fn q6_k_decoded_by_candle_and_not_worse() {
    kquant_checks(GgmlType::Q6_K, GgmlDType::Q6K, 1.05);
}
