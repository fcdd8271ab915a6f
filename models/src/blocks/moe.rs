//! The mixture-of-experts feed-forward block (llama.cpp's `build_moe_ffn` as
//! `src/models/qwen3moe.cpp` calls it): a router `ffn_gate_inp` chooses each token's
//! experts, whose gated feed-forwards (3-D `ffn_{gate,up,down}_exps` tensors, experts
//! outermost) are summed with the routing weights.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_ops::moe::{ExpertGating, Routing};
use vkml_ops::nn::GluActivation;

use super::{RmsNorm, Weights};
use crate::config::MoeHparams;
use crate::error::Result;
use crate::storage::{ModelStorage, MoeFfn};
use crate::tensor::ModelTensor;

/// One layer's experts and router.
#[derive(Debug)]
pub struct MoeFeedForward<S: ModelStorage> {
    /// `blk.N.ffn_gate_inp.weight`, `[n_expert, n_embd]`.
    pub router: S::QWeight,
    /// `blk.N.ffn_gate_exps.weight`, `[n_expert · n_ff_exp, n_embd]`.
    pub gate: S::QWeight,
    /// `blk.N.ffn_up_exps.weight`, `[n_expert · n_ff_exp, n_embd]`.
    pub up: S::QWeight,
    /// `blk.N.ffn_down_exps.weight`, `[n_expert · n_embd, n_ff_exp]`.
    pub down: S::QWeight,
    /// How tokens choose experts.
    pub routing: Routing,
    /// The experts' gate activation.
    pub act: GluActivation,
}

impl<S: ModelStorage> MoeFeedForward<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Layer `i`'s router and experts for `moe`'s counts, chosen by `gating` with the
    /// weights normalised where `norm_w` (Qwen3-MoE: softmax, normalised).
    ///
    /// # Errors
    /// [`crate::Error::Model`] for missing or misshapen tensors (naming them); device
    /// errors.
    pub fn load(
        w: &mut Weights<'_, S>,
        i: usize,
        n_embd: usize,
        moe: &MoeHparams,
        gating: ExpertGating,
        norm_w: bool,
        act: GluActivation,
    ) -> Result<Self> {
        let p = |n: &str| format!("blk.{i}.{n}");
        let (e, f) = (moe.n_expert, moe.n_ff_exp);
        Ok(MoeFeedForward {
            router: w.matrix(&p("ffn_gate_inp.weight"), e, n_embd)?,
            gate: w.experts(&p("ffn_gate_exps.weight"), e, f, n_embd)?,
            up: w.experts(&p("ffn_up_exps.weight"), e, f, n_embd)?,
            down: w.experts(&p("ffn_down_exps.weight"), e, n_embd, f)?,
            routing: Routing { n_expert: e, k: moe.n_expert_used, gating, norm_w, w_scale: moe.weights_scale },
            act,
        })
    }

    /// `x += moe(norm(x))`.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn forward_residual(&self, x: &mut Tensor<S>, norm: &RmsNorm<S>) -> Result<()> {
        let w = MoeFfn {
            router: &self.router,
            gate: &self.gate,
            up: &self.up,
            down: &self.down,
            routing: self.routing,
            act: self.act,
        };
        let y = norm.forward(x)?.moe_ffn(&w)?;
        *x = x.add(&y)?;
        Ok(())
    }
}
