//! Helpers of the model tests: the devices and value helpers vkml-candle's tests use
//! (included from its `tests/common/mod.rs`), the real test models, and the Gemma
//! references.

#![allow(dead_code)]

#[path = "../../../candle-bridge/tests/common/mod.rs"]
mod devices;
#[allow(unused_imports)]
pub use devices::*;

/// A small llama of two layers (128 wide, 4 heads over 2 KV heads, a vocabulary of 512,
/// tied embeddings): the shape the synthetic-model tests vary.
pub const TINY: vkml_models::synth::SynthShape = vkml_models::synth::SynthShape {
    name: "tiny",
    arch: "llama",
    head_dim: None,
    sliding_window: None,
    experts: None,
    n_layers: 2,
    n_embd: 128,
    n_ff: 256,
    n_head: 4,
    n_kv_head: 2,
    vocab: 512,
    tied: true,
};

/// [`TINY`] with `n_layers` layers.
pub fn tiny_shape(n_layers: usize) -> vkml_models::synth::SynthShape {
    vkml_models::synth::SynthShape { n_layers, ..TINY }
}

/// The index of the largest logit.
pub fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32
}

/// The gap between the largest logit and the second largest.
pub fn margin(v: &[f32]) -> f32 {
    let mut s: Vec<f32> = v.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    s[0] - s[1]
}

#[path = "../../../quant/tests/support/test_models.rs"]
mod test_models;
#[allow(unused_imports)]
pub use test_models::test_model;

/// The weights of a GGUF `gemma2` / `gemma3` file dequantized by vkml-quant, under
/// Hugging Face's names, with the GGUF norm weights (which hold Gemma's `1 + w`) given
/// back as `w`: candle-transformers' Gemma models add the 1 themselves.
fn gemma_weights(file: &vkml_quant::gguf::GgufFile) -> std::collections::HashMap<String, candle_core::Tensor> {
    let mut map = std::collections::HashMap::new();
    for t in file.tensors() {
        let v = file.dequantize(&t.name).unwrap();
        let shape: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        let is_norm = t.name.ends_with("norm.weight");
        let v: Vec<f32> = if is_norm { v.iter().map(|x| x - 1.0).collect() } else { v };
        let name = match t.name.as_str() {
            "token_embd.weight" => "model.embed_tokens.weight".to_string(),
            "output_norm.weight" => "model.norm.weight".to_string(),
            n => {
                let rest = n.strip_prefix("blk.").unwrap();
                let (i, what) = rest.split_once('.').unwrap();
                let hf = match what {
                    "attn_q.weight" => "self_attn.q_proj.weight",
                    "attn_k.weight" => "self_attn.k_proj.weight",
                    "attn_v.weight" => "self_attn.v_proj.weight",
                    "attn_output.weight" => "self_attn.o_proj.weight",
                    "attn_q_norm.weight" => "self_attn.q_norm.weight",
                    "attn_k_norm.weight" => "self_attn.k_norm.weight",
                    "attn_norm.weight" => "input_layernorm.weight",
                    "post_attention_norm.weight" => "post_attention_layernorm.weight",
                    "ffn_norm.weight" => "pre_feedforward_layernorm.weight",
                    "post_ffw_norm.weight" => "post_feedforward_layernorm.weight",
                    "ffn_gate.weight" => "mlp.gate_proj.weight",
                    "ffn_up.weight" => "mlp.up_proj.weight",
                    "ffn_down.weight" => "mlp.down_proj.weight",
                    other => panic!("unexpected gemma tensor {other}"),
                };
                format!("model.layers.{i}.{hf}")
            }
        };
        map.insert(name, candle_core::Tensor::from_vec(v, shape, &candle_core::Device::Cpu).unwrap());
    }
    map
}

/// `{arch}.{key}` of a file as an integer and as a float.
fn meta_u(file: &vkml_quant::gguf::GgufFile, key: &str) -> Option<usize> {
    let arch = file.get("general.architecture").and_then(vkml_quant::gguf::GgufValue::as_str).unwrap();
    file.get(&format!("{arch}.{key}")).and_then(vkml_quant::gguf::GgufValue::as_u64).map(|v| v as usize)
}

fn meta_f(file: &vkml_quant::gguf::GgufFile, key: &str) -> Option<f64> {
    let arch = file.get("general.architecture").and_then(vkml_quant::gguf::GgufValue::as_str).unwrap();
    match file.get(&format!("{arch}.{key}")) {
        Some(vkml_quant::gguf::GgufValue::F32(x)) => Some(f64::from(*x)),
        _ => None,
    }
}

