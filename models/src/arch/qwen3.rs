//! `qwen3` (llama.cpp's `src/models/qwen3.cpp`): the pre-norm decoder of
//! [`super::llama`] with neox-style rope, no biases, and per-head RMS norms of q and k
//! (`blk.N.attn_q_norm.weight`, `blk.N.attn_k_norm.weight`, `f32[head_dim]`) before rope.
//! The head dim is `{arch}.attention.key_length` (128 in every Qwen3, which is not
//! `n_embd / n_head` for most sizes). Missing q/k norm tensors, or ones that do not hold
//! the head dim, are errors naming them.

use vkml_ops::nn::RopeStyle;

use super::llama::DecoderOptions;
use crate::blocks::{GateUpLayout, QkvLayout};

/// How a `qwen3` file wires the decoder.
pub const OPTIONS: DecoderOptions = DecoderOptions {
    rope_style: RopeStyle::Neox,
    qk_norm: true,
    qkv: QkvLayout::Split,
    gate_up: GateUpLayout::Split,
    moe: None,
    ffn_norm: "ffn_norm.weight",
    swa_pattern: 0,
    required: &[],
};
