//! The self-attention block: QKV projection (split or fused tensors, optional biases),
//! optional per-head q/k RMS norms, rope, the f16 KV cache, grouped-query attention
//! (causal, optionally within a sliding window), and the output projection.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;

use super::{RmsNorm, Stacked, Weights};
use crate::arch::Sizes;
use crate::error::{model_err, Result};
use crate::rope::Rope;
use crate::storage::{AttnExtras, AttnParams, ModelStorage};
use crate::tensor::ModelTensor;

/// How a file stores the Q, K and V projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvLayout {
    /// `blk.N.attn_q.weight`, `attn_k.weight`, `attn_v.weight` (biases `attn_q.bias`, ...
    /// where present), unless the layer has the fused tensor of [`QkvLayout::Fused`], which
    /// is then taken (as llama.cpp's `create_tensor_qkv` does for these architectures; the
    /// converter's `--fuse-qkv` writes it).
    Split,
    /// One `blk.N.attn_qkv.weight` of `[(n_head + 2 n_kv_head) d, n_embd]`: Q's rows, then
    /// K's, then V's (Phi-3; bias `attn_qkv.bias`, or separate Q, K and V biases, where
    /// present).
    Fused,
}

/// The shape and options of one layer's attention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionSpec {
    /// Width of the residual stream.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (a divisor of `n_head`).
    pub n_kv_head: usize,
    /// Dims per head.
    pub head_dim: usize,
    /// How the QKV tensors are stored.
    pub qkv: QkvLayout,
    /// Whether the layer has per-head RMS norms of q and k (`attn_q_norm.weight`,
    /// `attn_k_norm.weight`, `f32[head_dim]`; Qwen3, Gemma 3), applied before rope.
    pub qk_norm: bool,
    /// The epsilon of the q/k norms.
    pub eps: f32,
    /// Masking and score scale.
    pub params: AttnParams,
    /// The model's context and chunk size: the KV cache holds `sizes.ctx` positions, or
    /// with a sliding window `w` a ring of `min(ctx, w + max_batch - 1)` (the keys a chunk
    /// of `max_batch` queries can see).
    pub sizes: Sizes,
}

impl AttentionSpec {
    /// Slots of the layer's KV cache (see [`AttentionSpec::sizes`]).
    pub fn kv_slots(&self) -> usize {
        let ctx = self.sizes.ctx.max(1);
        match self.params.window {
            Some(w) => ctx.min(w.saturating_add(self.sizes.max_batch.max(1)) - 1),
            None => ctx,
        }
    }
}

/// One layer's attention with its KV cache.
#[derive(Debug)]
pub struct Attention<S: ModelStorage> {
    /// Q, K and V, stacked into `[h + 2 hk, n_embd]` (`h = n_head · head_dim`) where
    /// their types agree.
    pub wqkv: Stacked<S>,
    /// Q, K and V biases stacked, `f32[h + 2 hk]`, where the file has them (Qwen2).
    pub bias: Option<Tensor<S>>,
    /// Per-head q and k norms.
    pub qk_norm: Option<(RmsNorm<S>, RmsNorm<S>)>,
    /// `blk.N.attn_output.weight`, `[n_embd, h]`.
    pub wo: S::QWeight,
    /// `blk.N.attn_output.bias`, `f32[n_embd]`, where the file has it (gpt-oss).
    pub wo_bias: Option<Tensor<S>>,
    /// `blk.N.attn_sinks.weight`, `f32[n_head]`, where the file has it (gpt-oss): each
    /// head's logit in its softmax denominator.
    pub sinks: Option<Tensor<S>>,
    /// The shape and options.
    pub spec: AttentionSpec,
    k_cache: S::KvCache,
    v_cache: S::KvCache,
}

