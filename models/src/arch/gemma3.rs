//! `gemma3` (llama.cpp's `src/models/gemma3.cpp`, hyper-parameters in
//! `src/llama-model.cpp`). Per layer:
//! `x += post_attention_norm(wo(attention(rope(qk_norm(qkv(attn_norm(x)))))))`, then
//! `x += post_ffw_norm(down(gelu_tanh(gate(n)) * up(n)))` with `n = ffn_norm(x)`; the
//! embedding rows are scaled by `sqrt(n_embd)`, the output is tied to the embedding (or
//! `output.weight`), with optional final soft-capping.
//!
//! Layers alternate between sliding-window ("local") and global attention: layer `i` is
//! local when `i % 6 < 5` (layers 5, 11, 17, ... are global; see [`GemmaConfig::local`]),
//! with `{arch}.attention.sliding_window` positions, rope base `{arch}.rope.freq_base_swa`
//! (default 10000) and no rope scaling; global layers use `{arch}.rope.freq_base` and the
//! file's rope scaling (linear 8 for Gemma 3 4B and larger). No sliding window key: every
//! layer is global (llama.cpp). `{arch}.attention.sliding_window_pattern` (a number or a
//! per-layer array) overrides the pattern of 6. Scores are scaled by `1 / sqrt(head_dim)`, or
//! `1 / sqrt(n_embd / n_head)` for the 62-layer 27B (llama.cpp's `f_attention_scale`; GGUF
//! has no key for Gemma's `query_pre_attn_scalar`). GGUF norm weights already hold
//! Gemma's `1 + w`. Gemma 2 ([`super::gemma2`]) is this wiring without the q/k norms and
//! with soft-capped attention logits.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_ops::nn::{GluActivation, RopeStyle};

use super::{Model, Sizes};
use crate::blocks::{
    Attention, AttentionSpec, Embedding, FeedForward, GateUpLayout, OutputHead, QkvLayout, RmsNorm, Weights,
};
use crate::config::{Hparams, Meta};
use crate::device_map::DeviceMap;
use crate::error::{model_err, Result};
use crate::rope::{Rope, RopeConfig};
use crate::storage::{AttnParams, ModelStorage};
use crate::tensor::ModelTensor;

/// The hyper-parameters of the Gemma wiring ([`Gemma`]), which Gemma 2 shares
/// ([`super::gemma2::config`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmaConfig {
    /// `{arch}.attention.sliding_window`; `None` (absent or 0): no local layers.
    pub sliding_window: Option<usize>,
    /// Per layer, whether it is local (sliding window, local rope).
    pub local: Vec<bool>,
    /// Rope of the global layers.
    pub rope_global: RopeConfig,
    /// Rope of the local layers.
    pub rope_local: RopeConfig,
    /// Score scale.
    pub attn_scale: f32,
    /// Attention logit soft-capping (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Final logit soft-capping.
    pub final_softcap: Option<f32>,
    /// Per-head q/k norms (Gemma 3).
    pub qk_norm: bool,
}

/// Gemma 3's hyper-parameters from the keys of `m`, for a model of `hp`.
///
/// # Errors
/// [`crate::Error::Model`] naming the key: a pattern array of another length than the
/// layer count, or of another type; a negative soft-cap; the rope keys' errors.
pub fn config(m: &Meta<'_>, hp: &Hparams) -> Result<GemmaConfig> {
    let sliding_window = m.opt_u("attention.sliding_window")?.filter(|&w| w > 0);
    let local = match sliding_window {
        None => vec![false; hp.n_layers],
        Some(_) => swa_layers(m, hp.n_layers, 6)?,
    };
    let rope_global = RopeConfig::from_meta(m, hp.head_dim, RopeStyle::Neox)?;
    let local_base = m.opt_positive("rope.freq_base_swa")?.unwrap_or(10000.0);
    let rope_local = rope_global.unscaled_with_base(local_base);
    let final_softcap = match m.opt_f("final_logit_softcapping")? {
        None => None,
        Some(0.0) => None,
        Some(c) if c > 0.0 => Some(c),
        Some(c) => {
            return Err(model_err(format!("{} is {c}, not a positive number", m.key("final_logit_softcapping"))))
        }
    };
    let attn_scale = attention_scale(hp, 62);
    Ok(GemmaConfig {
        sliding_window,
        local,
        rope_global,
        rope_local,
        attn_scale,
        attn_softcap: None,
        final_softcap,
        qk_norm: true,
    })
}

