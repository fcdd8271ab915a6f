//! Kernel lab for the cooperative-matrix mat-mat: compiles each GLSL file named on the
//! command line at run time as the kernel the op runs for each type
//! (`quant::mat_mat_kernel`), on a
//! fresh device each, and times `quant::mat_mat_with(.., MatMatPath::CoopMat, ..)` at
//! 14336x4096 and 4096x14336 by 512 tokens for Q4_0, Q8_0 and Q4_K, checking every output
//! against the built-in kernel's. With `VKML_LAB_PATH=cm2` the files replace
//! `mul_mat_cm2.<type>` and run on [`MatMatPath::CoopMat2`] instead, with `VKML_LAB_PATH=i8`
//! `mul_mat_cm_i8.<type>` on [`MatMatPath::CoopMatInt8`] (Q4_0 and Q8_0 only; x quantized
//! to Q8_1 in each call); the reference stays the built-in `mul_mat_cm`. For trying kernel variants in one device session.
//!
//! Prints the driver's compiler statistics of each kernel (registers, shared memory,
//! where the driver reports them through VK_KHR_pipeline_executable_properties).
//!
//! With `VKML_LAB_TILE=RxT` the files run as their own kernel on a grid of R-row x T-token
//! tiles that cm_lab dispatches itself (same bindings and push constants as
//! `mul_mat_cm`, x converted to f16 on the host, no split-K), for tile shapes the op does
//! not launch.
//!
//! A file replaces `mul_mat_cm` (or the kernel `VKML_LAB_KERNEL` names, e.g.
//! `mul_mat_cm256`; each line names the kernel the op ran), gets the op's specialization
//! constants (`tuning::mat_mat_spec_constants`) and must declare them; a file on its own
//! grid (`@RxT`) gets only constant 0. `VKML_LAB_SHAPES=RxK,...` picks the weight shapes.
//!
//! `@RxTxZ` also splits k over Z workgroups (chunks a multiple of 32), the partial
//! products summed by the op's `reduce_partials` kernel.
//!
//! Usage: `cm_lab FILE.comp[@RxT[xZ]]...` (device per `VKML_DEVICE`; `@RxT` gives that file its
//! own tile grid; `VKML_LAB_TYPES=f16,q4_0,q8_0,q4_k,q6_k,...` picks the weight types:
//! F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, IQ4_NL, IQ4_XS).

use std::time::Instant;

