//! Latency of dependent dispatches (issue 29): how long one dispatch takes when it must
//! wait for the one before it (a global memory barrier between them), as a decode step
//! runs them, against the same dispatches independent of each other (no barriers).
//!
//! Chains, each N dispatches in one command buffer, timed on the host around submit +
//! wait (N large enough that the submission itself does not count):
//! - `tiny 1x64`: one workgroup of 64 invocations, y = x * 1 + 1 in place (`affine.f32`);
//! - `tiny 132x128`: the same over 132 workgroups;
//! - mat-vecs of SmolLM2 and llama-8b shapes, x -> y -> x alternating (`quant::mat_vec`).
//!
//! Usage: `latency [--n N]`; device per `VKML_DEVICE`.

use std::time::Instant;

use vkml_benches::{arg, random};
use vkml_hal::{Buffer, Device, MemoryKind, PipelineOptions, Stream};
use vkml_ops::quant::{self, QMatrix};
use vkml_quant::GgmlType;

fn time(dev: &Device, n: usize, mut record: impl FnMut(&mut Stream, usize)) -> f64 {
    let mut s = Stream::new(dev).unwrap();
    for i in 0..n.min(64) {
        record(&mut s, i);
    }
    s.finish_and_wait().unwrap();
    let mut best = f64::MAX;
    for _ in 0..5 {
        for i in 0..n {
            record(&mut s, i);
        }
        let t = Instant::now();
        s.finish_and_wait().unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best / n as f64 * 1e6
}

fn main() {
    let dev = Device::from_env().expect("a Vulkan device");
    let n = arg("--n", 4096) as usize;
    let c = dev.caps();
    println!("device: {} ({}, driver {}), {} dispatches per chain", c.name, c.driver_name, c.driver_version, n);
    let pipe = dev.pipeline(&dev.kernel("affine.f32").unwrap(), &PipelineOptions::default()).unwrap();
    let bufs: Vec<Buffer> = (0..n.min(4096)).map(|_| dev.upload(&vec![0f32; 132 * 128]).unwrap()).collect();
    let push = |len: u32| {
        let mut p = len.to_le_bytes().to_vec();
        p.extend_from_slice(&1f32.to_le_bytes());
        p.extend_from_slice(&1f32.to_le_bytes());
        p
    };
    println!("| chain | µs per dependent dispatch | µs per independent dispatch |");
    println!("|---|---|---|");
    for (name, groups) in [("tiny 1x64", 1u32), ("tiny 132x64", 132)] {
        let len = groups * 64;
        let dep = time(&dev, n, |s, _| {
            s.dispatch(&pipe, &[(&bufs[0]).into(), (&bufs[0]).into()], &push(len), [groups, 1, 1]).unwrap()
        });
        let ind = time(&dev, n, |s, i| {
            let b = &bufs[i % bufs.len()];
            s.dispatch(&pipe, &[b.into(), b.into()], &push(len), [groups, 1, 1]).unwrap()
        });
        println!("| {name} | {dep:.2} | {ind:.2} |");
    }
    for (ty, rows, k) in [
        (GgmlType::Q4_1, 576usize, 576usize),
        (GgmlType::Q4_1, 576, 1536),
        (GgmlType::Q4_0, 4096, 4096),
        (GgmlType::Q4_0, 4096, 14336),
    ] {
        let bytes = vkml_quant::quantize(ty, &random(rows * k, 7)).unwrap();
        let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        let xs: Vec<Buffer> = (0..2).map(|i| dev.upload(&random(rows.max(k), i + 1)).unwrap()).collect();
        let ys: Vec<Buffer> =
            (0..64).map(|_| dev.alloc(4 * rows.max(k) as u64, MemoryKind::DeviceLocal).unwrap()).collect();
        // Dependent: y_i = W x_{i-1} where x and y alternate (rows == k only; else W
        // reads the same x and writes the one it reads next time: still a RAW chain).
        let dep = time(&dev, n / 4, |s, i| quant::mat_vec(s, &m, &xs[i % 2], 1, &xs[(i + 1) % 2]).unwrap());
        let ind = time(&dev, n / 4, |s, i| quant::mat_vec(s, &m, &xs[0], 1, &ys[i % ys.len()]).unwrap());
        println!("| mat_vec {ty:?} {rows}x{k} | {dep:.2} | {ind:.2} |");
    }
}
