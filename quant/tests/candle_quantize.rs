//! Quantized bytes vs candle-core 0.11's CPU quantizers (`QTensor::quantize`, which runs
//! `k_quants::Block*::from_float`), an independent Rust port of ggml's reference quantizers.

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

fn compare(ty: GgmlType, dtype: GgmlDType) -> Vec<String> {
    let row_len = 1024;
    let rows = test_rows(row_len, 0x5eed ^ ty.id() as u64);
    let theirs = candle_bytes(&rows, dtype);
    let mut ours = Vec::new();
    for r in &rows {
        ours.extend(quantize(ty, r).unwrap());
    }
    assert_eq!(ours.len(), theirs.len(), "{ty}: size differs");
    let ts = ty.type_size();
    let mut diffs = Vec::new();
    for (i, (a, b)) in ours.chunks(ts).zip(theirs.chunks(ts)).enumerate() {
        if a != b {
            diffs.push(format!("{ty} block {i} (row {}): ours {:02x?}\n theirs {:02x?}", i * ty.block_size() / row_len, a, b));
        }
    }
    diffs
}

macro_rules! same_as_candle {
    ($name:ident, $ty:expr, $dt:expr) => {
        #[test]
        fn $name() {
            let d = compare($ty, $dt);
            assert!(d.is_empty(), "{} of the blocks differ from candle:\n{}", d.len(), d[..d.len().min(3)].join("\n"));
        }
    };
}

same_as_candle!(q4_0, GgmlType::Q4_0, GgmlDType::Q4_0);
same_as_candle!(q4_1, GgmlType::Q4_1, GgmlDType::Q4_1);
same_as_candle!(q5_0, GgmlType::Q5_0, GgmlDType::Q5_0);
same_as_candle!(q5_1, GgmlType::Q5_1, GgmlDType::Q5_1);
same_as_candle!(q8_0, GgmlType::Q8_0, GgmlDType::Q8_0);
same_as_candle!(q8_1, GgmlType::Q8_1, GgmlDType::Q8_1);
same_as_candle!(q2_k, GgmlType::Q2_K, GgmlDType::Q2K);
same_as_candle!(q3_k, GgmlType::Q3_K, GgmlDType::Q3K);
same_as_candle!(q4_k, GgmlType::Q4_K, GgmlDType::Q4K);
same_as_candle!(q5_k, GgmlType::Q5_K, GgmlDType::Q5K);
same_as_candle!(q6_k, GgmlType::Q6_K, GgmlDType::Q6K);
same_as_candle!(q8_k, GgmlType::Q8_K, GgmlDType::Q8K);
same_as_candle!(f16, GgmlType::F16, GgmlDType::F16);
same_as_candle!(bf16, GgmlType::BF16, GgmlDType::BF16);
same_as_candle!(f32, GgmlType::F32, GgmlDType::F32);