/// llama.cpp's `f_attention_scale` for Gemma: `1 / sqrt(head_dim)`, but
/// `1 / sqrt(n_embd / n_head)` for the 27B model (`layers_27b` blocks; GGUF has no key for
/// Gemma's `query_pre_attn_scalar`).
pub(super) fn attention_scale(hp: &Hparams, layers_27b: usize) -> f32 {
    if hp.n_layers == layers_27b {
        1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt()
    } else {
        1.0 / (hp.head_dim as f32).sqrt()
    }
}

/// Which of `n_layers` layers are local, from `{arch}.attention.sliding_window_pattern`
/// as llama.cpp reads it (`llama_hparams::set_swa_pattern`): a number `n` (default
/// `default`) makes layer `i` local when `n == 0 || i % n < n - 1`; an array gives each
/// layer's flag.
pub(super) fn swa_layers(m: &Meta<'_>, n_layers: usize, default: usize) -> Result<Vec<bool>> {
    use vkml_quant::gguf::{GgufArray, GgufValue};
    let key = m.key("attention.sliding_window_pattern");
    let from_n = |n: usize| (0..n_layers).map(|i| n == 0 || i % n < n - 1).collect();
    let flags: Vec<bool> = match m.file.get(&key) {
        None => from_n(default),
        Some(GgufValue::Array(a)) => match a {
            GgufArray::Bool(v) => v.clone(),
            GgufArray::U32(v) => v.iter().map(|&x| x != 0).collect(),
            GgufArray::I32(v) => v.iter().map(|&x| x != 0).collect(),
            _ => {
                return Err(model_err(format!(
                    "metadata {key} is an array of {:?}, not of bool or integers",
                    a.elem_type()
                )))
            }
        },
        Some(v) => match v.as_u64().and_then(|x| usize::try_from(x).ok()) {
            Some(n) => from_n(n),
            None => return Err(model_err(format!("metadata {key} is neither an unsigned integer nor an array"))),
        },
    };
    if flags.len() != n_layers {
        return Err(model_err(format!("metadata {key} has {} entries for {n_layers} layers", flags.len())));
    }
    Ok(flags)
}

struct Layer<S: ModelStorage> {
    attn_norm: RmsNorm<S>,
    attn: Attention<S>,
    post_attention_norm: RmsNorm<S>,
    ffn_norm: RmsNorm<S>,
    ffn: FeedForward<S>,
    post_ffw_norm: RmsNorm<S>,
    local: bool,
}

/// A Gemma 2 or Gemma 3 model with its KV caches.
pub struct Gemma<S: ModelStorage> {
    hp: Hparams,
    cfg: GemmaConfig,
    embd: Embedding<S>,
    layers: Vec<Layer<S>>,
    head: OutputHead<S>,
    /// Rope tables of global and local layers, one pair per device of `devs`.
    rope: Vec<(Rope<S>, Rope<S>)>,
    devs: DeviceMap<S>,
}

impl<S: ModelStorage> std::fmt::Debug for Gemma<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gemma({:?}, {:?})", self.hp, self.cfg)
    }
}

impl<S: ModelStorage> Gemma<S> {
    /// The Gemma hyper-parameters.
    pub fn config(&self) -> &GemmaConfig {
        &self.cfg
    }
}

