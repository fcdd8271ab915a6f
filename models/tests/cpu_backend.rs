//! The CPU backend (weights in their GGML blocks, activations quantized to Q8_1 / Q8_K
//! per row, as llama.cpp's CPU backend and candle's default `QMatMul` multiply):
//! - against candle-transformers' `quantized_llama` with candle's default `QMatMul` (the
//!   same Q8 rounding of the activations, an independent implementation), teacher-forced
//!   on SmolLM2-135M Q4_1: logits within [`MAX_ABS_VS_CANDLE_Q8`], argmax agreeing past
//!   [`MARGIN`];
//! - against the dequantized CPU oracle (exact arithmetic) on SmolLM2 and Gemma 3: within
//!   the Q8 rounding, [`MAX_REL_VS_ORACLE`] of the logits' spread.
//!
//! The bounds are what was measured, with some margin; the Q8 rounding is the CPU
//! backend's by design (as llama.cpp's), the oracle stays exact.

mod common;

use candle_core::cpu_backend::CpuDevice;
use candle_core::quantized::gguf_file;
use candle_core::CpuStorage;
use candle_transformers::models::quantized_llama::ModelWeights;
use vkml_models::tokenizer::GgufTokenizer;
use vkml_models::{LoadOptions, Runner, WeightFormat};
use vkml_quant::gguf::GgufFile;

/// Largest |vkml - candle| where both quantize the activations to Q8 (logits span about
/// ±40). With exact arithmetic the two differ by 0.04 (vkml's f16 KV cache against
/// candle's f32 one, summation order); rounding activations to 8 bits turns such small
/// differences into whole Q8 steps where a value sits near a rounding boundary, so the
/// worst seen here is 1.48.
const MAX_ABS_VS_CANDLE_Q8: f32 = 2.0;
/// Top-1/top-2 margin above which the argmax must agree with candle's.
const MARGIN: f32 = 0.5;
/// Largest |blocks - dequantized| relative to the logits' spread at a position, per
/// model: the Q8 rounding of the activations. Seen: SmolLM2 0.033 (candle's own Q8 path
/// moves its logits by about 1.5 of a spread of about 40); Gemma 3 0.135, whose
/// activations have outliers that one Q8 scale per block of 32 or 256 values resolves
/// poorly (llama.cpp's CPU backend rounds them the same way).
const MAX_REL_VS_ORACLE: [(&str, f32); 2] =
    [("SmolLM2-135M-Instruct.Q4_1.gguf", 0.05), ("gemma-3-270m-q4_k_m.gguf", 0.2)];

/// The tokens of a chat prompt followed by a plausible reply.
fn conversation(file: &GgufFile) -> (Vec<u32>, usize) {
    let tok = GgufTokenizer::from_gguf(file).unwrap();
    let prompt = tok.encode(&tok.apply_chat_template(None, "What is the capital of France?").unwrap(), true).unwrap();
    let reply = tok.encode("The capital of France is Paris. It is known for the Eiffel Tower.", false).unwrap();
    let n = prompt.len();
    ([prompt, reply].concat(), n)
}

/// The logits after the prompt and after each following token, one token at a time.
fn vkml_steps(file: &GgufFile, weights: WeightFormat, ids: &[u32], prompt: usize) -> Vec<Vec<f32>> {
    let opts = LoadOptions { ctx: Some(256), max_batch: 64, weights, micro_batch: None };
    let mut r = Runner::<CpuStorage>::load(&CpuDevice, file, opts, &mut |_, _| {}).unwrap();
    let mut out = vec![r.forward(&ids[..prompt], false).unwrap()];
    for &t in &ids[prompt..] {
        out.push(r.forward(&[t], false).unwrap());
    }
    out
}

fn candle_steps(path: &std::path::Path, ids: &[u32], prompt: usize) -> Vec<Vec<f32>> {
    assert!(std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_none(), "this test needs candle's Q8 QMatMul");
    let cpu = candle_core::Device::Cpu;
    let mut f = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let mut model = ModelWeights::from_gguf(content, &mut f, &cpu).unwrap();
    let mut run = |input: &[u32], pos: usize| -> Vec<f32> {
        let x = candle_core::Tensor::new(input, &cpu).unwrap().unsqueeze(0).unwrap();
        model.forward(&x, pos).unwrap().squeeze(0).unwrap().to_vec1().unwrap()
    };
    let mut out = vec![run(&ids[..prompt], 0)];
    for (i, &t) in ids[prompt..].iter().enumerate() {
        out.push(run(&[t], prompt + i));
    }
    out
}

