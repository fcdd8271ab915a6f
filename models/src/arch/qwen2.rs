//! `qwen2` (llama.cpp's `src/models/qwen2.cpp`): the pre-norm decoder of
//! [`super::llama`] with neox-style rope and Q/K/V biases (`blk.N.attn_q.bias`, ...).

use candle_core::backend::BackendDevice;
use vkml_ops::nn::RopeStyle;

use super::llama::{Decoder, DecoderOptions};
use super::Sizes;
use crate::blocks::{GateUpLayout, QkvLayout};
use crate::config::Meta;
use crate::error::Result;
use crate::storage::ModelStorage;

/// Loads a `qwen2` model.
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
    let opts = DecoderOptions {
        rope_style: RopeStyle::Neox,
        qk_norm: false,
        qkv: QkvLayout::Split,
        gate_up: GateUpLayout::Split,
    };
    Decoder::load(m, dev, sizes, progress, opts)
}