/// Loads a `gemma3` model.
///
/// # Errors
/// As [`super::load`] and [`config`].
pub fn load<S: ModelStorage>(
    m: &Meta<'_>,
    devs: &DeviceMap<S>,
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

/// Loads the Gemma wiring of `m`'s file with `cfg`.
///
/// # Errors
/// As [`super::load`].
pub(super) fn load_with<S: ModelStorage>(
    m: &Meta<'_>,
    devs: &DeviceMap<S>,
    sizes: Sizes,
    progress: &mut dyn FnMut(u64, u64),
    hp: Hparams,
    cfg: GemmaConfig,
) -> Result<Gemma<S>>
where
    S::Device: BackendDevice<Storage = S>,
{
    let mut w = Weights::new(m.file, devs.first(), sizes.weights, progress);
    let e = hp.n_embd;
    let embd = Embedding::load(&mut w, hp.vocab, e, Some((e as f32).sqrt()))?;
    w.dev = devs.last();
    let head = OutputHead::load(&mut w, hp.vocab, e, hp.rms_eps, cfg.final_softcap, devs.is_split())?;
    let mut layers = Vec::with_capacity(hp.n_layers.min(4096));
    for i in 0..hp.n_layers {
        w.dev = devs.device(i);
        let p = |n: &str| format!("blk.{i}.{n}");
        let local = cfg.local[i];
        let spec = AttentionSpec {
            n_embd: e,
            n_head: hp.n_head,
            n_kv_head: hp.n_kv_head,
            head_dim: hp.head_dim,
            qkv: QkvLayout::Split,
            qk_norm: cfg.qk_norm,
            eps: hp.rms_eps,
            params: AttnParams {
                scale: cfg.attn_scale,
                window: if local { cfg.sliding_window } else { None },
                softcap: cfg.attn_softcap,
            },
            sizes,
        };
        layers.push(Layer {
            attn_norm: RmsNorm::load(&w, &p("attn_norm.weight"), e, hp.rms_eps)?,
            attn: Attention::load(&mut w, i, spec)?,
            post_attention_norm: RmsNorm::load(&w, &p("post_attention_norm.weight"), e, hp.rms_eps)?,
            ffn_norm: RmsNorm::load(&w, &p("ffn_norm.weight"), e, hp.rms_eps)?,
            ffn: FeedForward::load(&mut w, i, e, hp.n_ff, GateUpLayout::Split, GluActivation::Gelu)?,
            post_ffw_norm: RmsNorm::load(&w, &p("post_ffw_norm.weight"), e, hp.rms_eps)?,
            local,
        });
    }
    let rope = devs
        .per_device(|d| Ok((Rope::new(&cfg.rope_global, sizes.ctx, d)?, Rope::new(&cfg.rope_local, sizes.ctx, d)?)))?;
    Ok(Gemma { hp, cfg, embd, layers, head, rope, devs: devs.clone() })
}

impl<S: ModelStorage> Model<S> for Gemma<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    fn hparams(&self) -> &Hparams {
        &self.hp
    }

    fn forward(&mut self, ids: &Tensor<S>, pos: usize) -> Result<Tensor<S>> {
        let mut x = self.embd.forward(ids)?;
        for (i, l) in self.layers.iter_mut().enumerate() {
            x = x.to_device(self.devs.device(i))?;
            let (global, local) = &self.rope[self.devs.index(i)];
            let rope = if l.local { local } else { global };
            // The sandwich norms with their residual adds, folded into the output and down
            // projections where the backend can (`qmatmul_norm_add_`).
            let a = l.attn.forward(&x, &l.attn_norm, rope, pos)?;
            let post = &l.post_attention_norm;
            x.qmatmul_norm_add_(&a, &l.attn.wo, &post.weight, post.eps)?;
            l.ffn.forward_post_norm_residual(&mut x, &l.ffn_norm, &l.post_ffw_norm)?;
        }
        Ok(x.to_device(self.devs.last())?)
    }

    fn logits(&self, x: &Tensor<S>) -> Result<Tensor<S>> {
        self.head.forward(x, &self.embd)
    }

    fn kv_ring(&self) -> Option<usize> {
        let s = |l: &Layer<S>| l.attn.spec.kv_slots();
        self.layers.iter().filter(|l| s(l) < l.attn.spec.sizes.ctx).map(s).min()
    }
}
