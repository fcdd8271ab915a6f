//! The mixture-of-experts feed-forward block (llama.cpp's `build_moe_ffn` as
//! `src/models/qwen3moe.cpp` calls it): a router `ffn_gate_inp` chooses each token's
//! experts, whose gated feed-forwards (3-D `ffn_{gate,up,down}_exps` tensors, experts
//! outermost) are summed with the routing weights.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_ops::moe::{ExpertGating, Routing};
use vkml_ops::nn::GluActivation;

use super::{FeedForward, RmsNorm, Stacked, Weights};
use crate::config::MoeHparams;
use crate::error::Result;
use crate::storage::{ExpertGateUp, ModelStorage, MoeBiases, MoeFfn, MoeShared};
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
    /// The router's and experts' biases where the file has them (gpt-oss): `f32[n_expert]`,
    /// `f32[n_expert, 2 n_ff_exp]` (each expert's gate bias, then its up bias),
    /// `f32[n_expert, n_embd]`.
    pub biases: Option<(Tensor<S>, Tensor<S>, Tensor<S>)>,
    /// The shared expert where the file has one (Qwen2-MoE): `blk.N.ffn_gate_inp_shexp.weight`
    /// (`[1, n_embd]`: its gate's logit) and the SwiGLU `ffn_{gate,up,down}_shexp`, added to
    /// the experts' sum times the sigmoid of that logit (llama.cpp's `qwen2moe.cpp`).
    pub shared: Option<(S::QWeight, FeedForward<S>)>,
}

impl<S: ModelStorage> MoeFeedForward<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Layer `i`'s router and experts for `moe`'s counts, chosen by `gating` with the
    /// weights normalised where `norm_w` (Qwen3-MoE: softmax, normalised), with the biases
    /// `ffn_gate_inp.bias`, `ffn_{gate,up,down}_exps.bias` where the file has the router's
    /// (gpt-oss: then all four).
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
        let biases = if w.has(&p("ffn_gate_inp.bias")) {
            let router = w.values(&p("ffn_gate_inp.bias"), e)?;
            let (gate, up) = (w.values(&p("ffn_gate_exps.bias"), e * f)?, w.values(&p("ffn_up_exps.bias"), e * f)?);
            let down = w.values(&p("ffn_down_exps.bias"), e * n_embd)?;
            let gate_up: Vec<f32> =
                (0..e).flat_map(|x| gate[x * f..(x + 1) * f].iter().chain(&up[x * f..(x + 1) * f]).copied()).collect();
            Some((
                Tensor::from_slice(&router, e, w.dev)?,
                Tensor::from_slice(&gate_up, e * 2 * f, w.dev)?,
                Tensor::from_slice(&down, e * n_embd, w.dev)?,
            ))
        } else {
            None
        };
        let shared = if w.has(&p("ffn_gate_inp_shexp.weight")) {
            let gate = w.matrix(&p("ffn_gate_inp_shexp.weight"), 1, n_embd)?;
            let names = [p("ffn_gate_shexp.weight"), p("ffn_up_shexp.weight"), p("ffn_down_shexp.weight")];
            Some((gate, FeedForward::load_named(w, &names, n_embd, moe.n_ff_shexp, GluActivation::Silu)?))
        } else {
            None
        };
        Ok(MoeFeedForward {
            shared,
            router: w.matrix(&p("ffn_gate_inp.weight"), e, n_embd)?,
            gate_up: w.experts_gate_up(&p("ffn_gate_exps.weight"), &p("ffn_up_exps.weight"), e, f, n_embd)?,
            down: w.experts(&p("ffn_down_exps.weight"), e, n_embd, f)?,
            // (no scale: llama.cpp reads {arch}.expert_weights_scale only for architectures
            // vkml does not load, deepseek2 and the like)
            routing: Routing { n_expert: e, k: moe.n_expert_used, gating, norm_w, w_scale: 0.0 },
            act,
            biases,
        })
    }

    /// `x += moe(norm(x))` (plus the shared expert's gated output where there is one).
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn forward_residual(&self, x: &mut Tensor<S>, norm: &RmsNorm<S>) -> Result<()> {
        let gate_up = match &self.gate_up {
            GateUpExperts::Stacked(w) => ExpertGateUp::Stacked(w),
            GateUpExperts::Split(g, u) => ExpertGateUp::Split(g, u),
        };
        let biases = self.biases.as_ref().map(|(r, gu, d)| MoeBiases {
            router: r.storage(),
            gate_up: gu.storage(),
            down: d.storage(),
        });
        // The shared expert inside the block's op where its gate and up are one matrix with
        // the experts' activation (on Vulkan 3 dispatches more in a decode step, each
        // beside one of the routed block's: no dependent dispatch more).
        let shared = match &self.shared {
            Some((gate_inp, FeedForward { gate_up: Stacked::One(gate_up), down, act, .. })) if *act == self.act => {
                Some(MoeShared { gate_inp, gate_up, down })
            }
            _ => None,
        };
        let folds = shared.is_some();
        let w = MoeFfn {
            router: &self.router,
            gate_up,
            down: &self.down,
            routing: self.routing,
            act: self.act,
            biases,
            shared,
        };
        if let Some((gate, ffn)) = self.shared.as_ref().filter(|_| !folds) {
            // n = norm(x); x += moe(n) + sigmoid(gate · n) * ffn(n), by tensor ops.
            let n = norm.forward(x)?;
            let logit = n.qmatmul(gate)?;
            let weight = logit.neg()?.exp()?.affine(1.0, 1.0)?.recip()?;
            let shared = ffn.forward_normed(&n)?.broadcast_mul(&weight)?;
            *x = x.add(&n.moe_ffn(&w)?)?.add(&shared)?;
            return Ok(());
        }
        x.rms_norm_moe_ffn_add_(&norm.weight, norm.eps, &w)?;
        Ok(())
    }
}
