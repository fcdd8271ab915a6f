//! The named shapes of [`SHAPES`]: real models' dimensions (their Hugging Face
//! configs), with the architecture each is written as unless told another.

use crate::error::{model_err, Result};

/// The shape of a decoder model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthShape {
    /// Name (`smollm2-135m`, `llama-8b`, `qwen3-0.6b`, `gemma3-270m`, ...).
    pub name: &'static str,
    /// The GGUF architecture the real model has (what `vkml gguf synth` and
    /// `vkml bench --synthetic` write unless told another).
    pub arch: &'static str,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Embedding length.
    pub n_embd: usize,
    /// Feed-forward length.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_kv_head: usize,
    /// Vocabulary (at least [`super::TOKENIZER_FIXED`] + 1: the tokenizer's fixed tokens and one
    /// piece).
    pub vocab: usize,
    /// Whether the output projection is tied to the token embedding.
    pub tied: bool,
    /// Dims per head (`{arch}.attention.key_length`); `None`: `n_embd / n_head`.
    pub head_dim: Option<usize>,
    /// Gemma 3's `{arch}.attention.sliding_window` (local layers: 5 of every 6).
    pub sliding_window: Option<usize>,
    /// The mixture-of-experts feed-forward of a MoE architecture (`qwen3moe`): experts,
    /// experts used per token, and each expert's feed-forward length.
    pub experts: Option<SynthExperts>,
}

/// A synthetic model's experts ([`SynthShape::experts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthExperts {
    /// `{arch}.expert_count`.
    pub n_expert: usize,
    /// `{arch}.expert_used_count`.
    pub n_used: usize,
    /// `{arch}.expert_feed_forward_length`.
    pub n_ff_exp: usize,
}

impl SynthShape {
    /// Dims per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.n_embd / self.n_head.max(1))
    }
}

/// The named shapes: SmolLM2-135M, TinyLlama-1.1B, Llama-2-7B, and Llama-3-8B with a
/// 49152 vocabulary (issue 7's benchmark shapes); Llama-3-70B (131 GiB at F16: more than
/// one 80 GB GPU holds) and the 100 layers of Llama-3.2-90B-Vision's text decoder, every
/// one self-attention (163 GiB at F16: more than one 141 GB GPU holds), for layer splits; Qwen3-0.6B, Gemma-2-2B, Gemma-3-270M, Gemma-3-1B
/// and Phi-3-mini-4k (as their Hugging Face configs give them).
pub const SHAPES: &[SynthShape] = &[
    SynthShape {
        name: "smollm2-135m",
        arch: "llama",
        n_layers: 30,
        n_embd: 576,
        n_ff: 1536,
        n_head: 9,
        n_kv_head: 3,
        vocab: 49152,
        tied: true,
        head_dim: None,
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "llama-1b",
        arch: "llama",
        n_layers: 22,
        n_embd: 2048,
        n_ff: 5632,
        n_head: 32,
        n_kv_head: 4,
        vocab: 32000,
        tied: false,
        head_dim: None,
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "llama-7b",
        arch: "llama",
        n_layers: 32,
        n_embd: 4096,
        n_ff: 11008,
        n_head: 32,
        n_kv_head: 32,
        vocab: 32000,
        tied: false,
        head_dim: None,
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "llama-8b",
        arch: "llama",
        n_layers: 32,
        n_embd: 4096,
        n_ff: 14336,
        n_head: 32,
        n_kv_head: 8,
        vocab: 49152,
        tied: false,
        head_dim: None,
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "llama-70b",
        arch: "llama",
        n_layers: 80,
        n_embd: 8192,
        n_ff: 28672,
        n_head: 64,
        n_kv_head: 8,
        vocab: 128256,
        tied: false,
        head_dim: None,
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "llama-90b",
        arch: "llama",
        n_layers: 100,
        n_embd: 8192,
        n_ff: 28672,
        n_head: 64,
        n_kv_head: 8,
        vocab: 128256,
        tied: false,
        head_dim: None,
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "qwen3-0.6b",
        arch: "qwen3",
        n_layers: 28,
        n_embd: 1024,
        n_ff: 3072,
        n_head: 16,
        n_kv_head: 8,
        vocab: 151936,
        tied: true,
        head_dim: Some(128),
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "phi3-mini",
        arch: "phi3",
        n_layers: 32,
        n_embd: 3072,
        n_ff: 8192,
        n_head: 32,
        n_kv_head: 32,
        vocab: 32064,
        tied: false,
        head_dim: None,
        sliding_window: None,
        experts: None,
    },
    SynthShape {
        name: "gemma2-2b",
        arch: "gemma2",
        n_layers: 26,
        n_embd: 2304,
        n_ff: 9216,
        n_head: 8,
        n_kv_head: 4,
        vocab: 256000,
        tied: true,
        head_dim: Some(256),
        sliding_window: Some(4096),
        experts: None,
    },
    SynthShape {
        name: "gemma3-270m",
        arch: "gemma3",
        n_layers: 18,
        n_embd: 640,
        n_ff: 2048,
        n_head: 4,
        n_kv_head: 1,
        vocab: 262144,
        tied: true,
        head_dim: Some(256),
        sliding_window: Some(512),
        experts: None,
    },
    SynthShape {
        name: "gemma3-1b",
        arch: "gemma3",
        n_layers: 26,
        n_embd: 1152,
        n_ff: 6912,
        n_head: 4,
        n_kv_head: 1,
        vocab: 262144,
        tied: true,
        head_dim: Some(256),
        sliding_window: Some(512),
        experts: None,
    },
    SynthShape {
        name: "qwen3moe-30b-a3b",
        arch: "qwen3moe",
        n_layers: 48,
        n_embd: 2048,
        n_ff: 6144,
        n_head: 32,
        n_kv_head: 4,
        vocab: 151936,
        tied: false,
        head_dim: Some(128),
        sliding_window: None,
        experts: Some(SynthExperts { n_expert: 128, n_used: 8, n_ff_exp: 768 }),
    },
    SynthShape {
        name: "qwen2moe-a2.7b",
        arch: "qwen2moe",
        n_layers: 24,
        n_embd: 2048,
        n_ff: 5632,
        n_head: 16,
        n_kv_head: 16,
        vocab: 151936,
        tied: false,
        head_dim: None,
        sliding_window: None,
        experts: Some(SynthExperts { n_expert: 60, n_used: 4, n_ff_exp: 1408 }),
    },
    SynthShape {
        name: "gpt-oss-20b",
        arch: "gpt-oss",
        n_layers: 24,
        n_embd: 2880,
        n_ff: 2880,
        n_head: 64,
        n_kv_head: 8,
        vocab: 201088,
        tied: false,
        head_dim: Some(64),
        sliding_window: Some(128),
        experts: Some(SynthExperts { n_expert: 32, n_used: 4, n_ff_exp: 2880 }),
    },
];

/// The named shape.
///
/// # Errors
/// [`crate::Error::Model`] naming the known shapes.
pub fn shape(name: &str) -> Result<SynthShape> {
    SHAPES.iter().copied().find(|s| s.name == name).ok_or_else(|| {
        model_err(format!(
            "no synthetic shape {name:?} (known: {})",
            SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
        ))
    })
}
