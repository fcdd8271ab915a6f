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
use crate::storage::{ExpertGateUp, ModelStorage, MoeFfn};
use crate::tensor::ModelTensor;

/// The experts' gate and up projections as loaded ([`MoeFeedForward::gate_up`]).
#[derive(Debug)]
pub enum GateUpExperts<S: ModelStorage> {
    /// One matrix, each expert's gate rows then its up rows.
    Stacked(S::QWeight),
    /// The two tensors as they are (their types differ).
    Split(S::QWeight, S::QWeight),
}

/// One layer's experts and router.
#[derive(Debug)]
pub struct MoeFeedForward<S: ModelStorage> {
    /// `blk.N.ffn_gate_inp.weight`, `[n_expert, n_embd]`.
    pub router: S::QWeight,
    /// `blk.N.ffn_gate_exps.weight` and `blk.N.ffn_up_exps.weight` (`[n_expert · n_ff_exp,
    /// n_embd]` each): interleaved by expert into one `[n_expert · 2 n_ff_exp, n_embd]` matrix
    /// where their types agree (each expert's gate rows, then its up rows), else apart.
    pub gate_up: GateUpExperts<S>,
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
            gate_up: w.experts_gate_up(&p("ffn_gate_exps.weight"), &p("ffn_up_exps.weight"), e, f, n_embd)?,
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
        let gate_up = match &self.gate_up {
            GateUpExperts::Stacked(w) => ExpertGateUp::Stacked(w),
            GateUpExperts::Split(g, u) => ExpertGateUp::Split(g, u),
        };
        let w = MoeFfn { router: &self.router, gate_up, down: &self.down, routing: self.routing, act: self.act };
        x.rms_norm_moe_ffn_add_(&norm.weight, norm.eps, &w)?;
        Ok(())
    }
}
