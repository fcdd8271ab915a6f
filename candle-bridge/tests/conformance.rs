//! Conformance of `VulkanStorage` against candle's own `CpuStorage`: proptest drives each
//! `BackendStorage` method with random shapes, strided / permuted / narrowed / broadcast
//! layouts with offsets, and dtypes, runs candle-core's CPU implementation of the same
//! trait method on the same inputs, and compares. Exact (bit for bit, NaN for NaN) for
//! copies, conversions, selection, indexing, comparisons, min / max / arg*, integer
//! arithmetic and f32 / f16 / bf16 add, sub, mul; within the tolerances listed in
//! ARCHITECTURE.md ("Conformance") for the rest.

mod common;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{CmpOp, ReduceOp};
use candle_core::{CpuStorage, DType, Layout, Shape};
use half::{bf16, f16};
use proptest::prelude::*;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};

const CASES: u32 = 24;

fn dev() -> &'static VulkanDevice {
    static DEV: std::sync::OnceLock<VulkanDevice> = std::sync::OnceLock::new();
    DEV.get_or_init(common::vulkan_device)
}

/// The dtypes the device has (F64 needs shaderFloat64 and shaderInt64).
fn dtypes() -> Vec<DType> {
    let t = &dev().hal().caps().types;
    let mut v = vec![DType::F32, DType::F16, DType::BF16, DType::U8, DType::U32, DType::I64];
    if t.float64 && t.int64 {
        v.push(DType::F64);
    }
    v
}

fn float_dtypes() -> Vec<DType> {
    dtypes().into_iter().filter(|d| d.is_float()).collect()
}

/// xorshift64*: deterministic values from a proptest seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` values of `dt`: floats in [-4, 4) (or, with `ties`, multiples of 0.5 in [-2, 2],
/// so that comparisons and extremes see equal values), integers in [0, 8) for U8 / U32 and
/// [-8, 8) for I64 (small, so that sums and products stay exact where candle's CPU
/// arithmetic would panic on overflow).
fn values(dt: DType, n: usize, rng: &mut Rng, ties: bool) -> CpuStorage {
    let f = |rng: &mut Rng| if ties { (rng.below(9) as f64 - 4.0) * 0.5 } else { rng.unit() * 8.0 - 4.0 };
    match dt {
        DType::F32 => CpuStorage::F32((0..n).map(|_| f(rng) as f32).collect()),
        DType::F64 => CpuStorage::F64((0..n).map(|_| f(rng)).collect()),
        DType::F16 => CpuStorage::F16((0..n).map(|_| f16::from_f64(f(rng))).collect()),
        DType::BF16 => CpuStorage::BF16((0..n).map(|_| bf16::from_f64(f(rng))).collect()),
        DType::U8 => CpuStorage::U8((0..n).map(|_| rng.below(8) as u8).collect()),
        DType::U32 => CpuStorage::U32((0..n).map(|_| rng.below(8) as u32).collect()),
        DType::I64 => CpuStorage::I64((0..n).map(|_| rng.below(16) as i64 - 8).collect()),
        other => panic!("no generator for {other:?}"),
    }
}

/// A random layout with dims `shape` over a storage of the returned length: a random
/// permutation of a contiguous base with an offset, one dim possibly narrowed, and (when
/// `broadcast`) some dims broadcast from size 1.
fn layout(shape: &[usize], rng: &mut Rng, broadcast: bool) -> (Layout, usize) {
    let r = shape.len();
    let bshape: Vec<usize> =
        shape.iter().map(|&d| if broadcast && d > 1 && rng.below(4) == 0 { 1 } else { d }).collect();
    let mut perm: Vec<usize> = (0..r).collect();
    for i in (1..r).rev() {
        perm.swap(i, rng.below(i + 1));
    }
    let mut base: Vec<usize> = perm.iter().map(|&p| bshape[p]).collect();
    let narrow = if r > 0 && rng.below(3) == 0 { Some((rng.below(r), 1 + rng.below(2), rng.below(2))) } else { None };
    if let Some((k, extra, _)) = narrow {
        base[k] += extra;
    }
    let offset = rng.below(3);
    let len = offset + base.iter().product::<usize>();
    let mut l = Layout::contiguous_with_offset(Shape::from(base.clone()), offset);
    if let Some((k, extra, start)) = narrow {
        l = l.narrow(k, start.min(extra), base[k] - extra).unwrap();
    }
    let mut inv = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let l = l.permute(&inv).unwrap();
    assert_eq!(l.dims(), &bshape[..]);
    let l = if broadcast { l.broadcast_as(shape).unwrap() } else { l };
    (l, len)
}

/// One input: CPU and Vulkan storages of the same values, and a layout over them.
struct Input {
    cpu: CpuStorage,
    gpu: VulkanStorage,
    l: Layout,
}

fn input(dt: DType, shape: &[usize], rng: &mut Rng, broadcast: bool, ties: bool) -> Input {
    let (l, len) = layout(shape, rng, broadcast);
    let cpu = values(dt, len, rng, ties);
    let gpu = dev().storage_from_cpu_storage(&cpu).unwrap();
    Input { cpu, gpu, l }
}

