//! Mixture-of-experts routing on the GPU (issue 31's first kernel): from a router's logits,
//! each token's top-k experts and their weights, as llama.cpp's `build_moe_ffn` computes
//! them (src/llama-graph.cpp), kernel `moe_route.<gating>`. The ids stay on the device for
//! the expert-indexed products that read them.

use vkml_hal::{Buffer, Stream};

use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};

/// How router logits become expert probabilities (llama.cpp's
/// `llama_expert_gating_func_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertGating {
    /// `softmax(logits)` over the experts (Qwen3-MoE, Mixtral).
    Softmax,
    /// `sigmoid(logits)` per expert (DeepSeek-V3, Llama 4).
    Sigmoid,
    /// The logits themselves choose; the chosen ones' weights are their softmax over the k
    /// (gpt-oss).
    SoftmaxWeight,
}

/// The routing of one layer: `k` experts per token of `n_expert`, the weights normalised to
/// sum 1 where `norm_w` (their sum clamped to at least 2^-14, as llama.cpp does), then
/// multiplied by `w_scale` unless it is 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    /// Experts of the layer (at most [`MAX_EXPERTS`]).
    pub n_expert: usize,
    /// Experts used per token (1 ..= [`MAX_USED`], at most `n_expert`).
    pub k: usize,
    /// The gating function.
    pub gating: ExpertGating,
    /// Normalise the chosen weights (`{arch}.expert_weights_norm`).
    pub norm_w: bool,
    /// Scale of the chosen weights (`{arch}.expert_weights_scale`); 0 for none.
    pub w_scale: f32,
}

/// Most experts a layer may have (`moe_route.comp`'s `MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 1024;
/// Most experts per token (`moe_route.comp`'s `MAX_USED`).
pub const MAX_USED: usize = 64;

/// Records the routing of `t` tokens: `logits: f32[t, n_expert]` (packed) to `ids: u32[t,
/// k]` (each row's experts by decreasing probability plus `bias`, ties to the lower id) and
/// `weights: f32[t, k]` (the chosen probabilities, softmaxed over the k for
/// [`ExpertGating::SoftmaxWeight`], normalised and scaled as [`Routing`] says). `bias:
/// f32[n_expert]` is the selection bias some models add to the probabilities for choosing
/// only (`exp_probs_b`). Probabilities in f32 with the device's `exp`.
///
/// # Errors
/// [`OpsError::Shape`] for `n_expert` or `k` out of range and buffers too small; HAL
/// errors.
pub fn route(
    s: &mut Stream,
    logits: &Buffer,
    t: usize,
    r: Routing,
    bias: Option<&Buffer>,
    ids: &Buffer,
    weights: &Buffer,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "moe::route", reason });
    if r.n_expert == 0 || r.n_expert > MAX_EXPERTS || r.k == 0 || r.k > MAX_USED.min(r.n_expert) {
        return bad(format!(
            "{} experts, {} per token: at most {MAX_EXPERTS} experts and 1 ..= {MAX_USED} of them per token",
            r.n_expert, r.k
        ));
    }
    let (n, k) = (r.n_expert as u64, r.k as u64);
    let rows = t as u64;
    if logits.size() < 4 * rows * n || ids.size() < 4 * rows * k || weights.size() < 4 * rows * k {
        return bad(format!(
            "{t} tokens need logits of {} bytes and ids and weights of {} bytes each, got {}, {} and {}",
            4 * rows * n,
            4 * rows * k,
            logits.size(),
            ids.size(),
            weights.size()
        ));
    }
    if bias.is_some_and(|b| b.size() < 4 * n) {
        return bad(format!("the selection bias needs {} bytes", 4 * n));
    }
    if t == 0 {
        return Ok(());
    }
    let name = match r.gating {
        ExpertGating::Softmax => "moe_route.softmax",
        ExpertGating::Sigmoid => "moe_route.sigmoid",
        ExpertGating::SoftmaxWeight => "moe_route.softmax_weight",
    };
    let dev = s.device().clone();
    let p = pipeline(&dev, name, 256)?;
    let pc = push_words(&[
        r.n_expert as u32,
        r.k as u32,
        u32::from(bias.is_some()),
        u32::from(r.norm_w),
        r.w_scale.to_bits(),
    ]);
    let g = grid(&dev, "moe::route", rows)?;
    s.dispatch(&p, &[logits.into(), bias.unwrap_or(logits).into(), ids.into(), weights.into()], &pc, g)?;
    Ok(())
}
