//! `phi3` (llama.cpp's `src/models/phi3.cpp`): the pre-norm decoder of [`super::llama`]
//! with neox-style rope, Q, K and V in one `blk.N.attn_qkv.weight` (rows Q | K | V; split
//! `attn_q` / `attn_k` / `attn_v` tensors are read too, as llama.cpp does), and gate and up
//! in one `blk.N.ffn_up.weight` (`[2 n_ff, n_embd]`, the gate's rows first). Phi-3's
//! long-context LongRoPE factors (`rope_factors_short.weight`, `rope_factors_long.weight`,
//! `{arch}.rope.scaling.attn_factor`) are read by [`crate::rope::RopeConfig`].
//! `{arch}.attention.sliding_window` is ignored, as llama.cpp ignores it (Phi-3-mini-4k
//! writes 2047): every layer attends to the whole context.

use candle_core::backend::BackendDevice;
use vkml_ops::nn::RopeStyle;

use super::llama::{Decoder, DecoderOptions};
use super::Sizes;
use crate::blocks::{GateUpLayout, QkvLayout};
use crate::config::Meta;
use crate::error::Result;
use crate::storage::ModelStorage;

/// Loads a `phi3` model.
///
/// # Errors
/// As [`super::load`].
pub fn load<S: ModelStorage>(
    m: &Meta<'_>,
    dev: &S::Device,
    sizes: Sizes,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Decoder<S>>
where
    S::Device: BackendDevice<Storage = S>,
{
    let fused = m.file.header().tensor("blk.0.attn_qkv.weight").is_some();
    let opts = DecoderOptions {
        rope_style: RopeStyle::Neox,
        qk_norm: false,
        qkv: if fused { QkvLayout::Fused } else { QkvLayout::Split },
        gate_up: GateUpLayout::Fused,
    };
    Decoder::load(m, dev, sizes, progress, opts)
}