/// Elements as (f64 value, bits) for comparison.
fn elems(c: &CpuStorage) -> Vec<(f64, u64)> {
    match c {
        CpuStorage::F32(v) => v.iter().map(|x| (f64::from(*x), u64::from(x.to_bits()))).collect(),
        CpuStorage::F64(v) => v.iter().map(|x| (*x, x.to_bits())).collect(),
        CpuStorage::F16(v) => v.iter().map(|x| (x.to_f64(), u64::from(x.to_bits()))).collect(),
        CpuStorage::BF16(v) => v.iter().map(|x| (x.to_f64(), u64::from(x.to_bits()))).collect(),
        CpuStorage::U8(v) => v.iter().map(|x| (f64::from(*x), u64::from(*x))).collect(),
        CpuStorage::U32(v) => v.iter().map(|x| (f64::from(*x), u64::from(*x))).collect(),
        CpuStorage::I64(v) => v.iter().map(|x| (*x as f64, *x as u64)).collect(),
        other => panic!("unexpected {:?}", other.dtype()),
    }
}

/// Compares the GPU result to the CPU one: bit for bit when `tol` is None (any NaN equals
/// any NaN), else |gpu - cpu| <= tol(i, cpu value).
fn check(what: &str, cpu: &CpuStorage, gpu: &VulkanStorage, tol: Option<&dyn Fn(usize, f64) -> f64>) {
    let g = gpu.to_cpu_storage().unwrap();
    assert_eq!(cpu.dtype(), g.dtype(), "{what}: dtype");
    let (a, b) = (elems(cpu), elems(&g));
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if x.0.is_nan() || y.0.is_nan() {
            assert!(x.0.is_nan() && y.0.is_nan(), "{what}[{i}]: cpu {} gpu {}", x.0, y.0);
            continue;
        }
        match tol {
            None => assert_eq!(x.1, y.1, "{what}[{i}]: cpu {} ({:#x}) gpu {} ({:#x})", x.0, x.1, y.0, y.1),
            Some(t) => {
                let ok = x.0 == y.0 || (x.0 - y.0).abs() <= t(i, x.0);
                assert!(ok, "{what}[{i}]: cpu {} gpu {} (tolerance {})", x.0, y.0, t(i, x.0));
            }
        }
    }
}

/// Unit roundoff of a float dtype's storage (the error of one rounding, relative).
fn eps(dt: DType) -> f64 {
    match dt {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F64 => 2f64.powi(-53),
        _ => 2f64.powi(-24),
    }
}

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..6, 0..5)
}

