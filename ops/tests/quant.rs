//! GPU dequantize, get_rows and fused mat-vec against vkml-quant's CPU reference, for
//! every supported type, on odd shapes (rows not a multiple of the workgroup, k the
//! smallest legal size), through both reduction paths and the block-wise kernels, with
//! validation on.

mod common;

use vkml_hal::{Device, DeviceSelector, Instance, InstanceOptions, MemoryKind, Stream};
use vkml_ops::nn::GluActivation;
use vkml_ops::quant::{self, MatMatOptions, MatMatPath, MatVecEpilogue, QMatrix, SUPPORTED};
use vkml_ops::tuning::MatVecConfig;
use vkml_quant::GgmlType;

fn device() -> Device {
    let validation = std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0");
    let inst = Instance::new(&InstanceOptions { validation }).unwrap();
    inst.create_device(&DeviceSelector::from_env(), Default::default()).unwrap()
}

fn assert_clean(dev: &Device) {
    let errs = dev.instance().take_validation_errors();
    assert!(errs.is_empty(), "validation errors: {errs:#?}");
}

/// Weights with a spread of magnitudes, an outlier per row and a zero block.
fn weights(rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut v: Vec<f32> = (0..rows * k)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect();
    for r in 0..rows {
        v[r * k + (r * 7) % k] *= 40.0;
    }
    for x in v.iter_mut().take(32.min(k)) {
        *x = 0.0;
    }
    v
}

/// Raw GGML bytes of `w` in type `ty` (floats are stored as-is). Types vkml-quant cannot
/// quantize (the grid i-quants) get pseudo-random blocks ([`random_blocks`]).
fn encode(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    match ty {
        GgmlType::F32 => w.iter().flat_map(|x| x.to_le_bytes()).collect(),
        GgmlType::F16 => w.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
        GgmlType::BF16 => w.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect(),
        ty => vkml_quant::quantize(ty, w).unwrap_or_else(|_| random_blocks(ty, w)),
    }
}

/// Pseudo-random blocks of `ty` holding `w.len()` elements: random bytes (every grid index,
/// sign pattern and sub-block scale is valid) with the f16 super-block scale set from the
/// block's largest |w|, so the values are finite and of the weights' magnitude.
fn random_blocks(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let mut s = w.iter().fold(w.len() as u64, |h, x| h.rotate_left(5) ^ u64::from(x.to_bits())) | 1;
    let mut out = Vec::with_capacity(w.len() / bs * ts);
    for blk in w.chunks(bs) {
        let mut b: Vec<u8> = (0..ts)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect();
        let amax = blk.iter().fold(0f32, |m, x| m.max(x.abs()));
        let d = half::f16::from_f32(amax / 8.0).to_bits();
        if ty == GgmlType::IQ1_M {
            // The scale is spread over the top nibbles of the four u16 `scales` (bytes 48..56).
            for i in 0..4 {
                b[49 + 2 * i] = (b[49 + 2 * i] & 0x0F) | ((((d >> (4 * i)) & 0xF) as u8) << 4);
            }
        } else {
            b[..2].copy_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&b);
    }
    out
}

fn shapes(ty: GgmlType) -> Vec<(usize, usize)> {
    let bs = ty.block_size().max(32);
    vec![(1, bs), (37, bs), (129, 3 * bs), (5, 10 * bs)]
}

#[test]
fn dequantize_equals_cpu_reference() {
    let dev = device();
    for &ty in SUPPORTED {
        for (rows, k) in shapes(ty) {
            let bytes = encode(ty, &weights(rows, k, 3 + rows as u64));
            let want = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
            let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
            let out = dev.alloc(4 * (rows * k) as u64, MemoryKind::DeviceLocal).unwrap();
            let mut s = Stream::new(&dev).unwrap();
            quant::dequantize(&mut s, &m, &out).unwrap();
            s.finish_and_wait().unwrap();
            let got = out.to_vec::<f32>().unwrap();
            let bad = (0..want.len()).find(|&i| got[i].to_bits() != want[i].to_bits());
            assert!(
                bad.is_none(),
                "{ty:?} {rows}x{k}: element {bad:?}: gpu {} cpu {}",
                got[bad.unwrap()],
                want[bad.unwrap()]
            );
        }
    }
    assert_clean(&dev);
}

/// `get_rows` (and `get_rows_scaled`) bit-identical to the CPU's dequantized rows (times
/// the scale), NaN rows for ids past the table, every type.
#[test]
fn get_rows_equals_cpu_reference() {
    let dev = device();
    for &ty in SUPPORTED {
        let (rows, k) = (37, 3 * ty.block_size().max(32));
        let bytes = encode(ty, &weights(rows, k, 9));
        let table = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
        let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        let ids: Vec<u32> = vec![5, 0, 36, 5, 17, 1000];
        let idb = dev.upload(&ids).unwrap();
        let out = dev.alloc(4 * (ids.len() * k) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        quant::get_rows(&mut s, &m, &idb, ids.len(), &out).unwrap();
        s.finish_and_wait().unwrap();
        assert_rows_match(ty, &out.to_vec::<f32>().unwrap(), &ids, &table, k);
        // Scaled in the same pass: each value times the scale, rounded once.
        let scale = 48.0f32.sqrt();
        let scaled: Vec<f32> = table.iter().map(|v| v * scale).collect();
        quant::get_rows_scaled(&mut s, &m, &idb, ids.len(), &out, scale).unwrap();
        s.finish_and_wait().unwrap();
        assert_rows_match(ty, &out.to_vec::<f32>().unwrap(), &ids, &scaled, k);
    }
    assert_clean(&dev);
}

/// get_rows' output `got` (one row of `k` per id) equals the rows of the CPU-dequantized
/// `table` bit for bit, and ids past the table gave rows of NaN.
fn assert_rows_match(ty: GgmlType, got: &[f32], ids: &[u32], table: &[f32], k: usize) {
    let rows = table.len() / k;
    for (i, &id) in ids.iter().enumerate() {
        let row = &got[i * k..(i + 1) * k];
        if (id as usize) < rows {
            let want = &table[id as usize * k..(id as usize + 1) * k];
            assert!(row.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty:?} get_rows id {id}");
        } else {
            assert!(row.iter().all(|v| v.is_nan()), "{ty:?}: get_rows id {id} past the table must give NaN");
        }
    }
}

/// The mat-vec launches the tests run: per-element and vec4 kernels with shared-memory
/// and subgroup reductions, and the block-wise kernel with 1 to 4 rows per subgroup.
fn mat_vec_configs(dev: &Device) -> Vec<MatVecConfig> {
    // Each kernel with each reduction once; workgroup sizes alternate between kernels (every
    // pipeline is a cold LLVM compile on CI's lavapipe, so the matrix stays small).
    let sg = dev.caps().subgroup.operations.contains(&"arithmetic");
    let mut configs = Vec::new();
    for (vec4, workgroup) in [(false, 64), (true, 128)] {
        for subgroup_reduce in [false, true] {
            if subgroup_reduce && !sg {
                continue;
            }
            configs.push(MatVecConfig {
                workgroup: if subgroup_reduce { 192 - workgroup } else { workgroup },
                subgroup_reduce,
                vec4,
                subgroup_rows: false,
                rows_per_subgroup: 1,
                dot_rows_per_subgroup: 1,
                integer_dot: false,
                integer_dot_mxfp4: false,
                dot_x_in_kernel: false,
                dot_x_rows_per_subgroup: 1,
                dot_x_rows_per_subgroup_wide: 1,
                dot_x_workgroup: 64,
                norm_one_pass: false,
                vec4_norm_workgroup: 64,
            });
        }
    }
    if vkml_ops::tuning::row_subgroup_size(dev.caps()).is_some() {
        for (workgroup, rows_per_subgroup) in [(64, 1), (128, 3), (64, 4)] {
            configs.push(MatVecConfig {
                workgroup,
                subgroup_reduce: true,
                vec4: true,
                subgroup_rows: true,
                rows_per_subgroup,
                dot_rows_per_subgroup: rows_per_subgroup,
                integer_dot: false,
                integer_dot_mxfp4: false,
                dot_x_in_kernel: false,
                dot_x_rows_per_subgroup: 1,
                dot_x_rows_per_subgroup_wide: 1,
                dot_x_workgroup: 64,
                norm_one_pass: false,
                vec4_norm_workgroup: 64,
            });
        }
    }
    configs
}

/// `VKML_TEST_FULL=1` runs every (type, path, batch) combination; without it each type runs
/// a cover that keeps CI's lavapipe (a cold LLVM compile of ~1 s per pipeline) quick.
fn full_matrix() -> bool {
    std::env::var_os("VKML_TEST_FULL").is_some_and(|v| v != "0")
}

/// The (config, batch) launches for the type at index `t` of `SUPPORTED`. Every type runs
/// the first config at batches 1, 3 and 8; then one other per-element config (rotating
/// over the types) at batch 3 and, for block types, one block-wise config (rotating over
/// 1, 3 and 4 rows per subgroup). Every path thus runs on several types and every type on
/// at least two paths; IQ1_S / IQ1_M (per-element only, ~70 s per pipeline on lavapipe)
/// run the first config only.
fn mat_vec_cases(t: usize, ty: GgmlType, configs: &[MatVecConfig]) -> Vec<(MatVecConfig, usize)> {
    if full_matrix() {
        return configs.iter().flat_map(|c| [1usize, 3, 8].map(|b| (*c, b))).collect();
    }
    let mut cases: Vec<_> = [1usize, 3, 8].map(|b| (configs[0], b)).into();
    if matches!(ty, GgmlType::IQ1_S | GgmlType::IQ1_M) {
        return cases;
    }
    let element: Vec<_> = configs[1..].iter().filter(|c| !c.subgroup_rows).collect();
    if !element.is_empty() {
        cases.push((*element[t % element.len()], 3));
    }
    let block: Vec<_> = configs.iter().filter(|c| c.subgroup_rows).collect();
    if !block.is_empty() && quant::block_kernel(ty).is_some() {
        let cfg = *block[t % block.len()];
        let batch = if cfg.rows_per_subgroup == 1 { [1, 8][(t / block.len()) % 2] } else { 3 };
        cases.push((cfg, batch));
    }
    cases
}

#[test]
fn mat_vec_matches_cpu_on_every_path() {
    let dev = device();
    let configs = mat_vec_configs(&dev);
    for (t, &ty) in SUPPORTED.iter().enumerate() {
        let cases = mat_vec_cases(t, ty, &configs);
        for (rows, k) in shapes(ty) {
            let bytes = encode(ty, &weights(rows, k, 100 + k as u64));
            let w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
            let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
            for &(cfg, batch) in &cases {
                let x = weights(batch, k, 77 + batch as u64);
                let xb = dev.upload(&x).unwrap();
                let yb = dev.alloc(4 * (batch * rows) as u64, MemoryKind::DeviceLocal).unwrap();
                let mut s = Stream::new(&dev).unwrap();
                quant::mat_vec_with(&mut s, &m, &xb, batch, &yb, cfg).unwrap();
                s.finish_and_wait().unwrap();
                let y = yb.to_vec::<f32>().unwrap();
                for b in 0..batch {
                    for r in 0..rows {
                        // f64 reference; f32 summation in another order differs by
                        // rounding, bounded relative to the sum of |products|.
                        let (mut dot, mut mag) = (0f64, 0f64);
                        for c in 0..k {
                            let p = f64::from(w[r * k + c]) * f64::from(x[b * k + c]);
                            dot += p;
                            mag += p.abs();
                        }
                        let got = f64::from(y[b * rows + r]);
                        assert!(
                            (got - dot).abs() <= 1e-5 * mag + 1e-30,
                            "{ty:?} {rows}x{k} batch {b}/{batch} row {r} {cfg:?}: gpu {got} cpu {dot}"
                        );
                    }
                }
            }
        }
    }
    assert_clean(&dev);
}

/// Every mat-mat path the device has: the scalar kernel everywhere, the cooperative-matrix
/// kernel where `tuning::coopmat_subgroup_size` finds one and the workgroup-scope one where
/// `tuning::coopmat2` does (both on the H100, neither on lavapipe).
fn mat_mat_paths(dev: &Device) -> Vec<MatMatPath> {
    let mut paths = vec![MatMatPath::Scalar];
    if vkml_ops::tuning::coopmat_subgroup_size(dev.caps()).is_some() {
        paths.push(MatMatPath::CoopMat);
    } else {
        eprintln!("mat_mat: no cooperative-matrix path on {}; scalar only", dev.caps().name);
    }
    if vkml_ops::tuning::coopmat2(dev.caps()) {
        paths.push(MatMatPath::CoopMat2);
    }
    paths
}

#[test]
fn block_kernels_exist_for_block_types() {
    for &ty in SUPPORTED {
        let kernel = quant::block_kernel(ty);
        assert_eq!(kernel.is_some(), quant::BLOCK_TYPES.contains(&ty), "{ty:?}");
        if let Some(name) = kernel {
            assert!(name.ends_with(&format!(".{}", format!("{ty:?}").to_lowercase())), "{ty:?}: {name}");
            assert!(vkml_shaders::get(name).is_some(), "{ty:?}: no shader {name}");
        }
    }
    assert!(quant::Q32_TYPES.iter().all(|t| quant::BLOCK_TYPES.contains(t)));
}

/// Mat-mat against f64 dot products of the CPU-dequantized weights. The scalar path must
/// agree within 1e-5 of the sum of |products|; the cooperative-matrix path multiplies f16
/// weights and activations, so its reference rounds both to f16 first, and it may differ
/// by 1e-4 of the sum of |products| (tensor cores accumulate in f32 without IEEE rounding
/// of every partial sum); the workgroup-scope path (`CoopMat2`) rounds the same way.
/// Shapes cover edge tiles on both axes, split-K (k ≥ 1024) and,
/// with `accumulate`, the folded residual add.
/// The operands of one mat-mat case: a random `rows x k` weight of `ty` (its blocks and on
/// the device), a random `x: f32[n_tok, k]` (on the host and the device), `y0` and the
/// output buffer, which holds `y0` where the product accumulates.
struct MatMatCase {
    bytes: Vec<u8>,
    m: QMatrix,
    x: Vec<f32>,
    xb: vkml_hal::Buffer,
    y0: Vec<f32>,
    yb: vkml_hal::Buffer,
}

fn mat_mat_case(dev: &Device, ty: GgmlType, rows: usize, k: usize, n_tok: usize, accumulate: bool) -> MatMatCase {
    let bytes = encode(ty, &weights(rows, k, 5 + rows as u64));
    let m = QMatrix::upload(dev, ty, rows, k, &bytes).unwrap();
    let x = weights(n_tok, k, 31 + n_tok as u64);
    let xb = dev.upload(&x).unwrap();
    let y0 = weights(n_tok, rows, 77);
    let yb = if accumulate {
        dev.upload(&y0).unwrap()
    } else {
        dev.alloc(4 * (n_tok * rows) as u64, MemoryKind::DeviceLocal).unwrap()
    };
    MatMatCase { bytes, m, x, xb, y0, yb }
}

#[test]
fn mat_mat_matches_cpu() {
    let dev = device();
    for path in mat_mat_paths(&dev) {
        for &ty in SUPPORTED {
            let bs = ty.block_size().max(32);
            if (path == MatMatPath::CoopMat && bs % 32 != 0)
                || (path == MatMatPath::CoopMat2 && !quant::COOPMAT2_TYPES.contains(&ty))
            {
                continue;
            }
            let mut shapes = vec![(37, bs, 8, false), (70, 3 * bs, 33, true), (129, 2 * bs, 70, false)];
            if path != MatMatPath::Scalar {
                // Two 128-row tiles with a ragged third, two token tiles with a ragged second.
                shapes.push((300, 4 * bs, 150, true));
                // Whole tiles only, k past the 256-element unrolled steps, split-K.
                shapes.push((256, 1024.max(4 * bs), 128, false));
            }
            // Where the op takes 256-row tiles for big grids (mul_mat_cm256: 128 tiles or
            // more), a grid of 33 x 4 tiles with a ragged last row and token tile and the
            // residual add, and one of 65 x 2 with split-K.
            if quant::mat_mat_kernel(dev.caps(), path, ty, 8229, 500).0 == "mul_mat_cm256" {
                shapes.push((8229, 2 * bs, 500, true));
                shapes.push((16421, 1024, 129, false));
            }
            for (rows, k, n_tok, accumulate) in shapes {
                let MatMatCase { bytes, m, mut x, xb, y0, yb } = mat_mat_case(&dev, ty, rows, k, n_tok, accumulate);
                let mut w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
                let mut s = Stream::new(&dev).unwrap();
                let opts = MatMatOptions { accumulate, split_k: (k >= 1024).then_some(2), ..MatMatOptions::new(path) };
                quant::mat_mat_with(&mut s, &m, &xb, n_tok, &yb, opts).unwrap();
                s.finish_and_wait().unwrap();
                let y = yb.to_vec::<f32>().unwrap();
                let tol = match path {
                    MatMatPath::Scalar => 1e-5,
                    // (CoopMatInt8 has its own test: its x is Q8_1, not f16.)
                    MatMatPath::CoopMat | MatMatPath::CoopMat2 | MatMatPath::CoopMatInt8 => {
                        for v in w.iter_mut().chain(x.iter_mut()) {
                            *v = half::f16::from_f32(*v).to_f32();
                        }
                        1e-4
                    }
                };
                for n in 0..n_tok {
                    for r in 0..rows {
                        let base = if accumulate { f64::from(y0[n * rows + r]) } else { 0.0 };
                        let (mut dot, mut mag) = (base, base.abs());
                        for c in 0..k {
                            let p = f64::from(w[r * k + c]) * f64::from(x[n * k + c]);
                            dot += p;
                            mag += p.abs();
                        }
                        let got = f64::from(y[n * rows + r]);
                        assert!(
                            (got - dot).abs() <= tol * mag + 1e-30,
                            "{path:?} {ty:?} {rows}x{k} x {n_tok} token {n} row {r}: gpu {got} cpu {dot}"
                        );
                    }
                }
            }
        }
    }
    assert_clean(&dev);
}

/// The int8 cooperative-matrix mat-mat (`mul_mat_cm_i8.comp`) against ggml's integer dot
/// (`vec_dot_q8_1`: per 32-block `sumi * d_w * d_x`) of each weight row with the very Q8_1
/// blocks `quantize_q8_1` makes of `x` (the op quantizes with the same kernel, which is
/// deterministic): rows and tokens short of a tile and ragged past one, k from the
/// smallest legal 32, the residual add, split-K. Runs where `tuning::coopmat_int8` holds
/// (the H100 through the device tool; lavapipe has no cooperative matrices). Bound: f32
/// rounding of the per-block products and their sum, 1e-5 of the sum of |products|.
#[test]
fn int8_coopmat_mat_mat_matches_cpu_dot() {
    let dev = device();
    if !vkml_ops::tuning::coopmat_int8(dev.caps()) {
        eprintln!("skipped: no int8 cooperative-matrix path on {}", dev.caps().name);
        return;
    }
    for &ty in quant::COOPMAT_INT8_TYPES {
        for (rows, k, n_tok, accumulate, split_k) in [
            (37, 32, 9, false, None),
            (200, 288, 130, true, None),
            (300, 1024, 150, true, Some(2)),
            (256, 2048, 128, false, None),
        ] {
            let MatMatCase { bytes, m, xb, y0, yb, .. } = mat_mat_case(&dev, ty, rows, k, n_tok, accumulate);
            let xq = dev.alloc(36 * (n_tok * k / 32) as u64, MemoryKind::DeviceLocal).unwrap();
            let mut s = Stream::new(&dev).unwrap();
            quant::quantize_q8_1(&mut s, &xb, n_tok * k / 32, &xq).unwrap();
            let opts = MatMatOptions { accumulate, split_k, ..MatMatOptions::new(MatMatPath::CoopMatInt8) };
            quant::mat_mat_with(&mut s, &m, &xb, n_tok, &yb, opts).unwrap();
            s.finish_and_wait().unwrap();
            let y = yb.to_vec::<f32>().unwrap();
            let xq: Vec<vkml_quant::blocks::BlockQ8_1> = xq.to_vec().unwrap();
            let row_bytes = m.row_bytes() as usize;
            for n in 0..n_tok {
                let xblocks = &xq[n * k / 32..(n + 1) * k / 32];
                for r in 0..rows {
                    let row = &bytes[r * row_bytes..(r + 1) * row_bytes];
                    let wd = vkml_quant::dequantize_to_vec(ty, row).unwrap();
                    let base = if accumulate { f64::from(y0[n * rows + r]) } else { 0.0 };
                    let mag: f64 = base.abs()
                        + (0..k)
                            .map(|c| {
                                let xv = xblocks[c / 32].d.to_f32() * f32::from(xblocks[c / 32].qs[c % 32]);
                                f64::from((wd[c] * xv).abs())
                            })
                            .sum::<f64>();
                    let want = base + f64::from(vkml_quant::vec_dot_q8_1(ty, row, xblocks).unwrap());
                    let got = f64::from(y[n * rows + r]);
                    assert!(
                        (got - want).abs() <= 1e-5 * mag + 1e-6,
                        "{ty:?} {rows}x{k} x {n_tok} token {n} row {r}: gpu {got} cpu {want}"
                    );
                }
            }
        }
    }
    // Other types and k are refused by name, not run.
    let q4k = QMatrix::upload(&dev, GgmlType::Q4_K, 16, 256, &encode(GgmlType::Q4_K, &weights(16, 256, 3))).unwrap();
    let (xb, yb) = (dev.upload(&weights(16, 256, 4)).unwrap(), dev.alloc(4 * 256, MemoryKind::DeviceLocal).unwrap());
    let mut s = Stream::new(&dev).unwrap();
    let e = quant::mat_mat_with(&mut s, &q4k, &xb, 16, &yb, MatMatOptions::new(MatMatPath::CoopMatInt8)).unwrap_err();
    assert!(e.to_string().contains("Q4_0"), "{e}");
    assert_clean(&dev);
}

#[test]
fn q8_1_quantization_matches_cpu_within_one_step() {
    let dev = device();
    let n_blocks = 300;
    let x = weights(1, 32 * n_blocks, 17);
    let xb = dev.upload(&x).unwrap();
    let out = dev.alloc(36 * n_blocks as u64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    quant::quantize_q8_1(&mut s, &xb, n_blocks, &out).unwrap();
    s.finish_and_wait().unwrap();
    let gpu: Vec<vkml_quant::blocks::BlockQ8_1> = out.to_vec().unwrap();
    assert_q8_1_close(&gpu, &vkml_quant::quantize_q8_1(&x).unwrap(), "quantize_q8_1");
    assert_clean(&dev);
}

/// GPU Q8_1 blocks against vkml-quant's of (nearly) the same values: scales within 1e-3,
/// each quant within one step (GPU division may differ by an ulp, and a value at a
/// rounding boundary then rounds the other way), such steps in at most 1 % of the quants,
/// and each block's s equal to d times the sum of its quants.
fn assert_q8_1_close(gpu: &[vkml_quant::blocks::BlockQ8_1], cpu: &[vkml_quant::blocks::BlockQ8_1], what: &str) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: block count");
    let mut off_by_one = 0;
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        let (gd, cd) = (g.d.to_f32(), c.d.to_f32());
        assert!((gd - cd).abs() <= 1e-3 * cd.abs(), "{what} block {i}: d {gd} vs {cd}");
        for j in 0..32 {
            let diff = (i32::from(g.qs[j]) - i32::from(c.qs[j])).abs();
            assert!(diff <= 1, "{what} block {i} q[{j}]: {} vs {}", g.qs[j], c.qs[j]);
            off_by_one += diff;
        }
        let sum: i32 = g.qs.iter().map(|&q| i32::from(q)).sum();
        assert!((g.s.to_f32() - sum as f32 * gd).abs() <= 1e-3 * (sum as f32 * gd).abs() + 1e-3, "{what} block {i}: s");
    }
    // Rounding-boundary differences are rare, not systematic.
    assert!(off_by_one <= (32 * gpu.len()) as i32 / 100, "{what}: {off_by_one} quants differ by one");
}

