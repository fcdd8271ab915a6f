//! `llama` and `mistral` (llama.cpp's `src/models/llama.cpp`), and the pre-norm decoder
//! wiring they share with `qwen2`, `qwen3`, `qwen3moe`, `gpt-oss` and `phi3`: per layer
//! `x += wo(attention(rope(qkv(rms_norm(x)))))`, then
//! `x += down(act(gate(n)) * up(n))` with `n = rms_norm(x)`; final norm and output head.
//! Llama 3.x's rope frequency factors come from the `rope_freqs.weight` tensor
//! ([`crate::rope::RopeConfig`]).

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_ops::moe::ExpertGating;
use vkml_ops::nn::{GluActivation, RopeStyle};

use super::{Model, Sizes};
use crate::blocks::{
    Attention, AttentionSpec, Embedding, FeedForward, GateUpLayout, MoeFeedForward, OutputHead, QkvLayout, RmsNorm,
    Weights,
};
use crate::config::{Hparams, Meta, MoeHparams};
use crate::device_map::DeviceMap;
use crate::error::Result;
use crate::rope::{Rope, RopeConfig};
use crate::storage::{AttnParams, ModelStorage};
use crate::tensor::ModelTensor;

/// What distinguishes the architectures that share the pre-norm decoder wiring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderOptions {
    /// How rope pairs dims.
    pub rope_style: RopeStyle,
    /// Per-head q/k norms (Qwen3).
    pub qk_norm: bool,
    /// How Q, K and V are stored.
    pub qkv: QkvLayout,
    /// How gate and up are stored.
    pub gate_up: GateUpLayout,
    /// A mixture of experts in place of the dense feed-forward (Qwen3-MoE, gpt-oss).
    pub moe: Option<MoeOptions>,
    /// The feed-forward's norm weight, `blk.N.{ffn_norm}` (`ffn_norm.weight`; gpt-oss's
    /// `post_attention_norm.weight`).
    pub ffn_norm: &'static str,
    /// Sliding-window layers: with `n > 0`, layer `i` attends within
    /// `{arch}.attention.sliding_window` positions where `i % n < n - 1` (llama.cpp's
    /// `set_swa_pattern(n)`, `LLAMA_SWA_TYPE_STANDARD`; gpt-oss: 2, every even layer); 0 for
    /// none.
    pub swa_pattern: usize,
    /// Tensors every layer must have, `blk.N.{name}`, beyond what the options load anyway
    /// (the blocks take biases, sinks and a shared expert where present; an architecture
    /// that always has them names them here, so that a file without them is an error).
    pub required: &'static [&'static str],
}

/// How a decoder's mixture of experts routes and gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeOptions {
    /// How the router's logits become the experts' weights.
    pub gating: ExpertGating,
    /// Whether the chosen weights are normalised to sum 1.
    pub norm_w: bool,
    /// The experts' gated activation.
    pub act: GluActivation,
}

/// A layer's feed-forward: dense, or a mixture of experts.
enum Ffn<S: ModelStorage> {
    Dense(FeedForward<S>),
    Moe(Box<MoeFeedForward<S>>),
}

struct Layer<S: ModelStorage> {
    attn_norm: RmsNorm<S>,
    attn: Attention<S>,
    ffn_norm: RmsNorm<S>,
    ffn: Ffn<S>,
}

/// A pre-norm decoder (llama, mistral, qwen2, qwen3, phi3) with its KV caches.
pub struct Decoder<S: ModelStorage> {
    hp: Hparams,
    rope_cfg: RopeConfig,
    embd: Embedding<S>,
    layers: Vec<Layer<S>>,
    head: OutputHead<S>,
    /// The rope tables, one copy per device of `devs`.
    rope: Vec<Rope<S>>,
    devs: DeviceMap<S>,
}

impl<S: ModelStorage> std::fmt::Debug for Decoder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Decoder({:?}, {:?})", self.hp, self.rope_cfg)
    }
}