fn pick<T: Copy>(v: &[T], rng: &mut Rng) -> T {
    v[rng.below(v.len())]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    /// to_dtype between every pair, copy_strided_src and const_set: bit for bit.
    #[test]
    fn copies_and_conversions(shape in shape_strategy(), seed in any::<u64>()) {
        let mut rng = Rng(seed | 1);
        let dts = dtypes();
        let (src, dst) = (pick(&dts, &mut rng), pick(&dts, &mut rng));
        let x = input(src, &shape, &mut rng, false, false);
        let want = x.cpu.to_dtype(&x.l, dst).unwrap();
        check(&format!("to_dtype {src:?} -> {dst:?}"), &want, &x.gpu.to_dtype(&x.l, dst).unwrap(), None);
        // copy_strided_src into a larger destination at an offset.
        let n = x.l.shape().elem_count();
        let off = rng.below(3);
        let mut cd = values(src, n + off, &mut rng, false);
        let mut gd = dev().storage_from_cpu_storage(&cd).unwrap();
        x.cpu.copy_strided_src(&mut cd, off, &x.l).unwrap();
        x.gpu.copy_strided_src(&mut gd, off, &x.l).unwrap();
        check(&format!("copy_strided_src {src:?}"), &cd, &gd, None);
    }

    /// Every BinaryOpT on every dtype with broadcast operands.
    #[test]
    fn binary_ops(shape in shape_strategy(), seed in any::<u64>(), op in 0usize..6) {
        use candle_core::op::{Add, Div, Maximum, Minimum, Mul, Sub};
        let mut rng = Rng(seed | 1);
        let dt = pick(&dtypes(), &mut rng);
        let a = input(dt, &shape, &mut rng, true, op >= 4);
        let b = input(dt, &shape, &mut rng, true, op >= 4);
        macro_rules! both {
            ($t:ty) => {
                (
                    a.cpu.binary_impl::<$t>(&b.cpu, &a.l, &b.l).unwrap(),
                    a.gpu.binary_impl::<$t>(&b.gpu, &a.l, &b.l).unwrap(),
                )
            };
        }
        if op == 3 && !dt.is_float() {
            // Integer division by zero panics on the CPU: divide by b | 1 ... skip instead.
            return Ok(());
        }
        let (want, got) = match op {
            0 => both!(Add),
            1 => both!(Sub),
            2 => both!(Mul),
            3 => both!(Div),
            4 => both!(Maximum),
            _ => both!(Minimum),
        };
        // Division: Vulkan bounds f32 division to 2.5 ulp (f64: likewise), one more
        // rounding for the 16-bit types.
        let e = eps(dt);
        let tol = move |_: usize, v: f64| 3.0 * e * v.abs();
        check(&format!("binary {op} {dt:?}"), &want, &got, if op == 3 { Some(&tol) } else { None });
    }

    /// cmp (every CmpOp) and where_cond (every condition dtype).
    #[test]
    fn cmp_and_where(shape in shape_strategy(), seed in any::<u64>(), op in 0usize..6) {
        let mut rng = Rng(seed | 1);
        let dt = pick(&dtypes(), &mut rng);
        let a = input(dt, &shape, &mut rng, true, true);
        let b = input(dt, &shape, &mut rng, true, true);
        let c = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][op];
        let want = a.cpu.cmp(c, &b.cpu, &a.l, &b.l).unwrap();
        check(&format!("cmp {op} {dt:?}"), &want, &a.gpu.cmp(c, &b.gpu, &a.l, &b.l).unwrap(), None);
        let cdt = pick(&[DType::U8, DType::U32, DType::I64], &mut rng);
        let cond = input(cdt, &shape, &mut rng, true, false);
        let want = cond.cpu.where_cond(&cond.l, &a.cpu, &a.l, &b.cpu, &b.l).unwrap();
        let got = cond.gpu.where_cond(&cond.l, &a.gpu, &a.l, &b.gpu, &b.l).unwrap();
        check(&format!("where_cond {cdt:?} {dt:?}"), &want, &got, None);
    }

    /// Unary ops, affine and powf on the float dtypes; the integer unary forms.
    #[test]
    fn unary_ops(shape in shape_strategy(), seed in any::<u64>(), op in 0usize..12) {
        use candle_core::op::{Abs, Ceil, Exp, Floor, Gelu, Neg, Relu, Sign, Silu, Sqr, Tanh};
        let mut rng = Rng(seed | 1);
        let dt = pick(&dtypes(), &mut rng);
        let x = input(dt, &shape, &mut rng, false, false);
        if !dt.is_float() && matches!(op, 0 | 2 | 3 | 8 | 11) {
            // candle's integer todo!()s.
            return Ok(());
        }
        macro_rules! both {
            ($t:ty) => {
                (x.cpu.unary_impl::<$t>(&x.l).unwrap(), x.gpu.unary_impl::<$t>(&x.l).unwrap())
            };
        }
        let (want, got) = match op {
            // f16 / bf16 transcendental ops: the reference is candle's f32 result on the
            // widened input, rounded once (candle's own half path rounds intermediates).
            0 | 6 | 7 | 8 if matches!(dt, DType::F16 | DType::BF16) => {
                let w = x.cpu.to_dtype(&x.l, DType::F32).unwrap();
                let wl = Layout::contiguous(x.l.shape());
                let r = match op {
                    0 => w.unary_impl::<Exp>(&wl),
                    6 => w.unary_impl::<Gelu>(&wl),
                    7 => w.unary_impl::<Silu>(&wl),
                    _ => w.unary_impl::<Tanh>(&wl),
                }
                .unwrap();
                let got = match op {
                    0 => x.gpu.unary_impl::<Exp>(&x.l),
                    6 => x.gpu.unary_impl::<Gelu>(&x.l),
                    7 => x.gpu.unary_impl::<Silu>(&x.l),
                    _ => x.gpu.unary_impl::<Tanh>(&x.l),
                }
                .unwrap();
                (r.to_dtype(&wl, dt).unwrap(), got)
            }
            0 => both!(Exp),
            1 => both!(Abs),
            2 => both!(Neg),
            3 => both!(Sqr),
            4 => both!(Floor),
            5 => both!(Ceil),
            6 => both!(Gelu),
            7 => both!(Silu),
            8 => both!(Tanh),
            9 => both!(Relu),
            10 => both!(Sign),
            _ => (x.cpu.affine(&x.l, 1.5, -0.25).unwrap(), x.gpu.affine(&x.l, 1.5, -0.25).unwrap()),
        };
        // The device's exp / tanh: a few f32 ulp (relative to the value, 1e-6 absolute
        // near zero); one rounding of the stored dtype for f16 / bf16; candle's f16 / bf16
        // affine rounds the product too.
        let e = eps(dt);
        let tol = move |_: usize, v: f64| (8.0 * 2f64.powi(-24) + 2.0 * e) * v.abs() + 1e-6 + if op == 11 { 3.0 * e * 8.0 } else { 0.0 };
        let exact = !dt.is_float() || matches!(op, 1 | 2 | 3 | 4 | 5 | 9 | 10) || (op == 11 && matches!(dt, DType::F32 | DType::F64));
        check(&format!("unary {op} {dt:?}"), &want, &got, if exact { None } else { Some(&tol) });
    }

    /// reduce_op: sum over any set of dims; min / max / argmin / argmax over one dim.
    #[test]
    fn reductions(shape in prop::collection::vec(1usize..7, 1..5), seed in any::<u64>(), op in 0usize..5, big in any::<bool>()) {
        let mut rng = Rng(seed | 1);
        let dt = pick(&dtypes(), &mut rng);
        let mut shape = shape;
        if big {
            // Long reductions take the workgroup path.
            let d = rng.below(shape.len());
            shape[d] = 100 + rng.below(300);
        }
        let x = input(dt, &shape, &mut rng, false, op != 0);
        let rank = shape.len();
        let r = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::ArgMin, ReduceOp::ArgMax][op];
        let dims: Vec<usize> = if op == 0 {
            let mut d: Vec<usize> = (0..rank).filter(|_| rng.below(2) == 0).collect();
            if d.is_empty() {
                d.push(rng.below(rank));
            }
            d
        } else {
            vec![rng.below(rank)]
        };
        let want = x.cpu.reduce_op(r, &x.l, &dims).unwrap();
        let got = x.gpu.reduce_op(r, &x.l, &dims).unwrap();
        // Sums: n roundings of the partial sums (the CPU adds f16 / bf16 in half
        // precision, the GPU in f32) over values of magnitude <= 4.
        let n: usize = dims.iter().map(|&d| shape[d]).product();
        let e = eps(dt);
        let tol = move |_: usize, _: f64| 4.0 * n as f64 * e * 4.0 + 1e-9;
        let exact = op != 0 || !dt.is_float();
        check(&format!("reduce {r:?} {dt:?} over {dims:?} of {shape:?}"), &want, &got, if exact { None } else { Some(&tol) });
    }

    /// index_select, gather, scatter_set, scatter_add_set, index_add with every index dtype.
    #[test]
    fn indexing(shape in prop::collection::vec(1usize..6, 1..4), seed in any::<u64>(), n_idx in 1usize..7) {
        let mut rng = Rng(seed | 1);
        let dt = pick(&dtypes(), &mut rng);
        let idt = pick(&[DType::U8, DType::U32, DType::I64], &mut rng);
        let rank = shape.len();
        let dim = rng.below(rank);
        let d = shape[dim];
        let ids_of = |n: usize, rng: &mut Rng| -> CpuStorage {
            let v: Vec<usize> = (0..n).map(|_| rng.below(d)).collect();
            match idt {
                DType::U8 => CpuStorage::U8(v.iter().map(|&i| i as u8).collect()),
                DType::U32 => CpuStorage::U32(v.iter().map(|&i| i as u32).collect()),
                _ => CpuStorage::I64(v.iter().map(|&i| i as i64).collect()),
            }
        };
        // candle's CPU indexing wants a contiguous source (an offset is allowed).
        let x = {
            let off = rng.below(3);
            let cpu = values(dt, off + shape.iter().product::<usize>(), &mut rng, false);
            let gpu = dev().storage_from_cpu_storage(&cpu).unwrap();
            Input { cpu, gpu, l: Layout::contiguous_with_offset(shape.clone(), off) }
        };
        // index_select with 1-D ids.
        let ids = ids_of(n_idx, &mut rng);
        let gids = dev().storage_from_cpu_storage(&ids).unwrap();
        let il = Layout::contiguous(n_idx);
        let want = x.cpu.index_select(&ids, &x.l, &il, dim).unwrap();
        check(&format!("index_select {dt:?} {idt:?}"), &want, &x.gpu.index_select(&gids, &x.l, &il, dim).unwrap(), None);
        // gather with ids shaped like x but n_idx along dim.
        let mut gshape = shape.clone();
        gshape[dim] = n_idx;
        let gn: usize = gshape.iter().product();
        let gi = ids_of(gn, &mut rng);
        let ggi = dev().storage_from_cpu_storage(&gi).unwrap();
        let gl = Layout::contiguous(gshape.clone());
        let want = x.cpu.gather(&x.l, &gi, &gl, dim).unwrap();
        check(&format!("gather {dt:?} {idt:?}"), &want, &x.gpu.gather(&x.l, &ggi, &gl, dim).unwrap(), None);
        // scatter_set / scatter_add_set into a contiguous copy of x (candle's CPU wants
        // contiguous operands here).
        let src = {
            let cpu = values(dt, gn, &mut rng, false);
            let gpu = dev().storage_from_cpu_storage(&cpu).unwrap();
            Input { cpu, gpu, l: gl.clone() }
        };
        let xl = Layout::contiguous(shape.clone());
        let e = eps(dt);
        let tol = move |_: usize, v: f64| 2.0 * n_idx as f64 * e * (v.abs() + 8.0);
        for add in [false, true] {
            let mut cd = x.cpu.to_dtype(&x.l, dt).unwrap();
            let mut gd = x.gpu.to_dtype(&x.l, dt).unwrap();
            if add {
                cd.scatter_add_set(&xl, &gi, &gl, &src.cpu, &src.l, dim).unwrap();
                gd.scatter_add_set(&xl, &ggi, &gl, &src.gpu, &src.l, dim).unwrap();
            } else {
                cd.scatter_set(&xl, &gi, &gl, &src.cpu, &src.l, dim).unwrap();
                gd.scatter_set(&xl, &ggi, &gl, &src.gpu, &src.l, dim).unwrap();
            }
            let approx = add && matches!(dt, DType::F16 | DType::BF16);
            check(&format!("scatter add={add} {dt:?} {idt:?}"), &cd, &gd, if approx { Some(&tol) } else { None });
        }
        // index_add with 1-D ids and src [.., n_idx, ..].
        let want = x.cpu.index_add(&x.l, &ids, &il, &src.cpu, &src.l, dim).unwrap();
        let got = x.gpu.index_add(&x.l, &gids, &il, &src.gpu, &src.l, dim).unwrap();
        let approx = matches!(dt, DType::F16 | DType::BF16);
        check(&format!("index_add {dt:?} {idt:?}"), &want, &got, if approx { Some(&tol) } else { None });
    }

    /// Batched matmul with transposed, offset and broadcast (stride-0 batch) operands, every
    /// float dtype. The reference is candle's CPU matmul in F64 on packed copies of the
    /// inputs, rounded once to the dtype: candle-core 0.11's CPU matmul folds the batches
    /// of a transposed lhs into rows when the rhs batch is broadcast, which reads the wrong
    /// elements from the second batch on (its `b_skip == 0 && a_skip == m * k` branch), and
    /// it has no BF16 matmul.
    #[test]
    fn matmul(b in 1usize..4, m in 1usize..70, n in 1usize..70, k in 1usize..40, seed in any::<u64>()) {
        let mut rng = Rng(seed | 1);
        let dt = pick(&float_dtypes(), &mut rng);
        let operand = |rows: usize, cols: usize, rng: &mut Rng| -> Input {
            let transposed = rng.below(2) == 0;
            let bcast = b > 1 && rng.below(4) == 0;
            let off = rng.below(3);
            let (inner, outer) = if transposed { (cols, rows) } else { (rows, cols) };
            let nb = if bcast { 1 } else { b };
            let l = Layout::contiguous_with_offset((nb, inner, outer), off);
            let l = if transposed { l.transpose(1, 2).unwrap() } else { l };
            let l = if bcast { l.broadcast_as((b, rows, cols)).unwrap() } else { l };
            let cpu = values(dt, off + nb * rows * cols, rng, false);
            let gpu = dev().storage_from_cpu_storage(&cpu).unwrap();
            Input { cpu, gpu, l }
        };
        let a = operand(m, k, &mut rng);
        let bb = operand(k, n, &mut rng);
        let a64 = a.cpu.to_dtype(&a.l, DType::F64).unwrap();
        let b64 = bb.cpu.to_dtype(&bb.l, DType::F64).unwrap();
        let exact = a64
            .matmul(&b64, (b, m, n, k), &Layout::contiguous((b, m, k)), &Layout::contiguous((b, k, n)))
            .unwrap();
        let want = exact.to_dtype(&Layout::contiguous((b, m, n)), dt).unwrap();
        let got = a.gpu.matmul(&bb.gpu, (b, m, n, k), &a.l, &bb.l).unwrap();
        // k products of magnitude <= 16 summed in another order in f32 (f64 for F64),
        // then one rounding to the dtype (where the reference rounds the exact sum once).
        let acc = if dt == DType::F64 { eps(DType::F64) } else { eps(DType::F32) };
        let e = eps(dt);
        let tol = move |_: usize, v: f64| 2.0 * k as f64 * acc * 16.0 * k as f64 + 2.0 * e * v.abs() + 1e-12;
        check(&format!("matmul {dt:?} {b}x{m}x{n}x{k}"), &want, &got, Some(&tol));
    }
}

