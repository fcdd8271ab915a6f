//! `gpt-oss` (llama.cpp's `src/models/openai-moe.cpp`, architecture name `gpt-oss`): the
//! pre-norm decoder of [`super::llama`] with
//! - attention: split Q, K, V with biases, an output bias (`attn_output.bias`), a sink per
//!   head (`attn_sinks.weight`: a logit in each row's softmax denominator), neox rope with
//!   YaRN (`{arch}.rope.scaling.*`, [`crate::rope::RopeConfig`]), and a sliding window of
//!   `{arch}.attention.sliding_window` on every even layer (llama.cpp's swa pattern 2);
//! - feed-forward: `post_attention_norm.weight` as its norm, then a mixture of experts on
//!   every layer: the router with its bias chooses the top `{arch}.expert_used_count` logits,
//!   weighted by their softmax (`ExpertGating::SoftmaxWeight`, not normalised again), each
//!   expert's gate and up (with biases) through the clamped SwiGLU (ggml's `swiglu_oai`, α
//!   1.702, limit 7) into its down projection (with bias).

use vkml_ops::moe::ExpertGating;
use vkml_ops::nn::{GluActivation, RopeStyle};

use super::llama::{DecoderOptions, MoeOptions};
use crate::blocks::{GateUpLayout, QkvLayout};

/// How a `gpt-oss` file wires the decoder.
pub const OPTIONS: DecoderOptions = DecoderOptions {
    rope_style: RopeStyle::Neox,
    qk_norm: false,
    qkv: QkvLayout::Split,
    gate_up: GateUpLayout::Split,
    moe: Some(MoeOptions { gating: ExpertGating::SoftmaxWeight, norm_w: false, act: GluActivation::SwigluOai }),
    ffn_norm: "post_attention_norm.weight",
    swa_pattern: 2,
    required: &[
        "attn_q.bias",
        "attn_k.bias",
        "attn_v.bias",
        "attn_output.bias",
        "attn_sinks.weight",
        "ffn_gate_inp.bias",
        "ffn_gate_exps.bias",
        "ffn_up_exps.bias",
        "ffn_down_exps.bias",
    ],
};
