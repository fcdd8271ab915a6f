//! `qwen3` (llama.cpp's `src/models/qwen3.cpp`): the pre-norm decoder of
//! [`super::llama`] with neox-style rope, no biases, and per-head RMS norms of q and k
//! (`blk.N.attn_q_norm.weight`, `blk.N.attn_k_norm.weight`, `f32[head_dim]`) before rope.
//! The head dim is `{arch}.attention.key_length` (128 in every Qwen3, which is not
//! `n_embd / n_head` for most sizes).

use candle_core::backend::BackendDevice;
use vkml_ops::nn::RopeStyle;

use super::llama::{Decoder, DecoderOptions};
use super::Sizes;
use crate::blocks::{GateUpLayout, QkvLayout};
use crate::config::Meta;
use crate::error::Result;
use crate::storage::ModelStorage;

/// Loads a `qwen3` model.
///
/// # Errors
/// As [`super::load`]; missing q/k norm tensors, or ones that do not hold the head dim.
pub fn load<S: ModelStorage>(
    m: &Meta<'_>,
    dev: &S::Device,
    sizes: Sizes,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Decoder<S>>
where
    S::Device: BackendDevice<Storage = S>,
{
    let opts = DecoderOptions {
        rope_style: RopeStyle::Neox,
        qk_norm: true,
        qkv: QkvLayout::Split,
        gate_up: GateUpLayout::Split,
    };
    Decoder::load(m, dev, sizes, progress, opts)
}
