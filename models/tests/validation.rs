//! Each architecture's keys and tensors validated at load: a bad value ends in one line
//! that names the key or tensor, before any weight reaches a device; values llama.cpp
//! gives a meaning keep it (a sliding window of 0: no local layers). Synthetic files
//! with one key or tensor changed, loaded on candle's CPU backend.

mod common;

use candle_core::cpu_backend::CpuDevice;
use candle_core::CpuStorage;
use vkml_models::config::{Hparams, Meta};
use vkml_models::synth::{synthetic_model, SynthExperts, SynthShape};
use vkml_models::{LoadOptions, Runner};
use vkml_quant::gguf::{GgufArray, GgufFile, GgufValue, GgufWriter};
use vkml_quant::GgmlType;

const TINY: SynthShape = SynthShape {
    name: "tiny",
    arch: "llama",
    head_dim: Some(64),
    sliding_window: Some(8),
    experts: Some(SynthExperts { n_expert: 4, n_used: 2, n_ff_exp: 64 }),
    n_layers: 7,
    n_embd: 128,
    n_ff: 256,
    n_head: 4,
    n_kv_head: 2,
    vocab: 300,
    tied: true,
};

/// A synthetic `arch` model with key `key` set to `value` (added, or removed with
/// `None`) and tensor `tensor` (if given) replaced by f32 data of `len` values.
fn edited(arch: &str, key: &str, value: Option<GgufValue>, tensor: Option<(&str, usize)>) -> GgufFile {
    let mut w = GgufWriter::from_file(&synthetic_model(arch, &TINY, GgmlType::Q8_0, 3).unwrap());
    w.set_kv(key, value);
    if let Some((name, len)) = tensor {
        for t in w.tensors.iter_mut().filter(|t| t.name == name) {
            (t.ty, t.dims, t.data) = (GgmlType::F32, vec![len as u64], bytemuck::cast_slice(&vec![1f32; len]).to_vec());
        }
    }
    GgufFile::from_vec(w.to_bytes().unwrap()).unwrap()
}