#[test]
fn rms_norm_q8_1_equals_norm_then_quantize() {
    // The fused decode-step kernel must give the very blocks of rms_norm + quantize_q8_1
    // (same f32 row, same quantization code): compared word for word, with and without a
    // weight, on rows past one workgroup's blocks (n / 32 > 256 invocations); and both
    // against the CPU: vkml-quant's Q8_1 of the row normalised on the host.
    let dev = device();
    for (rows, n, weighted) in [(1usize, 4096usize, true), (3, 96, true), (2, 32 * 300, false)] {
        let x: Vec<f32> = weights(rows, n, 40 + n as u64).iter().map(|v| 3.0 * v).collect();
        let w = weights(1, n, 41);
        let (xb, wb) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap());
        let wq = weighted.then_some(&wb);
        let y = dev.alloc(4 * (rows * n) as u64, MemoryKind::DeviceLocal).unwrap();
        let (q1, q2) = (
            dev.alloc(36 * (rows * n / 32) as u64, MemoryKind::DeviceLocal).unwrap(),
            dev.alloc(36 * (rows * n / 32) as u64, MemoryKind::DeviceLocal).unwrap(),
        );
        let mut s = Stream::new(&dev).unwrap();
        vkml_ops::nn::rms_norm(&mut s, vkml_ops::Dtype::F32, &xb, wq, rows, n, 1e-5, &y).unwrap();
        quant::quantize_q8_1(&mut s, &y, rows * n / 32, &q1).unwrap();
        vkml_ops::nn::rms_norm_q8_1(&mut s, &xb, wq, rows, n, 1e-5, &q2).unwrap();
        s.finish_and_wait().unwrap();
        let (a, b) = (q1.to_vec::<u32>().unwrap(), q2.to_vec::<u32>().unwrap());
        assert!(a.iter().any(|&v| v != 0), "{rows}x{n}: the reference is all zeros");
        assert_eq!(a, b, "{rows}x{n} weighted {weighted}");
        let normed: Vec<f32> = x
            .chunks(n)
            .flat_map(|r| {
                let scale = 1.0 / (r.iter().map(|v| v * v).sum::<f32>() / n as f32 + 1e-5).sqrt();
                r.iter()
                    .zip(&w)
                    .map(move |(v, wi)| if weighted { v * scale * wi } else { v * scale })
                    .collect::<Vec<_>>()
            })
            .collect();
        let gpu: Vec<vkml_quant::blocks::BlockQ8_1> = q2.to_vec().unwrap();
        assert_q8_1_close(&gpu, &vkml_quant::quantize_q8_1(&normed).unwrap(), &format!("rms_norm_q8_1 {rows}x{n}"));
    }
    // Rows that are not whole blocks are refused by name.
    let b = dev.alloc(4 * 64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let e = vkml_ops::nn::rms_norm_q8_1(&mut s, &b, None, 1, 48, 1e-5, &b).unwrap_err();
    assert!(e.to_string().contains("rows of 48"), "{e}");
    assert_clean(&dev);
}

/// ggml's integer dot (vkml-quant's `vec_dot_q8_1`) of the weight `row` of `ty` with the
/// very Q8_1 blocks `xblocks` the GPU used, and the f32 sum of its products' magnitudes
/// (the dequantized weights times the quants): the scale of the GPU sum's rounding.
fn q8_1_dot(ty: GgmlType, row: &[u8], xblocks: &[vkml_quant::blocks::BlockQ8_1]) -> (f32, f32) {
    let w = vkml_quant::dequantize_to_vec(ty, row).unwrap();
    let mag: f32 =
        (0..w.len()).map(|c| (w[c] * xblocks[c / 32].d.to_f32() * f32::from(xblocks[c / 32].qs[c % 32])).abs()).sum();
    (vkml_quant::vec_dot_q8_1(ty, row, xblocks).unwrap(), mag)
}

#[test]
fn integer_dot_mat_vec_matches_cpu_dot() {
    let dev = device();
    if vkml_ops::tuning::row_subgroup_size(dev.caps()).is_none() || !dev.caps().integer_dot.supported {
        eprintln!("skipped: no integer dot product or usable subgroup size on this device");
        return;
    }
    for &ty in quant::DOT_TYPES {
        // One and several rows per subgroup (`dot_rows_per_subgroup`), rotating over shapes.
        for (rows, k, batch, nr) in [(37usize, 32usize, 1usize, 1u32), (70, 320, 3, 4), (129, 96, 8, 3)] {
            let bytes = encode(ty, &weights(rows, k, 9 + rows as u64));
            let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
            let x = weights(batch, k, 3 + k as u64);
            let xb = dev.upload(&x).unwrap();
            let yb = dev.alloc(4 * (batch * rows) as u64, MemoryKind::DeviceLocal).unwrap();
            let xq = dev.alloc(36 * (batch * k / 32) as u64, MemoryKind::DeviceLocal).unwrap();
            let cfg = MatVecConfig {
                integer_dot: true,
                dot_rows_per_subgroup: nr,
                ..vkml_ops::tuning::mat_vec_config(dev.caps())
            };
            let mut s = Stream::new(&dev).unwrap();
            quant::mat_vec_with(&mut s, &m, &xb, batch, &yb, MatVecConfig { subgroup_rows: true, ..cfg }).unwrap();
            quant::quantize_q8_1(&mut s, &xb, batch * k / 32, &xq).unwrap();
            // The same product from x quantized once, outside the mat-vec.
            let y2 = dev.alloc(4 * (batch * rows) as u64, MemoryKind::DeviceLocal).unwrap();
            quant::mat_vec_q8_1(&mut s, &m, &xq, batch, &y2, cfg).unwrap();
            s.finish_and_wait().unwrap();
            let y = yb.to_vec::<f32>().unwrap();
            assert_eq!(y, y2.to_vec::<f32>().unwrap(), "{ty:?} {rows}x{k}: pre-quantized x differs");
            let xq: Vec<vkml_quant::blocks::BlockQ8_1> = xq.to_vec().unwrap();
            let row_bytes = m.row_bytes() as usize;
            for b in 0..batch {
                let xblocks = &xq[b * k / 32..(b + 1) * k / 32];
                for r in 0..rows {
                    let (want, mag) = q8_1_dot(ty, &bytes[r * row_bytes..(r + 1) * row_bytes], xblocks);
                    let got = y[b * rows + r];
                    assert!(
                        (got - want).abs() <= 1e-5 * mag + 1e-6,
                        "{ty:?} {rows}x{k} batch {b} row {r}: gpu {got} cpu {want}"
                    );
                }
            }
        }
    }
    assert_clean(&dev);
}