impl<S: ModelStorage> Attention<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Layer `i`'s attention tensors and an empty cache.
    ///
    /// # Errors
    /// [`crate::Error::Model`] for missing or misshapen tensors (q/k norm weights must
    /// hold `head_dim` values); device errors.
    pub fn load(w: &mut Weights<'_, S>, i: usize, spec: AttentionSpec) -> Result<Self> {
        let p = |n: &str| format!("blk.{i}.{n}");
        let (e, d) = (spec.n_embd, spec.head_dim);
        let (h, hk) = (spec.n_head * d, spec.n_kv_head * d);
        // As llama.cpp's create_tensor_qkv: the fused tensor where the layer has one, for
        // every layout; its bias, or else separate Q, K and V biases.
        let fused = spec.qkv == QkvLayout::Fused || w.has(&p("attn_qkv.weight"));
        let wqkv = if fused {
            Stacked::One(w.matrix(&p("attn_qkv.weight"), h + 2 * hk, e)?)
        } else {
            let wq = w.matrix(&p("attn_q.weight"), h, e)?;
            let wk = w.matrix(&p("attn_k.weight"), hk, e)?;
            let wv = w.matrix(&p("attn_v.weight"), hk, e)?;
            Stacked::new(w.dev, vec![wq, wk, wv])?
        };
        let bias = if fused && w.has(&p("attn_qkv.bias")) {
            Some(w.values(&p("attn_qkv.bias"), h + 2 * hk)?)
        } else if w.has(&p("attn_q.bias")) {
            let mut b = w.values(&p("attn_q.bias"), h)?;
            b.extend(w.values(&p("attn_k.bias"), hk)?);
            b.extend(w.values(&p("attn_v.bias"), hk)?);
            Some(b)
        } else {
            None
        };
        let bias = match bias {
            Some(b) => Some(Tensor::from_slice(&b, h + 2 * hk, w.dev)?),
            None => None,
        };
        let qk_norm = if spec.qk_norm {
            let norm = |n: &str| {
                RmsNorm::load(w, &p(n), d, spec.eps).map_err(|e| {
                    model_err(format!("{e} (the per-head q/k norm weights must hold the head dim, {d} values)"))
                })
            };
            Some((norm("attn_q_norm.weight")?, norm("attn_k_norm.weight")?))
        } else {
            None
        };
        let opt = |name: &str, n: usize| -> Result<Option<Tensor<S>>> {
            if w.has(&p(name)) {
                Ok(Some(Tensor::from_slice(&w.values(&p(name), n)?, n, w.dev)?))
            } else {
                Ok(None)
            }
        };
        let (wo_bias, sinks) = (opt("attn_output.bias", e)?, opt("attn_sinks.weight", spec.n_head)?);
        Ok(Attention {
            wqkv,
            bias,
            qk_norm,
            wo: w.matrix(&p("attn_output.weight"), e, h)?,
            wo_bias,
            sinks,
            k_cache: S::kv_cache(w.dev, spec.n_kv_head, spec.kv_slots(), d)?,
            v_cache: S::kv_cache(w.dev, spec.n_kv_head, spec.kv_slots(), d)?,
            spec,
        })
    }

    /// `x += wo · a (+ the output bias where the file has one)`: the output projection of
    /// the attention `a` added to the residual stream.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn output_residual(&self, x: &mut Tensor<S>, a: &Tensor<S>) -> Result<()> {
        match &self.wo_bias {
            Some(b) => x.qmatmul_bias_add_(a, &self.wo, b)?,
            None => x.qmatmul_add_(a, &self.wo)?,
        }
        Ok(())
    }

    /// The attention of `norm(x)` (`x: f32[t, n_embd]` at positions `pos..pos + t`), its
    /// keys and values appended to the cache: `[t, n_head · head_dim]`, before the
    /// output projection ([`Attention::wo`]); f32, or f16 where the storage writes the f16 x
    /// that projection's mat-mat reads (see `ModelTensor::rms_norm_qkv_attention`).
    ///
    /// # Errors
    /// Positions past the cache or the rope tables; device errors.
    pub fn forward(&mut self, x: &Tensor<S>, norm: &RmsNorm<S>, rope: &Rope<S>, pos: usize) -> Result<Tensor<S>> {
        let s = self.spec;
        let (t, nh, nkv, d) = (x.dims()[0], s.n_head, s.n_kv_head, s.head_dim);
        let prologue = AttnExtras {
            bias: self.bias.as_ref(),
            q_norm: self.qk_norm.as_ref().map(|(qn, _)| (&qn.weight, qn.eps)),
            k_norm: self.qk_norm.as_ref().map(|(_, kn)| (&kn.weight, kn.eps)),
            sinks: self.sinks.as_ref(),
        };
        // A prompt on a storage that rotates and appends in the QKV product's store.
        if let Stacked::One(w) = &self.wqkv {
            let caches = (&mut self.k_cache, &mut self.v_cache);
            let tables = rope.tables();
            let wo = Some(&self.wo);
            if let Some(y) = x.rms_norm_qkv_attention(
                &norm.weight,
                norm.eps,
                w,
                tables,
                caches,
                pos,
                s.params,
                (nh, d),
                wo,
                prologue,
            )? {
                return Ok(y);
            }
        }
        // The raw heads; the bias and q/k norms go to the attention call as its prologue
        // (fused into the decode attention on Vulkan).
        let (q, k, v) = match &self.wqkv {
            Stacked::One(w) => {
                let qkv = x.rms_norm_linear(&norm.weight, norm.eps, w, None)?;
                let heads = qkv.reshape((t, nh + 2 * nkv, d))?;
                (heads.narrow(1, 0, nh)?, heads.narrow(1, nh, nkv)?, heads.narrow(1, nh + nkv, nkv)?)
            }
            Stacked::Parts(ws) => {
                let xn = norm.forward(x)?;
                let mut out = Vec::with_capacity(3);
                for (w, heads) in ws.iter().zip([nh, nkv, nkv]) {
                    out.push(xn.qmatmul(w)?.reshape((t, heads, d))?);
                }
                (out[0].clone(), out[1].clone(), out[2].clone())
            }
        };
        // The rotation of q and k goes with the cache append (one dispatch on Vulkan).
        let caches = (&mut self.k_cache, &mut self.v_cache);
        Ok(Tensor::attention(&q, &k, &v, Some(rope.tables()), caches, pos, s.params, prologue)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window_caches_are_rings_of_the_keys_a_chunk_can_see() {
        let spec = |window, ctx, max_batch| AttentionSpec {
            n_embd: 64,
            n_head: 2,
            n_kv_head: 1,
            head_dim: 32,
            qkv: QkvLayout::Split,
            qk_norm: false,
            eps: 1e-6,
            params: AttnParams { scale: 1.0, window, softcap: None },
            sizes: Sizes { ctx, max_batch, weights: Default::default() },
        };
        assert_eq!(spec(None, 64, 4).kv_slots(), 64);
        assert_eq!(spec(Some(5), 64, 4).kv_slots(), 8);
        assert_eq!(spec(Some(512), 32768, 512).kv_slots(), 1023);
        assert_eq!(spec(Some(100), 64, 4).kv_slots(), 64);
        assert_eq!(spec(Some(usize::MAX), 64, 4).kv_slots(), 64);
    }
}
