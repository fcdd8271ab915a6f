//! Quantized mat-vec bandwidth against the device's own copy bandwidth (issue 4's
//! benchmark): for every GPU-supported GGML type and the shapes rows x k = 4096x4096,
//! 4096x14336 and 14336x4096, the weight bytes read per second by `vkml_ops::quant::mat_vec`
//! (batch 1), as a fraction of `vkCmdCopyBuffer` bandwidth (bytes read + written) measured
//! in the same run. Weights rotate over at least 256 MiB of copies so the figure is memory,
//! not the 50 MB L2.
//!
//! Then quantized mat-mat TFLOP/s at 14336x4096 and 4096x14336 by 512 tokens on every
//! mat-mat path of the device.
//!
//! Usage: `matvec [--min-bytes N] [--reps N] [--mat-mat-only | --mat-vec-only]`; device per `VKML_DEVICE`;
//! `VKML_BENCH_TYPES=Q4_0,Q8_0` limits the mat-vec sweep to those types; `VKML_MATVEC_NR`
//! overrides the rows per subgroup of the block-wise and integer-dot kernels, `VKML_MATVEC_IDOT=0|1|pre` the
//! integer-dot path (`pre`: x quantized to Q8_1 once, outside the timed mat-vecs). Prints a Markdown
//! table. Times are host wall-clock around one submission of many independent dispatches
//! (submission latency amortised over ≥ 1 ms of work); host recording is timed apart.

use std::time::Instant;

use vkml_benches::{arg, mat_mat_options, random};
use vkml_hal::{Device, MemoryKind, Stream};
use vkml_ops::bench;
use vkml_ops::quant::{self, QMatrix, SUPPORTED};
use vkml_quant::GgmlType;

/// Raw blocks of `w` in `ty`; the grid i-quants, which vkml-quant cannot quantize, get
/// pseudo-random blocks (`vkml_ops::bench::random_blocks`: the kernels' speed does not
/// depend on the values).
fn encode(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    match ty {
        GgmlType::F32 => w.iter().flat_map(|x| x.to_le_bytes()).collect(),
        GgmlType::F16 => w.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
        GgmlType::BF16 => w.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect(),
        ty => vkml_quant::quantize(ty, w).unwrap_or_else(|_| bench::random_blocks(ty, 1, w.len(), 0x9e37_79b9)),
    }
}

/// Bytes read + written per second by `spec` (`vkml_ops::bench::copy_kernel` or
/// `copy_command`), timed by `vkml_ops::bench::measure`.
fn bandwidth(dev: &Device, spec: bench::Spec) -> f64 {
    let mut w = spec.build(dev).unwrap();
    let m = bench::measure(dev, &mut w, 3).unwrap();
    w.bytes / m.mean_sd().0
}