#[test]
fn smollm2_blocks_match_candle_on_q8_activations() {
    let path = common::test_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let file = GgufFile::open(&path).unwrap();
    let (ids, prompt) = conversation(&file);
    let want = candle_steps(&path, &ids, prompt);
    let got = vkml_steps(&file, WeightFormat::Blocks, &ids, prompt);
    let (mut worst, mut checked) = (0f32, 0);
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let d = common::max_diff(w, g);
        worst = worst.max(d);
        if common::margin(w) > MARGIN {
            assert_eq!(common::argmax(g), common::argmax(w), "step {i}: margin {}", common::margin(w));
            checked += 1;
        }
    }
    eprintln!("SmolLM2 blocks vs candle Q8: {} steps, worst |d| {worst:.4}, {checked} argmaxes checked", want.len());
    assert!(worst <= MAX_ABS_VS_CANDLE_Q8, "{worst}");
    assert!(checked * 2 > want.len(), "most steps are clear: {checked} of {}", want.len());
}

#[test]
fn blocks_stay_near_the_dequantized_oracle() {
    for (name, bound) in MAX_REL_VS_ORACLE {
        let file = GgufFile::open(common::test_model(name)).unwrap();
        let (ids, prompt) = conversation(&file);
        let want = vkml_steps(&file, WeightFormat::Dequantized, &ids, prompt);
        let got = vkml_steps(&file, WeightFormat::Blocks, &ids, prompt);
        let mut worst = 0f32;
        for (w, g) in want.iter().zip(&got) {
            let hi = w.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let lo = w.iter().fold(f32::INFINITY, |m, &x| m.min(x));
            worst = worst.max(common::max_diff(w, g) / (hi - lo));
        }
        eprintln!("{name}: blocks vs dequantized over {} steps: worst {worst:.4} of the spread", want.len());
        assert!(worst <= bound, "{name}: {worst}");
    }
}

/// The mixture-of-experts architectures on the CPU backend (each chosen expert's rows as
/// block dot products on Q8 activations) against the dequantized oracle, teacher-forced on
/// synthetic models: qwen3moe (Q4_0) and gpt-oss (MXFP4 experts, Q8_0 elsewhere), 2 of 8
/// experts per token; within the Q8 rounding, 5 % of the logits' spread (seen: 1.0 % and
/// 0.5 %).
#[test]
fn moe_blocks_stay_near_the_dequantized_oracle() {
    use vkml_models::synth::{synthetic_model, SynthExperts, SynthShape};
    use vkml_quant::GgmlType;
    let experts = Some(SynthExperts { n_expert: 8, n_used: 2, n_ff_exp: 64 });
    let qwen3moe = SynthShape { arch: "qwen3moe", head_dim: Some(64), experts, ..common::tiny_shape(2) };
    let oss = SynthShape { arch: "gpt-oss", sliding_window: Some(5), n_layers: 3, ..qwen3moe };
    for (shape, ty) in [(qwen3moe, GgmlType::Q4_0), (oss, GgmlType::MXFP4)] {
        let file = synthetic_model(shape.arch, &shape, ty, 13).unwrap();
        let ids: Vec<u32> = (0..20u32).map(|i| (i * 37 + 5) % shape.vocab as u32).collect();
        let want = vkml_steps(&file, WeightFormat::Dequantized, &ids, 12);
        let got = vkml_steps(&file, WeightFormat::Blocks, &ids, 12);
        let mut worst = 0f32;
        for (w, g) in want.iter().zip(&got) {
            let hi = w.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let lo = w.iter().fold(f32::INFINITY, |m, &x| m.min(x));
            worst = worst.max(common::max_diff(w, g) / (hi - lo));
        }
        eprintln!("{}: blocks vs dequantized over {} steps: worst {worst:.4} of the spread", shape.arch, want.len());
        assert!(worst <= 0.05, "{}: {worst}", shape.arch);
    }
}
