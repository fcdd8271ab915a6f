//! The gated feed-forward block: `down(act(gate(x)) * up(x))`.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_ops::nn::GluActivation;

use super::{RmsNorm, Stacked, Weights};
use crate::error::Result;
use crate::storage::ModelStorage;
use crate::tensor::ModelTensor;

/// How a file stores the gate and up projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateUpLayout {
    /// `blk.N.ffn_gate.weight` and `blk.N.ffn_up.weight`, `[n_ff, n_embd]` each.
    Split,
    /// One `blk.N.ffn_up.weight` of `[2 n_ff, n_embd]`: the gate's rows, then the up
    /// projection's (Phi-3; llama.cpp's `LLM_FFN_SWIGLU` on a fused tensor).
    Fused,
}

/// A gated feed-forward block: gate and up stacked into one `[2 n_ff, n_embd]` weight
/// (where their types agree) so that one product, fused with the activation where the
/// backend can, computes both.
#[derive(Debug)]
pub struct FeedForward<S: ModelStorage> {
    /// `[gate; up]`, `[2 n_ff, n_embd]`.
    pub gate_up: Stacked<S>,
    /// `blk.N.ffn_down.weight`, `[n_embd, n_ff]`.
    pub down: S::QWeight,
    /// The gate's activation (SiLU for SwiGLU, GELU-tanh for GeGLU).
    pub act: GluActivation,
}

impl<S: ModelStorage> FeedForward<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Layer `i`'s feed-forward tensors.
    ///
    /// # Errors
    /// As [`Weights::matrix`]; device errors stacking the weights.
    pub fn load(
        w: &mut Weights<'_, S>,
        i: usize,
        n_embd: usize,
        n_ff: usize,
        layout: GateUpLayout,
        act: GluActivation,
    ) -> Result<Self> {
        let p = |n: &str| format!("blk.{i}.{n}");
        match layout {
            GateUpLayout::Split => {
                let names = [p("ffn_gate.weight"), p("ffn_up.weight"), p("ffn_down.weight")];
                Self::load_named(w, &names, n_embd, n_ff, act)
            }
            GateUpLayout::Fused => {
                let gate_up = Stacked::One(w.matrix(&p("ffn_up.weight"), 2 * n_ff, n_embd)?);
                Ok(FeedForward { gate_up, down: w.matrix(&p("ffn_down.weight"), n_embd, n_ff)?, act })
            }
        }
    }

    /// The split gate, up and down tensors named `[gate, up, down]` (e.g. a shared
    /// expert's `blk.N.ffn_{gate,up,down}_shexp.weight`).
    ///
    /// # Errors
    /// As [`Weights::matrix`]; device errors stacking the weights.
    pub fn load_named(
        w: &mut Weights<'_, S>,
        [gate, up, down]: &[String; 3],
        n_embd: usize,
        n_ff: usize,
        act: GluActivation,
    ) -> Result<Self> {
        let (g, u) = (w.matrix(gate, n_ff, n_embd)?, w.matrix(up, n_ff, n_embd)?);
        let gate_up = Stacked::new(w.dev, vec![g, u])?;
        Ok(FeedForward { gate_up, down: w.matrix(down, n_embd, n_ff)?, act })
    }

    /// `down(act(gate(xn)) * up(xn))` of an already normalised `xn: f32[t, n_embd]`.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn forward_normed(&self, xn: &Tensor<S>) -> Result<Tensor<S>> {
        let g = match &self.gate_up {
            Stacked::One(w) => xn.qmatmul_glu(w, self.act)?,
            Stacked::Parts(ws) => Self::act_mul(xn.qmatmul(&ws[0])?, &xn.qmatmul(&ws[1])?, self.act)?,
        };
        Ok(g.qmatmul(&self.down)?)
    }

    /// `act(g) * u` by tensor ops.
    fn act_mul(g: Tensor<S>, u: &Tensor<S>, act: GluActivation) -> Result<Tensor<S>> {
        let g = match act {
            GluActivation::Silu => g.silu()?,
            GluActivation::Gelu => g.gelu()?,
            GluActivation::GeluErf => g.gelu_erf()?,
            GluActivation::SwigluOai => {
                return Err(crate::error::model_err(
                    "the clamped SwiGLU (gpt-oss) runs on stacked gate and up weights only",
                ))
            }
        };
        Ok(g.mul(u)?)
    }

    /// `x += down(act(gate(n)) * up(n))` for `n = norm(x)`: the norm folded into the
    /// gated product, the residual add into the down projection.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn forward_residual(&self, x: &mut Tensor<S>, norm: &RmsNorm<S>) -> Result<()> {
        if let Stacked::One(w) = &self.gate_up {
            // One call: the backend may keep the products in its own form between the two.
            x.rms_norm_glu_down_add_(&norm.weight, norm.eps, w, self.act, &self.down)?;
            return Ok(());
        }
        let g = self.gated(x, norm)?;
        x.qmatmul_add_(&g, &self.down)?;
        Ok(())
    }

    /// `x += post(down(act(gate(n)) * up(n)))` for `n = norm(x)`: the feed-forward
    /// half of Gemma's sandwich, the post-norm and the residual add folded into the down
    /// projection where the backend can ([`ModelTensor::qmatmul_norm_add_`]).
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn forward_post_norm_residual(&self, x: &mut Tensor<S>, norm: &RmsNorm<S>, post: &RmsNorm<S>) -> Result<()> {
        let g = self.gated(x, norm)?;
        x.qmatmul_norm_add_(&g, &self.down, &post.weight, post.eps)?;
        Ok(())
    }

    /// `act(gate(n)) * up(n)` for `n = norm(x)`, `f32[t, n_ff]`.
    fn gated(&self, x: &Tensor<S>, norm: &RmsNorm<S>) -> Result<Tensor<S>> {
        Ok(match &self.gate_up {
            Stacked::One(w) => x.rms_norm_linear(&norm.weight, norm.eps, w, Some(self.act))?,
            Stacked::Parts(ws) => {
                let xn = norm.forward(x)?;
                Self::act_mul(xn.qmatmul(&ws[0])?, &xn.qmatmul(&ws[1])?, self.act)?
            }
        })
    }

    /// `down(act(gate(n)) * up(n))` for `n = norm(x)`, `f32[t, n_embd]`.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn forward(&self, x: &Tensor<S>, norm: &RmsNorm<S>) -> Result<Tensor<S>> {
        Ok(self.gated(x, norm)?.qmatmul(&self.down)?)
    }
}