use vkml_benches::{mat_mat_options, random};
use vkml_hal::shader::Glsl;
use vkml_hal::{Device, MemoryKind, Stream, TargetEnv};
use vkml_ops::quant::{self, MatMatPath, QMatrix};
use vkml_quant::GgmlType;

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    let n_tok = 512usize;
    // VKML_LAB_TYPES=f16,q4_0,... picks the types (default Q4_0, Q8_0, Q4_K). A type's name
    // is its kernel variant's (`dequant.<name>`), whose QTYPE define a lab file is built with.
    let all = [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];
    let wanted = std::env::var("VKML_LAB_TYPES").unwrap_or_else(|_| "q4_0,q8_0,q4_k".into());
    let types: Vec<(GgmlType, String, &'static str)> = all
        .iter()
        .map(|&ty| {
            let name = format!("{ty:?}").to_lowercase();
            let qtype = vkml_shaders::get(&format!("dequant.{name}"))
                .and_then(|info| info.defines.iter().find(|(k, _)| *k == "QTYPE"))
                .map(|(_, v)| *v)
                .expect("every lab type has a dequant variant with a QTYPE define");
            (ty, name, qtype)
        })
        .filter(|(_, n, _)| wanted.split(',').any(|w| w == n))
        .collect();
    let (lab_path, default_kernel) = match std::env::var("VKML_LAB_PATH").as_deref() {
        Ok("cm2") => (MatMatPath::CoopMat2, "mul_mat_cm2"),
        Ok("i8") => (MatMatPath::CoopMatInt8, "mul_mat_cm_i8"),
        _ => (MatMatPath::CoopMat, "mul_mat_cm"),
    };
    // The built-in kernel a lab file replaces (VKML_LAB_KERNEL, e.g. mul_mat_cm256); shapes
    // on which the op runs another kernel run that one (each line names it).
    let lab_kernel = std::env::var("VKML_LAB_KERNEL").unwrap_or_else(|_| default_kernel.into());
    // RxT or RxTxZ (Z: split-K factor of a direct run).
    let parse_tile = |v: &str| -> Option<(usize, usize, usize)> {
        let mut it = v.split('x').map(str::parse::<usize>);
        let (r, t) = (it.next()?.ok()?, it.next()?.ok()?);
        let z = it.next().map_or(Some(1), Result::ok)?;
        (it.next().is_none() && z > 0).then_some((r, t, z))
    };
    let env_tile: Option<(usize, usize, usize)> = std::env::var("VKML_LAB_TILE").ok().and_then(|v| parse_tile(&v));
    // VKML_LAB_SHAPES=RxK,...: weight shapes (rows x k, k a multiple of 256), default
    // 14336x4096 and 4096x14336.
    let shapes: Vec<(usize, usize)> = std::env::var("VKML_LAB_SHAPES")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|p| p.split_once('x').and_then(|(r, k)| Some((r.parse().ok()?, k.parse().ok()?))))
                .collect()
        })
        .unwrap_or_else(|| vec![(14336, 4096), (4096, 14336)]);
    // Random weights and x for the largest shape; smaller ones take a prefix.
    let w = random(shapes.iter().map(|&(r, k)| r * k).max().unwrap_or(0), 7);
    let x = random(n_tok * shapes.iter().map(|&(_, k)| k).max().unwrap_or(0), 11);
    let enc: Vec<Vec<u8>> = types.iter().map(|(ty, _, _)| vkml_quant::quantize(*ty, &w).unwrap()).collect();
    let mut reference: Vec<Vec<f32>> = Vec::new();
    for (fi, arg) in std::iter::once("built-in".to_string()).chain(files).enumerate() {
        // FILE@RxT: this file runs on its own R x T tile grid (as VKML_LAB_TILE does).
        let (file, lab_tile) = match arg.split_once('@') {
            Some((f, t)) => (f.to_string(), parse_tile(t)),
            None => (arg.clone(), env_tile),
        };
        let inst = vkml_hal::Instance::new(&vkml_hal::InstanceOptions::from_env()).expect("a Vulkan instance");
        let opts = vkml_hal::DeviceOptions { pipeline_statistics: true, ..Default::default() };
        let dev = inst.create_device(&vkml_hal::DeviceSelector::from_env(), opts).expect("a Vulkan device");
        for (ti, (ty, name, id)) in types.iter().enumerate() {
            if fi > 0 {
                let src = std::fs::read(&file).unwrap();
                let fe = Glsl::new().define("QTYPE", id).target(TargetEnv::Vulkan1_3);
                let as_name = if lab_tile.is_some() { format!("lab.{name}") } else { format!("{lab_kernel}.{name}") };
                if let Err(e) = dev.register_kernel(&as_name, &fe, &src) {
                    println!("{file}: {e}");
                    break;
                }
            }
            for (si, &(rows, k)) in shapes.iter().enumerate() {
                // The kernel the op runs here (`mul_mat_cm`, `mul_mat_cm256`, ...).
                let kernel = quant::mat_mat_kernel(dev.caps(), lab_path, *ty, rows, n_tok).0;
                // VKML_LAB_COPIES=N: N copies of the weights, one per call in turn (so a
                // call reads its weights from memory, as a model's layers do).
                let copies: usize = std::env::var("VKML_LAB_COPIES").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
                let blocks = &enc[ti][..rows * k / ty.block_size() * ty.type_size()];
                let ms: Vec<QMatrix> =
                    (0..copies.max(1)).map(|_| QMatrix::upload(&dev, *ty, rows, k, blocks).unwrap()).collect();
                let turn = std::cell::Cell::new(0usize);
                let next = || {
                    turn.set(turn.get() + 1);
                    &ms[turn.get() % ms.len()]
                };
                let xb = dev.upload(&x[..n_tok * k]).unwrap();
                let y = dev.alloc(4 * (n_tok * rows) as u64, MemoryKind::DeviceLocal).unwrap();
                let mut s = Stream::new(&dev).unwrap();
                let path = if fi == 0 { MatMatPath::CoopMat } else { lab_path };
                // VKML_LAB_TILE=RxT[xZ]: the lab file runs as its own kernel on an R x T tile
                // grid, dispatched here (f16 x made on the host; split-K Z).
                let direct = match (fi, lab_tile) {
                    (1.., Some((tr, tt, tz))) => {
                        let x16: Vec<half::f16> = x[..n_tok * k].iter().map(|&v| half::f16::from_f32(v)).collect();
                        let x16 = dev.upload(&x16).unwrap();
                        let p = dev.pipeline(&dev.kernel(&format!("lab.{name}")).unwrap(), &lab_options(&dev)).unwrap();
                        // Split-K: k chunks of a multiple of 32, partials reduced by the op's
                        // reduce_partials kernel.
                        let chunk = k.div_ceil(tz).next_multiple_of(32);
                        let splits = k.div_ceil(chunk);
                        let part = (splits > 1)
                            .then(|| dev.alloc(4 * (splits * n_tok * rows) as u64, MemoryKind::DeviceLocal).unwrap());
                        let red = dev
                            .pipeline(
                                &dev.kernel("reduce_partials").unwrap(),
                                &vkml_hal::PipelineOptions { spec_constants: vec![(0, 256)], ..Default::default() },
                            )
                            .unwrap();
                        let grid = [rows.div_ceil(tr) as u32, n_tok.div_ceil(tt) as u32, splits as u32];
                        Some((p, x16, grid, chunk, part, red))
                    }
                    _ => None,
                };
                let run = |s: &mut Stream| match &direct {
                    Some((p, x16, grid, chunk, part, red)) => {
                        let m = next();
                        let words = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|w| w.to_ne_bytes()).collect() };
                        let pc = words(&[
                            0,
                            m.row_bytes() as u32,
                            k as u32,
                            rows as u32,
                            n_tok as u32,
                            0,
                            *chunk as u32,
                            rows as u32,
                        ]);
                        let out = part.as_ref().unwrap_or(&y);
                        s.dispatch(p, &[m.parts()[0].buffer().into(), x16.into(), out.into()], &pc, *grid)?;
                        if let Some(part) = part {
                            let n = (n_tok * rows) as u32;
                            let pc = words(&[n, grid[2], 0]);
                            s.dispatch(red, &[part.into(), (&y).into()], &pc, [n.div_ceil(256), 1, 1])?;
                        }
                        Ok(())
                    }
                    None => quant::mat_mat_with(s, next(), &xb, n_tok, &y, mat_mat_options(path)),
                };
                if let Err(e) = run(&mut s) {
                    println!("{file}: {e}");
                    continue;
                }
                s.finish_and_wait().unwrap();
                if si == 0 {
                    let (kname, opts) = if fi > 0 && lab_tile.is_some() {
                        (format!("lab.{name}"), lab_options(&dev))
                    } else {
                        let spec = vkml_ops::tuning::mat_mat_spec_constants(dev.caps(), kernel, *ty);
                        (format!("{kernel}.{name}"), options(&dev, spec))
                    };
                    print_statistics(&dev, &kname, &opts, *ty, &file);
                }
                let out = y.to_vec::<f32>().unwrap();
                let slot = ti * shapes.len() + si;
                let diff = if fi == 0 {
                    reference.push(out);
                    0.0
                } else {
                    reference[slot].iter().zip(&out).map(|(a, b)| (a - b).abs() / a.abs().max(1.0)).fold(0f32, f32::max)
                };
                let warm = Instant::now();
                // VKML_LAB_WARMUP_S: seconds of untimed calls first (default 0.5).
                let warm_s: f64 = std::env::var("VKML_LAB_WARMUP_S").ok().and_then(|v| v.parse().ok()).unwrap_or(0.5);
                while warm.elapsed().as_secs_f64() < warm_s {
                    run(&mut s).unwrap();
                    s.finish_and_wait().unwrap();
                }
                let reps = 30;
                for _ in 0..reps {
                    run(&mut s).unwrap();
                }
                let t = Instant::now();
                s.finish_and_wait().unwrap();
                let secs = t.elapsed().as_secs_f64() / f64::from(reps);
                println!(
                    "{file} {ty:?} {rows}x{k}x{n_tok} ({kernel}): {:.3} ms {:.1} TFLOP/s, max rel diff vs built-in {diff:.2e}",
                    secs * 1e3,
                    2.0 * (rows * k * n_tok) as f64 / secs / 1e12
                );
            }
        }
    }
}

