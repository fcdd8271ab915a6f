//! Issue 6's benchmark: float matmul at 4096 x 4096 x 4096 (TFLOP/s, 2 m n k flops) for
//! F32, F16 and BF16 on every matmul kernel the device has (`vkml_ops::matmul::matmul_with`:
//! tiled, and cooperative matrices where offered; the default choice marked), and the
//! element-wise add of two f32 tensors of 2^26 elements (GB/s counting 2 reads and 1 write
//! of 4 bytes), next to the device's `vkCmdCopyBuffer` bandwidth in the same run.
//! `benches/torch_backend.py` measures the same with PyTorch.
//!
//! Usage: `backend_bench [--n 4096] [--reps 20]`; device per `VKML_DEVICE`. Times are
//! host wall-clock around one submission of `reps` dispatches after a warm-up; prints a
//! Markdown table.

use std::time::Instant;

use vkml_benches::{arg, random};
use vkml_hal::{Device, MemoryKind, Stream};
use vkml_ops::elementwise::{self, BinaryOp, View};
use vkml_ops::matmul::{matmul_with, MatLayout};
use vkml_ops::tuning::{float_coopmat_subgroup, matmul_config, MatmulPath};
use vkml_ops::Dtype;

/// `v` as the bytes of `dt`.
fn encode(dt: Dtype, v: &[f32]) -> Vec<u8> {
    match dt {
        Dtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Dtype::F16 => v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect(),
    }
}

/// Seconds per call of `f`, over `reps` calls recorded into one submission.
fn time(dev: &Device, reps: usize, mut f: impl FnMut(&mut Stream)) -> f64 {
    let mut s = Stream::new(dev).unwrap();
    f(&mut s);
    s.finish_and_wait().unwrap();
    let t = Instant::now();
    for _ in 0..reps {
        f(&mut s);
    }
    s.finish_and_wait().unwrap();
    t.elapsed().as_secs_f64() / reps as f64
}

fn main() {
    let dev = Device::from_env().expect("a Vulkan device");
    let n = arg("--n", 4096) as usize;
    let reps = arg("--reps", 20) as usize;
    let c = dev.caps();
    println!(
        "device: {} ({}, driver {}), commit {}",
        c.name,
        c.driver_name,
        c.driver_version,
        option_env!("VKML_COMMIT").unwrap_or("unknown")
    );
    // Warm-up: ~2 s of copies so the GPU leaves its idle clocks before anything is timed.
    let (wa, wb) = (
        dev.alloc(256 << 20, MemoryKind::DeviceLocal).unwrap(),
        dev.alloc(256 << 20, MemoryKind::DeviceLocal).unwrap(),
    );
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < 2.0 {
        time(&dev, 20, |s| s.copy(&wa, 0, &wb, 0, 256 << 20).unwrap());
    }
    println!("\n| op | dtype | kernel | time (ms) | figure |\n|---|---|---|---|---|");
    let lay = MatLayout { offset: 0, batch: 0, row: n, col: 1 };
    for dt in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let a = dev.upload(&encode(dt, &random(n * n, 1))).unwrap();
        let b = dev.upload(&encode(dt, &random(n * n, 2))).unwrap();
        let y = dev.alloc((n * n * dt.size()) as u64, MemoryKind::DeviceLocal).unwrap();
        let default = matmul_config(c, dt, n);
        let mut paths = vec![MatmulPath::Tiled { tile: 64 }, MatmulPath::Tiled { tile: 32 }];
        if let Some((_, require)) = float_coopmat_subgroup(c, dt) {
            paths.push(MatmulPath::CoopMat { require_subgroup_size: require });
        }
        // a b, and a b^T (b read along k: a linear layer's x w^T).
        let lay_t = MatLayout { offset: 0, batch: 0, row: 1, col: n };
        for (what, bl) in [("a b", lay), ("a b^T", lay_t)] {
            for &path in &paths {
                let secs = time(&dev, reps, |s| {
                    matmul_with(s, path, dt, (1, n, n, n), &a, lay, &b, bl, &y).unwrap();
                });
                let tflops = 2.0 * (n as f64).powi(3) / secs / 1e12;
                let mark = if path == default { " (default)" } else { "" };
                println!(
                    "| matmul {what} {n}x{n}x{n} | {} | {path:?}{mark} | {:.3} | {tflops:.1} TFLOP/s |",
                    dt.name(),
                    secs * 1e3
                );
            }
        }
    }
    let len = 1usize << 26;
    let a = dev.upload(&random(len, 3)).unwrap();
    let b = dev.upload(&random(len, 4)).unwrap();
    let y = dev.alloc((len * 4) as u64, MemoryKind::DeviceLocal).unwrap();
    let st = [1usize];
    let secs = time(&dev, reps, |s| {
        let (va, vb) = (View { buffer: &a, offset: 0, strides: &st }, View { buffer: &b, offset: 0, strides: &st });
        elementwise::binary(s, BinaryOp::Add, Dtype::F32, &[len], va, vb, &y).unwrap();
    });
    let add_gbs = 12.0 * len as f64 / secs / 1e9;
    let secs_copy = time(&dev, reps, |s| s.copy(&a, 0, &y, 0, (len * 4) as u64).unwrap());
    let copy_gbs = 8.0 * len as f64 / secs_copy / 1e9;
    println!(
        "| add 2^26 | f32 | binary | {:.3} | {add_gbs:.0} GB/s ({:.0} % of copy) |",
        secs * 1e3,
        100.0 * add_gbs / copy_gbs
    );
    println!("| vkCmdCopyBuffer 256 MiB | - | - | {:.3} | {copy_gbs:.0} GB/s |", secs_copy * 1e3);
}
