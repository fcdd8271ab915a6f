//! Every float matmul kernel the device can run (`vkml_ops::matmul::matmul_with`: tiled with
//! tiles of 32 and 64, the subgroup kernel, and the cooperative-matrix kernel where the
//! device has one, as on NVIDIA) against an f64 reference on the CPU, for F32, F16, BF16
//! and F64, with transposed, offset and batch-broadcast operands.
//!
//! The values are multiples of 1/8 in [-2, 2]: every product and every partial sum is then
//! exact in f32, whatever order a kernel (or a tensor core) adds in, so each kernel must
//! return the exact sum rounded once to the dtype (as a value: the sign of a zero sum may
//! differ).

mod common;

use common::device;
use half::{bf16, f16};
use proptest::prelude::*;
use vkml_hal::{Buffer, Device, MemoryKind};
use vkml_ops::matmul::{matmul, matmul_with, MatLayout};
use vkml_ops::tuning::{float_coopmat_subgroup, matmul_config, MatmulPath};
use vkml_ops::Dtype;

/// `v` uploaded as `dt` (exact: multiples of 1/8 in [-2, 2]).
fn upload(dev: &Device, dt: Dtype, v: &[f64]) -> Buffer {
    match dt {
        Dtype::F32 => dev.upload(&v.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        Dtype::F16 => dev.upload(&v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>()),
        Dtype::BF16 => dev.upload(&v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>()),
        _ => dev.upload(v),
    }
    .unwrap()
}

/// `y` read back, and the reference rounded to `dt`, both as f64 bits of the dtype value.
fn rounded(dt: Dtype, v: &[f64]) -> Vec<f64> {
    v.iter()
        .map(|&x| match dt {
            Dtype::F32 => f64::from(x as f32),
            Dtype::F16 => f16::from_f64(x).to_f64(),
            Dtype::BF16 => bf16::from_f64(x).to_f64(),
            _ => x,
        })
        .collect()
}

fn download(dt: Dtype, b: &Buffer) -> Vec<f64> {
    match dt {
        Dtype::F32 => b.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect(),
        Dtype::F16 => b.to_vec::<f16>().unwrap().into_iter().map(|x| x.to_f64()).collect(),
        Dtype::BF16 => b.to_vec::<bf16>().unwrap().into_iter().map(|x| x.to_f64()).collect(),
        _ => b.to_vec::<f64>().unwrap(),
    }
}

/// The paths to test on this device for `dt`, labelled.
fn paths(dev: &Device, dt: Dtype) -> Vec<MatmulPath> {
    let caps = dev.caps();
    let mut v = vec![MatmulPath::Tiled { tile: 32 }, MatmulPath::Tiled { tile: 64 }];
    if let MatmulPath::Subgroup { workgroup } = matmul_config(caps, Dtype::F32, 1) {
        if dt != Dtype::F64 {
            v.push(MatmulPath::Subgroup { workgroup });
        }
    }
    if let Some((_, require)) = float_coopmat_subgroup(caps, dt) {
        v.push(MatmulPath::CoopMat { require_subgroup_size: require });
    }
    v
}

/// One operand `[batch, rows, cols]`: values, layout (maybe transposed, offset, batch
/// broadcast) and the element accessor.
struct Operand {
    data: Vec<f64>,
    l: MatLayout,
}

impl Operand {
    fn new(batch: usize, rows: usize, cols: usize, transposed: bool, bcast: bool, off: usize, seed: &mut u64) -> Self {
        let nb = if bcast { 1 } else { batch };
        let data = (0..off + nb * rows * cols)
            .map(|_| {
                *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((*seed >> 33) % 33) as f64 / 8.0 - 2.0
            })
            .collect();
        let (row, col) = if transposed { (1, rows) } else { (cols, 1) };
        let l = MatLayout { offset: off, batch: if bcast { 0 } else { rows * cols }, row, col };
        Operand { data, l }
    }

    fn at(&self, b: usize, r: usize, c: usize) -> f64 {
        self.data[self.l.offset + b * self.l.batch + r * self.l.row + c * self.l.col]
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_path_is_exact(
        batch in 1usize..4,
        m in prop_oneof![1usize..10, 10usize..140],
        n in 1usize..140,
        k in 1usize..70,
        flags in 0u8..64,
        seed in any::<u64>(),
    ) {
        // flags & 32: dims in multiples of 8 and offsets 0 or 8, the layouts of the
        // 16-byte-load cooperative-matrix kernel (matmul_cm4.comp) where the device has it.
        let aligned = flags & 32 != 0;
        let (m, n, k) = if aligned { (m.next_multiple_of(8), n.next_multiple_of(8), k.next_multiple_of(8)) } else { (m, n, k) };
        let (a_off, b_off) = if aligned { (8 * ((flags >> 3) & 1) as usize, 0) } else { ((flags >> 3) as usize % 3, 1) };
        let dev = device();
        let t = &dev.caps().types;
        let mut dts = vec![Dtype::F32, Dtype::F16, Dtype::BF16];
        if t.float64 && t.int64 {
            dts.push(Dtype::F64);
        }
        let mut seed = seed | 1;
        for dt in dts {
            let a = Operand::new(batch, m, k, flags & 1 != 0, batch > 1 && flags & 4 != 0, a_off, &mut seed);
            let b = Operand::new(batch, k, n, flags & 2 != 0, batch > 1 && flags & 16 != 0, b_off, &mut seed);
            let mut want = vec![0.0; batch * m * n];
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        want[(bi * m + i) * n + j] = (0..k).map(|kk| a.at(bi, i, kk) * b.at(bi, kk, j)).sum();
                    }
                }
            }
            let want = rounded(dt, &want);
            let (ab, bb) = (upload(dev, dt, &a.data), upload(dev, dt, &b.data));
            for path in paths(dev, dt) {
                let y = dev.alloc((batch * m * n * dt.size()) as u64, MemoryKind::DeviceLocal).unwrap();
                let mut s = vkml_hal::Stream::new(dev).unwrap();
                matmul_with(&mut s, path, dt, (batch, m, n, k), &ab, a.l, &bb, b.l, &y).unwrap();
                s.finish_and_wait().unwrap();
                let got = download(dt, &y);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // Values, not bits: a sum of -0 products is +0 from a zero accumulator.
                    prop_assert!(g == w, "{:?} {:?} {}x{}x{}x{} a {:?} b {:?} at {}: {} vs {}",
                        path, dt, batch, m, n, k, a.l, b.l, i, g, w);
                }
            }
        }
    }
}

