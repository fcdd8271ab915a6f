//! Candle's quantized tensors on Vulkan (`vkml_candle::quantized`): every candle
//! `GgmlDType` crosses to the device and back with its bytes unchanged; `QMatMul::forward`
//! gives the product of the dequantized weight in f64 (to f32 summation) and candle's CPU
//! `QMatMul` (to the Q8 rounding of x its dot products make), for x of any leading dims,
//! f32 and f16, on the mat-vec and the mat-mat kernels (within candle's bound where the
//! device's kernels round x themselves).

mod common;
use common::{values, vulkan_device, vulkan_device_mat_mat_from};

use candle_core::quantized::{GgmlDType, QMatMul as CQMatMul, QTensor as CQTensor};
use candle_core::{DType, Device as Cpu, Module, Tensor as CTensor};
use vkml_candle::front::Tensor;
use vkml_candle::quantized::{QMatMul, QTensor};
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};

type VTensor = Tensor<VulkanStorage>;

const ALL: [GgmlDType; 15] = [
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q8_1,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8K,
];

/// A candle QTensor of `dims` (last dim 256) quantized from seeded values.
fn cpu_qtensor(dims: &[usize], dt: GgmlDType, seed: u64) -> CQTensor {
    let n: usize = dims.iter().product();
    let t = CTensor::from_vec(values(n, seed), dims, &Cpu::Cpu).unwrap();
    CQTensor::quantize(&t, dt).unwrap()
}