/// Pipeline options with the subgroup requirements `quant::mat_mat_with` gives the
/// cooperative-matrix kernels, and `spec_constants`.
fn options(dev: &Device, spec_constants: Vec<(u32, u32)>) -> vkml_hal::PipelineOptions {
    let fallback = vkml_hal::PipelineOptions {
        spec_constants: spec_constants.clone(),
        full_subgroups: dev.caps().subgroup.full_subgroups,
        ..Default::default()
    };
    vkml_ops::tuning::coopmat_pipeline_options(dev.caps(), spec_constants).unwrap_or(fallback)
}

/// The options of a lab kernel on its own grid: only the row order (it sets its workgroup
/// size itself).
fn lab_options(dev: &Device) -> vkml_hal::PipelineOptions {
    options(dev, vec![(0, u32::from(vkml_ops::tuning::mat_mat_row_raster(dev.caps())))])
}

/// The driver's compiler statistics (registers, shared memory, ...) of `kernel` with
/// `options` (those it ran with, so the same cached pipeline). One line per executable.
fn print_statistics(dev: &Device, kernel: &str, options: &vkml_hal::PipelineOptions, ty: GgmlType, file: &str) {
    let stats = dev.kernel(kernel).and_then(|k| dev.pipeline(&k, options)).and_then(|p| dev.pipeline_statistics(&p));
    match stats {
        Ok(stats) => {
            let line: Vec<String> = stats.iter().map(|s| format!("{}={}", s.name, s.value)).collect();
            println!("{file} {ty:?} statistics: {}", line.join(", "));
        }
        Err(e) => println!("{file} {ty:?} statistics: {e}"),
    }
}