/// `c` (`dt`, laid out by `l`) as a packed F64 CPU tensor of `l`'s dims: the exact values
/// for a reference computed in f64.
fn tensor_f64(c: &CpuStorage, l: &Layout) -> candle_core::Tensor {
    let CpuStorage::F64(v) = c.to_dtype(l, DType::F64).unwrap() else { unreachable!() };
    candle_core::Tensor::from_vec(v, l.dims(), &candle_core::Device::Cpu).unwrap()
}

/// An F64 CPU tensor's values rounded once to `dt` (candle's `to_dtype`).
fn rounded(t: &candle_core::Tensor, dt: DType) -> CpuStorage {
    let v: Vec<f64> = t.flatten_all().unwrap().to_vec1().unwrap();
    let n = v.len();
    CpuStorage::F64(v).to_dtype(&Layout::contiguous(n), dt).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    /// conv1d, conv2d and both transposes with random geometry, strided inputs and every
    /// float dtype, against candle's CPU convolution in F64 rounded once to the dtype
    /// (candle's CPU has no BF16 conv1d: it goes through its matmul). The trait methods
    /// take candle's params, which only candle-core can build, so this drives
    /// `VulkanStorage::conv`, the function they call.
    #[test]
    fn convolutions(
        two_d in any::<bool>(),
        transposed in any::<bool>(),
        geom in (1usize..3, 1usize..4, 1usize..4, 1usize..4, 0usize..3, 1usize..4, 1usize..3),
        size in (1usize..8, 1usize..9),
        seed in any::<u64>(),
    ) {
        let (batch, c_in, c_out, k, pad, stride, dil) = geom;
        let mut rng = Rng(seed | 1);
        let dt = pick(&float_dtypes(), &mut rng);
        let (h, w) = if two_d { size } else { (1, size.1) };
        let kh = if two_d { 1 + rng.below(3) } else { 1 };
        let span = |k: usize| dil * (k - 1) + 1;
        // Forward: the padded input must hold the kernel. Transposed: the trimmed padding
        // must fit in (i - 1) stride (candle's CPU output-size formula subtracts it first),
        // and the output padding is below stride or dilation (PyTorch's rule).
        let fits = |i: usize, k: usize, p: usize| if transposed { (i - 1) * stride >= 2 * p } else { i + 2 * p >= span(k) };
        let pad_h = if two_d { pad } else { 0 };
        prop_assume!(fits(w, k, pad) && fits(h, kh, pad_h));
        let out_pad = if transposed { rng.below(stride.max(dil)) } else { 0 };
        let p = vkml_ops::conv::ConvParams {
            batch,
            c_in,
            c_out,
            input: [h, w],
            kernel: [kh, k],
            padding: [pad_h, pad],
            stride: [if two_d { stride } else { 1 }, stride],
            dilation: [if two_d { dil } else { 1 }, dil],
            output_padding: [if two_d { out_pad } else { 0 }, out_pad],
            transposed,
        };
        let (x_shape, w_shape): (Vec<usize>, Vec<usize>) = if two_d {
            (vec![batch, c_in, h, w], p.w_dims().to_vec())
        } else {
            let wd = p.w_dims();
            (vec![batch, c_in, w], vec![wd[0], wd[1], wd[3]])
        };
        let x = input(dt, &x_shape, &mut rng, false, false);
        let kern = input(dt, &w_shape, &mut rng, false, false);
        let (xt, kt) = (tensor_f64(&x.cpu, &x.l), tensor_f64(&kern.cpu, &kern.l));
        let want = match (two_d, transposed) {
            (false, false) => xt.conv1d(&kt, pad, stride, dil, 1),
            // Where candle's CPU conv_transpose1d would take its col2im path (padding 0,
            // dilation 1, no output padding), whose matmul folds the batches of a
            // transposed lhs (wrong from the second batch; see `matmul` above), the same
            // product through conv_transpose2d with height 1 (equal there: the height
            // gets the same zero padding and unit dilation).
            (false, true) if pad == 0 && dil == 1 && out_pad == 0 => xt
                .unsqueeze(2)
                .and_then(|x| x.conv_transpose2d(&kt.unsqueeze(2)?, 0, 0, stride, 1))
                .and_then(|y| y.squeeze(2)),
            (false, true) => xt.conv_transpose1d(&kt, pad, out_pad, stride, dil, 1),
            (true, false) => xt.conv2d(&kt, pad, stride, dil, 1),
            (true, true) => xt.conv_transpose2d(&kt, pad, out_pad, stride, dil),
        }
        .unwrap();
        let got = x.gpu.conv(&x.l, &kern.gpu, &kern.l, &p).unwrap();
        let terms = (c_in * kh * k) as f64;
        let acc = if dt == DType::F64 { eps(DType::F64) } else { eps(DType::F32) };
        let e = eps(dt);
        let tol = move |_: usize, v: f64| 2.0 * terms * acc * 16.0 * terms + 2.0 * e * v.abs() + 1e-12;
        check(&format!("conv 2d={two_d} transposed={transposed} {dt:?} {p:?}"), &rounded(&want, dt), &got, Some(&tol));
    }

    /// avg_pool2d (float dtypes) and max_pool2d (every dtype) on strided inputs: bit-exact
    /// to candle's CPU.
    #[test]
    fn pools(dims in (1usize..3, 1usize..4, 1usize..9, 1usize..9), win in (1usize..4, 1usize..4, 1usize..4, 1usize..4), seed in any::<u64>()) {
        let (b, c, h, w) = dims;
        let (kh, kw, sh, sw) = win;
        prop_assume!(kh <= h && kw <= w);
        let mut rng = Rng(seed | 1);
        let avg = rng.below(2) == 0;
        let dt = pick(&if avg { float_dtypes() } else { dtypes() }, &mut rng);
        let x = input(dt, &[b, c, h, w], &mut rng, false, !avg);
        let (want, got) = if avg {
            (x.cpu.avg_pool2d(&x.l, (kh, kw), (sh, sw)).unwrap(), x.gpu.avg_pool2d(&x.l, (kh, kw), (sh, sw)).unwrap())
        } else {
            (x.cpu.max_pool2d(&x.l, (kh, kw), (sh, sw)).unwrap(), x.gpu.max_pool2d(&x.l, (kh, kw), (sh, sw)).unwrap())
        };
        check(&format!("{} {dt:?} {dims:?} {win:?}", if avg { "avg_pool2d" } else { "max_pool2d" }), &want, &got, None);
    }

    /// upsample_nearest1d / 2d (every dtype, bit-exact) and upsample_bilinear2d (float
    /// dtypes, both corner modes, with and without scale factors) on strided inputs. The
    /// bilinear reference reads a packed copy: candle-core 0.11's CPU returns its raw
    /// buffer, not the layout's elements, when the size is unchanged.
    #[test]
    fn upsampling(dims in (1usize..3, 1usize..4, 1usize..7, 1usize..7), out in (1usize..13, 1usize..13), seed in any::<u64>()) {
        let (b, c, h, w) = dims;
        let (oh, ow) = out;
        let mut rng = Rng(seed | 1);
        match rng.below(3) {
            0 => {
                let dt = pick(&dtypes(), &mut rng);
                let x = input(dt, &[b, c, w], &mut rng, false, false);
                let want = x.cpu.upsample_nearest1d(&x.l, ow).unwrap();
                check(&format!("upsample_nearest1d {dt:?}"), &want, &x.gpu.upsample_nearest1d(&x.l, ow).unwrap(), None);
            }
            1 => {
                let dt = pick(&dtypes(), &mut rng);
                let x = input(dt, &[b, c, h, w], &mut rng, false, false);
                let want = x.cpu.upsample_nearest2d(&x.l, oh, ow).unwrap();
                check(&format!("upsample_nearest2d {dt:?}"), &want, &x.gpu.upsample_nearest2d(&x.l, oh, ow).unwrap(), None);
            }
            _ => {
                let dt = pick(&float_dtypes(), &mut rng);
                let x = input(dt, &[b, c, h, w], &mut rng, false, false);
                let align = rng.below(2) == 0;
                let (sh, sw) = if rng.below(2) == 0 { (Some(oh as f64 / h as f64), Some(ow as f64 / w as f64)) } else { (None, None) };
                let packed = x.cpu.to_dtype(&x.l, dt).unwrap();
                let want = packed.upsample_bilinear2d(&Layout::contiguous((b, c, h, w)), oh, ow, align, sh, sw).unwrap();
                let got = x.gpu.upsample_bilinear2d(&x.l, oh, ow, align, sh, sw).unwrap();
                // f32 interpolation (candle: f64) of values <= 4, then one rounding.
                let acc = if dt == DType::F64 { eps(DType::F64) } else { eps(DType::F32) };
                let e = eps(dt);
                let tol = move |_: usize, v: f64| 16.0 * 4.0 * acc + 2.0 * e * v.abs();
                check(&format!("upsample_bilinear2d {dt:?} align={align} {sh:?}"), &want, &got, Some(&tol));
            }
        }
    }
}