#[test]
fn every_candle_type_crosses_with_its_bytes() {
    let dev = vulkan_device();
    for (i, dt) in ALL.into_iter().enumerate() {
        for dims in [&[5usize, 256][..], &[2, 3, 512][..]] {
            let q = cpu_qtensor(dims, dt, i as u64);
            let v = QTensor::from_candle(&q, &dev).unwrap();
            assert_eq!((v.dtype(), v.shape().dims()), (dt, dims), "{dt:?}");
            let back = v.to_candle().unwrap();
            assert_eq!((back.dtype(), back.shape().dims()), (dt, dims), "{dt:?}");
            assert_eq!(back.data().unwrap(), q.data().unwrap(), "{dt:?} {dims:?}: bytes");
            // The device's block decoding is candle's.
            let want = q.dequantize(&Cpu::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(v.dequantize().unwrap().to_vec::<f32>().unwrap(), want, "{dt:?} {dims:?}: values");
        }
    }
}

/// Max |a - b| over max |b|.
fn rel(a: &[f32], b: &[f64]) -> f64 {
    let top = b.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    a.iter().zip(b).map(|(x, y)| (*x as f64 - y).abs()).fold(0.0, f64::max) / top
}

#[test]
fn qmatmul_matches_the_dequantized_product_and_candles_cpu() {
    let (n, k) = (48, 256);
    for (what, dev) in [("mat-vec", vulkan_device()), ("mat-mat", vulkan_device_mat_mat_from(2))] {
        // Kernels that round x (to Q8_1 on integer-dot mat-vecs, to f16 on tensor-core
        // mat-mats, as on NVIDIA) meet the exact product within candle's own bound; lavapipe's
        // multiply f32 x.
        let caps = dev.hal().caps();
        let rounds_x = vkml_ops::tuning::q8_1_activations(caps)
            || (what == "mat-mat" && vkml_ops::tuning::coopmat_subgroup_size(caps).is_some());
        let (tol, tol16) = if rounds_x { (3e-2, 3e-2) } else { (1e-5, 2e-3) };
        for (i, dt) in ALL.into_iter().enumerate() {
            let q = cpu_qtensor(&[n, k], dt, 10 + i as u64);
            let w: Vec<f32> = q.dequantize(&Cpu::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let mm = QMatMul::from_qtensor(QTensor::from_candle(&q, &dev).unwrap());
            let cpu_mm = CQMatMul::from_qtensor(q).unwrap();
            for dims in [&[k][..], &[3, k][..], &[2, 5, k][..]] {
                let case = format!("{what} {dt:?} x {dims:?}");
                let len: usize = dims.iter().product();
                let xv = values(len, 99);
                let x = VTensor::from_slice(&xv, dims, &dev).unwrap();
                let y = mm.forward(&x).unwrap();
                let mut want_dims = dims.to_vec();
                *want_dims.last_mut().unwrap() = n;
                assert_eq!(y.dims(), &want_dims[..], "{case}");
                let got = y.to_vec::<f32>().unwrap();
                let exact: Vec<f64> = xv
                    .chunks(k)
                    .flat_map(|row| {
                        w.chunks(k).map(move |wr| wr.iter().zip(row).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>())
                    })
                    .collect();
                let r = rel(&got, &exact);
                assert!(r < tol, "{case}: {r} from the dequantized product");
                // candle's CPU QMatMul (its dequantized F32/F16/BF16 weights take no 1-D x).
                if dims.len() > 1 {
                    let cx = CTensor::from_vec(xv.clone(), dims, &Cpu::Cpu).unwrap();
                    let cpu: Vec<f32> = cpu_mm.forward(&cx).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                    let cpu64: Vec<f64> = cpu.iter().map(|&v| v as f64).collect();
                    let r = rel(&got, &cpu64);
                    assert!(r < 3e-2, "{case}: {r} from candle's CPU QMatMul (x rounded to Q8 there)");
                }
                // f16 x: the product of the f16 values, rounded to f16.
                let y16 = mm.forward(&x.to_dtype(DType::F16).unwrap()).unwrap();
                assert_eq!(y16.dtype(), DType::F16, "{case}");
                let x16: Vec<f32> = xv.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
                let exact16: Vec<f64> = x16
                    .chunks(k)
                    .flat_map(|row| {
                        w.chunks(k).map(move |wr| wr.iter().zip(row).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>())
                    })
                    .collect();
                let got16: Vec<f32> = y16.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
                let r = rel(&got16, &exact16);
                assert!(r < tol16, "{case}: f16 x {r}");
            }
        }
    }
}

#[test]
fn qmatmul_refuses_what_it_cannot_multiply() {
    let dev = vulkan_device();
    let mm = QMatMul::from_qtensor(QTensor::from_candle(&cpu_qtensor(&[8, 256], GgmlDType::Q4_0, 1), &dev).unwrap());
    let x = VTensor::from_slice(&values(2 * 128, 2), (2, 128), &dev).unwrap();
    let e = mm.forward(&x).unwrap_err().to_string();
    assert!(e.contains("last dim must be 256"), "{e}");
    let xi = VTensor::from_slice(&vec![1u32; 256], 256, &dev).unwrap();
    let e = mm.forward(&xi).unwrap_err().to_string();
    assert!(e.contains("QMatMul"), "{e}");
}

/// Quantizing on the device (`QTensor::quantize`) against vkml-quant's CPU quantizers
/// (ggml's reference) on the same values, every type the GPU writes: random rows, and
/// blocks of zeros, of one value, with an outlier, of tiny values. Blocks whose bytes
/// differ (the device's division not correctly rounded) must hold values one quant step
/// from the CPU's at most, with an error no larger than the CPU's (up to f32 rounding);
/// the fraction seen is printed and must stay under 1 %.
#[test]
fn quantizing_on_the_device_gives_the_cpus_blocks() {
    use vkml_quant::dequant::dequantize_to_vec;
    let dev = vulkan_device();
    let (rows, k) = (64, 512);
    let mut x: Vec<f32> = values(rows * k, 77).iter().enumerate().map(|(i, v)| v * (1.0 + (i % 7) as f32)).collect();
    x[..32].fill(0.0);
    x[32..64].fill(0.75);
    x[64..96].iter_mut().enumerate().for_each(|(i, v)| *v = if i == 9 { -40.0 } else { 0.01 * i as f32 });
    x[96..128].iter_mut().enumerate().for_each(|(i, v)| *v = 1e-6 * (i as f32 - 16.0));
    let src = VTensor::from_slice(&x, (rows, k), &dev).unwrap();
    for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q5_1, GgmlDType::Q8_0, GgmlDType::Q8_1] {
        let ty = vkml_candle::quantized::ggml_type(dt);
        let gpu = QTensor::quantize(&src, dt).unwrap().to_candle().unwrap().data().unwrap().to_vec();
        let cpu = vkml_quant::quantize(ty, &x).unwrap();
        assert_eq!(gpu.len(), cpu.len(), "{dt:?}");
        let bb = ty.type_size();
        let mut differ = 0;
        for (b, (g, c)) in gpu.chunks(bb).zip(cpu.chunks(bb)).enumerate() {
            if g == c {
                continue;
            }
            differ += 1;
            let (gv, cv) = (dequantize_to_vec(ty, g).unwrap(), dequantize_to_vec(ty, c).unwrap());
            let xs = &x[b * 32..b * 32 + 32];
            let step = xs.iter().fold(0f32, |m, v| m.max(v.abs())) / 7.0;
            for j in 0..32 {
                let (eg, ec) = ((gv[j] - xs[j]).abs(), (cv[j] - xs[j]).abs());
                assert!((gv[j] - cv[j]).abs() <= 1.01 * step, "{dt:?} block {b} value {j}: {} vs {}", gv[j], cv[j]);
                assert!(
                    eg <= ec * 1.001 + 1e-6 * step,
                    "{dt:?} block {b} value {j}: error {eg} against the CPU's {ec}"
                );
            }
        }
        let blocks = cpu.len() / bb;
        eprintln!("{dt:?}: {differ} of {blocks} blocks differ from the CPU's");
        assert!(differ * 100 < blocks, "{dt:?}: {differ} of {blocks} blocks differ");
    }
    // An odd number of blocks: the last pair of an invocation is half full.
    let odd: Vec<f32> = values(3 * 96, 5);
    let src_odd = VTensor::from_slice(&odd, (3, 96), &dev).unwrap();
    for dt in [GgmlDType::Q4_0, GgmlDType::Q5_0, GgmlDType::Q8_0] {
        let ty = vkml_candle::quantized::ggml_type(dt);
        let gpu = QTensor::quantize(&src_odd, dt).unwrap().to_candle().unwrap().data().unwrap().to_vec();
        assert_eq!(gpu, vkml_quant::quantize(ty, &odd).unwrap(), "{dt:?}: 9 blocks");
    }
    // The float types: the values converted as candle converts them (from f32 and from a
    // bf16 input), byte for byte.
    let cpu_src = candle_core::Tensor::from_slice(&x, (rows, k), &candle_core::Device::Cpu).unwrap();
    let bf = src.to_dtype(candle_core::DType::BF16).unwrap();
    let cpu_bf = cpu_src.to_dtype(candle_core::DType::BF16).unwrap();
    for dt in [GgmlDType::F32, GgmlDType::F16, GgmlDType::BF16] {
        for (input, cpu_input) in [(&src, &cpu_src), (&bf, &cpu_bf)] {
            let gpu = QTensor::quantize(input, dt).unwrap().to_candle().unwrap().data().unwrap().to_vec();
            let cpu = candle_core::quantized::QTensor::quantize(cpu_input, dt).unwrap().data().unwrap().to_vec();
            assert!(gpu == cpu, "{dt:?} from {:?}", input.dtype());
        }
    }
}

/// `x: f32[rows, k]` quantized to `ty` on `dev` through `vkml_ops::quant::quantize` (the
/// types candle's `GgmlDType` lacks), the blocks read back.
fn ops_quantize(dev: &VulkanDevice, ty: vkml_quant::GgmlType, x: &[f32], rows: usize, k: usize) -> Vec<u8> {
    let src = VTensor::from_slice(x, (rows, k), dev).unwrap();
    let m = vkml_ops::quant::QMatrix::alloc(dev.hal(), ty, rows, k).unwrap();
    dev.with_stream(|s| {
        vkml_ops::quant::quantize(s, src.storage().buffer(), &m).unwrap();
        Ok(())
    })
    .unwrap();
    dev.flush().unwrap();
    m.read_blocks().unwrap()
}

/// The blocks of `ty` where the device's bytes `gpu` differ from the CPU's `cpu` (both of
/// `x`): `(differing, set apart)`, the blocks whose values `apart` picks counted apart. A
/// differing block not set apart must fit its values with a squared error at most 1.01
/// times the CPU's, else a failure is pushed.
fn differing_blocks(
    ty: vkml_quant::GgmlType,
    x: &[f32],
    gpu: &[u8],
    cpu: &[u8],
    apart: impl Fn(&[f32]) -> bool,
    failures: &mut Vec<String>,
) -> (usize, usize) {
    use vkml_quant::dequant::dequantize_to_vec;
    let (bb, be) = (ty.type_size(), ty.block_size());
    let (mut differ, mut set_apart) = (0, 0);
    for (b, (g, c)) in gpu.chunks(bb).zip(cpu.chunks(bb)).enumerate() {
        if g == c {
            continue;
        }
        let xs = &x[b * be..(b + 1) * be];
        if apart(xs) {
            set_apart += 1;
            continue;
        }
        differ += 1;
        let (gv, cv) = (dequantize_to_vec(ty, g).unwrap(), dequantize_to_vec(ty, c).unwrap());
        let sq = |v: &[f32]| v.iter().zip(xs).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>();
        let (eg, ec) = (sq(&gv), sq(&cv));
        if eg > ec * 1.01 + 1e-30 {
            failures.push(format!("{ty:?} block {b}: squared error {eg} against the CPU's {ec}"));
        }
    }
    (differ, set_apart)
}

/// The k-quants and IQ4 types quantized on the device (`QTensor::quantize`; IQ4_NL and
/// IQ4_XS, which candle lacks, through `vkml_ops::quant::quantize`) against vkml-quant's CPU
/// quantizers on the same values: random rows, and super-blocks of zeros, of one value, with
/// an outlier, of tiny values, of those in blocks of 32 and 16, zero blocks amid random
/// values. The kernels divide and take square roots correctly rounded, so the bytes should
/// be the CPU's (lavapipe and an H200 gave no difference); a block whose bytes differ
/// anyway (a device flushing subnormal intermediates can move a scale search to another
/// trial scale) must fit its values with a squared error at most 1.01 times the CPU's; the
/// fraction seen is printed and must stay under 1 %.
#[test]
fn quantizing_k_quants_on_the_device_gives_the_cpus_blocks() {
    use vkml_quant::GgmlType;
    let dev = vulkan_device();
    let (rows, k) = (64, 1024);
    let mut x: Vec<f32> = values(rows * k, 78).iter().enumerate().map(|(i, v)| v * (1.0 + (i % 5) as f32)).collect();
    // Row 0: whole super-blocks of zeros, of one value, with an outlier, of tiny values.
    x[..256].fill(0.0);
    x[256..512].fill(0.75);
    x[512..768].iter_mut().enumerate().for_each(|(i, v)| *v = if i == 77 { -40.0 } else { 0.01 * i as f32 });
    x[768..1024].iter_mut().enumerate().for_each(|(i, v)| *v = 1e-6 * (i as f32 - 128.0));
    // Row 1: the same in blocks of 32 and of 16 (one super-block), then zero blocks of 32
    // (one alone, then a run of three) and a zero 16 amid random values.
    let r1 = &mut x[k..2 * k];
    r1[..32].fill(0.0);
    r1[32..64].fill(-0.75);
    r1[64..96].iter_mut().enumerate().for_each(|(i, v)| *v = if i == 9 { 40.0 } else { 0.01 * i as f32 });
    r1[96..128].iter_mut().enumerate().for_each(|(i, v)| *v = 1e-6 * (i as f32 - 16.0));
    r1[128..144].fill(0.0);
    r1[144..160].fill(3.0);
    r1[176..192].iter_mut().enumerate().for_each(|(i, v)| *v = 1e-5 * i as f32);
    r1[320..352].fill(0.0);
    r1[576..672].fill(0.0);
    r1[800..816].fill(0.0);
    let src = VTensor::from_slice(&x, (rows, k), &dev).unwrap();
    let types = [
        (GgmlType::Q4_K, Some(GgmlDType::Q4K)),
        (GgmlType::Q5_K, Some(GgmlDType::Q5K)),
        (GgmlType::Q6_K, Some(GgmlDType::Q6K)),
        (GgmlType::Q8_K, Some(GgmlDType::Q8K)),
        (GgmlType::Q2_K, Some(GgmlDType::Q2K)),
        (GgmlType::Q3_K, Some(GgmlDType::Q3K)),
        (GgmlType::IQ4_NL, None),
        (GgmlType::IQ4_XS, None),
    ];
    let mut failures = Vec::new();
    for (ty, dt) in types {
        let gpu = match dt {
            Some(dt) => QTensor::quantize(&src, dt).unwrap().to_candle().unwrap().data().unwrap().to_vec(),
            None => ops_quantize(&dev, ty, &x, rows, k),
        };
        let cpu = vkml_quant::quantize(ty, &x).unwrap();
        assert_eq!(gpu.len(), cpu.len(), "{ty:?}");
        if ty == GgmlType::IQ4_NL {
            // The lone zero block of row 1: scale 0, the quants of the block before it (the
            // CPU's scratch buffer), which the device must find too.
            let z = &cpu[(k / 32 + 10) * 18..][..18];
            assert!(z[..2] == [0, 0] && z[2..].iter().any(|&q| q != 0), "{z:?}");
        }
        let (differ, _) = differing_blocks(ty, &x, &gpu, &cpu, |_| false, &mut failures);
        let blocks = cpu.len() / ty.type_size();
        eprintln!("{ty:?}: {differ} of {blocks} blocks differ from the CPU's");
        if differ * 100 >= blocks {
            failures.push(format!("{ty:?}: {differ} of {blocks} blocks differ"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Rows of one super-block: an odd number of blocks, the last pair of an invocation half full.
    let odd: Vec<f32> = values(3 * 256, 6);
    let src_odd = VTensor::from_slice(&odd, (3, 256), &dev).unwrap();
    for dt in [GgmlDType::Q6K, GgmlDType::Q3K, GgmlDType::Q4K] {
        let ty = vkml_candle::quantized::ggml_type(dt);
        let gpu = QTensor::quantize(&src_odd, dt).unwrap().to_candle().unwrap().data().unwrap().to_vec();
        assert_eq!(gpu, vkml_quant::quantize(ty, &odd).unwrap(), "{dt:?}: 3 blocks");
    }
}

/// MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0 and Q2_0 (which candle lacks) quantized on the device
/// (`vkml_ops::quant::quantize`) against vkml-quant's CPU quantizers on the same values:
/// random rows, whole blocks (of 256, then of 32 and 64) of zeros, of one value, with an
/// outlier, of tiny values, of values halfway between levels, and MXFP4 blocks whose largest
/// magnitude is a few ulps below a power of two (where log2 rounds up to the next exponent or
/// not). The kernels divide correctly rounded and take floor(log2) as the CPU's log2f rounds,
/// so the bytes should be the CPU's: on lavapipe every block; elsewhere a block whose bytes
/// differ (a device flushing subnormals) must fit its values with a squared error at most
/// 1.01 times the CPU's, the fraction printed and under 1 %. Then odd block counts (the last
/// pair, or quad of MXFP4 blocks, of an invocation part full).
#[test]
fn quantizing_fp4_and_ternary_types_on_the_device_gives_the_cpus_blocks() {
    use vkml_quant::GgmlType;
    let dev = vulkan_device();
    let lavapipe = dev.hal().caps().driver_id == "MESA_LLVMPIPE";
    let (rows, k) = (64, 1024);
    let mut x: Vec<f32> = values(rows * k, 79).iter().enumerate().map(|(i, v)| v * (1.0 + (i % 5) as f32)).collect();
    // Row 0: whole blocks of 256 of zeros, of one value, with an outlier, of tiny values.
    x[..256].fill(0.0);
    x[256..512].fill(0.75);
    x[512..768].iter_mut().enumerate().for_each(|(i, v)| *v = if i == 77 { -40.0 } else { 0.01 * i as f32 });
    x[768..1024].iter_mut().enumerate().for_each(|(i, v)| *v = 1e-6 * (i as f32 - 128.0));
    // Row 1: the same in blocks of 32 and 64, values halfway between levels (x / amax =
    // 1/2, the FP4 midpoints), tinier values.
    let r1 = &mut x[k..2 * k];
    r1[..64].fill(0.0);
    r1[64..128].fill(-0.75);
    r1[128..192].iter_mut().enumerate().for_each(|(i, v)| *v = if i == 9 { 40.0 } else { 0.01 * i as f32 });
    r1[192..256].iter_mut().enumerate().for_each(|(i, v)| *v = 1e-6 * (i as f32 - 32.0));
    r1[256..320].iter_mut().enumerate().for_each(|(i, v)| *v = [1.0, 0.5, -0.5, 0.25, -0.75, 0.0, -1.0, 0.125][i % 8]);
    r1[320..384]
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = [6.0, 5.0, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25][i % 8] * 0.5);
    r1[384..448].iter_mut().enumerate().for_each(|(i, v)| *v = 1e-30 * (i as f32 - 20.0));
    // Rows 2 to 7: MXFP4 blocks of largest magnitude j ulps below 2^(ex + 1), j around the
    // count where log2 rounds up (1, 2, 5, 11, 22, 44 as the exponent grows).
    let r2 = &mut x[2 * k..8 * k];
    let mut b = 0;
    for ex in [-100i32, -20, -3, -1, 0, 1, 2, 3, 4, 7, 12, 20, 40, 70, 100, 126, 127] {
        for j in [1u32, 2, 3, 5, 6, 11, 12, 22, 23, 44, 45] {
            let a = f32::from_bits((((ex + 127) as u32) << 23) | ((1u32 << 23) - j));
            r2[32 * b + (b % 32)] = if b % 2 == 0 { a } else { -a };
            r2[32 * b..32 * b + 32].iter_mut().filter(|v| v.abs() > a).for_each(|v| *v = a * 0.5);
            b += 1;
        }
    }
    assert!(b * 32 <= r2.len());
    let mut failures = Vec::new();
    for ty in [GgmlType::MXFP4, GgmlType::NVFP4, GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::Q1_0, GgmlType::Q2_0] {
        let gpu = ops_quantize(&dev, ty, &x, rows, k);
        let cpu = vkml_quant::quantize(ty, &x).unwrap();
        assert_eq!(gpu.len(), cpu.len(), "{ty:?}");
        // TQ1_0, TQ2_0, Q2_0 multiply by 1 / amax, subnormal from amax = 2^126 on (the f16
        // scale is infinite there anyway): a device that flushes subnormals (the H100)
        // rounds those blocks' values to 0. Counted apart.
        let subnormal_id = |xs: &[f32]| {
            matches!(ty, GgmlType::TQ1_0 | GgmlType::TQ2_0 | GgmlType::Q2_0)
                && xs.iter().fold(0f32, |m, v| m.max(v.abs())) >= 2f32.powi(126)
        };
        let (differ, subnormal_id) = differing_blocks(ty, &x, &gpu, &cpu, subnormal_id, &mut failures);
        let blocks = cpu.len() / ty.type_size();
        eprintln!(
            "{ty:?}: {differ} of {blocks} blocks differ from the CPU's ({:.3} %), {subnormal_id} more where 1 / amax is subnormal",
            100.0 * differ as f64 / blocks as f64
        );
        if differ * 100 >= blocks || (lavapipe && differ + subnormal_id != 0) {
            failures.push(format!("{ty:?}: {differ} (+ {subnormal_id}) of {blocks} blocks differ"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Odd block counts: 3 rows of 7 MXFP4 blocks (21: the last quad one block), 3 of one
    // block of the others.
    for (ty, k) in [
        (GgmlType::MXFP4, 224),
        (GgmlType::MXFP4, 32),
        (GgmlType::NVFP4, 64),
        (GgmlType::TQ1_0, 256),
        (GgmlType::TQ2_0, 256),
        (GgmlType::Q1_0, 128),
        (GgmlType::Q2_0, 64),
    ] {
        let odd: Vec<f32> = values(3 * k, 7);
        let cpu = vkml_quant::quantize(ty, &odd).unwrap();
        assert_eq!(ops_quantize(&dev, ty, &odd, 3, k), cpu, "{ty:?}: 3 rows of {k}");
    }
}
