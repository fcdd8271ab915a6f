//! The tensor front and the llama model on it.
//!
//! - Front ops on Vulkan against the same ops on candle's CPU tensors (views, copies,
//!   broadcast binary ops, unary ops, dtype conversion).
//! - The conformance oracle (DESIGN.md): the same model code ([`Llama`]) on candle's
//!   `CpuStorage` and on [`VulkanStorage`] (with the device's own kernel choice, and
//!   with prompts forced onto mat-mats), on synthetic llama and qwen2 models and on the
//!   real SmolLM2-135M-Instruct Q4_1: the same greedy tokens, and logits within a bound
//!   at every position. Decode steps recorded ahead are checked on the way: a reset, and
//!   a read-back of unrelated work between two steps, make them stale.

mod common;
use common::{device, test_model, vulkan_device_mat_mat_from};

use candle_core::cpu_backend::CpuDevice;
use candle_core::{CpuStorage, DType, Device as Cpu, Tensor as CTensor};
use vkml_candle::front::Tensor;
use vkml_candle::llama::{Llama, LoadOptions};
use vkml_candle::synth::{synthetic_model, SynthShape};
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_quant::gguf::GgufFile;
use vkml_quant::GgmlType;

type VTensor = Tensor<VulkanStorage>;

fn vdev() -> VulkanDevice {
    VulkanDevice::from_device(&device(), 0).unwrap()
}

/// Deterministic values in [-2, 2).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

fn flat(t: &CTensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn front_ops_match_candle_cpu() {
    let dev = vdev();
    let a_data = values(2 * 3 * 8, 1);
    let b_data = values(8, 2);
    let a = VTensor::from_slice(&a_data, (2, 3, 8), &dev).unwrap();
    let b = VTensor::from_slice(&b_data, 8, &dev).unwrap();
    let ca = CTensor::from_vec(a_data.clone(), (2, 3, 8), &Cpu::Cpu).unwrap();
    let cb = CTensor::from_vec(b_data.clone(), 8, &Cpu::Cpu).unwrap();

    // Round trip through candle.
    assert_eq!(a.to_vec::<f32>().unwrap(), a_data);
    let back = VTensor::from_candle(&ca.transpose(0, 2).unwrap(), &dev).unwrap();
    assert_eq!(back.dims(), &[8, 3, 2]);
    assert_eq!(back.to_vec::<f32>().unwrap(), flat(&ca.transpose(0, 2).unwrap()));

    // Views and copies are exact.
    let v = a.narrow(2, 3, 4).unwrap().transpose(0, 1).unwrap();
    let cv = ca.narrow(2, 3, 4).unwrap().transpose(0, 1).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), flat(&cv));
    assert_eq!(v.contiguous().unwrap().reshape((6, 4)).unwrap().to_vec::<f32>().unwrap(), flat(&cv));

    // Element-wise f32 arithmetic is exact (one rounding, as on the CPU).
    let s = a.broadcast_add(&b).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), flat(&ca.broadcast_add(&cb).unwrap()));
    let m = a.transpose(1, 2).unwrap().mul(&a.transpose(1, 2).unwrap()).unwrap();
    assert_eq!(m.to_vec::<f32>().unwrap(), flat(&ca.transpose(1, 2).unwrap().sqr().unwrap()));
    let af = a.affine(0.5, -1.25).unwrap();
    assert_eq!(af.to_vec::<f32>().unwrap(), flat(&ca.affine(0.5, -1.25).unwrap()));

    // silu uses exp: within a few f32 ulps of candle's.
    let si = a.narrow(1, 1, 2).unwrap().silu().unwrap();
    let want = flat(&candle_nn::ops::silu(&ca.narrow(1, 1, 2).unwrap()).unwrap());
    assert!(max_diff(&si.to_vec::<f32>().unwrap(), &want) <= 1e-6, "silu");

    // f32 -> f16 rounds to nearest even, as half does.
    let h = a.to_dtype(DType::F16).unwrap();
    let want: Vec<half::f16> = a_data.iter().map(|&x| half::f16::from_f32(x)).collect();
    assert_eq!(h.to_vec::<half::f16>().unwrap(), want);
}