/// The random fills, every float dtype: every uniform value in [lo, hi) of the dtype; the
/// sample mean and variance (and, for the normal, the share beyond two standard
/// deviations) within bounds that a correct generator leaves about once in 10^6 runs;
/// `set_seed` repeats a sequence and consecutive fills differ. On its own device, so
/// that no other test's fill moves the sequence.
#[test]
fn random_fills() {
    let own = common::vulkan_device();
    let n = 1 << 16;
    let t = &own.hal().caps().types;
    let mut dts = vec![DType::F32, DType::F16, DType::BF16];
    if t.float64 && t.int64 {
        dts.push(DType::F64);
    }
    let vals =
        |s: &VulkanStorage| -> Vec<f64> { elems(&s.to_cpu_storage().unwrap()).into_iter().map(|e| e.0).collect() };
    let moments = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (m, v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64)
    };
    for dt in dts {
        // Uniform on [-1, 0.3): 0.3 is not a value of f16 / bf16, and the top of the range
        // is where rounding could reach hi.
        let (lo, hi) = (-1.0, 0.3);
        own.set_seed(7).unwrap();
        let a = own.rand_uniform(&Shape::from(n), dt, lo, hi).unwrap();
        let va = vals(&a);
        let hi_t = elems(&CpuStorage::F64(vec![hi]).to_dtype(&Layout::contiguous(1), dt).unwrap())[0].0;
        assert!(va.iter().all(|&x| x >= lo && x < hi_t), "{dt:?} uniform value outside [lo, hi)");
        let (m, var) = moments(&va);
        let w = hi - lo;
        let sd_mean = w / (12.0 * n as f64).sqrt();
        assert!((m - (lo + hi) / 2.0).abs() < 5.0 * sd_mean + 2.0 * eps(dt), "{dt:?} uniform mean {m}");
        assert!((var / (w * w / 12.0) - 1.0).abs() < 0.03, "{dt:?} uniform variance {var}");
        // The same seed repeats the sequence; the next fill is another one.
        own.set_seed(7).unwrap();
        let b = own.rand_uniform(&Shape::from(n), dt, lo, hi).unwrap();
        assert_eq!(elems(&a.to_cpu_storage().unwrap()), elems(&b.to_cpu_storage().unwrap()), "{dt:?} reseeded");
        let c = own.rand_uniform(&Shape::from(n), dt, lo, hi).unwrap();
        let same = va.iter().zip(vals(&c)).filter(|(x, y)| **x == *y).count();
        assert!(same < n / 8, "{dt:?}: consecutive fills share {same} of {n} values");
        assert_eq!(own.get_current_seed().unwrap(), 7);

        let (mean, std) = (1.5, 2.0);
        let z = own.rand_normal(&Shape::from(n), dt, mean, std).unwrap();
        let vz = vals(&z);
        let (m, var) = moments(&vz);
        assert!((m - mean).abs() < 5.0 * std / (n as f64).sqrt() + 2.0 * eps(dt) * 4.0, "{dt:?} normal mean {m}");
        assert!((var / (std * std) - 1.0).abs() < 0.04, "{dt:?} normal variance {var}");
        let tail = vz.iter().filter(|&&x| (x - mean).abs() > 2.0 * std).count() as f64 / n as f64;
        assert!((tail - 0.0455).abs() < 0.006, "{dt:?} normal: {tail} beyond 2 sd, expected 0.0455");
    }
    let err = own.rand_uniform(&Shape::from(4), DType::U32, 0.0, 1.0).unwrap_err().to_string();
    assert!(err.contains("rand_uniform"), "{err}");
    let err = own.rand_uniform(&Shape::from(4), DType::F32, 1.0, 1.0).unwrap_err().to_string();
    assert!(err.contains("lo") && err.contains("hi"), "{err}");
    // A rejected fill does not move the sequence on.
    own.set_seed(3).unwrap();
    let a = own.rand_uniform(&Shape::from(64), DType::F32, 0.0, 1.0).unwrap();
    own.set_seed(3).unwrap();
    assert!(own.rand_uniform(&Shape::from(64), DType::F32, 1.0, 0.0).is_err());
    let b = own.rand_uniform(&Shape::from(64), DType::F32, 0.0, 1.0).unwrap();
    assert_eq!(elems(&a.to_cpu_storage().unwrap()), elems(&b.to_cpu_storage().unwrap()));
}

