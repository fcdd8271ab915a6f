//! The tensor front and the generic llama on it.
//!
//! - Front ops on Vulkan against the same ops on candle's CPU tensors (views, copies,
//!   broadcast binary ops, unary ops, dtype conversion).
//! - The conformance oracle (DESIGN.md): the same model code ([`GenericLlama`]) on
//!   candle's `CpuStorage` and on [`VulkanStorage`], on synthetic llama and qwen2 models
//!   and on the real SmolLM2-135M-Instruct Q4_1: the same greedy tokens, and logits
//!   within a bound at every position. The fused engine ([`Llama`]) agrees with both.

mod common;
use common::{device, test_model};

use candle_core::cpu_backend::CpuDevice;
use candle_core::{CpuStorage, DType, Device as Cpu, Tensor as CTensor};
use vkml_candle::front::Tensor;
use vkml_candle::llama::{Llama, LoadOptions};
use vkml_candle::llama_generic::GenericLlama;
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
    let i = VTensor::from_slice(&[1u32, 2], 2, &dev).unwrap();
    let e = i.silu().unwrap_err().to_string();
    assert!(e.contains("U32") && e.contains("silu"), "{e}");
}

/// Max |a - b| over the step relative to the largest |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(1f32, |m, x| m.max(x.abs()));
    max_diff(a, b) / scale
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32
}

/// Greedy generation from `prompt` for `steps` tokens on the generic model over both
/// storages and on the fused engine; returns (tokens, worst relative logit difference of
/// Vulkan vs CPU, of fused vs generic Vulkan).
fn run_all(file: &GgufFile, prompt: &[u32], steps: usize) -> (Vec<u32>, f32, f32) {
    let vdev = vdev();
    let mut cpu = GenericLlama::<CpuStorage>::load(&CpuDevice, file, Some(64)).unwrap();
    let mut gpu = GenericLlama::<VulkanStorage>::load(&vdev, file, Some(64)).unwrap();
    let opts = LoadOptions { ctx: Some(64), ..LoadOptions::default() };
    let mut fused = Llama::load(vdev.hal(), file, opts, &mut |_, _| {}).unwrap();
    let (mut tokens, mut worst_gpu, mut worst_fused) = (Vec::new(), 0f32, 0f32);
    let mut input = prompt.to_vec();
    for step in 0..steps {
        let want = cpu.forward(&input, false).unwrap();
        let got = gpu.forward(&input, false).unwrap();
        let f = fused.forward(&input, false).unwrap();
        worst_gpu = worst_gpu.max(rel_diff(&got, &want));
        worst_fused = worst_fused.max(rel_diff(&f, &got));
        let (tc, tg) = (argmax(&want), argmax(&got));
        assert_eq!(tg, tc, "step {step}: Vulkan picked {tg}, CPU {tc}");
        assert_eq!(argmax(&f), tg, "step {step}: the fused engine differs from the generic model");
        tokens.push(tc);
        input = vec![tc];
    }
    (tokens, worst_gpu, worst_fused)
}

/// Relative logit bound, Vulkan vs CPU and fused vs generic: f16 KV cache rounding is
/// identical on both sides; what differs is summation order (subgroup reductions,
/// split-K attention) and the GPU's exp, all f32.
const REL_TOL: f32 = 1e-3;

#[test]
fn generic_llama_on_cpu_and_vulkan_agree_synthetic() {
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
        let (_, dg, df) = run_all(&file, &prompt, 8);
        assert!(dg <= REL_TOL, "{arch}: Vulkan vs CPU {dg}");
        assert!(df <= REL_TOL, "{arch}: fused vs generic {df}");
    }
}

#[test]
fn generic_llama_on_cpu_and_vulkan_agree_smollm2() {
    let path = test_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let file = GgufFile::open(&path).unwrap();
    // A 4-token prompt then 16 greedy steps.
    let prompt = [1u32, 504, 3458, 282];
    let (tokens, dg, df) = run_all(&file, &prompt, 16);
    eprintln!("tokens {tokens:?}; Vulkan vs CPU {dg:.2e}, fused vs generic {df:.2e}");
    assert!(dg <= REL_TOL, "Vulkan vs CPU {dg}");
    assert!(df <= REL_TOL, "fused vs generic {df}");
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
