//! `qwen2` (llama.cpp's `src/models/qwen2.cpp`): the pre-norm decoder of
//! [`super::llama`] with neox-style rope and Q/K/V biases (`blk.N.attn_q.bias`, ...).

use vkml_ops::nn::RopeStyle;

use super::llama::DecoderOptions;
use crate::blocks::{GateUpLayout, QkvLayout};

/// How a `qwen2` file wires the decoder.
pub const OPTIONS: DecoderOptions = DecoderOptions {
    rope_style: RopeStyle::Neox,
    qk_norm: false,
    qkv: QkvLayout::Split,
    gate_up: GateUpLayout::Split,
    moe: None,
    ffn_norm: "ffn_norm.weight",
    swa_pattern: 0,
    required: &[],
};