/// Every f64 unary op with a transcendental function (exp, log, sin, cos, tanh, gelu,
/// gelu_erf, erf, silu, powf, elu) against candle's CPU (Rust's libm) on random values in
/// [-8, 8] and special ones (zeros, tiny and huge magnitudes, the edges of exp's range,
/// infinities, NaN; sin and cos up to 1e300, through the Payne-Hanek reduction), with the
/// per-op bounds below. Skipped where the device lacks shaderFloat64.
#[test]
fn f64_transcendental_ops() {
    use candle_core::op::{Cos, Erf, Exp, Gelu, GeluErf, Log, Silu, Sin, Tanh};
    let t = &dev().hal().caps().types;
    if !(t.float64 && t.int64) {
        return;
    }
    let mut rng = Rng(0x5eed);
    let mut xs: Vec<f64> = (0..400).map(|_| rng.unit() * 16.0 - 8.0).collect();
    xs.extend([
        0.0,
        -0.0,
        1e-300,
        -1e-300,
        1e-10,
        -1e-10,
        0.5,
        1.0,
        -1.0,
        2.0,
        3.0,
        10.0,
        22.5,
        -22.5,
        50.0,
        100.0,
        700.0,
        709.7,
        710.0,
        -700.0,
        -745.0,
        -750.0,
        1e5,
        -1e5,
        123456.789,
        1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ]);
    let cpu = CpuStorage::F64(xs.clone());
    let l = Layout::contiguous(xs.len());
    let gpu = dev().storage_from_cpu_storage(&cpu).unwrap();
    let ulp = 2f64.powi(-52);
    // |gpu - cpu| <= rel(x) ulp |cpu| + abs(x) ulp (+ 1e-300 for results a device may
    // flush from subnormal to zero); a non-finite reference must be matched exactly.
    // rel grows with the function's condition where its argument reduction carries the
    // rounding of a product (exp and the ops built on it, powf's e ln x); abs covers
    // cancellation both sides share (1 + tanh / erf for very negative x in gelu, exp(x) - 1
    // near 0 in elu) and sin / cos near their zeros.
    let run = |name: &str,
               want: CpuStorage,
               got: VulkanStorage,
               xs: &[f64],
               rel: &dyn Fn(f64) -> f64,
               abs: &dyn Fn(f64) -> f64| {
        let tol = |i: usize, v: f64| {
            if v.is_finite() {
                rel(xs[i]) * ulp * v.abs() + abs(xs[i]) * ulp + 1e-300
            } else {
                0.0
            }
        };
        check(name, &want, &got, Some(&tol));
    };
    let flat = |_: f64| 16.0;
    let grows = |x: f64| 16.0 + 4.0 * x.abs();
    let none = |_: f64| 0.0;
    macro_rules! unary {
        ($name:expr, $op:ty, $rel:expr, $abs:expr) => {
            run($name, cpu.unary_impl::<$op>(&l).unwrap(), gpu.unary_impl::<$op>(&l).unwrap(), &xs, &$rel, &$abs)
        };
    }
    unary!("exp", Exp, grows, none);
    unary!("log", Log, flat, none);
    unary!("sin", Sin, flat, |_: f64| 4.0);
    unary!("cos", Cos, flat, |_: f64| 4.0);
    unary!("tanh", Tanh, flat, none);
    unary!("erf", Erf, flat, none);
    unary!("gelu", Gelu, flat, |x: f64| 4.0 * x.abs());
    unary!("gelu_erf", GeluErf, flat, |x: f64| 4.0 * x.abs());
    unary!("silu", Silu, grows, none);
    run("elu", cpu.elu(&l, 0.7).unwrap(), gpu.elu(&l, 0.7).unwrap(), &xs, &grows, &|_: f64| 4.0);
    for e in [0.5, -1.5, 2.0, 3.0, 0.0, 7.25] {
        let rel = move |x: f64| 16.0 + 4.0 * (e * x.abs().ln()).abs();
        run(&format!("powf {e}"), cpu.powf(&l, e).unwrap(), gpu.powf(&l, e).unwrap(), &xs, &rel, &none);
    }
}

