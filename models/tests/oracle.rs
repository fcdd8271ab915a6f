//! The conformance oracle (DESIGN.md): the same model code on candle's `CpuStorage` and
//! on [`VulkanStorage`] (with the device's own kernel choice, with prompts forced onto
//! mat-mats, and with decode on Q8_1 activations), on synthetic models of every
//! architecture and on the real SmolLM2-135M-Instruct Q4_1: the same greedy tokens, and
//! logits within a bound at every position. Decode steps recorded ahead are checked on
//! the way: a reset, and a read-back of unrelated work between two steps, make them
//! stale. Also the decode step's fused norm and product against the two calls.

mod common;
use common::{argmax, flat, margin, max_diff, test_model, values, vulkan_device, vulkan_device_mat_mat_from};

use candle_core::cpu_backend::CpuDevice;
use candle_core::{CpuStorage, Device as Cpu, Tensor as CTensor};
use vkml_candle::front::Tensor;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_models::synth::{synthetic_model, SynthExperts, SynthShape};
use vkml_models::tensor::ModelTensor;
use vkml_models::{LoadOptions, Runner};
use vkml_quant::gguf::GgufFile;
use vkml_quant::GgmlType;

type VTensor = Tensor<VulkanStorage>;

/// The decode step's fused norm and product (`rms_norm_linear`), on a device whose integer
/// dot products count as accelerated so that its mat-vecs take Q8_1 activations: for
/// several tokens the norm writes x as Q8_1 itself, and the values must be the bits of
/// `rms_norm` followed by `qmatmul` / `qmatmul_glu` (which quantize the normalised x
/// separately); for one token the mat-vec normalises and quantizes x itself
/// (`quant::dot_quantizes_x`), reducing the sum of squares in another order, so a quant
/// may move by one step at a rounding boundary: within 1 % of the largest output. Either
/// way from one dispatch fewer.
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
                if vkml_ops::quant::dot_quantizes_x(dev.caps(), &w, t, &vkml_ops::tuning::mat_vec_config(dev.caps())) {
                    let r = rel_diff(&fused, &composed);
                    assert!(r <= 1e-2, "{ty:?} t {t} {act:?}: relative difference {r}");
                } else {
                    assert_eq!(fused, composed, "{ty:?} t {t} {act:?}");
                }
                assert_eq!(d1 - d0 + 1, d2 - d1, "{ty:?} t {t} {act:?}: the fused form saves one dispatch");
            }
        }
    }
}

/// Max |a - b| over the step relative to the largest |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(1f32, |m, x| m.max(x.abs()));
    max_diff(a, b) / scale
}