fn load_err(f: &GgufFile) -> String {
    let opts = LoadOptions { ctx: Some(32), max_batch: 8, ..Default::default() };
    let e = Runner::<CpuStorage>::load(&CpuDevice, f, opts, &mut |_, _| {}).unwrap_err().to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn every_architecture_loads_from_its_synthetic_file() {
    for arch in vkml_models::arch::ARCHITECTURES {
        let f = synthetic_model(arch, &TINY, GgmlType::Q8_0, 3).unwrap();
        let opts = LoadOptions { ctx: Some(32), max_batch: 8, ..Default::default() };
        let mut m = Runner::<CpuStorage>::load(&CpuDevice, &f, opts, &mut |_, _| {}).unwrap();
        let logits = m.forward(&[1, 2, 3], false).unwrap();
        assert_eq!(logits.len(), TINY.vocab, "{arch}");
        assert!(logits.iter().all(|x| x.is_finite()), "{arch}");
    }
}

#[test]
fn unsupported_architecture_names_itself_and_the_supported_ones() {
    let e = load_err(&edited("llama", "general.architecture", Some(GgufValue::String("gpt2".into())), None));
    assert!(
        e.contains(
            "architecture \"gpt2\" is not supported (supported: llama, mistral, qwen2, qwen2moe, qwen3, qwen3moe, gpt-oss, gemma2, gemma3, phi3)"
        ),
        "{e}"
    );
}

#[test]
fn bad_expert_counts_are_errors_naming_the_key() {
    let u = |v: u32| Some(GgufValue::U32(v));
    let e = load_err(&edited("qwen3moe", "qwen3moe.expert_used_count", u(0), None));
    assert!(e.contains("qwen3moe.expert_used_count is 0"), "{e}");
    let e = load_err(&edited("qwen3moe", "qwen3moe.expert_used_count", u(5), None));
    assert!(e.contains("qwen3moe.expert_used_count is 5: 1 ..= 4 of the 4 experts"), "{e}");
    let e = load_err(&edited("qwen3moe", "qwen3moe.expert_count", u(2000), None));
    assert!(e.contains("qwen3moe.expert_count is 2000"), "{e}");
    let e = load_err(&edited("qwen3moe", "qwen3moe.expert_count", None, None));
    assert!(e.contains("qwen3moe.expert_count"), "{e}");
    // Experts the tensors do not hold.
    let e = load_err(&edited("qwen3moe", "qwen3moe.expert_count", u(3), None));
    assert!(e.contains("ffn_gate_inp.weight has shape"), "{e}");
}

#[test]
fn head_dim_past_the_kernels_is_an_error_naming_the_key() {
    let e = load_err(&edited("qwen3", "qwen3.attention.key_length", Some(GgufValue::U32(512)), None));
    assert!(e.contains("head dim 512 (qwen3.attention.key_length): need an even dim of at most 256"), "{e}");
    let e = load_err(&edited("qwen3", "qwen3.attention.value_length", Some(GgufValue::U32(32)), None));
    assert!(e.contains("qwen3.attention.value_length 32 differs from the key length 64"), "{e}");
}

#[test]
fn qk_norm_weights_of_the_wrong_length_are_errors_naming_the_tensor() {
    for arch in ["qwen3", "gemma3"] {
        let key = format!("{arch}.general.unused");
        let f = edited(arch, &key, None, Some(("blk.1.attn_k_norm.weight", 32)));
        let e = load_err(&f);
        assert!(e.contains("tensor blk.1.attn_k_norm.weight has 32 elements, expected 64"), "{arch}: {e}");
        assert!(e.contains("must hold the head dim"), "{arch}: {e}");
    }
}

#[test]
fn bad_hyper_parameters_are_errors_naming_the_key() {
    let e =
        load_err(&edited("gemma3", "gemma3.attention.layer_norm_rms_epsilon", Some(GgufValue::F32(f32::NAN)), None));
    assert!(e.contains("gemma3.attention.layer_norm_rms_epsilon is NaN, not a finite number"), "{e}");
    let e = load_err(&edited("llama", "llama.attention.layer_norm_rms_epsilon", Some(GgufValue::F32(-1.0)), None));
    assert!(e.contains("llama.attention.layer_norm_rms_epsilon is -1, not a positive number"), "{e}");
    let e = load_err(&edited("qwen2", "qwen2.attention.head_count_kv", Some(GgufValue::U32(3)), None));
    assert!(e.contains("4 heads over 3 KV heads"), "{e}");
    let e = load_err(&edited("gemma2", "gemma2.attn_logit_softcapping", Some(GgufValue::F32(0.0)), None));
    assert!(e.contains("gemma2.attn_logit_softcapping is 0, not a positive number"), "{e}");
    let e = load_err(&edited("gemma2", "gemma2.attention.sliding_window", Some(GgufValue::U32(0)), None));
    assert!(e.contains("gemma2.attention.sliding_window is 0"), "{e}");
    let e = load_err(&edited("phi3", "phi3.rope.freq_base", Some(GgufValue::F32(0.0)), None));
    assert!(e.contains("phi3.rope.freq_base is 0, not a positive number"), "{e}");
    let e = load_err(&edited("llama", "llama.block_count", None, None));
    assert!(e.contains("metadata llama.block_count is missing"), "{e}");
}

#[test]
fn gemma3_sliding_window_pattern_must_fit_the_layers() {
    let key = "gemma3.attention.sliding_window_pattern";
    let arr = |v: Vec<bool>| Some(GgufValue::Array(GgufArray::Bool(v)));
    let e = load_err(&edited("gemma3", key, arr(vec![true, false, true]), None));
    assert!(e.contains("metadata gemma3.attention.sliding_window_pattern has 3 entries for 7 layers"), "{e}");
    let e = load_err(&edited("gemma3", key, Some(GgufValue::String("six".into())), None));
    assert!(e.contains("gemma3.attention.sliding_window_pattern is neither an unsigned integer nor an array"), "{e}");
    let config = |f: &GgufFile| {
        let m = Meta::new(f).unwrap();
        vkml_models::arch::gemma3::config(&m, &Hparams::from_meta(&m).unwrap()).unwrap()
    };
    // The default pattern of 6: layer 5 global, the rest local.
    let c = config(&synthetic_model("gemma3", &TINY, GgmlType::Q8_0, 3).unwrap());
    assert_eq!((c.sliding_window, c.local.clone()), (Some(8), vec![true, true, true, true, true, false, true]));
    // A number n: layer i local when i % n < n - 1; 0: every layer local (llama.cpp).
    let c = config(&edited("gemma3", key, Some(GgufValue::U32(2)), None));
    assert_eq!(c.local, vec![true, false, true, false, true, false, true]);
    let c = config(&edited("gemma3", key, Some(GgufValue::U32(0)), None));
    assert_eq!(c.local, vec![true; 7]);
    // A window of 0, or none: no local layers.
    let c = config(&edited("gemma3", "gemma3.attention.sliding_window", Some(GgufValue::U32(0)), None));
    assert_eq!((c.sliding_window, c.local), (None, vec![false; 7]));
    let c = config(&edited("gemma3", "gemma3.attention.sliding_window", None, None));
    assert_eq!(c.local, vec![false; 7]);
}

/// Counts from the file that no tensor backs are refused before anything is allocated:
/// a block count past the blocks present (10^9 once aborted the process allocating for
/// it), a token list shorter than the embedding's rows.
#[test]
fn counts_are_checked_against_the_tensors_present() {
    for n in [8u64, 1_000_000_000, 1 << 62] {
        let t = std::time::Instant::now();
        let e = load_err(&edited("llama", "llama.block_count", Some(GgufValue::U64(n)), None));
        assert!(e.contains(&format!("llama.block_count is {n}, but the file has tensors for 7 blocks")), "{e}");
        assert!(t.elapsed().as_secs() < 2);
    }
    let tokens: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    let e =
        load_err(&edited("qwen3", "tokenizer.ggml.tokens", Some(GgufValue::Array(GgufArray::String(tokens))), None));
    assert!(e.contains("tokenizer.ggml.tokens lists 200 tokens, token_embd.weight has 300 rows"), "{e}");
}

/// Contexts past what vkml loads, or past the device's memory, are one-line errors before
/// any allocation (a context of 2^59 + 1 once wrapped the KV-cache size to 384 bytes).
#[test]
fn impossible_contexts_are_refused_before_allocating() {
    let f = synthetic_model("llama", &TINY, GgmlType::Q8_0, 3).unwrap();
    for ctx in [576_460_752_303_423_489usize, usize::MAX, (1 << 20) + 1] {
        let opts = LoadOptions { ctx: Some(ctx), max_batch: 8, ..Default::default() };
        let e = Runner::<CpuStorage>::load(&CpuDevice, &f, opts, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains(&format!("a context of {ctx} positions is past the 1048576")), "{e}");
    }
    // 2^20 positions of a model with 32 KV heads of 256 dims over 7 layers: 224 GiB of KV
    // cache, more than any test machine's Vulkan device has.
    let wide = SynthShape { n_head: 32, n_kv_head: 32, head_dim: Some(256), ..TINY };
    let f = synthetic_model("qwen3", &wide, GgmlType::Q8_0, 3).unwrap();
    let dev = vkml_candle::vulkan::VulkanDevice::from_device(&common::device(), 0).unwrap();
    let t = std::time::Instant::now();
    let opts = LoadOptions { ctx: Some(1 << 20), max_batch: 8, ..Default::default() };
    let e = Runner::<vkml_candle::vulkan::VulkanStorage>::load(&dev, &f, opts, &mut |_, _| {}).unwrap_err().to_string();
    assert!(
        e.contains("GiB of KV cache and rope tables for a context of 1048576 positions exceed the device's"),
        "{e}"
    );
    assert!(t.elapsed().as_secs() < 5);
}

/// An architecture's tensors that every layer has (gpt-oss's biases and sinks, qwen2moe's
/// shared expert) are required: a file without one is an error naming the tensor, not a
/// model that silently runs without it.
#[test]
fn required_tensors_missing_are_errors_naming_them() {
    for (arch, name) in [
        ("gpt-oss", "blk.1.attn_sinks.weight"),
        ("gpt-oss", "blk.0.ffn_down_exps.bias"),
        ("qwen2moe", "blk.0.ffn_gate_inp_shexp.weight"),
    ] {
        let mut w = GgufWriter::from_file(&synthetic_model(arch, &TINY, GgmlType::Q8_0, 3).unwrap());
        let before = w.tensors.len();
        w.tensors.retain(|t| t.name != name);
        assert_eq!(w.tensors.len(), before - 1, "{arch} has {name}");
        let e = load_err(&GgufFile::from_vec(w.to_bytes().unwrap()).unwrap());
        assert!(e.contains(&format!("tensor {name} is missing ({arch} has it in every layer)")), "{e}");
    }
}

/// `{arch}.expert_weights_scale` scales nothing for the MoE architectures vkml loads, as
/// llama.cpp reads it only for others (deepseek2 and the like).
#[test]
fn expert_weights_scale_is_ignored_as_llama_cpp_does() {
    let logits = |f: &GgufFile| {
        let opts = LoadOptions { ctx: Some(32), max_batch: 8, ..Default::default() };
        Runner::<CpuStorage>::load(&CpuDevice, f, opts, &mut |_, _| {}).unwrap().forward(&[1, 2, 3], false).unwrap()
    };
    for arch in ["qwen3moe", "qwen2moe", "gpt-oss"] {
        let plain = synthetic_model(arch, &TINY, GgmlType::Q8_0, 3).unwrap();
        let scaled = edited(arch, &format!("{arch}.expert_weights_scale"), Some(GgufValue::F32(2.5)), None);
        assert_eq!(logits(&scaled), logits(&plain), "{arch}");
    }
}