/// An out-of-range index is reported as an error naming the op at the next read, not a
/// silent wrong answer; and the device keeps working afterwards. Its own device: the
/// status word is per device, and the next read by any thread reports it.
#[test]
fn out_of_range_index_is_an_error() {
    let own = common::vulkan_device();
    let dev = || &own;
    let cpu = CpuStorage::F32((0..12).map(|i| i as f32).collect());
    let x = dev().storage_from_cpu_storage(&cpu).unwrap();
    let l = Layout::contiguous((3, 4));
    for ids in [CpuStorage::U32(vec![0, 3]), CpuStorage::I64(vec![-1, 1]), CpuStorage::U8(vec![2, 9])] {
        let g = dev().storage_from_cpu_storage(&ids).unwrap();
        let y = x.index_select(&g, &l, &Layout::contiguous(2), 0).unwrap();
        let err = y.to_cpu_storage().unwrap_err().to_string();
        assert!(err.contains("index_select") && err.contains("out of range"), "{err}");
    }
    let ok = dev().storage_from_cpu_storage(&CpuStorage::U32(vec![2, 0])).unwrap();
    let y = x.index_select(&ok, &l, &Layout::contiguous(2), 0).unwrap();
    let want = cpu.index_select(&CpuStorage::U32(vec![2, 0]), &l, &Layout::contiguous(2), 0).unwrap();
    check("index_select after an error", &want, &y, None);
}
