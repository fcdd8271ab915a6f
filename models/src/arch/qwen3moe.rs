//! `qwen3moe` (llama.cpp's `src/models/qwen3moe.cpp`): [`super::qwen3`]'s decoder (neox
//! rope, per-head q/k norms, no biases) with a mixture of experts in every layer's
//! feed-forward: `ffn_gate_inp` routes each token by softmax to `{arch}.expert_used_count`
//! of `{arch}.expert_count` experts, their weights normalised to sum 1 (llama.cpp reads
//! no `{arch}.expert_weights_scale` for it), each expert a SwiGLU of
//! `{arch}.expert_feed_forward_length` ([`crate::config::MoeHparams`]).

use vkml_ops::moe::ExpertGating;
use vkml_ops::nn::GluActivation;

use super::llama::{DecoderOptions, MoeOptions};

/// How a `qwen3moe` file wires the decoder.
pub const OPTIONS: DecoderOptions = DecoderOptions {
    moe: Some(MoeOptions { gating: ExpertGating::Softmax, norm_w: true, act: GluActivation::Silu }),
    ..super::qwen3::OPTIONS
};
