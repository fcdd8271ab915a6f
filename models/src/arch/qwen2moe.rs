//! `qwen2moe` (llama.cpp's `src/models/qwen2moe.cpp`; Qwen1.5-MoE, Qwen2-57B-A14B):
//! [`super::qwen2`]'s decoder (neox rope, Q/K/V biases) with a mixture of experts on every
//! layer: the router's softmax chooses `{arch}.expert_used_count` experts, their weights
//! not normalised, each a SwiGLU of `{arch}.expert_feed_forward_length`; plus a shared
//! SwiGLU expert of `{arch}.expert_shared_feed_forward_length` gated per token by the
//! sigmoid of `ffn_gate_inp_shexp` ([`crate::blocks::MoeFeedForward::shared`]).

use vkml_ops::moe::ExpertGating;
use vkml_ops::nn::GluActivation;

use super::llama::{DecoderOptions, MoeOptions};

/// How a `qwen2moe` file wires the decoder.
pub const OPTIONS: DecoderOptions = DecoderOptions {
    moe: Some(MoeOptions { gating: ExpertGating::Softmax, norm_w: false, act: GluActivation::Silu }),
    required: &["ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"],
    ..super::qwen2::OPTIONS
};