/// The same sequence of front ops (candle's method names) on a device: results as f32,
/// labelled. Generic over the storage, so it runs on Vulkan and on candle's CPU.
fn more_front_ops<S>(dev: &S::Device) -> Vec<(&'static str, Vec<f32>)>
where
    S: candle_core::backend::BackendStorage,
    S::Device: candle_core::backend::BackendDevice<Storage = S>,
{
    let a = Tensor::<S>::from_slice(&values(2 * 3 * 8, 3), (2, 3, 8), dev).unwrap();
    let b = Tensor::<S>::from_slice(&values(2 * 8 * 5, 4), (2, 8, 5), dev).unwrap();
    let row = Tensor::<S>::from_slice(&values(8, 5), (1, 1, 8), dev).unwrap();
    let f = |t: Tensor<S>| t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let ids = Tensor::<S>::from_slice(&[2u32, 0, 1, 2], 4, dev).unwrap();
    let img = a.reshape((2, 1, 3, 8)).unwrap();
    vec![
        ("matmul", f(a.matmul(&b).unwrap())),
        ("matmul of a transposed view", f(b.t().unwrap().matmul(&a.t().unwrap()).unwrap())),
        ("broadcast_matmul", f(a.broadcast_matmul(&b.narrow(0, 0, 1).unwrap()).unwrap())),
        ("broadcast_sub", f(a.broadcast_sub(&row).unwrap())),
        ("broadcast_div", f(a.broadcast_div(&row.abs().unwrap().affine(1.0, 0.5).unwrap()).unwrap())),
        ("maximum", f(a.maximum(&a.neg().unwrap()).unwrap())),
        ("exp", f(a.exp().unwrap())),
        ("tanh", f(a.tanh().unwrap())),
        ("sqrt of abs", f(a.abs().unwrap().sqrt().unwrap())),
        ("powf", f(a.abs().unwrap().powf(1.5).unwrap())),
        ("gt", f(a.gt(&a.permute(&[0, 1, 2]).unwrap().neg().unwrap()).unwrap())),
        ("where_cond", f(a.ge(&a.sqr().unwrap()).unwrap().where_cond(&a, &a.exp().unwrap()).unwrap())),
        ("sum_keepdim", f(a.sum_keepdim(2).unwrap())),
        ("max", f(a.max(1).unwrap())),
        ("argmin", f(a.argmin(2).unwrap())),
        ("mean_keepdim", f(a.mean_keepdim(0).unwrap())),
        ("sum over two dims", f(a.reduce(candle_core::op::ReduceOp::Sum, &[0, 2], false).unwrap())),
        ("index_select", f(a.index_select(&ids, 2).unwrap())),
        ("gather", f(a.gather(&Tensor::<S>::from_slice(&[1u32, 0, 2, 2, 1, 0], (2, 3, 1), dev).unwrap(), 2).unwrap())),
        ("unsqueeze / squeeze", f(a.unsqueeze(1).unwrap().squeeze(1).unwrap().t().unwrap().contiguous().unwrap())),
        ("full", f(Tensor::<S>::full(2.5, (2, 2), DType::F16, dev).unwrap())),
        ("avg_pool2d", f(img.avg_pool2d_with_stride((2, 2), (1, 2)).unwrap())),
        ("max_pool2d", f(img.max_pool2d_with_stride((3, 3), (1, 1)).unwrap())),
        ("upsample_nearest2d", f(img.upsample_nearest2d(5, 11).unwrap())),
    ]
}

/// The same ops through `candle_core::Tensor` on candle's CPU: the reference for
/// [`more_front_ops`] (its shapes and index logic are the front's own, so they are checked
/// against candle's, not against the front on another storage).
fn candle_ops() -> Vec<(&'static str, Vec<f32>)> {
    let a = CTensor::from_vec(values(2 * 3 * 8, 3), (2, 3, 8), &Cpu::Cpu).unwrap();
    let b = CTensor::from_vec(values(2 * 8 * 5, 4), (2, 8, 5), &Cpu::Cpu).unwrap();
    let row = CTensor::from_vec(values(8, 5), (1, 1, 8), &Cpu::Cpu).unwrap();
    let f = |t: CTensor| flat(&t.to_dtype(DType::F32).unwrap());
    let ids = CTensor::new(&[2u32, 0, 1, 2], &Cpu::Cpu).unwrap();
    let img = a.reshape((2, 1, 3, 8)).unwrap();
    let gids = CTensor::from_vec(vec![1u32, 0, 2, 2, 1, 0], (2, 3, 1), &Cpu::Cpu).unwrap();
    vec![
        ("matmul", f(a.matmul(&b).unwrap())),
        ("matmul of a transposed view", f(b.t().unwrap().matmul(&a.t().unwrap()).unwrap())),
        ("broadcast_matmul", f(a.broadcast_matmul(&b.narrow(0, 0, 1).unwrap()).unwrap())),
        ("broadcast_sub", f(a.broadcast_sub(&row).unwrap())),
        ("broadcast_div", f(a.broadcast_div(&row.abs().unwrap().affine(1.0, 0.5).unwrap()).unwrap())),
        ("maximum", f(a.maximum(&a.neg().unwrap()).unwrap())),
        ("exp", f(a.exp().unwrap())),
        ("tanh", f(a.tanh().unwrap())),
        ("sqrt of abs", f(a.abs().unwrap().sqrt().unwrap())),
        ("powf", f(a.abs().unwrap().powf(1.5).unwrap())),
        ("gt", f(a.gt(&a.neg().unwrap()).unwrap())),
        ("where_cond", f(a.ge(&a.sqr().unwrap()).unwrap().where_cond(&a, &a.exp().unwrap()).unwrap())),
        ("sum_keepdim", f(a.sum_keepdim(2).unwrap())),
        ("max", f(a.max(1).unwrap())),
        ("argmin", f(a.argmin(2).unwrap())),
        ("mean_keepdim", f(a.mean_keepdim(0).unwrap())),
        ("sum over two dims", f(a.sum((0, 2)).unwrap())),
        ("index_select", f(a.index_select(&ids, 2).unwrap())),
        ("gather", f(a.gather(&gids, 2).unwrap())),
        ("unsqueeze / squeeze", f(a.unsqueeze(1).unwrap().squeeze(1).unwrap().t().unwrap().contiguous().unwrap())),
        ("full", f(CTensor::full(half::f16::from_f32(2.5), (2, 2), &Cpu::Cpu).unwrap())),
        ("avg_pool2d", f(img.avg_pool2d_with_stride((2, 2), (1, 2)).unwrap())),
        ("max_pool2d", f(img.max_pool2d_with_stride((3, 3), (1, 1)).unwrap())),
        ("upsample_nearest2d", f(img.upsample_nearest2d(5, 11).unwrap())),
    ]
}

/// The front's candle-named methods on Vulkan give candle's results (`candle_core::Tensor`
/// on the CPU): the same shapes, and values within the rounding of matmul and the
/// device's transcendental functions (1e-5 of the largest value).
#[test]
fn more_front_ops_match_cpu() {
    let gpu = more_front_ops::<VulkanStorage>(&vdev());
    let cpu = candle_ops();
    assert_eq!(gpu.len(), cpu.len());
    for ((name, g), (cname, c)) in gpu.iter().zip(&cpu) {
        assert_eq!(name, cname);
        assert_eq!(g.len(), c.len(), "{name}: length");
        let scale = c.iter().fold(1f32, |m, x| m.max(x.abs()));
        let d = max_diff(g, c);
        assert!(d <= 1e-5 * scale, "{name}: max difference {d} (scale {scale})");
    }
    // A random fill on the front: in range, reproducible from the seed.
    let dev = vdev();
    candle_core::backend::BackendDevice::set_seed(&dev, 11).unwrap();
    let r1 = VTensor::rand(-1.0, 1.0, 1000, DType::F32, &dev).unwrap().to_vec::<f32>().unwrap();
    candle_core::backend::BackendDevice::set_seed(&dev, 11).unwrap();
    let r2 = VTensor::rand(-1.0, 1.0, 1000, DType::F32, &dev).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(r1, r2);
    assert!(r1.iter().all(|x| (-1.0..1.0).contains(x)));
    let n = VTensor::randn(0.0, 1.0, 1000, DType::F32, &dev).unwrap().to_vec::<f32>().unwrap();
    let mean = n.iter().sum::<f32>() / 1000.0;
    assert!(mean.abs() < 0.2, "randn mean {mean}");
}

#[test]
fn front_errors_name_the_problem() {
    let dev = vdev();
    let a = VTensor::from_slice(&values(6, 3), (2, 3), &dev).unwrap();
    let b = VTensor::from_slice(&values(4, 4), (2, 2), &dev).unwrap();
    let e = a.add(&b).unwrap_err().to_string();
    assert!(e.contains("shape mismatch"), "{e}");
    let e = a.broadcast_add(&b).unwrap_err().to_string();
    assert!(e.contains("shape mismatch in add"), "{e}");
    let e = VTensor::from_slice(&[1f32, 2.0], (3,), &dev).unwrap_err().to_string();
    assert!(e.contains("Shape mismatch, got buffer of size 2"), "{e}");
    // I16 is held as bytes only: arithmetic on it is an error naming dtype and op.
    let i = VTensor::from_slice(&[1i16, 2], 2, &dev).unwrap();
    let e = i.silu().unwrap_err().to_string();
    assert!(e.contains("I16") && e.contains("silu"), "{e}");
}

/// Max |a - b| over the step relative to the largest |b|.
/// The decode step's fused norm and product (`rms_norm_linear`), on a device whose integer
/// dot products count as accelerated so that its mat-vecs take Q8_1 activations: the
/// norm then writes x as Q8_1 itself. The values must be the bits of `rms_norm` followed
/// by `qmatmul` / `qmatmul_glu` (which quantize the normalised x separately), from one
/// dispatch fewer.
#[test]
fn rms_norm_linear_equals_norm_then_product() {
    use vkml_ops::nn::GluActivation;
    use vkml_ops::quant::QMatrix;
    let dev = common::device_with(|c| c.integer_dot.packed_4x8_signed_accelerated = true);
    if !dev.caps().integer_dot.supported || vkml_ops::tuning::row_subgroup_size(dev.caps()).is_none() {
        eprintln!("skipped: no integer dot product or usable subgroup size on this device");
        return;
    }
    let vd = VulkanDevice::from_device(&dev, 0).unwrap();
    let (rows, k) = (96, 256);
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0] {
        let bytes = vkml_quant::quantize(ty, &values(rows * k, 7)).unwrap();
        let w = QMatrix::upload(vd.hal(), ty, rows, k, &bytes).unwrap();
        for t in [1usize, 3] {
            let x = VTensor::from_slice(&values(t * k, 8 + t as u64), (t, k), &vd).unwrap();
            let nw = VTensor::from_slice(&values(k, 9), k, &vd).unwrap();
            for act in [None, Some(GluActivation::Silu)] {
                let d0 = vd.stream_stats().dispatches;
                let fused = x.rms_norm_linear(&nw, 1e-5, &w, act).unwrap().to_vec::<f32>().unwrap();
                let d1 = vd.stream_stats().dispatches;
                let xn = x.rms_norm(&nw, 1e-5).unwrap();
                let composed = match act {
                    None => xn.qmatmul(&w),
                    Some(a) => xn.qmatmul_glu(&w, a),
                }
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
                let d2 = vd.stream_stats().dispatches;
                assert_eq!(fused.len(), t * if act.is_some() { rows / 2 } else { rows });
                assert!(fused.iter().any(|&v| v != 0.0), "{ty:?} t {t} {act:?}: all zeros");
                assert_eq!(fused, composed, "{ty:?} t {t} {act:?}");
                assert_eq!(d1 - d0 + 1, d2 - d1, "{ty:?} t {t} {act:?}: the fused form saves one dispatch");
            }
        }
    }
}

fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(1f32, |m, x| m.max(x.abs()));
    max_diff(a, b) / scale
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32
}

/// Greedy generation from `prompt` for `steps` tokens with the same model code on
/// candle's CPU storage, on Vulkan, and on Vulkan with mat-mats from 2 tokens on (the
/// prompt path on every device), and on Vulkan with decode on Q8_1 activations (as GPUs
/// with accelerated integer dot products run it); returns (tokens, worst relative logit
/// difference against the CPU of the Vulkan runs that decode on f32 activations, that of
/// the runs that decode on Q8_1: `tuning::q8_1_activations` of their device, which on a
/// GPU with accelerated integer dot products is all three).
///
/// On the way, the decode step each Vulkan model records ahead is made stale twice: by
/// a read-back of unrelated work on the same device (which submits the step before its
/// token id is written), and by a reset followed by the prompt again. Both must give the
/// CPU's logits.
fn run_all(file: &GgufFile, prompt: &[u32], steps: usize) -> (Vec<u32>, f32, f32) {
    let opts = LoadOptions { ctx: Some(64), ..LoadOptions::default() };
    let mut cpu = Llama::<CpuStorage>::load(&CpuDevice, file, opts, &mut |_, _| {}).unwrap();
    let vd = vdev();
    let mut gpu = Llama::<VulkanStorage>::load(&vd, file, opts, &mut |_, _| {}).unwrap();
    let mut gpu_mm = Llama::<VulkanStorage>::load(&vulkan_device_mat_mat_from(2), file, opts, &mut |_, _| {}).unwrap();
    // Decode on Q8_1 activations (integer-dot mat-vecs, the norm quantizing x) as on GPUs
    // whose integer dot products are accelerated.
    let q8 = VulkanDevice::from_device(&common::device_with(|c| c.integer_dot.packed_4x8_signed_accelerated = true), 0)
        .unwrap();
    let mut gpu_q8 = Llama::<VulkanStorage>::load(&q8, file, opts, &mut |_, _| {}).unwrap();
    let (mut tokens, mut worst, mut worst_q8) = (Vec::new(), 0f32, 0f32);
    let mut input = prompt.to_vec();
    let mut first = Vec::new();
    for step in 0..steps {
        let want = cpu.forward(&input, false).unwrap();
        for (what, m) in [("Vulkan", &mut gpu), ("Vulkan, mat-mat", &mut gpu_mm), ("Vulkan, Q8_1 decode", &mut gpu_q8)]
        {
            let got = m.forward(&input, false).unwrap();
            let q8_decode = what.ends_with("Q8_1 decode") || vkml_ops::tuning::q8_1_activations(vd.hal().caps());
            if q8_decode {
                worst_q8 = worst_q8.max(rel_diff(&got, &want));
            } else {
                worst = worst.max(rel_diff(&got, &want));
            }
            assert_eq!(argmax(&got), argmax(&want), "step {step}: {what} picked another token than the CPU");
            if step == 0 && what == "Vulkan" {
                first = got;
            }
        }
        if step == 1 {
            let other = VTensor::from_slice(&[0.5f32, -1.0], 2, &vd).unwrap().silu().unwrap();
            assert_eq!(other.to_vec::<f32>().unwrap().len(), 2);
        }
        tokens.push(argmax(&want));
        input = vec![argmax(&want)];
    }
    gpu.reset();
    let again = gpu.forward(prompt, false).unwrap();
    assert_eq!(again, first, "the prompt after a reset gives other logits than the first time");
    (tokens, worst, worst_q8)
}