fn main() {
    let dev = Device::from_env().expect("a Vulkan device");
    let min_bytes = arg("--min-bytes", 256 << 20);
    let reps = arg("--reps", 20) as usize;
    let c = dev.caps();
    let mut cfg = vkml_ops::tuning::mat_vec_config(c);
    if let Some(nr) = std::env::var("VKML_MATVEC_NR").ok().and_then(|v| v.parse().ok()) {
        cfg.rows_per_subgroup = nr;
        cfg.dot_rows_per_subgroup = nr;
    }
    // VKML_MATVEC_IDOT=1: integer dot, x quantized inside each mat-vec; =pre: x quantized
    // to Q8_1 once, outside the timed mat-vecs (as a decode step shares it).
    let idot = std::env::var("VKML_MATVEC_IDOT").unwrap_or_default();
    cfg.integer_dot = idot == "1" || idot == "pre";
    let pre_q8_1 = idot == "pre";
    println!("mat-vec launch: {cfg:?}");
    println!(
        "device: {} ({}, driver {}), commit {}",
        c.name,
        c.driver_name,
        c.driver_version,
        option_env!("VKML_COMMIT").unwrap_or("unknown")
    );
    // Warm-up: ~2 s of streaming so the GPU leaves its idle clocks before anything is timed.
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < 2.0 {
        bandwidth(&dev, bench::copy_kernel(256 << 20));
    }
    let cmd_copy = bandwidth(&dev, bench::copy_command(1 << 30));
    let copy = bandwidth(&dev, bench::copy_kernel((1 << 30).min(c.limits.max_storage_buffer_range)));
    println!(
        "copy bandwidth, read + write: copy_vec4 kernel {:.1} GB/s (the reference below); vkCmdCopyBuffer {:.1} GB/s\n",
        copy / 1e9,
        cmd_copy / 1e9
    );
    println!("| type | rows x k | weight MiB | copies | host record us | GPU us / mat-vec | GB/s | of copy bw |");
    println!("|---|---|---|---|---|---|---|---|");
    let shapes = [(4096usize, 4096usize), (4096, 14336), (14336, 4096)];
    let max_elems = 4096 * 14336;
    let w = random(max_elems, 7);
    // Quantize everything before timing anything: CPU work in between would let the
    // GPU drop to idle clocks.
    let encoded: Vec<(GgmlType, Vec<u8>)> = SUPPORTED.iter().map(|&ty| (ty, encode(ty, &w))).collect();
    let only: Option<Vec<String>> =
        std::env::var("VKML_BENCH_TYPES").ok().map(|v| v.split(',').map(|t| t.trim().to_uppercase()).collect());
    let skip_matvec = std::env::args().any(|a| a == "--mat-mat-only");
    for (ty, bytes_all) in &encoded {
        let ty = *ty;
        if skip_matvec || only.as_ref().is_some_and(|o| !o.contains(&format!("{ty:?}"))) {
            continue;
        }
        for &(rows, k) in &shapes {
            let n = rows * k;
            let bytes = &bytes_all[..n / ty.block_size() * ty.type_size()];
            let copies = (min_bytes.div_ceil(bytes.len() as u64)).max(1) as usize;
            let mats: Vec<QMatrix> = (0..copies).map(|_| QMatrix::upload(&dev, ty, rows, k, bytes).unwrap()).collect();
            let x = dev.upload(&random(k, 3)).unwrap();
            let pre = pre_q8_1 && quant::DOT_TYPES.contains(&ty);
            let xq = dev.alloc(36 * (k / 32).max(1) as u64, MemoryKind::DeviceLocal).unwrap();
            if pre {
                let mut s = Stream::new(&dev).unwrap();
                quant::quantize_q8_1(&mut s, &x, k / 32, &xq).unwrap();
                s.finish_and_wait().unwrap();
            }
            let mv = |s: &mut Stream, m: &QMatrix, y: &vkml_hal::Buffer| {
                if pre {
                    quant::mat_vec_q8_1(s, m, &xq, 1, y, cfg)
                } else {
                    quant::mat_vec_with(s, m, &x, 1, y, cfg)
                }
            };
            let ys: Vec<_> =
                (0..copies).map(|_| dev.alloc(4 * rows as u64, MemoryKind::DeviceLocal).unwrap()).collect();
            let mut s = Stream::new(&dev).unwrap();
            let run = |s: &mut Stream, n: usize| -> Result<(), vkml_ops::OpsError> {
                for i in 0..n {
                    mv(s, &mats[i % copies], &ys[i % copies])?;
                }
                s.finish_and_wait()?;
                Ok(())
            };
            // Warm-up (pipelines, caches); a shape the device cannot bind is reported.
            if let Err(e) = run(&mut s, copies) {
                println!(
                    "| {ty:?} | {rows}x{k} | {:.1} | - | - | - | - | not run: {e} |",
                    bytes.len() as f64 / (1 << 20) as f64
                );
                continue;
            }
            // Re-warm: uploads above left the GPU idle for a moment.
            let warm = Instant::now();
            while warm.elapsed().as_secs_f64() < 0.3 {
                bandwidth(&dev, bench::copy_kernel(64 << 20));
            }
            let count = reps * copies;
            // Record first, then time the submission alone: host recording cost is
            // reported separately and not counted in the bandwidth.
            let t0 = Instant::now();
            for i in 0..count {
                mv(&mut s, &mats[i % copies], &ys[i % copies]).unwrap();
            }
            let record = t0.elapsed().as_secs_f64() / count as f64;
            let t = Instant::now();
            s.finish_and_wait().unwrap();
            let secs = t.elapsed().as_secs_f64() / count as f64;
            let gbs = bytes.len() as f64 / secs;
            println!(
                "| {ty:?} | {rows}x{k} | {:.1} | {copies} | {:.1} | {:.1} | {:.1} | {:.0} % |",
                bytes.len() as f64 / (1 << 20) as f64,
                record * 1e6,
                secs * 1e6,
                gbs / 1e9,
                100.0 * gbs / copy
            );
        }
    }

    if std::env::args().any(|a| a == "--mat-vec-only") {
        return;
    }
    // Quantized mat-mat (prompt processing): rows x k by 512 tokens, both orientations of
    // the 4096 x 14336 weight, every path the device has.
    println!("\n| type | path | rows x k x tokens | GPU ms | TFLOP/s |");
    println!("|---|---|---|---|---|");
    let mut paths = vec![quant::MatMatPath::Scalar];
    if vkml_ops::tuning::coopmat_subgroup_size(c).is_some() {
        paths.insert(0, quant::MatMatPath::CoopMat);
    }
    if vkml_ops::tuning::coopmat2(c) {
        paths.insert(0, quant::MatMatPath::CoopMat2);
    }
    let n_tok = 512usize;
    let x = dev.upload(&random(n_tok * 14336, 11)).unwrap();
    let y = dev.alloc(4 * (n_tok * 14336) as u64, MemoryKind::DeviceLocal).unwrap();
    for (ty, bytes_all) in &encoded {
        if !matches!(ty, GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::Q4_K | GgmlType::Q6_K | GgmlType::F16) {
            continue;
        }
        for &(rows, k) in &[(14336usize, 4096usize), (4096, 14336)] {
            let m =
                QMatrix::upload(&dev, *ty, rows, k, &bytes_all[..rows * k / ty.block_size() * ty.type_size()]).unwrap();
            for &path in &paths {
                let mut s = Stream::new(&dev).unwrap();
                let run = |s: &mut Stream| quant::mat_mat_with(s, &m, &x, n_tok, &y, mat_mat_options(path));
                if let Err(e) = run(&mut s) {
                    println!("| {ty:?} | {path:?} | {rows}x{k}x{n_tok} | - | not run: {e} |");
                    continue;
                }
                s.finish_and_wait().unwrap();
                let reps = if path == quant::MatMatPath::Scalar { 5 } else { 20 };
                for _ in 0..reps {
                    run(&mut s).unwrap();
                }
                let t = Instant::now();
                s.finish_and_wait().unwrap();
                let secs = t.elapsed().as_secs_f64() / f64::from(reps);
                println!(
                    "| {ty:?} | {path:?} | {rows}x{k}x{n_tok} | {:.3} | {:.1} |",
                    secs * 1e3,
                    2.0 * (rows * k * n_tok) as f64 / secs / 1e12
                );
            }
        }
    }
}
