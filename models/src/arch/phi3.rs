//! `phi3` (llama.cpp's `src/models/phi3.cpp`): the pre-norm decoder of [`super::llama`]
//! with neox-style rope, Q, K and V in one `blk.N.attn_qkv.weight` (rows Q | K | V; split
//! `attn_q` / `attn_k` / `attn_v` tensors are read too, as llama.cpp does), and gate and up
//! in one `blk.N.ffn_up.weight` (`[2 n_ff, n_embd]`, the gate's rows first). Phi-3's
//! long-context LongRoPE factors (`rope_factors_short.weight`, `rope_factors_long.weight`,
//! `{arch}.rope.scaling.attn_factor`) are read by [`crate::rope::RopeConfig`].
//! `{arch}.attention.sliding_window` is ignored, as llama.cpp ignores it (Phi-3-mini-4k
//! writes 2047): every layer attends to the whole context.

use vkml_ops::nn::RopeStyle;

use super::llama::DecoderOptions;
use crate::blocks::{GateUpLayout, QkvLayout};
use crate::config::Meta;

/// How `m`'s `phi3` file wires the decoder: Q, K and V fused where it has
/// `blk.0.attn_qkv.weight`, else split.
pub fn options(m: &Meta<'_>) -> DecoderOptions {
    let fused = m.file.header().tensor("blk.0.attn_qkv.weight").is_some();
    DecoderOptions {
        rope_style: RopeStyle::Neox,
        qk_norm: false,
        qkv: if fused { QkvLayout::Fused } else { QkvLayout::Split },
        gate_up: GateUpLayout::Fused,
        moe: None,
        ffn_norm: "ffn_norm.weight",
        swa_pattern: 0,
        required: &[],
    }
}