/// MXFP4's integer-dot decode (`mul_mat_vec_dot.comp`'s bit arithmetic per nibble, codes
/// negated bytewise by their signs) on every weight byte at every position of a block:
/// 256 blocks whose byte j is (n + 17 j) mod 256, so each of the 256 code pairs, the
/// negative zero (code 8) among them, sits at each of the 16 positions once (the device
/// layout stores negative zero as zero: without that, its negation carries), with
/// scales 2^-4 .. 2^4. Both kernels (x quantized in the kernel, and x quantized before) are
/// checked against vkml-quant's `vec_dot_q8_1` (ggml's `vec_dot_mxfp4_q8_0` on the very
/// Q8_1 blocks) and against each other bit for bit.
#[test]
fn mxfp4_integer_dot_decodes_every_byte() {
    let dev = device();
    let caps = dev.caps();
    let base = MatVecConfig {
        subgroup_rows: true,
        integer_dot: true,
        integer_dot_mxfp4: true,
        dot_x_in_kernel: true,
        ..vkml_ops::tuning::mat_vec_config(caps)
    };
    let (rows, k) = (16usize, 512usize);
    let ty = GgmlType::MXFP4;
    let mut bytes = Vec::with_capacity(rows * k / 32 * 17);
    for n in 0..rows * k / 32 {
        bytes.push(124 + (n % 9) as u8);
        bytes.extend((0..16).map(|j| ((n + 17 * j) % 256) as u8));
    }
    let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
    if vkml_ops::tuning::row_subgroup_size(caps).is_none() || !quant::mat_vec_uses_q8_1(caps, &m, &base) {
        eprintln!("skipped: MXFP4 does not run on the integer-dot kernel on this device");
        return;
    }
    let x = weights(1, k, 77);
    let xb = dev.upload(&x).unwrap();
    let (y_in, y_pre) = (
        dev.alloc(4 * rows as u64, MemoryKind::DeviceLocal).unwrap(),
        dev.alloc(4 * rows as u64, MemoryKind::DeviceLocal).unwrap(),
    );
    let xq = dev.alloc(36 * (k / 32) as u64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let in_kernel = quant::dot_quantizes_x(caps, &m, 1, &base);
    quant::mat_vec_with(&mut s, &m, &xb, 1, &y_in, base).unwrap();
    quant::quantize_q8_1(&mut s, &xb, k / 32, &xq).unwrap();
    quant::mat_vec_q8_1(&mut s, &m, &xq, 1, &y_pre, base).unwrap();
    s.finish_and_wait().unwrap();
    let (a, b) = (y_in.to_vec::<f32>().unwrap(), y_pre.to_vec::<f32>().unwrap());
    let xq: Vec<vkml_quant::blocks::BlockQ8_1> = xq.to_vec().unwrap();
    let row_bytes = m.row_bytes() as usize;
    for r in 0..rows {
        let (want, mag) = q8_1_dot(ty, &bytes[r * row_bytes..(r + 1) * row_bytes], &xq);
        assert!((b[r] - want).abs() <= 1e-5 * mag + 1e-6, "row {r}: gpu {} cpu {want}", b[r]);
        if in_kernel {
            assert_eq!(
                a[r].to_bits(),
                b[r].to_bits(),
                "row {r}: x quantized in the kernel {} vs before {}",
                a[r],
                b[r]
            );
        } else {
            assert!((a[r] - want).abs() <= 1e-5 * mag + 1e-6, "row {r}: gpu {} cpu {want}", a[r]);
        }
    }
    assert_clean(&dev);
}

#[test]
fn shape_and_type_errors_are_clear() {
    let dev = device();
    let e = QMatrix::upload(&dev, GgmlType::Q4_0, 2, 48, &[0u8; 54]).unwrap_err();
    assert!(e.to_string().contains("not a positive multiple of the Q4_0 block size 32"), "{e}");
    let e = QMatrix::upload(&dev, GgmlType::Q4_0, 2, 32, &[0u8; 35]).unwrap_err();
    assert!(e.to_string().contains("got 35"), "{e}");
    let e = QMatrix::upload(&dev, GgmlType::I32, 1, 4, &[0u8; 16]).unwrap_err();
    assert!(e.to_string().contains("no GPU kernel for I32"), "{e}");
    let m = QMatrix::upload(&dev, GgmlType::Q8_0, 4, 32, &[0u8; 4 * 34]).unwrap();
    let small = dev.alloc(8, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    assert!(quant::mat_vec(&mut s, &m, &small, 1, &small).unwrap_err().to_string().contains("needs x of 128 bytes"));
    assert!(quant::dequantize(&mut s, &m, &small).is_err());
    assert_clean(&dev);
}

#[test]
fn tuning_table_per_architecture() {
    use vkml_hal::caps::ArchClass;
    let inst = Instance::new(&InstanceOptions::default()).unwrap();
    let mut caps = inst.adapters().unwrap()[0].caps.clone();
    for (arch, sg, want) in [
        (ArchClass::NvidiaTensorCore, 32, 128),
        (ArchClass::Nvidia, 32, 128),
        (ArchClass::AmdRdna, 32, 64),
        (ArchClass::AmdGcn, 64, 64),
        (ArchClass::Intel, 16, 64),
        (ArchClass::Apple, 32, 64),
        (ArchClass::Adreno, 128, 128),
        (ArchClass::Mali, 16, 64),
        (ArchClass::Cpu, 8, 64),
        (ArchClass::Other, 4, 64),
    ] {
        caps.arch = arch;
        caps.subgroup.size = sg;
        caps.subgroup.min_size = sg;
        caps.subgroup.max_size = sg;
        caps.subgroup.operations = vec!["basic", "arithmetic"];
        let cfg = vkml_ops::tuning::mat_vec_config(&caps);
        let nr = match arch {
            ArchClass::NvidiaTensorCore | ArchClass::Nvidia | ArchClass::AmdRdna | ArchClass::AmdGcn => 4,
            ArchClass::Cpu => 8,
            _ => 1,
        };
        let dot_nr = match arch {
            ArchClass::NvidiaTensorCore | ArchClass::Nvidia => 1,
            _ => nr,
        };
        // The kernels quantizing x themselves: 32 rows per workgroup on NVIDIA (measured),
        // 128 for wide, short matrices.
        let (dot_x_wg, dot_x_nr, dot_x_wide) = match arch {
            ArchClass::NvidiaTensorCore | ArchClass::Nvidia => (1024, 1, 4),
            _ => (256, 2, 2),
        };
        // The router's vec4 kernel normalising x: 1024 invocations on NVIDIA (measured).
        let nvidia = matches!(arch, ArchClass::NvidiaTensorCore | ArchClass::Nvidia);
        assert_eq!(
            cfg,
            MatVecConfig {
                workgroup: want,
                subgroup_reduce: true,
                vec4: true,
                subgroup_rows: true,
                rows_per_subgroup: nr,
                dot_rows_per_subgroup: dot_nr,
                // Decode mat-vecs take Q8_1 x where packed int8 dot products are accelerated.
                integer_dot: caps.integer_dot.supported && caps.integer_dot.packed_4x8_signed_accelerated,
                integer_dot_mxfp4: true,
                dot_x_in_kernel: true,
                dot_x_rows_per_subgroup: dot_x_nr,
                dot_x_rows_per_subgroup_wide: dot_x_wide,
                dot_x_workgroup: dot_x_wg,
                norm_one_pass: true,
                vec4_norm_workgroup: if nvidia { 1024 } else { want },
            },
            "{arch:?}"
        );
        // Q8_1 activations follow accelerated packed dot products; cooperative matrices
        // need the f16 16x16x16 shape and subgroups of 32.
        caps.subgroup.operations = vec!["basic", "arithmetic"];
        for accel in [false, true] {
            caps.integer_dot.supported = true;
            caps.integer_dot.packed_4x8_signed_accelerated = accel;
            assert_eq!(vkml_ops::tuning::q8_1_activations(&caps), accel, "{arch:?}");
            assert_eq!(vkml_ops::tuning::mat_vec_config(&caps).integer_dot, accel, "{arch:?}");
        }
        caps.cooperative_matrix.clear();
        assert_eq!(vkml_ops::tuning::coopmat_subgroup_size(&caps), None);
        caps.cooperative_matrix.push(vkml_hal::caps::CoopMatShape {
            m: 16,
            n: 16,
            k: 16,
            a: "f16",
            b: "f16",
            c: "f32",
            result: "f32",
            saturating: false,
            scope: "subgroup",
        });
        caps.types.float16 = true;
        caps.limits.max_shared_memory = 48 * 1024;
        caps.subgroup.size_control = false;
        assert_eq!(vkml_ops::tuning::coopmat_subgroup_size(&caps), (sg == 32).then_some((32, false)), "{arch:?}");
        // Mat-mat kernel per type and grid: 256-row tiles for Q8_0 where they alone
        // make 128 tiles, the warp-specialized 128-row kernel (x copied by the multipliers for
        // Q4_K) on NVIDIA tensor cores only; the specialization constants follow the kernel.
        let nv = arch == ArchClass::NvidiaTensorCore;
        let cm = MatMatPath::CoopMat;
        let want = if nv { ("mul_mat_cm256", 256, 128) } else { ("mul_mat_cm", 128, 128) };
        assert_eq!(quant::mat_mat_kernel(&caps, cm, GgmlType::Q8_0, 14336, 512), want, "{arch:?}");
        // 16 x 4 tall tiles would need split-K: 128-row tiles instead.
        assert_eq!(quant::mat_mat_kernel(&caps, cm, GgmlType::Q8_0, 4096, 512), ("mul_mat_cm", 128, 128), "{arch:?}");
        for ty in [GgmlType::Q4_0, GgmlType::Q4_K] {
            assert_eq!(quant::mat_mat_kernel(&caps, cm, ty, 14336, 512), ("mul_mat_cm", 128, 128), "{arch:?} {ty:?}");
        }
        let consts = vkml_ops::tuning::mat_mat_spec_constants(&caps, "mul_mat_cm", GgmlType::Q4_K);
        let want = if nv { vec![(0, 1), (1, 256), (2, 1), (3, 1)] } else { vec![(0, 0), (1, 128), (2, 0), (3, 0)] };
        assert_eq!(consts, want, "{arch:?}");
        let consts = vkml_ops::tuning::mat_mat_spec_constants(&caps, "mul_mat_cm", GgmlType::Q4_1);
        let want = if nv { vec![(0, 1), (1, 256), (2, 1), (3, 0)] } else { vec![(0, 0), (1, 128), (2, 0), (3, 0)] };
        assert_eq!(consts, want, "{arch:?}");
        let consts = vkml_ops::tuning::mat_mat_spec_constants(&caps, "mul_mat_cm", GgmlType::F16);
        assert_eq!(consts, vec![(0, u32::from(nv)), (1, 128), (2, 0), (3, 0)], "{arch:?}");
        let consts = vkml_ops::tuning::mat_mat_spec_constants(&caps, "mul_mat_cm256", GgmlType::Q8_0);
        assert_eq!(consts, vec![(0, u32::from(nv))], "{arch:?}");
        // The int8 path needs a non-saturating 16x16x32 s8 shape and int8 arithmetic on top.
        let s8 = vkml_hal::caps::CoopMatShape {
            m: 16,
            n: 16,
            k: 32,
            a: "s8",
            b: "s8",
            c: "s32",
            result: "s32",
            saturating: false,
            scope: "subgroup",
        };
        caps.cooperative_matrix.retain(|s| s.a != "s8");
        caps.types.int8 = true;
        assert!(!vkml_ops::tuning::coopmat_int8(&caps), "{arch:?}");
        caps.cooperative_matrix.push(vkml_hal::caps::CoopMatShape { saturating: true, ..s8.clone() });
        assert!(!vkml_ops::tuning::coopmat_int8(&caps), "{arch:?}");
        caps.cooperative_matrix.push(s8);
        assert_eq!(vkml_ops::tuning::coopmat_int8(&caps), sg == 32, "{arch:?}");
        caps.types.int8 = false;
        assert!(!vkml_ops::tuning::coopmat_int8(&caps), "{arch:?}");
        // The workgroup-scope path needs all of VK_NV_cooperative_matrix2's loading features,
        // buffer device addresses and 16-bit storage on top. (`caps` starts from the real
        // adapter's, which on the H100 has the extension: clear it first.)
        caps.nv_cooperative_matrix2 = None;
        assert!(!vkml_ops::tuning::coopmat2(&caps), "{arch:?}");
        let nv = vkml_hal::caps::NvCoopMat2Caps {
            workgroup_scope: true,
            flexible_dimensions: true,
            tensor_addressing: true,
            block_loads: true,
            workgroup_scope_max_workgroup_size: 256,
            ..Default::default()
        };
        caps.nv_cooperative_matrix2 = Some(nv.clone());
        caps.buffer_device_address = true;
        caps.types.storage_buffer_16bit = true;
        caps.types.int16 = true;
        assert_eq!(vkml_ops::tuning::coopmat2(&caps), sg == 32, "{arch:?}");
        caps.nv_cooperative_matrix2 = Some(vkml_hal::caps::NvCoopMat2Caps { block_loads: false, ..nv });
        assert!(!vkml_ops::tuning::coopmat2(&caps), "{arch:?}");
        caps.nv_cooperative_matrix2 = None;
        caps.subgroup.operations = vec!["basic"];
        assert!(!vkml_ops::tuning::mat_vec_config(&caps).subgroup_reduce);
    }
}

/// The gated activations in f64 (erf from candle's CPU backend, an independent port).
/// The two factors of a gated product in f64, `(act(g), u)` (ggml's `swiglu_oai`: the
/// clamped gate's `x σ(1.702 x)` and `clamp(u, -7, 7) + 1`); the product is theirs and
/// each factor's slope is at most 1.13.
fn glu_parts(a: GluActivation, g: f64, u: f64) -> (f64, f64) {
    match a {
        GluActivation::Silu => (g / (1.0 + (-g).exp()), u),
        GluActivation::Gelu => (0.5 * g * (1.0 + (0.797_884_560_802_865_4 * (g + 0.044715 * g * g * g)).tanh()), u),
        GluActivation::GeluErf => (0.5 * g * (1.0 + candle_core::cpu::erf::erf_f64(g / std::f64::consts::SQRT_2)), u),
        GluActivation::SwigluOai => {
            let x = g.min(7.0);
            (x / (1.0 + (-1.702 * x).exp()), u.clamp(-7.0, 7.0) + 1.0)
        }
    }
}

/// The decode fusions on the integer-dot kernel (`mul_mat_vec_dot.comp` with
/// `include/mat_vec_out.glsl`): `y += W x` and the gated product of a `concat_rows(gate,
/// up)` matrix on Q8_1 activations quantized once, against ggml's integer dot
/// (`vec_dot_q8_1`) on the very Q8_1 blocks the GPU used. Tolerances: the dot bound of
/// `integer_dot_mat_vec_matches_cpu_dot` carried through the residual add and through the
/// activation (|act'| ≤ 1.13) and the product.
#[test]
fn integer_dot_fused_epilogues_match_cpu_dot() {
    let dev = device();
    if vkml_ops::tuning::row_subgroup_size(dev.caps()).is_none() || !dev.caps().integer_dot.supported {
        eprintln!("skipped: no integer dot product or usable subgroup size on this device");
        return;
    }
    let (n, k, batch) = (37usize, 96usize, 2usize);
    for &ty in quant::DOT_TYPES {
        let gate_bytes = encode(ty, &weights(n, k, 21));
        let up_bytes = encode(ty, &weights(n, k, 22));
        let gate = QMatrix::upload(&dev, ty, n, k, &gate_bytes).unwrap();
        let up = QMatrix::upload(&dev, ty, n, k, &up_bytes).unwrap();
        let x = weights(batch, k, 23);
        let xb = dev.upload(&x).unwrap();
        let xq = dev.alloc(36 * (batch * k / 32) as u64, MemoryKind::DeviceLocal).unwrap();
        let y0 = weights(batch, n, 24);
        let y_add = dev.upload(&y0).unwrap();
        let y_glu = dev.alloc(4 * (batch * n) as u64, MemoryKind::DeviceLocal).unwrap();
        let cfg =
            MatVecConfig { integer_dot: true, subgroup_rows: true, ..vkml_ops::tuning::mat_vec_config(dev.caps()) };
        let mut s = Stream::new(&dev).unwrap();
        let gu = QMatrix::concat_rows(&mut s, &[&gate, &up]).unwrap();
        quant::quantize_q8_1(&mut s, &xb, batch * k / 32, &xq).unwrap();
        quant::mat_vec_q8_1_fused(&mut s, &gate, &xq, batch, &y_add, cfg, MatVecEpilogue::Add).unwrap();
        let silu = MatVecEpilogue::Glu(GluActivation::Silu);
        quant::mat_vec_q8_1_fused(&mut s, &gu, &xq, batch, &y_glu, cfg, silu).unwrap();
        // An odd stacked matrix is refused, not read past its end.
        let e = quant::mat_vec_q8_1_fused(&mut s, &gate, &xq, batch, &y_glu, cfg, silu).unwrap_err();
        assert!(e.to_string().contains("even"), "{e}");
        s.finish_and_wait().unwrap();
        let (added, gated) = (y_add.to_vec::<f32>().unwrap(), y_glu.to_vec::<f32>().unwrap());
        let xq: Vec<vkml_quant::blocks::BlockQ8_1> = xq.to_vec().unwrap();
        let row_bytes = gate.row_bytes() as usize;
        let dot = |bytes: &[u8], r: usize, xblocks: &[vkml_quant::blocks::BlockQ8_1]| -> (f64, f64) {
            let (d, mag) = q8_1_dot(ty, &bytes[r * row_bytes..(r + 1) * row_bytes], xblocks);
            (f64::from(d), f64::from(mag))
        };
        for b in 0..batch {
            let xblocks = &xq[b * k / 32..(b + 1) * k / 32];
            for r in 0..n {
                let (g, mg) = dot(&gate_bytes, r, xblocks);
                let want = f64::from(y0[b * n + r]) + g;
                let got = f64::from(added[b * n + r]);
                assert!(
                    (got - want).abs() <= 1e-5 * mg + 1e-6 * want.abs() + 1e-6,
                    "add {ty:?} b {b} r {r}: gpu {got} cpu {want}"
                );
                let (u, mu) = dot(&up_bytes, r, xblocks);
                let (ag, uf) = glu_parts(GluActivation::Silu, g, u);
                let want = ag * uf;
                let tol =
                    1.13 * (1e-5 * mg + 1e-6) * u.abs() + ag.abs() * (1e-5 * mu + 1e-6) + 1e-6 * want.abs() + 1e-6;
                let got = f64::from(gated[b * n + r]);
                assert!((got - want).abs() <= tol, "silu {ty:?} b {b} r {r}: gpu {got} cpu {want}");
            }
        }
    }
    assert_clean(&dev);
}

/// (dot, sum of |products|) of row r of w with batch column b of x, in f64.
fn dot_ref(w: &[f32], x: &[f32], k: usize, r: usize, b: usize) -> (f64, f64) {
    (0..k).fold((0.0, 0.0), |(d, m), c| {
        let p = f64::from(w[r * k + c]) * f64::from(x[b * k + c]);
        (d + p, m + p.abs())
    })
}

/// The decode fusions on every mat-vec path: the residual add folded into the mat-vec
/// (`y += W x`), gate/up with silu, gelu and gelu_erf in one pass over a
/// `concat_rows(gate, up)` matrix, and Q/K/V as one `concat_rows` matrix (bit-identical to
/// three separate mat-vecs, and within the mat-vec bound of the CPU reference). Tolerances propagate the mat-vec bound 1e-5 * sum|products|
/// through the activation (|act'| ≤ 1.13) and the product.
#[test]
fn fused_mat_vec_epilogues_match_cpu() {
    let dev = device();
    // One launch per kernel (each epilogue is its own pipeline, a cold LLVM compile on
    // CI's lavapipe): per-element with the shared-memory reduction, vec4 with the subgroup
    // one, block-wise with 4 rows per subgroup; one type per block-wise kernel.
    let configs: Vec<MatVecConfig> = mat_vec_configs(&dev)
        .into_iter()
        .filter(|c| {
            (!c.vec4 && !c.subgroup_reduce)
                || (c.vec4 && c.subgroup_reduce && !c.subgroup_rows)
                || (c.subgroup_rows && c.rows_per_subgroup == 4)
        })
        .collect();
    let types = [GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::IQ4_XS];
    for ty in types {
        let bs = ty.block_size().max(32);
        let (n, k) = (37, 2 * bs);
        let gate_w = weights(n, k, 3);
        let up_w = weights(n, k, 4);
        let gate = QMatrix::upload(&dev, ty, n, k, &encode(ty, &gate_w)).unwrap();
        let up = QMatrix::upload(&dev, ty, n, k, &encode(ty, &up_w)).unwrap();
        let (gd, ud) = (
            vkml_quant::dequantize_to_vec(ty, &encode(ty, &gate_w)).unwrap(),
            vkml_quant::dequantize_to_vec(ty, &encode(ty, &up_w)).unwrap(),
        );
        let mut s = Stream::new(&dev).unwrap();
        let gu = QMatrix::concat_rows(&mut s, &[&gate, &up]).unwrap();
        let qkv = QMatrix::concat_rows(&mut s, &[&gate, &up, &gate]).unwrap();
        s.finish_and_wait().unwrap();
        assert_eq!((gu.rows(), qkv.rows()), (2 * n, 3 * n));
        for batch in [1usize, 3] {
            let x = weights(batch, k, 50 + batch as u64);
            let xb = dev.upload(&x).unwrap();
            for cfg in &configs {
                // y += W x.
                let y0 = weights(batch, n, 9);
                let yb = dev.upload(&y0).unwrap();
                let mut s = Stream::new(&dev).unwrap();
                quant::mat_vec_fused(&mut s, &gate, &xb, batch, &yb, *cfg, MatVecEpilogue::Add).unwrap();
                s.finish_and_wait().unwrap();
                let y = yb.to_vec::<f32>().unwrap();
                for b in 0..batch {
                    for r in 0..n {
                        let (d, m) = dot_ref(&gd, &x, k, r, b);
                        let want = f64::from(y0[b * n + r]) + d;
                        let got = f64::from(y[b * n + r]);
                        assert!(
                            (got - want).abs() <= 1e-5 * (m + want.abs()) + 1e-30,
                            "add {ty:?} {cfg:?} b {b} r {r}: gpu {got} cpu {want}"
                        );
                    }
                }
                // Gated products.
                for a in [GluActivation::Silu, GluActivation::Gelu, GluActivation::GeluErf, GluActivation::SwigluOai] {
                    let yb = dev.alloc(4 * (batch * n) as u64, MemoryKind::DeviceLocal).unwrap();
                    let mut s = Stream::new(&dev).unwrap();
                    quant::mat_vec_fused(&mut s, &gu, &xb, batch, &yb, *cfg, MatVecEpilogue::Glu(a)).unwrap();
                    s.finish_and_wait().unwrap();
                    let y = yb.to_vec::<f32>().unwrap();
                    for b in 0..batch {
                        for r in 0..n {
                            let (g, mg) = dot_ref(&gd, &x, k, r, b);
                            let (u, mu) = dot_ref(&ud, &x, k, r, b);
                            let (ag, uf) = glu_parts(a, g, u);
                            let want = ag * uf;
                            let tol = 1.13 * 1e-5 * mg * uf.abs() + ag.abs() * 1e-5 * mu + 1e-6 * want.abs() + 1e-30;
                            let got = f64::from(y[b * n + r]);
                            assert!(
                                (got - want).abs() <= tol,
                                "{a:?} {ty:?} {cfg:?} b {b} r {r}: gpu {got} cpu {want}"
                            );
                        }
                    }
                }
                // Q/K/V in one pass equals three passes, bit for bit.
                let yq = dev.alloc(4 * (batch * 3 * n) as u64, MemoryKind::DeviceLocal).unwrap();
                let parts: Vec<_> =
                    (0..3).map(|_| dev.alloc(4 * (batch * n) as u64, MemoryKind::DeviceLocal).unwrap()).collect();
                let mut s = Stream::new(&dev).unwrap();
                quant::mat_vec_with(&mut s, &qkv, &xb, batch, &yq, *cfg).unwrap();
                for (m, yb) in [&gate, &up, &gate].into_iter().zip(&parts) {
                    quant::mat_vec_with(&mut s, m, &xb, batch, yb, *cfg).unwrap();
                }
                s.finish_and_wait().unwrap();
                let fused = yq.to_vec::<f32>().unwrap();
                let sep: Vec<Vec<f32>> = parts.iter().map(|p| p.to_vec::<f32>().unwrap()).collect();
                for b in 0..batch {
                    for (i, part) in sep.iter().enumerate() {
                        assert_eq!(
                            &fused[b * 3 * n + i * n..b * 3 * n + (i + 1) * n],
                            &part[b * n..(b + 1) * n],
                            "qkv {ty:?} {cfg:?} b {b} part {i}"
                        );
                        // And against the CPU reference (parts: gate, up, gate).
                        let w = if i == 1 { &ud } else { &gd };
                        for r in 0..n {
                            let (d, m) = dot_ref(w, &x, k, r, b);
                            let got = f64::from(fused[b * 3 * n + i * n + r]);
                            assert!(
                                (got - d).abs() <= 1e-5 * m + 1e-30,
                                "qkv {ty:?} {cfg:?} b {b} part {i} r {r}: gpu {got} cpu {d}"
                            );
                        }
                    }
                }
            }
        }
        // Errors: mismatched parts, odd gate/up.
        let other = QMatrix::upload(&dev, ty, 3, 2 * k, &encode(ty, &weights(3, 2 * k, 1))).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        let e = QMatrix::concat_rows(&mut s, &[&gate, &other]).unwrap_err();
        assert!(e.to_string().contains("row length"), "{e}");
        let xb = dev.upload(&weights(1, k, 2)).unwrap();
        let yb = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
        let e = quant::mat_vec_fused(&mut s, &gate, &xb, 1, &yb, configs[0], MatVecEpilogue::Glu(GluActivation::Silu))
            .unwrap_err();
        assert!(e.to_string().contains("even"), "{e}");
        s.finish_and_wait().unwrap();
    }
    assert_clean(&dev);
}

/// A matrix held in several parts (`QMatrix::upload_in_parts`, as a matrix past one
/// storage-buffer binding is): dequantize, get_rows, every mat-vec epilogue (the gated
/// product across parts), concat_rows of split matrices and every mat-mat path against the
/// CPU reference, and the mat-vec and mat-mat outputs bit-identical to the same matrix in
/// one part. 300 rows in parts of at most 70 rows (5 parts, a short last one). Mat-vecs on
/// the device's default launch (integer dot on Q8_1 activations where it has them: checked
/// against one part only, its rounding is `integer_dot_mat_vec_matches_cpu_dot`'s) and on
/// the per-element kernel (f32 activations: against the CPU).
#[test]
fn split_matrices_match_cpu() {
    let dev = device();
    let cfg = vkml_ops::tuning::mat_vec_config(dev.caps());
    let configs = [cfg, mat_vec_configs(&dev)[0]];
    // (MXFP4: 2 blocks a row, so parts and concatenated rows start inside its device
    // layout's groups of 16 blocks)
    for ty in [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::MXFP4,
    ] {
        let bs = ty.block_size().max(32);
        let (rows, k) = (300, 2 * bs);
        let bytes = encode(ty, &weights(rows, k, 21));
        let w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
        let row_bytes = (bytes.len() / rows) as u64;
        let whole = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        let m = QMatrix::upload_in_parts(&dev, ty, rows, k, &bytes, 70 * row_bytes).unwrap();
        let parts = m.parts();
        assert!(parts.len() >= 5, "{ty:?}: {} parts", parts.len());
        assert!(parts.windows(2).all(|p| p[0].row0() + p[0].rows() == p[1].row0() && p[0].rows() <= 70));
        assert_eq!(parts.last().map(|p| p.row0() + p.rows()), Some(rows));

        // Dequantize and get_rows, bit for bit.
        let out = dev.alloc(4 * (rows * k) as u64, MemoryKind::DeviceLocal).unwrap();
        let ids: Vec<u32> = vec![0, 299, 67, 68, 150, 1000, 5, 64, 63];
        let idb = dev.upload(&ids).unwrap();
        let rows_out = dev.alloc(4 * (ids.len() * k) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        quant::dequantize(&mut s, &m, &out).unwrap();
        let d0 = s.stats().dispatches;
        quant::get_rows(&mut s, &m, &idb, ids.len(), &rows_out).unwrap();
        // One lookup per four parts (get_rows_parts.comp) where the device binds 6 buffers.
        let per = if dev.caps().limits.max_storage_buffers_per_stage >= 6 { quant::GET_ROWS_PARTS } else { 1 };
        assert_eq!(s.stats().dispatches - d0, parts.len().div_ceil(per) as u64, "{ty:?}: get_rows dispatches");
        s.finish_and_wait().unwrap();
        let got = out.to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty:?} dequantize");
        assert_rows_match(ty, &rows_out.to_vec::<f32>().unwrap(), &ids, &w, k);

        // Mat-vec: store and residual add, against the CPU and against one part.
        for cfg in configs {
            for batch in [1usize, 3] {
                let x = weights(batch, k, 40 + batch as u64);
                let xb = dev.upload(&x).unwrap();
                let y0 = weights(batch, rows, 8);
                let (ya, yb, yw) = (dev.upload(&y0).unwrap(), dev.upload(&y0).unwrap(), dev.upload(&y0).unwrap());
                let mut s = Stream::new(&dev).unwrap();
                quant::mat_vec_with(&mut s, &m, &xb, batch, &ya, cfg).unwrap();
                quant::mat_vec_fused(&mut s, &m, &xb, batch, &yb, cfg, MatVecEpilogue::Add).unwrap();
                quant::mat_vec_with(&mut s, &whole, &xb, batch, &yw, cfg).unwrap();
                s.finish_and_wait().unwrap();
                let (ya, yb, yw) =
                    (ya.to_vec::<f32>().unwrap(), yb.to_vec::<f32>().unwrap(), yw.to_vec::<f32>().unwrap());
                assert_eq!(ya, yw, "{ty:?} {cfg:?} batch {batch}: parts against one part");
                if cfg.integer_dot && quant::DOT_TYPES.contains(&ty) {
                    continue;
                }
                for b in 0..batch {
                    for r in 0..rows {
                        let (d, mag) = dot_ref(&w, &x, k, r, b);
                        let got = f64::from(ya[b * rows + r]);
                        assert!((got - d).abs() <= 1e-5 * mag + 1e-30, "{ty:?} {cfg:?} b {b} r {r}: gpu {got} cpu {d}");
                        let want = f64::from(y0[b * rows + r]) + d;
                        let got = f64::from(yb[b * rows + r]);
                        assert!(
                            (got - want).abs() <= 1e-5 * (mag + want.abs()) + 1e-30,
                            "add {ty:?} {cfg:?} b {b} r {r}: gpu {got} cpu {want}"
                        );
                    }
                }
            }
        }

        // concat_rows of split matrices (gate = m, up = its reverse rows' matrix) and the
        // gated product over the result, whose gate and up rows lie in different parts.
        let rev: Vec<u8> = bytes.chunks(row_bytes as usize).rev().flatten().copied().collect();
        let up = QMatrix::upload_in_parts(&dev, ty, rows, k, &rev, 70 * row_bytes).unwrap();
        let ud = vkml_quant::dequantize_to_vec(ty, &rev).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        let gu = QMatrix::concat_rows(&mut s, &[&m, &up]).unwrap();
        s.finish_and_wait().unwrap();
        assert_eq!(gu.rows(), 2 * rows);
        let out = dev.alloc(4 * (2 * rows * k) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        quant::dequantize(&mut s, &gu, &out).unwrap();
        s.finish_and_wait().unwrap();
        let got = out.to_vec::<f32>().unwrap();
        assert!(got.iter().zip(w.iter().chain(&ud)).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty:?} concat_rows");
        let batch = 2;
        let x = weights(batch, k, 61);
        let xb = dev.upload(&x).unwrap();
        let yg = dev.alloc(4 * (batch * rows) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        let glu = MatVecEpilogue::Glu(GluActivation::Silu);
        quant::mat_vec_fused(&mut s, &gu, &xb, batch, &yg, configs[1], glu).unwrap();
        s.finish_and_wait().unwrap();
        let y = yg.to_vec::<f32>().unwrap();
        for b in 0..batch {
            for r in 0..rows {
                let ((g, mg), (u, mu)) = (dot_ref(&w, &x, k, r, b), dot_ref(&ud, &x, k, r, b));
                let (ag, uf) = glu_parts(GluActivation::Silu, g, u);
                let want = ag * uf;
                let tol = 1.13 * 1e-5 * mg * uf.abs() + ag.abs() * 1e-5 * mu + 1e-6 * want.abs();
                let got = f64::from(y[b * rows + r]);
                assert!((got - want).abs() <= tol + 1e-30, "glu {ty:?} b {b} r {r}: gpu {got} cpu {want}");
            }
        }

        // Mat-mat on every path, with the residual add.
        for path in mat_mat_paths(&dev) {
            if (path == MatMatPath::CoopMat2 && !quant::COOPMAT2_TYPES.contains(&ty))
                || (path != MatMatPath::Scalar && !k.is_multiple_of(32))
            {
                continue;
            }
            let n_tok = if path == MatMatPath::Scalar { 9 } else { 150 };
            let mut x = weights(n_tok, k, 33);
            let xb = dev.upload(&x).unwrap();
            let y0 = weights(n_tok, rows, 12);
            let (ys, yw) = (dev.upload(&y0).unwrap(), dev.upload(&y0).unwrap());
            let opts = MatMatOptions { accumulate: true, ..MatMatOptions::new(path) };
            let mut s = Stream::new(&dev).unwrap();
            quant::mat_mat_with(&mut s, &m, &xb, n_tok, &ys, opts).unwrap();
            // (Unsplit, as parts run: a grid this small would otherwise split k on the
            // tensor-core path and sum in another order.)
            let unsplit = MatMatOptions { split_k: Some(1), ..opts };
            quant::mat_mat_with(&mut s, &whole, &xb, n_tok, &yw, unsplit).unwrap();
            s.finish_and_wait().unwrap();
            let (y, yw) = (ys.to_vec::<f32>().unwrap(), yw.to_vec::<f32>().unwrap());
            assert_eq!(y, yw, "{path:?} {ty:?}: parts against one part");
            let mut wr = w.clone();
            let tol = if path == MatMatPath::Scalar {
                1e-5
            } else {
                for v in wr.iter_mut().chain(x.iter_mut()) {
                    *v = half::f16::from_f32(*v).to_f32();
                }
                1e-4
            };
            for n in 0..n_tok {
                for r in 0..rows {
                    let (d, mag) = dot_ref(&wr, &x, k, r, n);
                    let want = f64::from(y0[n * rows + r]) + d;
                    let got = f64::from(y[n * rows + r]);
                    assert!(
                        (got - want).abs() <= tol * (mag + want.abs()) + 1e-30,
                        "{path:?} {ty:?} token {n} row {r}: gpu {got} cpu {want}"
                    );
                }
            }
        }
    }
    // One row past a binding is refused by name.
    let e = QMatrix::upload_in_parts(&dev, GgmlType::Q8_0, 8, 64, &vec![0u8; 8 * 68], 100).unwrap_err();
    assert!(e.to_string().contains("exceed a storage binding"), "{e}");
    assert_clean(&dev);
}

/// A matrix past the device's own storage-buffer binding (lavapipe: 128 MiB), as an 8B
/// model's token embedding is on such devices: uploaded in parts, then mat-vec and get_rows
/// against the CPU reference. Runs where `maxStorageBufferRange` is at most 256 MiB.
#[test]
fn matrix_past_one_binding_runs_in_parts() {
    let dev = device();
    let limit = dev.caps().limits.max_storage_buffer_range;
    if limit > 256 << 20 {
        eprintln!("maxStorageBufferRange is {limit} bytes: no matrix of this test passes it");
        return;
    }
    let (ty, k) = (GgmlType::Q8_0, 4096);
    let row_bytes = (k / 32 * 34) as u64;
    let rows = (limit / row_bytes) as usize + 300;
    // Random Q8_0 blocks: f16 scales of 2^-10 .. 2^-7, random quants.
    let mut st = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        st
    };
    let mut bytes = vec![0u8; rows * row_bytes as usize];
    for blk in bytes.chunks_mut(34) {
        let r = next();
        let d = half::f16::from_f32(f32::from(1u16 << (r % 4)) / 1024.0);
        blk[..2].copy_from_slice(&d.to_le_bytes());
        for (i, q) in blk[2..].iter_mut().enumerate() {
            *q = (r >> (i % 8 * 8)) as u8 ^ (i as u8).wrapping_mul(37);
        }
    }
    assert!(bytes.len() as u64 > limit);
    let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
    assert!(m.parts().len() >= 2, "{} bytes in {} parts", bytes.len(), m.parts().len());
    let x = weights(1, k, 5);
    let xb = dev.upload(&x).unwrap();
    let y = dev.alloc(4 * rows as u64, MemoryKind::DeviceLocal).unwrap();
    let ids: Vec<u32> = vec![0, (rows - 1) as u32, m.parts()[1].row0() as u32, 17];
    let idb = dev.upload(&ids).unwrap();
    let got_rows = dev.alloc(4 * (ids.len() * k) as u64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    quant::mat_vec(&mut s, &m, &xb, 1, &y).unwrap();
    quant::get_rows(&mut s, &m, &idb, ids.len(), &got_rows).unwrap();
    // The norm folded in: one dispatch per part where the kernels fold it, each part's
    // workgroups normalising x themselves.
    let nw: Vec<f32> = weights(1, k, 6).iter().map(|v| 1.0 + 0.5 * v).collect();
    let nwb = dev.upload(&nw).unwrap();
    let yn = dev.alloc(4 * rows as u64, MemoryKind::DeviceLocal).unwrap();
    let d0 = s.stats().dispatches;
    let norm = quant::PreNorm { weight: &nwb, eps: 1e-5 };
    let opts = quant::LinearOptions::new(dev.caps());
    quant::linear(&mut s, &m, &xb, 1, Some(norm), &yn, quant::LinearEpilogue::Store, &opts).unwrap();
    let dispatches = s.stats().dispatches - d0;
    s.finish_and_wait().unwrap();
    let cfg = vkml_ops::tuning::mat_vec_config(dev.caps());
    if quant::mat_vec_fuses_norm(dev.caps(), &m, &cfg) {
        assert_eq!(dispatches, m.parts().len() as u64, "the norm folded into each part's dispatch");
    }
    let ms = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / k as f64;
    let xn: Vec<f32> =
        x.iter().zip(&nw).map(|(&v, &w)| (f64::from(v) / (ms + 1e-5).sqrt() * f64::from(w)) as f32).collect();
    let (y, yn) = (y.to_vec::<f32>().unwrap(), yn.to_vec::<f32>().unwrap());
    for (r, row) in bytes.chunks(row_bytes as usize).enumerate() {
        let w = vkml_quant::dequantize_to_vec(ty, row).unwrap();
        let (d, mag) = dot_ref(&w, &x, k, 0, 0);
        let got = f64::from(y[r]);
        assert!((got - d).abs() <= 1e-5 * mag + 1e-30, "row {r}: gpu {got} cpu {d}");
        let (d, mag) = dot_ref(&w, &xn, k, 0, 0);
        let got = f64::from(yn[r]);
        assert!((got - d).abs() <= 1e-4 * mag + 1e-30, "normalised, row {r}: gpu {got} cpu {d}");
    }
    let got = got_rows.to_vec::<f32>().unwrap();
    for (i, &id) in ids.iter().enumerate() {
        let start = id as usize * row_bytes as usize;
        let want = vkml_quant::dequantize_to_vec(ty, &bytes[start..start + row_bytes as usize]).unwrap();
        assert!(got[i * k..(i + 1) * k].iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "get_rows id {id}");
    }
    assert_clean(&dev);
}

/// The norm folded into the mat-vec (`quant::rms_norm_mat_vec`): one dispatch where
/// `mat_vec_fuses_norm` holds (the block kernels normalising x as they load it) or
/// `vec4_fuses_norm` (one row of a matrix of few rows on the vec4 kernel), else the
/// norm's kernel first (on the integer-dot kernel, writing Q8_1); against the f64 product
/// of the dequantized weights with x normalised on the host (candle-nn's `rms_norm`),
/// through Store, Add and Glu.
/// Tolerances: the mat-vec bound 1e-5 · Σ|products| (carried through the add and the
/// activation as in `fused_mat_vec_epilogues_match_cpu`); on the integer-dot kernel, x as
/// vkml-quant quantizes the normalised row to Q8_1 plus one quant step per block (the GPU's
/// sum of squares, reduced in its own order, may move a value across a rounding boundary).
#[test]
fn rms_norm_mat_vec_matches_cpu() {
    let dev = device();
    let base = vkml_ops::tuning::mat_vec_config(dev.caps());
    let block = MatVecConfig { subgroup_rows: true, integer_dot: false, rows_per_subgroup: 2, ..base };
    let dot = MatVecConfig {
        subgroup_rows: true,
        integer_dot: true,
        dot_rows_per_subgroup: 2,
        dot_x_in_kernel: false,
        ..base
    };
    // The integer-dot kernel normalising and quantizing x itself (one row of x).
    let dot_x = MatVecConfig { dot_x_in_kernel: true, dot_x_rows_per_subgroup: 3, dot_x_workgroup: 64, ..dot };
    let plain = MatVecConfig { subgroup_rows: false, integer_dot: false, ..base };
    // The block-wise and vec4 kernels' norm in two passes (a workgroup reduction over x
    // first) and in one (x times the weight, the product scaled at the end).
    let (block2, plain2) =
        (MatVecConfig { norm_one_pass: false, ..block }, MatVecConfig { norm_one_pass: false, ..plain });
    // (the one-pass vec4 kernel on a workgroup of 512: more subgroups than a subgroup has
    // lanes on lavapipe, whose partials the first subgroup sums in turns)
    let (block1, plain1) = (
        MatVecConfig { norm_one_pass: true, ..block },
        MatVecConfig { norm_one_pass: true, vec4_norm_workgroup: 512, ..plain },
    );
    let silu = MatVecEpilogue::Glu(GluActivation::Silu);
    let (n, k, eps) = (37usize, 256usize, 1e-5f32);
    for (ty, cfg, ep, batch) in [
        (GgmlType::Q4_1, block1, MatVecEpilogue::Store, 3usize),
        (GgmlType::Q4_1, block2, MatVecEpilogue::Store, 3),
        (GgmlType::Q4_K, block1, silu, 1),
        (GgmlType::Q4_K, block2, silu, 1),
        (GgmlType::Q4_0, dot, MatVecEpilogue::Add, 2),
        (GgmlType::Q8_0, dot, silu, 1),
        (GgmlType::Q4_0, dot_x, MatVecEpilogue::Add, 1),
        (GgmlType::Q8_0, dot_x, silu, 1),
        (GgmlType::Q4_0, dot_x, MatVecEpilogue::Store, 2),
        (GgmlType::Q4_1, plain1, MatVecEpilogue::Add, 1),
        (GgmlType::Q4_1, plain2, MatVecEpilogue::Add, 1),
        (GgmlType::Q8_0, dot_x, MatVecEpilogue::Softcap(4.0), 1),
        (GgmlType::Q4_1, block1, MatVecEpilogue::Softcap(4.0), 2),
    ] {
        let glu = matches!(ep, MatVecEpilogue::Glu(_));
        let rows = if glu { 2 * n } else { n };
        let bytes = encode(ty, &weights(rows, k, 31));
        let w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
        let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        let x: Vec<f32> = weights(batch, k, 32).iter().map(|v| 2.5 * v).collect();
        let nw: Vec<f32> = weights(1, k, 33).iter().map(|v| 1.0 + v).collect();
        let y0 = weights(batch, n, 34);
        let (xb, nwb, yb) = (dev.upload(&x).unwrap(), dev.upload(&nw).unwrap(), dev.upload(&y0).unwrap());
        let mut s = Stream::new(&dev).unwrap();
        let d0 = s.stats().dispatches;
        let need = quant::rms_norm_mat_vec_scratch(dev.caps(), &m, batch, &cfg);
        let scratch = dev.alloc(need.max(4), MemoryKind::DeviceLocal).unwrap();
        if need > 0 {
            let small = dev.alloc(need - 4, MemoryKind::DeviceLocal).unwrap();
            let e = quant::rms_norm_mat_vec(&mut s, &xb, &nwb, eps, &m, batch, &yb, cfg, ep, Some(&small)).unwrap_err();
            assert!(e.to_string().contains("scratch"), "{e}");
        }
        quant::rms_norm_mat_vec(&mut s, &xb, &nwb, eps, &m, batch, &yb, cfg, ep, Some(&scratch)).unwrap();
        let in_block = quant::mat_vec_fuses_norm(dev.caps(), &m, &cfg);
        let in_dot = quant::dot_quantizes_x(dev.caps(), &m, batch, &cfg);
        // (one row of few rows on the vec4 subgroup kernel: a router)
        let in_vec4 = quant::vec4_fuses_norm(dev.caps(), &m, batch, &cfg);
        assert!(!in_vec4 || (batch == 1 && rows <= quant::VEC4_NORM_MAX_ROWS), "{ty:?}: the vec4 prologue's reach");
        let fused = in_block || in_dot || in_vec4;
        let dispatches = s.stats().dispatches - d0;
        s.finish_and_wait().unwrap();
        assert!(!fused || dispatches == 1, "{ty:?} {cfg:?}: fused in {dispatches} dispatches");
        let caps = dev.caps();
        let row_sg = vkml_ops::tuning::row_subgroup_size(caps).is_some();
        let uses_dot = quant::mat_vec_uses_q8_1(caps, &m, &cfg);
        assert_eq!(in_block, row_sg && cfg.subgroup_rows && !uses_dot, "{ty:?} {cfg:?}: the prologue on block kernels");
        let shuffles = caps.subgroup.operations.contains(&"shuffle") && caps.subgroup.size >= 8;
        assert_eq!(
            in_dot,
            uses_dot && cfg.dot_x_in_kernel && batch == 1 && shuffles,
            "{ty:?} {cfg:?} batch {batch}: the prologue on the integer-dot kernel"
        );
        assert!(fused || dispatches == 2, "{ty:?} {cfg:?}: {dispatches} dispatches unfused");
        let y = yb.to_vec::<f32>().unwrap();
        for b in 0..batch {
            let row = &x[b * k..(b + 1) * k];
            let scale = 1.0 / (row.iter().map(|v| v * v).sum::<f32>() / k as f32 + eps).sqrt();
            let xn: Vec<f32> = row.iter().zip(&nw).map(|(v, wi)| v * scale * wi).collect();
            // The x the kernel multiplies, and per block the value of one quant step.
            let (xs, step): (Vec<f32>, Vec<f32>) = if uses_dot {
                let q = vkml_quant::quantize_q8_1(&xn).unwrap();
                let values = q.iter().flat_map(|b| b.qs.iter().map(|&v| b.d.to_f32() * f32::from(v))).collect();
                (values, q.iter().map(|b| b.d.to_f32()).collect())
            } else {
                (xn.clone(), vec![0.0; k / 32])
            };
            let dotp = |r: usize| -> (f64, f64) {
                let (mut d, mut tol) = (0f64, 0f64);
                for c in 0..k {
                    let p = f64::from(w[r * k + c]) * f64::from(xs[c]);
                    d += p;
                    tol += 1e-5 * p.abs();
                }
                for (blk, st) in step.iter().enumerate() {
                    let wmax = (0..32).map(|c| w[r * k + blk * 32 + c].abs()).fold(0f32, f32::max);
                    tol += f64::from(st * wmax);
                }
                (d, tol + 1e-6)
            };
            for r in 0..n {
                let got = f64::from(y[b * n + r]);
                let (g, tg) = dotp(r);
                let (want, tol) = match ep {
                    MatVecEpilogue::Store => (g, tg),
                    MatVecEpilogue::Add => (f64::from(y0[b * n + r]) + g, tg + 1e-6 * g.abs()),
                    MatVecEpilogue::Glu(a) => {
                        let (u, tu) = dotp(n + r);
                        let (ag, uf) = glu_parts(a, g, u);
                        (ag * uf, 1.13 * tg * uf.abs() + ag.abs() * tu + 1.13 * tg * tu)
                    }
                    // tanh's slope is at most 1: the product's error, plus tanh's own.
                    MatVecEpilogue::Softcap(c) => ((g / f64::from(c)).tanh() * f64::from(c), tg + 1e-6 * f64::from(c)),
                    MatVecEpilogue::GluQ8_1(_) => unreachable!("f32 epilogues only here"),
                };
                assert!((got - want).abs() <= tol, "{ty:?} {ep:?} batch {b} row {r}: gpu {got} cpu {want} (tol {tol})");
            }
        }
    }
    assert_clean(&dev);
}

/// The integer-dot kernel quantizing its f32 x itself (`mul_mat_vec_dot.*_x_f32`, no
/// quantize dispatch) gives the bits of `quantize_q8_1` then the Q8_1 mat-vec: the same
/// blocks (amax and quant sums reduced exactly) and the same dot loop; for every epilogue,
/// rows per subgroup and workgroup size, k past one subgroup's blocks, a row count that
/// leaves the last workgroup partly empty, and the largest k it holds.
#[test]
fn integer_dot_quantizing_x_equals_quantize_then_mat_vec() {
    let dev = device();
    let caps = dev.caps();
    let Some((sg, _)) = vkml_ops::tuning::row_subgroup_size(caps) else {
        eprintln!("skipped: no usable subgroup size");
        return;
    };
    if !caps.integer_dot.supported || !caps.subgroup.operations.contains(&"shuffle") || sg < 8 {
        eprintln!("skipped: no integer dot product or subgroup shuffles");
        return;
    }
    let base = MatVecConfig { subgroup_rows: true, integer_dot: true, ..vkml_ops::tuning::mat_vec_config(caps) };
    let silu = MatVecEpilogue::Glu(GluActivation::Silu);
    let max_k = 32 * quant::DOT_X_MAX_BLOCKS;
    for (ty, rows, k, ep, nr, wg) in [
        (GgmlType::Q4_0, 45usize, 96usize, MatVecEpilogue::Store, 1u32, 32u32),
        (GgmlType::Q8_0, 70, 1024, MatVecEpilogue::Add, 2, 64),
        (GgmlType::Q4_0, 2 * 19, 800, silu, 3, 128),
        (GgmlType::Q4_0, 9, max_k, MatVecEpilogue::Store, 2, 256),
    ] {
        let wg = wg.max(sg);
        let bytes = encode(ty, &weights(rows, k, 41));
        let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        let x: Vec<f32> =
            weights(1, k, 42).iter().enumerate().map(|(i, v)| if i % 97 == 0 { 0.0 } else { 3.0 * v }).collect();
        let out = if matches!(ep, MatVecEpilogue::Glu(_)) { rows / 2 } else { rows };
        let y0 = weights(1, out, 43);
        let xb = dev.upload(&x).unwrap();
        let (y_in, y_pre) = (dev.upload(&y0).unwrap(), dev.upload(&y0).unwrap());
        let xq = dev.alloc(36 * (k / 32) as u64, MemoryKind::DeviceLocal).unwrap();
        let cfg = MatVecConfig { dot_x_in_kernel: true, dot_x_rows_per_subgroup: nr, dot_x_workgroup: wg, ..base };
        assert!(quant::dot_quantizes_x(caps, &m, 1, &cfg), "{ty:?} k {k}");
        assert!(!quant::dot_quantizes_x(caps, &m, 2, &cfg), "one row of x only");
        let mut s = Stream::new(&dev).unwrap();
        let d0 = s.stats().dispatches;
        quant::mat_vec_fused(&mut s, &m, &xb, 1, &y_in, cfg, ep).unwrap();
        assert_eq!(s.stats().dispatches - d0, 1, "{ty:?}: one dispatch");
        quant::quantize_q8_1(&mut s, &xb, k / 32, &xq).unwrap();
        quant::mat_vec_q8_1_fused(&mut s, &m, &xq, 1, &y_pre, cfg, ep).unwrap();
        s.finish_and_wait().unwrap();
        let (a, b) = (y_in.to_vec::<f32>().unwrap(), y_pre.to_vec::<f32>().unwrap());
        for r in 0..out {
            assert_eq!(a[r].to_bits(), b[r].to_bits(), "{ty:?} {ep:?} k {k} row {r}: {} vs {}", a[r], b[r]);
        }
    }
    // Past the shared-memory capacity the quantize dispatch comes back.
    let m = QMatrix::upload(&dev, GgmlType::Q8_0, 1, max_k + 32, &encode(GgmlType::Q8_0, &weights(1, max_k + 32, 44)))
        .unwrap();
    assert!(!quant::dot_quantizes_x(caps, &m, 1, &MatVecConfig { dot_x_in_kernel: true, ..base }));
    assert_clean(&dev);
}

/// The post-norm residual add folded into the mat-vec (`mat_vec_norm_add`, Gemma's
/// sandwich norms): `res += rms_norm(x Wᵀ) * w` against the CPU from the same mat-vec's
/// product (the normalisation in f64: 1e-5 relative to the largest term), on the block
/// kernels (1 and 3 rows of x, rows that leave the last workgroup part empty) and on the
/// integer-dot kernel quantizing x itself; twice in one submission, so the count its last
/// workgroup resets serves the next dispatch.
#[test]
fn mat_vec_norm_add_matches_cpu() {
    let dev = device();
    let caps = dev.caps();
    let base = vkml_ops::tuning::mat_vec_config(caps);
    let block = MatVecConfig { subgroup_rows: true, integer_dot: false, rows_per_subgroup: 2, ..base };
    let dot_x = MatVecConfig {
        subgroup_rows: true,
        integer_dot: true,
        dot_x_in_kernel: true,
        dot_x_rows_per_subgroup: 2,
        dot_x_workgroup: 64,
        ..base
    };
    let eps = 1e-6f32;
    for (ty, rows, k, batch, cfg) in [
        (GgmlType::Q4_K, 45usize, 256usize, 1usize, block),
        (GgmlType::Q4_0, 70, 96, 3, block),
        (GgmlType::Q8_0, 37, 128, 1, dot_x),
    ] {
        let bytes = encode(ty, &weights(rows, k, 51));
        let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        if !quant::mat_vec_fuses_norm_add(caps, &m, batch, &cfg) {
            eprintln!("skipped {ty:?}: no one-dispatch form on this device");
            continue;
        }
        let x = weights(batch, k, 52);
        let nw: Vec<f32> = weights(1, rows, 53).iter().map(|v| 1.0 + v).collect();
        let res0 = weights(batch, rows, 54);
        let (xb, nwb, res) = (dev.upload(&x).unwrap(), dev.upload(&nw).unwrap(), dev.upload(&res0).unwrap());
        let (t_plain, y) = (
            dev.alloc(4 * (batch * rows) as u64, MemoryKind::DeviceLocal).unwrap(),
            dev.alloc(4 * (batch * rows) as u64, MemoryKind::DeviceLocal).unwrap(),
        );
        let mut s = Stream::new(&dev).unwrap();
        quant::mat_vec_fused(&mut s, &m, &xb, batch, &t_plain, cfg, MatVecEpilogue::Store).unwrap();
        let d0 = s.stats().dispatches;
        for _ in 0..2 {
            quant::mat_vec_norm_add(&mut s, &m, &xb, batch, &y, &res, &nwb, eps, cfg).unwrap();
        }
        assert_eq!(s.stats().dispatches - d0, 2, "{ty:?}: one dispatch each");
        // The product's scratch cannot be the residual it is added to.
        let e = quant::mat_vec_norm_add(&mut s, &m, &xb, batch, &res, &res, &nwb, eps, cfg).unwrap_err();
        assert!(e.to_string().contains("different buffers"), "{e}");
        s.finish_and_wait().unwrap();
        let (t, got) = (t_plain.to_vec::<f32>().unwrap(), res.to_vec::<f32>().unwrap());
        for b in 0..batch {
            let row = &t[b * rows..(b + 1) * rows];
            let ms = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / rows as f64;
            let scale = 1.0 / (ms + f64::from(eps)).sqrt();
            let top =
                row.iter().zip(&nw).map(|(&v, &w)| (f64::from(v) * scale * f64::from(w)).abs()).fold(0.0, f64::max);
            for r in 0..rows {
                let add = f64::from(row[r]) * scale * f64::from(nw[r]);
                let want = f64::from(res0[b * rows + r]) + 2.0 * add;
                let g = f64::from(got[b * rows + r]);
                assert!((g - want).abs() <= 1e-5 * (top + want.abs()), "{ty:?} batch {b} row {r}: gpu {g} cpu {want}");
            }
        }
    }
    assert_clean(&dev);
}

/// `quant::linear`, the one entry, against an f64 CPU reference for every epilogue, with
/// and without the pre-norm, on mat-vec rows (1 and 3) and mat-mat rows (9, with the
/// mat-mat from 8): Q4_0 (the integer-dot kernels where the device has them) and Q4_K
/// (the block kernels). Tolerance: 2 % of Σ|xₙ·w| per output (x, without outliers, is
/// quantized to Q8_1 or rounded to f16 on the integer-dot and mat-mat paths), carried
/// through the activation and the post-norm
/// (its scale 1 / rms of the product); a missing add, norm or gate is off by O(1). One
/// dispatch where the mat-vec folds the norm and the epilogue.
#[test]
fn linear_matches_cpu_for_every_epilogue_and_path() {
    let dev = device();
    let (k, n, eps) = (256usize, 24usize, 1e-5f32);
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let opts = quant::LinearOptions { mat_mat_from: 8 };
    let mut bad = Vec::new();
    for ty in [GgmlType::Q4_0, GgmlType::Q4_K] {
        for ep_kind in 0..4 {
            let rows = if ep_kind == 2 { 2 * n } else { n };
            let bytes = encode(ty, &weights(rows, k, 41 + ep_kind as u64));
            let w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
            let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
            for (t, norm) in [(1usize, true), (1, false), (3, true), (3, false), (9, true), (9, false)] {
                // No outliers in x: an outlier sets its Q8_1 block's step (the integer-dot and
                // int8 paths), which the bound below does not cover.
                let x: Vec<f32> = (0..t * k).map(|i| 2.0 * ((i * 37 + t) as f32 * 0.173).sin()).collect();
                let nw: Vec<f32> = weights(1, k, 51).iter().map(|v| 1.0 + v).collect();
                let pw: Vec<f32> = weights(1, n, 52).iter().map(|v| 1.0 + 0.5 * v).collect();
                let y0 = weights(t, n, 53);
                let (xb, nwb, pwb) = (dev.upload(&x).unwrap(), dev.upload(&nw).unwrap(), dev.upload(&pw).unwrap());
                let yb = dev.upload(&y0).unwrap();
                let ep = match ep_kind {
                    0 => quant::LinearEpilogue::Store,
                    1 => quant::LinearEpilogue::Add,
                    2 => quant::LinearEpilogue::Glu(GluActivation::Silu),
                    _ => quant::LinearEpilogue::NormAdd { weight: &pwb, eps },
                };
                let pre = norm.then_some(quant::PreNorm { weight: &nwb, eps });
                let mut s = Stream::new(&dev).unwrap();
                let d0 = s.stats().dispatches;
                quant::linear(&mut s, &m, &xb, t, pre, &yb, ep, &opts).unwrap();
                let dispatches = s.stats().dispatches - d0;
                s.finish_and_wait().unwrap();
                let got: Vec<f32> = yb.to_vec().unwrap();
                let cfg = vkml_ops::tuning::mat_vec_config(dev.caps());
                let one_pass = t == 1
                    && match ep_kind {
                        3 => !norm && quant::mat_vec_fuses_norm_add(dev.caps(), &m, 1, &cfg),
                        _ => {
                            !norm
                                || quant::mat_vec_fuses_norm(dev.caps(), &m, &cfg)
                                || quant::dot_quantizes_x(dev.caps(), &m, 1, &cfg)
                        }
                    };
                assert!(!one_pass || dispatches == 1, "{ty:?} ep {ep_kind} t {t}: {dispatches} dispatches");
                for b in 0..t {
                    let xr = &x[b * k..(b + 1) * k];
                    let ms = xr.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / k as f64;
                    let xn: Vec<f64> =
                        (0..k)
                            .map(|j| {
                                if norm {
                                    xr[j] as f64 / (ms + eps as f64).sqrt() * nw[j] as f64
                                } else {
                                    xr[j] as f64
                                }
                            })
                            .collect();
                    let dot = |r: usize| (0..k).map(|j| xn[j] * w[r * k + j] as f64).sum::<f64>();
                    let mag = |r: usize| (0..k).map(|j| (xn[j] * w[r * k + j] as f64).abs()).sum::<f64>();
                    let p: Vec<f64> = (0..rows).map(dot).collect();
                    let prms = (p.iter().map(|v| v * v).sum::<f64>() / n as f64 + eps as f64).sqrt();
                    for r in 0..n {
                        let (want, tol) = match ep_kind {
                            0 => (p[r], 0.02 * mag(r)),
                            1 => (y0[b * n + r] as f64 + p[r], 0.02 * mag(r)),
                            2 => (silu(p[r]) * p[n + r], 0.02 * (mag(r) * p[n + r].abs() + mag(n + r) * p[r].abs())),
                            _ => {
                                let big = (0..n).map(mag).fold(0.0, f64::max);
                                (y0[b * n + r] as f64 + p[r] / prms * pw[r] as f64, 0.04 * big / prms * 1.5)
                            }
                        };
                        let g = got[b * n + r] as f64;
                        if (g - want).abs() > tol + 1e-4 {
                            bad.push(format!(
                                "{ty:?} ep {ep_kind} t {t} norm {norm} [{b}, {r}]: {g} vs {want} (tol {tol})"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} of the outputs off:\n{}", bad.len(), bad[..bad.len().min(40)].join("\n"));
    assert_clean(&dev);
}

/// `MatMatOptions::x_f16`: on the float cooperative-matrix path, an x given as f16 (the
/// CPU's rounding to nearest even) gives bit-identical products to the f32 x the call
/// converts itself (where the device has the path; lavapipe has not); on the scalar path
/// it is an error naming it, and a short f16 x is one too.
#[test]
fn mat_mat_f16_x_equals_converted_x() {
    let dev = device();
    let (rows, k, n_tok) = (128usize, 512usize, 40usize);
    let bytes = encode(GgmlType::Q4_0, &weights(rows, k, 71));
    let m = QMatrix::upload(&dev, GgmlType::Q4_0, rows, k, &bytes).unwrap();
    let x = weights(n_tok, k, 72);
    let x16: Vec<u16> = x.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    let (xb, x16b) = (dev.upload(&x).unwrap(), dev.upload(&x16).unwrap());
    let y = dev.alloc(4 * (n_tok * rows) as u64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let scalar = MatMatOptions { x_f16: true, ..MatMatOptions::new(MatMatPath::Scalar) };
    let e = quant::mat_mat_with(&mut s, &m, &x16b, n_tok, &y, scalar).unwrap_err().to_string();
    assert!(e.contains("Scalar reads f32 x"), "{e}");
    let path = MatMatPath::best(dev.caps(), &m);
    if !path.reads_f16_x() {
        eprintln!("no float cooperative-matrix path on {}: f16 x not run", dev.caps().name);
        return;
    }
    let short = dev.upload(&x16[..x16.len() - 2]).unwrap();
    let opts = |x_f16| MatMatOptions { x_f16, ..MatMatOptions::new(path) };
    let e = quant::mat_mat_with(&mut s, &m, &short, n_tok, &y, opts(true)).unwrap_err().to_string();
    assert!(e.contains("need f16 x of"), "{e}");
    let y2 = dev.alloc(4 * (n_tok * rows) as u64, MemoryKind::DeviceLocal).unwrap();
    quant::mat_mat_with(&mut s, &m, &xb, n_tok, &y, opts(false)).unwrap();
    quant::mat_mat_with(&mut s, &m, &x16b, n_tok, &y2, opts(true)).unwrap();
    s.finish_and_wait().unwrap();
    let (a, b): (Vec<f32>, Vec<f32>) = (y.to_vec().unwrap(), y2.to_vec().unwrap());
    assert_eq!(a, b);
    assert!(a.iter().any(|&v| v != 0.0));
    assert_clean(&dev);
}

/// The soft-capping epilogue (Gemma 2's head: `MatVecEpilogue::Softcap`, and
/// `LinearEpilogue::Softcap` behind a norm, through the mat-vec and the mat-mat) gives the
/// bits of the product followed by `elementwise::softcap`, on one part and on five, on
/// the device's launch and the per-element kernel; the cap bites (half the largest logit).
#[test]
fn softcap_epilogue_equals_softcap_after_the_product() {
    use vkml_ops::elementwise::{self, View};
    let dev = device();
    let opts = quant::LinearOptions::new(dev.caps());
    let configs = [vkml_ops::tuning::mat_vec_config(dev.caps()), mat_vec_configs(&dev)[0]];
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F16] {
        let bs = ty.block_size().max(32);
        let (rows, k) = (300, 2 * bs);
        let bytes = encode(ty, &weights(rows, k, 31));
        let row_bytes = (bytes.len() / rows) as u64;
        let whole = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        let split = QMatrix::upload_in_parts(&dev, ty, rows, k, &bytes, 70 * row_bytes).unwrap();
        let nw: Vec<f32> = weights(1, k, 32).iter().map(|v| 1.0 + 0.5 * v).collect();
        let nwb = dev.upload(&nw).unwrap();
        for m in [&whole, &split] {
            for t in [1usize, 3, 5] {
                // Five rows through the mat-mat (lavapipe's default never takes it).
                let opts = if t == 5 { quant::LinearOptions { mat_mat_from: 4 } } else { opts };
                let x = weights(t, k, 33 + t as u64);
                let xb = dev.upload(&x).unwrap();
                let plain = dev.alloc(4 * (t * rows) as u64, MemoryKind::DeviceLocal).unwrap();
                let mut s = Stream::new(&dev).unwrap();
                quant::mat_vec_with(&mut s, m, &xb, t, &plain, configs[0]).unwrap();
                s.finish_and_wait().unwrap();
                let amax = plain.to_vec::<f32>().unwrap().iter().fold(0f32, |a, v| a.max(v.abs()));
                let cap = 0.5 * amax;
                let strides = [rows, 1];
                let capped = |s: &mut Stream, y: &vkml_hal::Buffer| {
                    let out = dev.alloc(4 * (t * rows) as u64, MemoryKind::DeviceLocal).unwrap();
                    let view = View { buffer: y, offset: 0, strides: &strides };
                    elementwise::softcap(s, vkml_ops::Dtype::F32, &[t, rows], view, cap, &out).unwrap();
                    out
                };
                let alloc = || dev.alloc(4 * (t * rows) as u64, MemoryKind::DeviceLocal).unwrap();
                let mut s = Stream::new(&dev).unwrap();
                let mut pairs = Vec::new();
                if t < opts.mat_mat_from {
                    for cfg in configs {
                        let (y, fused) = (alloc(), alloc());
                        quant::mat_vec_with(&mut s, m, &xb, t, &y, cfg).unwrap();
                        quant::mat_vec_fused(&mut s, m, &xb, t, &fused, cfg, MatVecEpilogue::Softcap(cap)).unwrap();
                        pairs.push((format!("mat_vec {cfg:?}"), capped(&mut s, &y), fused));
                    }
                }
                let norm = Some(quant::PreNorm { weight: &nwb, eps: 1e-6 });
                let (y, fused) = (alloc(), alloc());
                quant::linear(&mut s, m, &xb, t, norm, &y, quant::LinearEpilogue::Store, &opts).unwrap();
                quant::linear(&mut s, m, &xb, t, norm, &fused, quant::LinearEpilogue::Softcap(cap), &opts).unwrap();
                pairs.push(("linear".into(), capped(&mut s, &y), fused));
                s.finish_and_wait().unwrap();
                for (what, want, got) in pairs {
                    let (want, got) = (want.to_vec::<f32>().unwrap(), got.to_vec::<f32>().unwrap());
                    let what = format!("{ty:?}, {} parts, t {t}, {what}", m.parts().len());
                    assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}");
                    assert!(got.iter().all(|v| v.abs() <= cap), "{what}: capped at {cap}");
                }
            }
        }
    }
    assert_clean(&dev);
}

/// Records what `quant::glu_down` must equal: `linear` with the gated epilogue into a
/// scratch of `t x rows / 2`, then `linear` of that with the `Add` epilogue into `acc`.
#[allow(clippy::too_many_arguments)]
fn glu_then_down(
    s: &mut Stream,
    gu: &QMatrix,
    down: &QMatrix,
    act: GluActivation,
    x: &vkml_hal::Buffer,
    t: usize,
    norm: Option<quant::PreNorm<'_>>,
    acc: &vkml_hal::Buffer,
    opts: &quant::LinearOptions,
) {
    let g = s.device().alloc(4 * (t * gu.rows() / 2) as u64, MemoryKind::DeviceLocal).unwrap();
    quant::linear(s, gu, x, t, norm, &g, quant::LinearEpilogue::Glu(act), opts).unwrap();
    quant::linear(s, down, &g, t, None, acc, quant::LinearEpilogue::Add, opts).unwrap();
}

/// The gated products written as Q8_1 by their own mat-vec (`MatVecEpilogue::GluQ8_1`) are
/// the blocks `quantize_q8_1` makes of the f32 products, and `quant::glu_down` (gate|up
/// writing Q8_1, the down mat-vec reading it) gives the bits of `linear` with `Glu` then
/// with `Add` (whose down mat-vec quantizes the same products itself): with and without the
/// norm, rows / 2 of whole and partial workgroups, each integer-dot type.
#[test]
fn q8_1_gated_products_feed_the_down_projection_unchanged() {
    // The integer-dot choice as on a GPU that accelerates it (lavapipe runs the kernels, it
    // does not report them accelerated).
    let validation = std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0");
    let inst = Instance::new(&InstanceOptions { validation }).unwrap();
    let mut adapter = inst.select(&DeviceSelector::from_env()).unwrap();
    adapter.caps.integer_dot.packed_4x8_signed_accelerated = adapter.caps.integer_dot.supported;
    let dev = Device::from_adapter(&inst, &adapter, Default::default()).unwrap();
    let cfg = vkml_ops::tuning::mat_vec_config(dev.caps());
    let opts = quant::LinearOptions::new(dev.caps());
    for &ty in quant::DOT_TYPES {
        for (n, k) in [(96usize, 256usize), (256, 128)] {
            let gu_bytes = encode(ty, &weights(2 * n, k, 41));
            let down_bytes = encode(ty, &weights(k, n, 42));
            let gu = QMatrix::upload(&dev, ty, 2 * n, k, &gu_bytes).unwrap();
            let down = QMatrix::upload(&dev, ty, k, n, &down_bytes).unwrap();
            if !dev.caps().integer_dot.supported {
                eprintln!("skipped {ty:?}: no integer dot products on this device");
                continue;
            }
            assert!(quant::glu_writes_q8_1(dev.caps(), &gu, &cfg), "{ty:?} n {n}: Q8_1 gated products");
            assert!(quant::mat_vec_uses_q8_1(dev.caps(), &down, &cfg), "{ty:?}: a down projection on Q8_1");
            let x = weights(1, k, 43);
            let nw: Vec<f32> = weights(1, k, 44).iter().map(|v| 1.0 + 0.5 * v).collect();
            let (xb, nwb) = (dev.upload(&x).unwrap(), dev.upload(&nw).unwrap());
            let act = GluActivation::Silu;
            // The Q8_1 products against quantize_q8_1 of the f32 products.
            let mut s = Stream::new(&dev).unwrap();
            let (g, gq, q) = (
                dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap(),
                dev.alloc(36 * (n / 32) as u64, MemoryKind::DeviceLocal).unwrap(),
                dev.alloc(36 * (n / 32) as u64, MemoryKind::DeviceLocal).unwrap(),
            );
            quant::mat_vec_fused(&mut s, &gu, &xb, 1, &g, cfg, MatVecEpilogue::Glu(act)).unwrap();
            quant::mat_vec_fused(&mut s, &gu, &xb, 1, &gq, cfg, MatVecEpilogue::GluQ8_1(act)).unwrap();
            quant::quantize_q8_1(&mut s, &g, n / 32, &q).unwrap();
            s.finish_and_wait().unwrap();
            assert_eq!(gq.to_vec::<u32>().unwrap(), q.to_vec::<u32>().unwrap(), "{ty:?} n {n}: Q8_1 products");
            for norm in [None, Some(quant::PreNorm { weight: &nwb, eps: 1e-5 })] {
                let y0 = weights(1, k, 45);
                let (fused, composed) = (dev.upload(&y0).unwrap(), dev.upload(&y0).unwrap());
                let mut s = Stream::new(&dev).unwrap();
                quant::glu_down(&mut s, &gu, &down, act, &xb, 1, norm, &fused, &opts).unwrap();
                glu_then_down(&mut s, &gu, &down, act, &xb, 1, norm, &composed, &opts);
                s.finish_and_wait().unwrap();
                let (f, c) = (fused.to_vec::<f32>().unwrap(), composed.to_vec::<f32>().unwrap());
                assert!(
                    f.iter().zip(&c).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{ty:?} n {n} norm {}: glu_down against linear + linear",
                    norm.is_some()
                );
                assert!(f.iter().zip(&y0).any(|(a, b)| a != b), "the residual changed");
            }
            // The residual stream as both input and accumulator.
            let (xa, xc) = (dev.upload(&x).unwrap(), dev.upload(&x).unwrap());
            let mut s = Stream::new(&dev).unwrap();
            quant::glu_down(&mut s, &gu, &down, act, &xa, 1, None, &xa, &opts).unwrap();
            glu_then_down(&mut s, &gu, &down, act, &xc, 1, None, &xc, &opts);
            s.finish_and_wait().unwrap();
            assert_eq!(xa.to_vec::<u32>().unwrap(), xc.to_vec::<u32>().unwrap(), "{ty:?} n {n}: in place");
        }
    }
    // Prompts: from mat_mat_from rows on, the down mat-mat reading the products as f16
    // written by glu_halves_f16 where its path reads f16 x (the tensor-core paths; lavapipe
    // runs the scalar one), the bits of the two linear calls either way.
    let prompt = quant::LinearOptions { mat_mat_from: 9 };
    for ty in [GgmlType::Q4_0, GgmlType::Q4_K] {
        let (n, k, t) = (256usize, 256usize, 12usize);
        let gu = QMatrix::upload(&dev, ty, 2 * n, k, &encode(ty, &weights(2 * n, k, 51))).unwrap();
        let down = QMatrix::upload(&dev, ty, k, n, &encode(ty, &weights(k, n, 52))).unwrap();
        let x = weights(t, k, 53);
        let nw: Vec<f32> = weights(1, k, 54).iter().map(|v| 1.0 + 0.5 * v).collect();
        let (xb, nwb) = (dev.upload(&x).unwrap(), dev.upload(&nw).unwrap());
        let norm = Some(quant::PreNorm { weight: &nwb, eps: 1e-5 });
        let (fused, composed) = (dev.upload(&x).unwrap(), dev.upload(&x).unwrap());
        let act = GluActivation::Silu;
        let mut s = Stream::new(&dev).unwrap();
        quant::glu_down(&mut s, &gu, &down, act, &xb, t, norm, &fused, &prompt).unwrap();
        glu_then_down(&mut s, &gu, &down, act, &xb, t, norm, &composed, &prompt);
        s.finish_and_wait().unwrap();
        assert_eq!(fused.to_vec::<u32>().unwrap(), composed.to_vec::<u32>().unwrap(), "{ty:?}: prompt glu_down");
    }
    // Matrices that do not chain.
    let m = QMatrix::upload(&dev, GgmlType::Q8_0, 64, 64, &encode(GgmlType::Q8_0, &weights(64, 64, 1))).unwrap();
    let b = dev.alloc(4 * 64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let e = quant::glu_down(&mut s, &m, &m, GluActivation::Silu, &b, 1, None, &b, &opts).unwrap_err();
    assert!(e.to_string().contains("do not chain"), "{e}");
    assert_clean(&dev);
}

/// The gated products of a stacked product written as f16 (`nn::glu_halves_f16`, the x of a
/// tensor-core mat-mat) are the f32 products of `nn::glu_halves` rounded to nearest even,
/// for each activation; an odd row is refused.
#[test]
fn glu_halves_f16_is_glu_halves_rounded() {
    use vkml_ops::nn;
    let dev = device();
    let (t, n) = (5usize, 70usize);
    let both = dev.upload(&weights(t, 2 * n, 61).iter().map(|v| 3.0 * v).collect::<Vec<f32>>()).unwrap();
    for act in [GluActivation::Silu, GluActivation::Gelu, GluActivation::GeluErf, GluActivation::SwigluOai] {
        let (y32, y16) = (
            dev.alloc(4 * (t * n) as u64, MemoryKind::DeviceLocal).unwrap(),
            dev.alloc(2 * (t * n) as u64, MemoryKind::DeviceLocal).unwrap(),
        );
        let mut s = Stream::new(&dev).unwrap();
        nn::glu_halves(&mut s, act, &both, t, n, &y32).unwrap();
        nn::glu_halves_f16(&mut s, act, &both, t, n, &y16).unwrap();
        s.finish_and_wait().unwrap();
        let want: Vec<u16> = y32.to_vec::<f32>().unwrap().iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
        assert_eq!(y16.to_vec::<u16>().unwrap(), want, "{act:?}");
    }
    let y = dev.alloc(4 * 64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let e = nn::glu_halves_f16(&mut s, GluActivation::Silu, &both, 1, 3, &y).unwrap_err();
    assert!(e.to_string().contains("even"), "{e}");
    assert_clean(&dev);
}

/// The mat-mat's gated-product epilogue (`MatMatOptions::glu`: `mul_mat_q`, or
/// `mul_mat_cm` / `mul_mat_cm256` on the tensor-core path) gives the bits of the product
/// followed by `glu_halves` (f32) or `glu_halves_f16` (f16), for each activation, on whole
/// and partial tiles of rows and tokens, for types with the coalesced, the per-element
/// and the F16 decode (Q8_0 also on a grid big enough for the 256-row tile where the
/// device takes it); and those equal an f64 CPU reference to the f16 rounding of x and w.
#[test]
fn mat_mat_glu_epilogue_equals_product_then_glu() {
    use vkml_ops::nn;
    use vkml_ops::quant::MatMatGlu;
    let dev = device();
    let acts = [GluActivation::Silu, GluActivation::Gelu, GluActivation::GeluErf, GluActivation::SwigluOai];
    let glu_f64 = |a: GluActivation, v: f64, u: f64| match a {
        GluActivation::Silu | GluActivation::Gelu | GluActivation::SwigluOai => {
            let (av, uf) = glu_parts(a, v, u);
            av * uf
        }
        GluActivation::GeluErf => {
            // erf(z) = 2 / sqrt(pi) * integral of exp(-s^2) over [0, z], by Simpson's rule
            // on 2 000 intervals of [0, min(|z|, 7)] (erf(7) is 1 to 1e-22).
            let z = v / std::f64::consts::SQRT_2;
            let (b, steps) = (z.abs().min(7.0), 2000);
            let hs = b / steps as f64;
            let f = |i: usize| {
                (-(i as f64 * hs).powi(2)).exp()
                    * if i == 0 || i == steps {
                        1.0
                    } else if i % 2 == 1 {
                        4.0
                    } else {
                        2.0
                    }
            };
            let erf = z.signum() * 2.0 / std::f64::consts::PI.sqrt() * hs / 3.0 * (0..=steps).map(f).sum::<f64>();
            0.5 * v * (1.0 + erf) * u
        }
    };
    let mut cases = vec![
        (GgmlType::Q4_0, 24usize, 256usize, 9usize),
        (GgmlType::Q4_0, 200, 128, 130),
        (GgmlType::Q8_0, 200, 128, 130),
        (GgmlType::Q4_K, 72, 256, 70),
        (GgmlType::IQ4_XS, 40, 256, 20),
        (GgmlType::F16, 96, 64, 33),
    ];
    let cm = MatMatPath::best(dev.caps(), &QMatrix::upload(&dev, GgmlType::Q8_0, 2, 32, &[0; 68]).unwrap());
    if cm == MatMatPath::CoopMat {
        // 16 x 8 tiles of 256 rows by 128 tokens: mul_mat_cm256 where the device takes it.
        cases.push((GgmlType::Q8_0, 2048, 64, 1024));
    }
    for (ty, h, k, t) in cases {
        let bytes = encode(ty, &weights(2 * h, k, 81 + h as u64));
        let w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
        let m = QMatrix::upload(&dev, ty, 2 * h, k, &bytes).unwrap();
        let path = MatMatPath::best(dev.caps(), &m);
        let x: Vec<f32> = (0..t * k).map(|i| 1.5 * ((i * 29 + 7) as f32 * 0.131).sin()).collect();
        let xb = dev.upload(&x).unwrap();
        let both = dev.alloc(4 * (t * 2 * h) as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        quant::mat_mat_with(&mut s, &m, &xb, t, &both, MatMatOptions::new(path)).unwrap();
        s.finish_and_wait().unwrap();
        let f16r = |v: f32| f64::from(half::f16::from_f32(v).to_f32());
        let tensor = path != MatMatPath::Scalar;
        for act in acts {
            for y_f16 in [false, true] {
                let bytes_out = (if y_f16 { 2 } else { 4 }) * t * h;
                let (fused, composed) = (
                    dev.alloc(bytes_out as u64, MemoryKind::DeviceLocal).unwrap(),
                    dev.alloc(bytes_out as u64, MemoryKind::DeviceLocal).unwrap(),
                );
                let mut s = Stream::new(&dev).unwrap();
                let glu = Some(MatMatGlu { act, y_f16 });
                let d0 = s.stats().dispatches;
                quant::mat_mat_with(&mut s, &m, &xb, t, &fused, MatMatOptions { glu, ..MatMatOptions::new(path) })
                    .unwrap();
                let dispatches = s.stats().dispatches - d0;
                if y_f16 {
                    nn::glu_halves_f16(&mut s, act, &both, t, h, &composed).unwrap();
                } else {
                    nn::glu_halves(&mut s, act, &both, t, h, &composed).unwrap();
                }
                s.finish_and_wait().unwrap();
                // The product and its store in one kernel (the tensor-core path converts x first).
                assert_eq!(dispatches, 1 + u64::from(tensor), "{ty:?} h {h} t {t}: dispatches");
                let what = format!("{ty:?} {act:?} f16 {y_f16} h {h} k {k} t {t} on {path:?}");
                let (a, b) = (fused.to_vec::<u32>().unwrap(), composed.to_vec::<u32>().unwrap());
                let off = a.iter().zip(&b).filter(|(p, q)| p != q).count();
                assert_eq!(off, 0, "{what}: {off} of {} words differ from the product then glu", a.len());
                // The CPU: the products of the (on the tensor-core path f16-rounded) x and w.
                let got: Vec<f64> = if y_f16 {
                    let v: Vec<u16> = fused.to_vec().unwrap();
                    v.iter().map(|&b| f64::from(half::f16::from_bits(b).to_f32())).collect()
                } else {
                    fused.to_vec::<f32>().unwrap().iter().map(|&v| f64::from(v)).collect()
                };
                for n in (0..t).step_by(7) {
                    let xr: Vec<f64> =
                        x[n * k..(n + 1) * k].iter().map(|&v| if tensor { f16r(v) } else { f64::from(v) }).collect();
                    let dot = |r: usize| {
                        (0..k)
                            .map(|c| xr[c] * if tensor { f16r(w[r * k + c]) } else { f64::from(w[r * k + c]) })
                            .sum::<f64>()
                    };
                    for j in 0..h {
                        let (g, u) = (dot(j), dot(h + j));
                        let want = glu_f64(act, g, u);
                        let tol =
                            1e-4 * (1.0 + g.abs()) * (1.0 + u.abs()) + if y_f16 { want.abs() / 1024.0 } else { 0.0 };
                        let v = got[n * h + j];
                        assert!((v - want).abs() <= tol, "{what} [{n}, {j}]: gpu {v} cpu {want}");
                    }
                }
            }
        }
    }
    assert_clean(&dev);
}

/// The Q|K|V mat-mat's store with the prologue (`RopeKv::prologue`: Qwen2's QKV bias,
/// Qwen3's q/k norms) against the product then `rope_kv_append` with the same prologue: the
/// bias alone to the bit, the head norms within the rounding of their sums of squares
/// (queries 1e-5 relative to the largest, cached keys within one f16 step; values to the
/// bit), on every mat-mat path, for heads that fill a tile, share one, and (scalar kernel,
/// 128 dims) pass it (the product, then `rope_kv.comp`).
#[test]
fn mat_mat_rope_kv_prologue_equals_product_then_rope_kv_prologue() {
    use vkml_ops::attention::{self, HeadRows, KvCache, QkvPrologue, RopeKv, RopeTables};
    use vkml_ops::nn::RopeStyle;
    let dev = device();
    let upload = |v: &[f32]| dev.upload(v).unwrap();
    let wave = |n: usize, seed: f32| -> Vec<f32> { (0..n).map(|i| ((i as f32 + seed) * 0.37).sin()).collect() };
    // (type, heads, KV heads, d, tokens, pos0, cache slots)
    let mut cases = vec![
        (GgmlType::Q8_0, 4usize, 2usize, 32usize, 40usize, 3usize, 64usize),
        (GgmlType::Q4_0, 2, 1, 64, 70, 0, 80),
        (GgmlType::Q4_K, 2, 1, 128, 20, 5, 32),
    ];
    if MatMatPath::best(dev.caps(), &QMatrix::upload(&dev, GgmlType::Q8_0, 2, 32, &[0; 68]).unwrap())
        == MatMatPath::CoopMat
    {
        // 24 x 8 tiles of 256 rows: mul_mat_cm256 where the device takes it.
        cases.push((GgmlType::Q8_0, 32, 8, 128, 300, 2, 400));
    }
    for (ty, nh, nkv, d, t, pos0, ctx) in cases {
        let rows = (nh + 2 * nkv) * d;
        let k = ty.block_size().max(64);
        let m = QMatrix::upload(&dev, ty, rows, k, &encode(ty, &weights(rows, k, 7 + d as u64))).unwrap();
        let xb = upload(&wave(t * k, 1.0));
        let cos = upload(&wave((pos0 + t) * d / 2, 2.0));
        let sin = upload(&wave((pos0 + t) * d / 2, 3.0));
        let (bias, qw, kw) = (upload(&wave(rows, 4.0)), upload(&wave(d, 5.0)), upload(&wave(d, 6.0)));
        for path in mat_mat_paths(&dev) {
            for (style, with_bias, norms) in
                [(RopeStyle::Neox, true, false), (RopeStyle::Interleaved, false, true), (RopeStyle::Neox, true, true)]
            {
                let rope = RopeTables { cos: &cos, sin: &sin, positions: pos0 + t, rot: d, style };
                let prologue = QkvPrologue {
                    bias: with_bias.then_some(&bias),
                    q_norm: norms.then_some((&qw, 1e-6)),
                    k_norm: norms.then_some((&kw, 1e-5)),
                };
                let caches: Vec<KvCache> = (0..4).map(|_| KvCache::new(&dev, nkv, ctx, d).unwrap()).collect();
                let q = |_| dev.alloc(4 * (t * nh * d) as u64, MemoryKind::DeviceLocal).unwrap();
                let (qf, qc) = (q(0), q(1));
                let p = dev.alloc(4 * (t * rows) as u64, MemoryKind::DeviceLocal).unwrap();
                let fused = RopeKv { rope, n_heads: nh, pos0, caches: (&caches[0], &caches[1]), prologue };
                let mut s = Stream::new(&dev).unwrap();
                quant::mat_mat_rope_kv(&mut s, &m, &xb, t, &qf, MatMatOptions::new(path), &fused).unwrap();
                quant::mat_mat_with(&mut s, &m, &xb, t, &p, MatMatOptions::new(path)).unwrap();
                let at = |off| HeadRows { buffer: &p, off, stride: rows };
                let srcs = (at(0), at(nh * d), at((nh + nkv) * d));
                attention::rope_kv_append(&mut s, rope, srcs, nh, t, pos0, (&caches[2], &caches[3]), &qc, prologue)
                    .unwrap();
                s.finish_and_wait().unwrap();
                let what =
                    format!("{ty:?} {style:?} heads {nh}/{nkv} d {d} t {t} bias {with_bias} norms {norms} on {path:?}");
                let (got, want): (Vec<f32>, Vec<f32>) = (qf.to_vec().unwrap(), qc.to_vec().unwrap());
                let v = |i: usize| caches[i].buffer().to_vec::<u32>().unwrap();
                assert_eq!(v(1), v(3), "{what}: v cache");
                if !norms {
                    assert_eq!(got, want, "{what}: q");
                    assert_eq!(v(0), v(2), "{what}: k cache");
                    continue;
                }
                common::assert_normed_close(&what, (&got, &want), (&v(0), &v(2)));
            }
        }
    }
    assert_clean(&dev);
}

/// The Q|K|V mat-mat rotating and appending in its store (`quant::mat_mat_rope_kv`:
/// `mul_mat_q`, or `mul_mat_cm` / `mul_mat_cm256` on the tensor-core path; a head dim past
/// the tile falls back to the product then `rope_kv.comp`) gives the bits of the product
/// followed by `attention::rope_kv_append` in q_out and in both caches, for neox and
/// interleaved pairs, partial rotations, whole and partial tiles, a cache ring that wraps;
/// `quant::linear` with `LinearEpilogue::RopeKv` does too on the mat-vec rows. The rotated
/// queries equal an f64 CPU rotation of the product.
#[test]
fn mat_mat_rope_kv_equals_product_then_rope_kv() {
    use vkml_ops::attention::{self, HeadRows, KvCache, RopeKv, RopeTables};
    use vkml_ops::nn::RopeStyle;
    let dev = device();
    let tables = |positions: usize, rot: usize| {
        let (mut c, mut sn) = (Vec::new(), Vec::new());
        for p in 0..positions {
            for j in 0..rot / 2 {
                let a = p as f64 * 10000f64.powf(-2.0 * j as f64 / rot as f64);
                c.push(a.cos() as f32);
                sn.push(a.sin() as f32);
            }
        }
        (dev.upload(&c).unwrap(), dev.upload(&sn).unwrap())
    };
    // (type, heads, KV heads, d, rot, tokens, pos0, cache slots, the mat-vec rows too)
    let mut cases = vec![
        (GgmlType::Q4_0, 4usize, 2usize, 32usize, 32usize, 9usize, 5usize, 64usize),
        (GgmlType::Q8_0, 3, 1, 64, 32, 70, 3, 80),
        (GgmlType::F16, 2, 2, 64, 64, 33, 0, 40),
        (GgmlType::Q4_K, 2, 1, 128, 128, 20, 7, 32),
    ];
    let cm = MatMatPath::best(dev.caps(), &QMatrix::upload(&dev, GgmlType::Q8_0, 2, 32, &[0; 68]).unwrap());
    if cm == MatMatPath::CoopMat {
        // 24 x 8 tiles of 256 rows: mul_mat_cm256 where the device takes it.
        cases.push((GgmlType::Q8_0, 32, 8, 128, 128, 1024, 2, 1100));
    }
    for (ty, nh, nkv, d, rot, t, pos0, ctx) in cases {
        let rows = (nh + 2 * nkv) * d;
        let k = ty.block_size().max(64);
        let bytes = encode(ty, &weights(rows, k, 90 + d as u64));
        let w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
        let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
        let path = MatMatPath::best(dev.caps(), &m);
        let x: Vec<f32> = (0..t * k).map(|i| ((i * 13 + 5) as f32 * 0.071).sin()).collect();
        let xb = dev.upload(&x).unwrap();
        let (cos, sin) = tables(pos0 + t, rot);
        for style in [RopeStyle::Neox, RopeStyle::Interleaved] {
            let rope = RopeTables { cos: &cos, sin: &sin, positions: pos0 + t, rot, style };
            let caches: Vec<KvCache> = (0..4).map(|_| KvCache::new(&dev, nkv, ctx, d).unwrap()).collect();
            let (qf, qc) = (
                dev.alloc(4 * (t * nh * d) as u64, MemoryKind::DeviceLocal).unwrap(),
                dev.alloc(4 * (t * nh * d) as u64, MemoryKind::DeviceLocal).unwrap(),
            );
            let p = dev.alloc(4 * (t * rows) as u64, MemoryKind::DeviceLocal).unwrap();
            let fused =
                RopeKv { rope, n_heads: nh, pos0, caches: (&caches[0], &caches[1]), prologue: Default::default() };
            let mut s = Stream::new(&dev).unwrap();
            quant::mat_mat_rope_kv(&mut s, &m, &xb, t, &qf, MatMatOptions::new(path), &fused).unwrap();
            // In the store: one dispatch (the tensor-core path converts x first); a head
            // past the scalar kernel's 64-row tile: the product, then rope_kv.comp.
            let tensor = path != MatMatPath::Scalar;
            let folds = d <= if tensor { 128 } else { 64 };
            assert_eq!(s.stats().dispatches, u64::from(tensor) + if folds { 1 } else { 2 }, "{ty:?} d {d}: dispatches");
            quant::mat_mat_with(&mut s, &m, &xb, t, &p, MatMatOptions::new(path)).unwrap();
            let at = |off| HeadRows { buffer: &p, off, stride: rows };
            let srcs = (at(0), at(nh * d), at((nh + nkv) * d));
            attention::rope_kv_append(
                &mut s,
                rope,
                srcs,
                nh,
                t,
                pos0,
                (&caches[2], &caches[3]),
                &qc,
                Default::default(),
            )
            .unwrap();
            s.finish_and_wait().unwrap();
            let what = format!("{ty:?} {style:?} heads {nh}/{nkv} d {d} rot {rot} t {t} on {path:?}");
            assert_eq!(qf.to_vec::<u32>().unwrap(), qc.to_vec::<u32>().unwrap(), "{what}: q");
            for (a, b, side) in [(0, 2, "k"), (1, 3, "v")] {
                let (ca, cb) =
                    (caches[a].buffer().to_vec::<u32>().unwrap(), caches[b].buffer().to_vec::<u32>().unwrap());
                assert_eq!(ca, cb, "{what}: {side} cache");
                assert!(ca.iter().any(|&v| v != 0), "{what}: {side} cache written");
            }
            // The CPU: token 1's query heads, the product of (on the tensor-core path
            // f16-rounded) x and w rotated in f64.
            let r16 = |v: f32| if tensor { f64::from(half::f16::from_f32(v).to_f32()) } else { f64::from(v) };
            let n = 1;
            let prod = |r: usize| (0..k).map(|c| r16(x[n * k + c]) * r16(w[r * k + c])).sum::<f64>();
            let got: Vec<f32> = qf.to_vec().unwrap();
            for h in 0..nh {
                for e in 0..d {
                    let a = prod(h * d + e);
                    let want = if e >= rot {
                        a
                    } else {
                        let (j, first, partner) = match style {
                            RopeStyle::Neox => {
                                (e % (rot / 2), e < rot / 2, if e < rot / 2 { e + rot / 2 } else { e - rot / 2 })
                            }
                            RopeStyle::Interleaved => (e / 2, e % 2 == 0, e ^ 1),
                        };
                        let ang = (pos0 + n) as f64 * 10000f64.powf(-2.0 * j as f64 / rot as f64);
                        let b = prod(h * d + partner);
                        if first {
                            a * ang.cos() - b * ang.sin()
                        } else {
                            b * ang.sin() + a * ang.cos()
                        }
                    };
                    let g = f64::from(got[(n * nh + h) * d + e]);
                    assert!((g - want).abs() <= 1e-4 * (1.0 + want.abs()), "{what} head {h} e {e}: gpu {g} cpu {want}");
                }
            }
            // linear's RopeKv on mat-vec rows (3) and mat-mat rows (9): the same composition.
            for tl in [3usize, 9] {
                if tl > t {
                    continue;
                }
                let opts = quant::LinearOptions { mat_mat_from: 8 };
                let cs: Vec<KvCache> = (0..4).map(|_| KvCache::new(&dev, nkv, ctx, d).unwrap()).collect();
                let (qa, qb) = (
                    dev.alloc(4 * (tl * nh * d) as u64, MemoryKind::DeviceLocal).unwrap(),
                    dev.alloc(4 * (tl * nh * d) as u64, MemoryKind::DeviceLocal).unwrap(),
                );
                let pl = dev.alloc(4 * (tl * rows) as u64, MemoryKind::DeviceLocal).unwrap();
                let mut s = Stream::new(&dev).unwrap();
                let ep = quant::LinearEpilogue::RopeKv(RopeKv {
                    rope,
                    n_heads: nh,
                    pos0,
                    caches: (&cs[0], &cs[1]),
                    prologue: Default::default(),
                });
                quant::linear(&mut s, &m, &xb, tl, None, &qa, ep, &opts).unwrap();
                quant::linear(&mut s, &m, &xb, tl, None, &pl, quant::LinearEpilogue::Store, &opts).unwrap();
                let at = |off| HeadRows { buffer: &pl, off, stride: rows };
                let srcs = (at(0), at(nh * d), at((nh + nkv) * d));
                attention::rope_kv_append(&mut s, rope, srcs, nh, tl, pos0, (&cs[2], &cs[3]), &qb, Default::default())
                    .unwrap();
                s.finish_and_wait().unwrap();
                assert_eq!(qa.to_vec::<u32>().unwrap(), qb.to_vec::<u32>().unwrap(), "{what} linear t {tl}: q");
                assert_eq!(
                    cs[0].buffer().to_vec::<u32>().unwrap(),
                    cs[2].buffer().to_vec::<u32>().unwrap(),
                    "{what} linear t {tl}: k"
                );
                assert_eq!(
                    cs[1].buffer().to_vec::<u32>().unwrap(),
                    cs[3].buffer().to_vec::<u32>().unwrap(),
                    "{what} linear t {tl}: v"
                );
            }
        }
    }
    // A matrix that is not the heads' Q|K|V is refused with the shapes named.
    let m = QMatrix::upload(&dev, GgmlType::F16, 96, 64, &encode(GgmlType::F16, &weights(96, 64, 3))).unwrap();
    let kc = KvCache::new(&dev, 1, 8, 32).unwrap();
    let (cos, sin) = tables(8, 32);
    let rope = RopeTables { cos: &cos, sin: &sin, positions: 8, rot: 32, style: RopeStyle::Neox };
    let r = RopeKv { rope, n_heads: 2, pos0: 0, caches: (&kc, &kc), prologue: Default::default() };
    let (xb, q) = (dev.upload(&vec![0f32; 4 * 64]).unwrap(), dev.alloc(4 * 4 * 64, MemoryKind::DeviceLocal).unwrap());
    let mut s = Stream::new(&dev).unwrap();
    let e = quant::mat_mat_rope_kv(&mut s, &m, &xb, 4, &q, MatMatOptions::new(MatMatPath::Scalar), &r)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not the Q|K|V of 2 query and 1 KV heads of 32"), "{e}");
    drop(s);
    assert_clean(&dev);
}

/// `mat_vec_bias`: `y += W x + b` with the bias in the store of the block-wise and
/// integer-dot kernels (`include/mat_vec_moe.glsl`'s plain bias) or a pass after the
/// others: for every path of `mat_vec_configs` and types of each kernel family, the result
/// is, bit for bit, the residual plus the product of `mat_vec_fused` (store) and the bias,
/// added in the kernel's order (y + (p + b)) or the pass's ((y + p) + b).
#[test]
fn mat_vec_bias_adds_the_bias_in_the_store() {
    let dev = device();
    let (rows, k, batch) = (70usize, 256usize, 2usize);
    for cfg in mat_vec_configs(&dev) {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::MXFP4] {
            let bytes = encode(ty, &weights(rows, k, 31));
            let m = QMatrix::upload(&dev, ty, rows, k, &bytes).unwrap();
            let (x, y0, b) = (weights(batch, k, 32), weights(batch, rows, 33), weights(1, rows, 34));
            let (xb, bb, yb) = (dev.upload(&x).unwrap(), dev.upload(&b).unwrap(), dev.upload(&y0).unwrap());
            let p = dev.alloc(4 * (batch * rows) as u64, MemoryKind::DeviceLocal).unwrap();
            let mut s = Stream::new(&dev).unwrap();
            quant::mat_vec_fused(&mut s, &m, &xb, batch, &p, cfg, MatVecEpilogue::Store).unwrap();
            quant::mat_vec_bias(&mut s, &m, &xb, batch, &yb, &bb, cfg, MatVecEpilogue::Add).unwrap();
            // A bias with another epilogue, or too short, is refused.
            let e = quant::mat_vec_bias(&mut s, &m, &xb, batch, &p, &bb, cfg, MatVecEpilogue::Softcap(30.0));
            assert!(e.unwrap_err().to_string().contains("bias"));
            let short = dev.upload(&b[..rows / 2]).unwrap();
            assert!(quant::mat_vec_bias(&mut s, &m, &xb, batch, &p, &short, cfg, MatVecEpilogue::Add).is_err());
            s.finish_and_wait().unwrap();
            let (pv, got) = (p.to_vec::<f32>().unwrap(), yb.to_vec::<f32>().unwrap());
            for i in 0..batch * rows {
                let (y, p, b) = (y0[i], pv[i], b[i % rows]);
                let (fused, after) = (y + (p + b), (y + p) + b);
                assert!(
                    got[i].to_bits() == fused.to_bits() || got[i].to_bits() == after.to_bits(),
                    "{ty:?} {cfg:?} [{}, {}]: {} against {fused} or {after}",
                    i / rows,
                    i % rows,
                    got[i]
                );
            }
        }
    }
    assert_clean(&dev);
}

/// MXFP4's concat_rows moves blocks between its device layout's groups of 16 and quads of
/// scales (`mxfp4_copy_blocks.comp`): three matrices of 15 blocks (5 rows of 3 blocks) or
/// 7 (7 rows of 1), the second in parts of 4 rows, concatenated so that sources start
/// inside quads and groups. The result dequantizes to the sources' values, bit for bit, and reads
/// back as their blocks.
#[test]
fn mxfp4_concat_rows_moves_blocks_between_groups() {
    let dev = device();
    let ty = GgmlType::MXFP4;
    for (rows, k) in [(5usize, 96usize), (7, 32)] {
        let mats: Vec<(Vec<u8>, Vec<f32>)> = (0..3u64)
            .map(|i| {
                let bytes = encode(ty, &weights(rows, k, 71 + i));
                let w = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
                (bytes, w)
            })
            .collect();
        let up: Vec<QMatrix> = mats
            .iter()
            .enumerate()
            .map(|(i, (b, _))| {
                // (the second in parts of 4 rows, the fewest lavapipe's offset alignment allows)
                let part = if i == 1 { 4 * b.len() / rows } else { b.len() };
                QMatrix::upload_in_parts(&dev, ty, rows, k, b, part as u64 + 272).unwrap()
            })
            .collect();
        let mut s = Stream::new(&dev).unwrap();
        let cat = QMatrix::concat_rows(&mut s, &up.iter().collect::<Vec<_>>()).unwrap();
        s.finish_and_wait().unwrap();
        let want: Vec<f32> = mats.iter().flat_map(|m| m.1.iter().copied()).collect();
        let out = dev.alloc(4 * want.len() as u64, MemoryKind::DeviceLocal).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        quant::dequantize(&mut s, &cat, &out).unwrap();
        s.finish_and_wait().unwrap();
        let got = out.to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{rows}x{k}: dequantized");
        let blocks: Vec<u8> = mats.iter().flat_map(|m| m.0.iter().copied()).collect();
        assert_eq!(cat.read_blocks().unwrap(), blocks, "{rows}x{k}: blocks");
    }
}
