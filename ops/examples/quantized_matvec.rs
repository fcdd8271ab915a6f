//! Quantized inference, one matrix: a weight matrix quantized to Q4_K on the CPU
//! (vkml-quant, ggml's reference quantizer), uploaded as GGML blocks, multiplied by a
//! vector on the GPU (the fused mat-vec that dequantizes as it reads), compared with the
//! f32 product and with the product of the dequantized weights.
//!
//! `cargo run --release -p vkml-ops --example quantized_matvec` (device per
//! `VKML_DEVICE`, else the best).

use vkml_hal::{Device, MemoryKind, Stream};
use vkml_ops::quant::{self, QMatrix};
use vkml_quant::GgmlType;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::from_env()?;
    let (rows, k) = (512, 1024);
    // Deterministic weights and input in [-1, 1).
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    };
    let w: Vec<f32> = (0..rows * k).map(|_| next()).collect();
    let x: Vec<f32> = (0..k).map(|_| next()).collect();

    let ty = GgmlType::Q4_K;
    let blocks = vkml_quant::quantize(ty, &w)?;
    let m = QMatrix::upload(&dev, ty, rows, k, &blocks)?;
    let xb = dev.upload(&x)?;
    let yb = dev.alloc(4 * rows as u64, MemoryKind::DeviceLocal)?;
    let mut s = Stream::new(&dev)?;
    quant::mat_vec(&mut s, &m, &xb, 1, &yb)?;
    s.finish_and_wait()?;
    let y = yb.to_vec::<f32>()?;

    let dot = |w: &[f32]| -> Vec<f64> {
        (0..rows).map(|r| (0..k).map(|c| f64::from(w[r * k + c]) * f64::from(x[c])).sum()).collect()
    };
    let exact = dot(&w);
    let dequantized = dot(&vkml_quant::dequantize_to_vec(ty, &blocks)?);
    let rms = |a: &[f64]| (a.iter().map(|v| v * v).sum::<f64>() / a.len() as f64).sqrt();
    let err = |a: &[f64]| {
        let d: Vec<f64> = (0..rows).map(|r| f64::from(y[r]) - a[r]).collect();
        rms(&d) / rms(a)
    };
    println!(
        "{ty:?} {rows}x{k} mat-vec on {} ({} bytes of blocks for {} of f32): relative RMS error {:.2e} against \
         the f32 product, {:.2e} against the dequantized weights' product",
        dev.caps().name,
        blocks.len(),
        4 * w.len(),
        err(&exact),
        err(&dequantized)
    );
    // Q4_K's own rounding error is a few per cent; the kernel adds only f32 rounding (and
    // Q8_1 activations where the device runs the integer-dot path).
    assert!(err(&exact) < 0.1 && err(&dequantized) < 0.02);
    Ok(())
}