/// candle-transformers' (non-quantized) Gemma 3 on candle's CPU, in f32, fed the weights of
/// a GGUF `gemma3` file dequantized by vkml-quant (`gemma_weights`): the reference for
/// Gemma 3.
///
/// candle-transformers 0.11's `quantized_gemma3` gates its feed-forward with SiLU where
/// Gemma uses GELU (tanh) (candle issue #3745), so the full-precision model is used.
/// It masks `w + 1` keys in a prompt where llama.cpp masks `w` (a query sees `w` keys,
/// itself included): prompts must be at most `w` tokens long; its decode steps keep the
/// last `w` keys, as llama.cpp does.
pub fn gemma3_reference(
    file: &vkml_quant::gguf::GgufFile,
    max_positions: usize,
) -> candle_transformers::models::gemma3::Model {
    let (n_embd, n_head) = (meta_u(file, "embedding_length").unwrap(), meta_u(file, "attention.head_count").unwrap());
    let head_dim = meta_u(file, "attention.key_length").unwrap_or(n_embd / n_head);
    let vocab = file.header().tensor("token_embd.weight").unwrap().n_rows() as usize;
    let cfg = candle_transformers::models::gemma3::Config {
        attention_bias: false,
        head_dim,
        hidden_activation: candle_nn::Activation::GeluPytorchTanh,
        hidden_size: n_embd,
        intermediate_size: meta_u(file, "feed_forward_length").unwrap(),
        num_attention_heads: n_head,
        num_hidden_layers: meta_u(file, "block_count").unwrap(),
        num_key_value_heads: meta_u(file, "attention.head_count_kv").unwrap(),
        rms_norm_eps: meta_f(file, "attention.layer_norm_rms_epsilon").unwrap(),
        rope_theta: meta_f(file, "rope.freq_base").unwrap_or(1e6),
        rope_local_base_freq: 10000.0,
        vocab_size: vocab,
        final_logit_softcapping: None,
        attn_logit_softcapping: None,
        query_pre_attn_scalar: head_dim,
        sliding_window: meta_u(file, "attention.sliding_window").unwrap(),
        sliding_window_pattern: 6,
        max_position_embeddings: max_positions,
    };
    let vb =
        candle_nn::VarBuilder::from_tensors(gemma_weights(file), candle_core::DType::F32, &candle_core::Device::Cpu);
    candle_transformers::models::gemma3::Model::new(false, &cfg, vb).unwrap()
}

/// candle-transformers' Gemma 2 on candle's CPU, in f32, on a GGUF `gemma2` file's
/// dequantized weights, with llama.cpp's default soft-caps (50, 30). It has no sliding
/// window of its own (its config's window masks every layer of a prompt): sequences must
/// stay inside the file's window.
pub fn gemma2_reference(
    file: &vkml_quant::gguf::GgufFile,
    max_positions: usize,
) -> candle_transformers::models::gemma2::Model {
    let (n_embd, n_head) = (meta_u(file, "embedding_length").unwrap(), meta_u(file, "attention.head_count").unwrap());
    let head_dim = meta_u(file, "attention.key_length").unwrap_or(n_embd / n_head);
    let vocab = file.header().tensor("token_embd.weight").unwrap().n_rows() as usize;
    let cfg = candle_transformers::models::gemma2::Config {
        attention_bias: false,
        head_dim,
        hidden_activation: candle_nn::Activation::GeluPytorchTanh,
        hidden_size: n_embd,
        intermediate_size: meta_u(file, "feed_forward_length").unwrap(),
        num_attention_heads: n_head,
        num_hidden_layers: meta_u(file, "block_count").unwrap(),
        num_key_value_heads: meta_u(file, "attention.head_count_kv").unwrap(),
        rms_norm_eps: meta_f(file, "attention.layer_norm_rms_epsilon").unwrap(),
        rope_theta: meta_f(file, "rope.freq_base").unwrap_or(10000.0),
        vocab_size: vocab,
        final_logit_softcapping: Some(meta_f(file, "final_logit_softcapping").unwrap_or(30.0)),
        attn_logit_softcapping: Some(meta_f(file, "attn_logit_softcapping").unwrap_or(50.0)),
        query_pre_attn_scalar: head_dim,
        sliding_window: None,
        max_position_embeddings: max_positions,
    };
    let vb =
        candle_nn::VarBuilder::from_tensors(gemma_weights(file), candle_core::DType::F32, &candle_core::Device::Cpu);
    candle_transformers::models::gemma2::Model::new(false, &cfg, vb).unwrap()
}