/// Greedy generation from `prompt` for `steps` tokens with the same model code on
/// candle's CPU storage, on Vulkan, and on Vulkan with mat-mats from 2 tokens on (the
/// prompt path on every device), on Vulkan with decode on Q8_1 activations (as GPUs
/// with accelerated integer dot products run it), and on Vulkan with the prompt in chunks
/// of 4 (sliding-window caches as rings); returns (tokens, worst relative logit
/// difference against the CPU of the Vulkan runs that decode on f32 activations, that of
/// the runs that decode on Q8_1: `tuning::q8_1_activations` of their device, which on a
/// GPU with accelerated integer dot products is all three).
///
/// Each run must pick the CPU's token wherever the CPU's top-1/top-2 margin exceeds twice
/// the run's bound (`tol` for f32 decode, `q8_tol` for Q8_1 decode, relative to the largest
/// logit): a smaller margin is a near-tie that the allowed rounding may flip.
///
/// On the way, the decode step each Vulkan model records ahead is made stale twice: by
/// a read-back of unrelated work on the same device (which submits the step before its
/// token id is written), and by a reset followed by the prompt again. Both must give the
/// CPU's logits.
fn run_all(file: &GgufFile, prompt: &[u32], steps: usize, q8_tol: f32) -> (Vec<u32>, f32, f32) {
    let opts = LoadOptions { ctx: Some(64), ..LoadOptions::default() };
    let mut cpu = Runner::<CpuStorage>::load(&CpuDevice, file, opts, &mut |_, _| {}).unwrap();
    let vd = vulkan_device();
    let mut gpu = Runner::<VulkanStorage>::load(&vd, file, opts, &mut |_, _| {}).unwrap();
    let mut gpu_mm = Runner::<VulkanStorage>::load(&vulkan_device_mat_mat_from(2), file, opts, &mut |_, _| {}).unwrap();
    // Decode on Q8_1 activations (integer-dot mat-vecs, the norm quantizing x) as on GPUs
    // whose integer dot products are accelerated.
    let q8 = VulkanDevice::from_device(&common::device_with(|c| c.integer_dot.packed_4x8_signed_accelerated = true), 0)
        .unwrap();
    let mut gpu_q8 = Runner::<VulkanStorage>::load(&q8, file, opts, &mut |_, _| {}).unwrap();
    // The prompt in chunks of 4: sliding-window layers' caches become rings of window + 3
    // slots, which the prompt and the decode steps run around.
    let chunked = LoadOptions { max_batch: 4, ..opts };
    let mut gpu_chunks = Runner::<VulkanStorage>::load(&vd, file, chunked, &mut |_, _| {}).unwrap();
    let (mut tokens, mut worst, mut worst_q8) = (Vec::new(), 0f32, 0f32);
    let mut input = prompt.to_vec();
    let mut first = Vec::new();
    for step in 0..steps {
        let want = cpu.forward(&input, false).unwrap();
        for (what, m) in [
            ("Vulkan", &mut gpu),
            ("Vulkan, mat-mat", &mut gpu_mm),
            ("Vulkan, Q8_1 decode", &mut gpu_q8),
            ("Vulkan, chunks of 4", &mut gpu_chunks),
        ] {
            let got = m.forward(&input, false).unwrap();
            let q8_decode = what.ends_with("Q8_1 decode") || vkml_ops::tuning::q8_1_activations(vd.hal().caps());
            if q8_decode {
                worst_q8 = worst_q8.max(rel_diff(&got, &want));
            } else {
                worst = worst.max(rel_diff(&got, &want));
            }
            let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
            let tol = if q8_decode { q8_tol } else { REL_TOL };
            if margin(&want) > 2.0 * tol * scale {
                assert_eq!(argmax(&got), argmax(&want), "step {step}: {what} picked another token than the CPU");
            }
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

/// [`Q8_REL_TOL`] for the seven-layer synthetic gemma3, whose rounding adds up over more
/// layers (3.2e-2 measured on lavapipe, 2.6e-2 on the H100).
const Q8_REL_TOL_DEEP: f32 = 5e-2;

/// Every architecture, on small shapes: qwen3 with a head dim other than n_embd / n_head,
/// qwen2moe with 2 of 8 experts and a shared one, qwen3moe with it and 2 of 8 experts per
/// token, gpt-oss with it, 2 of 8 experts, three
/// layers (two with a window of 5),
/// gemma3 with seven layers (one global) and gemma2 with three (one global), each with a
/// window of 5 that the 12-token prompt and the decode steps run past.
#[test]
fn models_on_cpu_and_vulkan_agree_synthetic() {
    let shape = common::tiny_shape(2);
    let qwen3 = SynthShape { arch: "qwen3", head_dim: Some(64), ..shape };
    let gemma3 = SynthShape { arch: "gemma3", head_dim: Some(64), sliding_window: Some(5), n_layers: 7, ..shape };
    let experts = Some(SynthExperts { n_expert: 8, n_used: 2, n_ff_exp: 64 });
    for (arch, shape, ty) in [
        ("llama", shape, GgmlType::Q4_0),
        ("qwen2", shape, GgmlType::Q8_0),
        ("qwen3", qwen3, GgmlType::Q4_0),
        ("qwen2moe", SynthShape { arch: "qwen2moe", experts, ..shape }, GgmlType::Q8_0),
        ("qwen3moe", SynthShape { arch: "qwen3moe", experts, ..qwen3 }, GgmlType::Q4_0),
        (
            "gpt-oss",
            SynthShape { arch: "gpt-oss", experts, n_layers: 3, sliding_window: Some(5), ..qwen3 },
            GgmlType::MXFP4,
        ),
        ("gemma3", gemma3, GgmlType::Q8_0),
        ("gemma2", SynthShape { arch: "gemma2", n_layers: 3, ..gemma3 }, GgmlType::Q4_0),
        ("phi3", SynthShape { arch: "phi3", tied: false, ..shape }, GgmlType::Q4_0),
    ] {
        let file = synthetic_model(arch, &shape, ty, 11).unwrap();
        let prompt: Vec<u32> = (0..12u32).map(|i| (i * 37 + 5) % shape.vocab as u32).collect();
        let q8_tol = if shape.n_layers > 2 { Q8_REL_TOL_DEEP } else { Q8_REL_TOL };
        let (_, dg, dq) = run_all(&file, &prompt, 8, q8_tol);
        assert!(dg <= REL_TOL, "{arch}: Vulkan vs CPU {dg}");
        eprintln!("{arch}: Vulkan vs CPU {dg:.2e}, on Q8_1 activations {dq:.2e}");
        assert!(dq <= q8_tol, "{arch}: Vulkan on Q8_1 activations vs CPU {dq}");
    }
}

#[test]
fn llama_on_cpu_and_vulkan_agree_smollm2() {
    let path = test_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let file = GgufFile::open(&path).unwrap();
    // A 4-token prompt then 16 greedy steps.
    let prompt = [1u32, 504, 3458, 282];
    let (tokens, dg, dq) = run_all(&file, &prompt, 16, Q8_REL_TOL);
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
        if margin(&l) > 0.1 {
            assert_eq!(argmax(&l), t, "step {i}: candle-transformers picks another token");
        }
        input = vec![t];
    }
}