/// The default choice runs too (whichever path the device's table gives), and a path the
/// device cannot run is an error naming it, not a wrong answer.
#[test]
fn default_choice_and_refusals() {
    let dev = device();
    let mut seed = 5;
    let a = Operand::new(1, 3, 5, false, false, 0, &mut seed);
    let b = Operand::new(1, 5, 2, true, false, 0, &mut seed);
    let (ab, bb) = (upload(dev, Dtype::F32, &a.data), upload(dev, Dtype::F32, &b.data));
    let y = dev.alloc(4 * 6, MemoryKind::DeviceLocal).unwrap();
    let mut s = vkml_hal::Stream::new(dev).unwrap();
    matmul(&mut s, Dtype::F32, (1, 3, 2, 5), &ab, a.l, &bb, b.l, &y).unwrap();
    s.finish_and_wait().unwrap();
    let got = download(Dtype::F32, &y);
    for i in 0..3 {
        for j in 0..2 {
            let want: f64 = (0..5).map(|kk| a.at(0, i, kk) * b.at(0, kk, j)).sum();
            assert_eq!(got[i * 2 + j], want, "({i}, {j})");
        }
    }
    let bad = matmul_with(&mut s, MatmulPath::Tiled { tile: 30 }, Dtype::F32, (1, 3, 2, 5), &ab, a.l, &bb, b.l, &y);
    assert!(bad.unwrap_err().to_string().contains("tile 30"));
    // F32 has no cooperative-matrix kernel on any device.
    let path = MatmulPath::CoopMat { require_subgroup_size: false };
    let err = matmul_with(&mut s, path, Dtype::F32, (1, 3, 2, 5), &ab, a.l, &bb, b.l, &y).unwrap_err();
    assert!(err.to_string().contains("cooperative-matrix"), "{err}");
    let path = MatmulPath::Subgroup { workgroup: 0 };
    let err = matmul_with(&mut s, path, Dtype::F32, (1, 3, 2, 5), &ab, a.l, &bb, b.l, &y).unwrap_err();
    assert!(err.to_string().contains("subgroup"), "{err}");
}