/// Relative logit bound, Vulkan vs CPU: f16 KV cache rounding is
/// identical on both sides; what differs is summation order (subgroup reductions,
/// split-K attention) and the GPU's exp, all f32.
const REL_TOL: f32 = 1e-3;

/// The same bound with decode on Q8_1 activations: every 32 values of x rounded to 8 bits
/// (a step of up to 1/254 of the block's largest magnitude, as ggml's own backends do),
/// which moved these models' logits by 1-2 % of the largest one on lavapipe. A wrong
/// block or scale moves them by the whole range; the greedy tokens must agree as well.
const Q8_REL_TOL: f32 = 3e-2;

#[test]
fn llama_on_cpu_and_vulkan_agree_synthetic() {
    let shape = SynthShape {
        name: "tiny",
        n_layers: 2,
        n_embd: 128,
        n_ff: 256,
        n_head: 4,
        n_kv_head: 2,
        vocab: 512,
        tied: true,
    };
    for (arch, ty) in [("llama", GgmlType::Q4_0), ("qwen2", GgmlType::Q8_0)] {
        let file = synthetic_model(arch, &shape, ty, 11).unwrap();
        let prompt: Vec<u32> = (0..12u32).map(|i| (i * 37 + 5) % shape.vocab as u32).collect();
        let (_, dg, dq) = run_all(&file, &prompt, 8);
        assert!(dg <= REL_TOL, "{arch}: Vulkan vs CPU {dg}");
        assert!(dq <= Q8_REL_TOL, "{arch}: Vulkan on Q8_1 activations vs CPU {dq}");
    }
}

