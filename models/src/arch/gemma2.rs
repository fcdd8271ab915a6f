//! `gemma2` (llama.cpp's `src/models/gemma2.cpp`): the wiring of [`super::gemma3`]
//! (embedding scale, GELU-tanh gate, post-attention and post-feed-forward norms,
//! interleaved local and global layers) without per-head q/k norms, with attention logits
//! soft-capped at `{arch}.attn_logit_softcapping` (default 50) and the output at
//! `{arch}.final_logit_softcapping` (default 30). Every other layer is local (pattern 2:
//! layers 0, 2, 4, ...), with `{arch}.attention.sliding_window` positions (default 4096)
//! and `{arch}.rope.freq_base_swa` (default: the global base; both scaled alike).

use candle_core::backend::BackendDevice;
use vkml_ops::nn::RopeStyle;

use super::gemma3::{attention_scale, load_with, swa_layers, Gemma, GemmaConfig};
use super::Sizes;
use crate::config::{Hparams, Meta};
use crate::error::{model_err, Result};
use crate::rope::RopeConfig;
use crate::storage::ModelStorage;

/// Gemma 2's hyper-parameters from the keys of `m`, for a model of `hp`.
///
/// # Errors
/// [`crate::Error::Model`] naming the key: a window of 0, a soft-cap that is not a
/// positive number, a pattern that does not fit the layers; the rope keys' errors.
pub fn config(m: &Meta<'_>, hp: &Hparams) -> Result<GemmaConfig> {
    let sliding_window = m.opt_u("attention.sliding_window")?.unwrap_or(4096);
    if sliding_window == 0 {
        return Err(model_err(format!("{} is 0: Gemma 2 always has local layers", m.key("attention.sliding_window"))));
    }
    let cap = |key: &str, default: f32| -> Result<f32> {
        match m.opt_f(key)?.unwrap_or(default) {
            c if c > 0.0 => Ok(c),
            c => Err(model_err(format!("{} is {c}, not a positive number", m.key(key)))),
        }
    };
    let rope_global = RopeConfig::from_meta(m, hp.head_dim, RopeStyle::Neox)?;
    let local_base = m.opt_positive("rope.freq_base_swa")?.unwrap_or(rope_global.base);
    Ok(GemmaConfig {
        sliding_window: Some(sliding_window),
        local: swa_layers(m, hp.n_layers, 2)?,
        rope_local: RopeConfig { base: local_base, ..rope_global.clone() },
        rope_global,
        attn_scale: attention_scale(hp, 46),
        attn_softcap: Some(cap("attn_logit_softcapping", 50.0)?),
        final_softcap: Some(cap("final_logit_softcapping", 30.0)?),
        qk_norm: false,
    })
}

/// Loads a `gemma2` model.
///
/// # Errors
/// As [`super::load`] and [`config`].
pub fn load<S: ModelStorage>(
    m: &Meta<'_>,
    devs: &crate::device_map::DeviceMap<S>,
    sizes: Sizes,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Gemma<S>>
where
    S::Device: BackendDevice<Storage = S>,
{
    let hp = Hparams::from_meta(m)?;
    let cfg = config(m, &hp)?;
    load_with(m, devs, sizes, progress, hp, cfg)
}