impl<S: ModelStorage> Decoder<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Loads the decoder of `m`'s file with `opts` for `sizes` onto `devs`.
    ///
    /// # Errors
    /// As [`super::load`].
    pub fn load(
        m: &Meta<'_>,
        devs: &DeviceMap<S>,
        sizes: Sizes,
        progress: &mut dyn FnMut(u64, u64),
        opts: DecoderOptions,
    ) -> Result<Self> {
        let hp = Hparams::from_meta(m)?;
        let rope_cfg = RopeConfig::from_meta(m, hp.head_dim, opts.rope_style)?;
        let window = match opts.swa_pattern {
            0 => None,
            _ => Some(m.req_u("attention.sliding_window")?).filter(|&w| w > 0),
        };
        let mut w = Weights::new(m.file, devs.first(), sizes.weights, progress);
        let spec = AttentionSpec {
            n_embd: hp.n_embd,
            n_head: hp.n_head,
            n_kv_head: hp.n_kv_head,
            head_dim: hp.head_dim,
            qkv: opts.qkv,
            qk_norm: opts.qk_norm,
            eps: hp.rms_eps,
            params: AttnParams { scale: 1.0 / (hp.head_dim as f32).sqrt(), window: None, softcap: None },
            sizes,
        };
        let embd = Embedding::load(&mut w, hp.vocab, hp.n_embd, None)?;
        w.dev = devs.last();
        let head = OutputHead::load(&mut w, hp.vocab, hp.n_embd, hp.rms_eps, None, devs.is_split())?;
        let moe = match opts.moe {
            Some(_) => Some(MoeHparams::from_meta(m, hp.n_ff)?),
            None => None,
        };
        let mut layers = Vec::with_capacity(hp.n_layers.min(4096));
        for i in 0..hp.n_layers {
            w.dev = devs.device(i);
            let p = |n: &str| format!("blk.{i}.{n}");
            // (a fused Q|K|V bias holds the Q, K and V biases)
            let has = |n: &str| {
                w.has(&p(n))
                    || (matches!(n, "attn_q.bias" | "attn_k.bias" | "attn_v.bias") && w.has(&p("attn_qkv.bias")))
            };
            if let Some(name) = opts.required.iter().find(|n| !has(n)) {
                return Err(crate::error::model_err(format!(
                    "tensor {} is missing ({} has it in every layer)",
                    p(name),
                    m.arch
                )));
            }
            let ffn = match (moe, opts.moe) {
                (Some(mh), Some(o)) => {
                    Ffn::Moe(Box::new(MoeFeedForward::load(&mut w, i, hp.n_embd, &mh, o.gating, o.norm_w, o.act)?))
                }
                _ => Ffn::Dense(FeedForward::load(&mut w, i, hp.n_embd, hp.n_ff, opts.gate_up, GluActivation::Silu)?),
            };
            let n = opts.swa_pattern;
            let swa = n > 0 && i % n < n - 1;
            let spec = AttentionSpec { params: AttnParams { window: window.filter(|_| swa), ..spec.params }, ..spec };
            layers.push(Layer {
                attn_norm: RmsNorm::load(&w, &p("attn_norm.weight"), hp.n_embd, hp.rms_eps)?,
                attn: Attention::load(&mut w, i, spec)?,
                ffn_norm: RmsNorm::load(&w, &p(opts.ffn_norm), hp.n_embd, hp.rms_eps)?,
                ffn,
            });
        }
        let rope = devs.per_device(|d| Rope::new(&rope_cfg, sizes.ctx, d))?;
        Ok(Decoder { hp, rope_cfg, embd, layers, head, rope, devs: devs.clone() })
    }

    /// The rope configuration.
    pub fn rope_config(&self) -> &RopeConfig {
        &self.rope_cfg
    }
}

impl<S: ModelStorage> Model<S> for Decoder<S>
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
            let a = l.attn.forward(&x, &l.attn_norm, &self.rope[self.devs.index(i)], pos)?;
            l.attn.output_residual(&mut x, &a)?;
            match &l.ffn {
                Ffn::Dense(f) => f.forward_residual(&mut x, &l.ffn_norm)?,
                Ffn::Moe(f) => f.forward_residual(&mut x, &l.ffn_norm)?,
            }
        }
        Ok(x.to_device(self.devs.last())?)
    }

    fn logits(&self, x: &Tensor<S>) -> Result<Tensor<S>> {
        self.head.forward(x, &self.embd)
    }
}

/// How a `llama` or `mistral` file wires the decoder: interleaved rope (llama.cpp's
/// `LLAMA_ROPE_TYPE_NORM`), split tensors, SwiGLU.
pub const OPTIONS: DecoderOptions = DecoderOptions {
    rope_style: RopeStyle::Interleaved,
    qk_norm: false,
    qkv: QkvLayout::Split,
    gate_up: GateUpLayout::Split,
    moe: None,
    ffn_norm: "ffn_norm.weight",
    swa_pattern: 0,
    required: &[],
};