#[test]
fn llama_on_cpu_and_vulkan_agree_smollm2() {
    let path = test_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let file = GgufFile::open(&path).unwrap();
    // A 4-token prompt then 16 greedy steps.
    let prompt = [1u32, 504, 3458, 282];
    let (tokens, dg, dq) = run_all(&file, &prompt, 16);
    eprintln!("tokens {tokens:?}; Vulkan vs CPU {dg:.2e}, on Q8_1 activations {dq:.2e}");
    assert!(dg <= REL_TOL, "Vulkan vs CPU {dg}");
    assert!(dq <= Q8_REL_TOL, "Vulkan on Q8_1 activations vs CPU {dq}");
    // candle-transformers' quantized_llama (exact f32 weights) picks the same tokens wherever
    // its top-1/top-2 margin exceeds 0.1: the oracle is not circular.
    std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
    let mut f = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut cm =
        candle_transformers::models::quantized_llama::ModelWeights::from_gguf(content, &mut f, &Cpu::Cpu).unwrap();
    let mut input = prompt.to_vec();
    let mut pos = 0;
    for (i, &t) in tokens.iter().enumerate() {
        let x = CTensor::new(input.as_slice(), &Cpu::Cpu).unwrap().unsqueeze(0).unwrap();
        let l = flat(&cm.forward(&x, pos).unwrap());
        pos += input.len();
        let mut top = l.clone();
        top.sort_by(|a, b| b.total_cmp(a));
        if top[0] - top[1] > 0.1 {
            assert_eq!(argmax(&l), t, "step {i}: candle-transformers picks another token");
        }
        input = vec![t];
    }
}
