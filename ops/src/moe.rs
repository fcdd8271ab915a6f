//! Mixture-of-experts feed-forward on the GPU, as llama.cpp's `build_moe_ffn` computes it
//! (src/llama-graph.cpp): [`route`] (kernel `moe_route.<gating>`: each token's top-k
//! experts and their weights from the router's logits), [`group`] (`moe_group`: a batch's
//! slots sorted by expert) and [`ffn`] / [`ffn_with`], the whole block: the router, the
//! routing, the chosen experts' products and the weighted sums: for decode three
//! dispatches (the router's mat-vec; the gate|up expert mat-vec routing its own token,
//! `quant::mat_vec_id_fused`; the down expert mat-vec with the weighted sums: where it
//! runs on the integer-dot kernel, each slot's row, summed by the last workgroup of each
//! row group, `tuning::moe_sums`, which can also ask for a `moe_weighted_sum` pass), for
//! prompts grouped mat-mats (`quant::mat_mat_id`) and `moe_weighted_sum`; with gpt-oss's biases
//! ([`ExpertBiases`]: the router's in the routing, gate and up before the activation, down
//! in the weighted sums) and Qwen2-MoE's shared expert ([`SharedExpert`]: its logit,
//! gate|up and down products, its output added with the sigmoid of its logit as weight:
//! for one token in the down mat-vec's store, else by `moe_weighted_sum`). The ids stay
//! on the device throughout.

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

/// Records the routing of `t` tokens: `logits: f32[t, n_expert]` (packed; plus
/// `logit_bias: f32[n_expert]` where given, the router's own bias as gpt-oss has it) to `ids: u32[t,
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
    (logits, logit_bias): (&Buffer, Option<&Buffer>),
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
    if bias.is_some_and(|b| b.size() < 4 * n) || logit_bias.is_some_and(|b| b.size() < 4 * n) {
        return bad(format!("the selection and router biases need {} bytes", 4 * n));
    }
    if t == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let name = match (r.gating, crate::tuning::subgroup_reduce(dev.caps())) {
        (ExpertGating::Softmax, false) => "moe_route.softmax",
        (ExpertGating::Sigmoid, false) => "moe_route.sigmoid",
        (ExpertGating::SoftmaxWeight, false) => "moe_route.softmax_weight",
        (ExpertGating::Softmax, true) => "moe_route.softmax_sg",
        (ExpertGating::Sigmoid, true) => "moe_route.sigmoid_sg",
        (ExpertGating::SoftmaxWeight, true) => "moe_route.softmax_weight_sg",
    };
    let p = pipeline(&dev, name, 256)?;
    let pc = push_words(&[
        r.n_expert as u32,
        r.k as u32,
        u32::from(bias.is_some()),
        u32::from(r.norm_w),
        r.w_scale.to_bits(),
        u32::from(logit_bias.is_some()),
    ]);
    let g = grid(&dev, "moe::route", rows)?;
    let bindings =
        [logits.into(), bias.unwrap_or(logits).into(), ids.into(), weights.into(), logit_bias.unwrap_or(logits).into()];
    s.dispatch(&p, &bindings, &pc, g)?;
    Ok(())
}

/// Records the grouping of a routed batch's slots by expert for the expert-grouped
/// mat-mats ([`crate::quant::mat_mat_id`]), kernel `moe_group`: from `ids: u32[t, k]` (as
/// [`route`] writes them: a token's `k` ids differ and lie below `n_expert`), `first:
/// u32[n_expert + 1]` (where each expert's slots begin, then `t k`) and `slots: u32[t k]`
/// (slot indices `n k + i`, expert by expert, in increasing order within each).
///
/// # Errors
/// [`OpsError::Shape`] for `n_expert` or `k` out of range and buffers too small; HAL
/// errors.
pub fn group(
    s: &mut Stream,
    ids: &Buffer,
    t: usize,
    k: usize,
    n_expert: usize,
    first: &Buffer,
    slots: &Buffer,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "moe::group", reason });
    if n_expert == 0 || n_expert > MAX_EXPERTS || k == 0 || k > MAX_USED.min(n_expert) {
        return bad(format!(
            "{n_expert} experts, {k} per token: at most {MAX_EXPERTS} experts and 1 ..= {MAX_USED} per token"
        ));
    }
    let n_slots = (t * k) as u64;
    if n_slots > u64::from(u32::MAX) {
        return bad(format!("{t} tokens of {k} slots exceed 32-bit slot indices"));
    }
    if ids.size() < 4 * n_slots || slots.size() < 4 * n_slots || first.size() < 4 * (n_expert as u64 + 1) {
        return bad(format!(
            "{t} tokens need ids and slots of {} bytes and first of {}, got {}, {} and {}",
            4 * n_slots,
            4 * (n_expert + 1),
            ids.size(),
            slots.size(),
            first.size()
        ));
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, "moe_group", 256)?;
    let pc = push_words(&[t as u32, n_expert as u32, k as u32]);
    s.dispatch(&p, &[ids.into(), first.into(), slots.into()], &pc, [1, 1, 1])?;
    Ok(())
}

/// The weights of one mixture-of-experts feed-forward block: the router (`ffn_gate_inp`,
/// `[n_expert, n_embd]`), the experts' gate and up projections ([`ExpertGateUp`]) and
/// down projections (`[n_expert * n_embd, n_ff]`), experts outermost as the 3-D
/// `ffn_{gate,up,down}_exps` tensors hold them.
#[derive(Debug, Clone, Copy)]
pub struct MoeWeights<'a> {
    /// The router.
    pub router: &'a crate::quant::QMatrix,
    /// The experts' gate and up projections.
    pub gate_up: ExpertGateUp<'a>,
    /// The experts' down projections.
    pub down: &'a crate::quant::QMatrix,
    /// Biases of the router and the experts (gpt-oss), if any.
    pub biases: Option<ExpertBiases<'a>>,
    /// The shared expert (Qwen2-MoE), if any.
    pub shared: Option<SharedExpert<'a>>,
}

/// A shared expert that every token takes besides its routed ones (Qwen2-MoE,
/// llama.cpp's `qwen2moe.cpp`): `y += sigmoid(gate_inp x) * down(act(gate x) * up x)`,
/// with the block's activation.
#[derive(Debug, Clone, Copy)]
pub struct SharedExpert<'a> {
    /// `ffn_gate_inp_shexp`, `[1, n_embd]`: the logit of the expert's weight.
    pub gate_inp: &'a crate::quant::QMatrix,
    /// `ffn_gate_shexp` and `ffn_up_shexp` stacked, `[2 n_ff_shexp, n_embd]`: gate rows, then up rows.
    pub gate_up: &'a crate::quant::QMatrix,
    /// `ffn_down_shexp`, `[n_embd, n_ff_shexp]`.
    pub down: &'a crate::quant::QMatrix,
}

/// The biases of a mixture-of-experts block (gpt-oss's `ffn_gate_inp.bias`,
/// `ffn_{gate,up,down}_exps.bias`), all f32: the router's added to its logits before the
/// routing, each chosen expert's gate and up biases to its products before the activation,
/// its down bias to its output before the weighting (llama.cpp's `build_moe_ffn`).
#[derive(Debug, Clone, Copy)]
pub struct ExpertBiases<'a> {
    /// `[n_expert]`.
    pub router: &'a Buffer,
    /// `[n_expert, 2 n_ff]`: each expert's gate bias, then its up bias.
    pub gate_up: &'a Buffer,
    /// `[n_expert, n_embd]`.
    pub down: &'a Buffer,
}

/// How the experts' gate and up projections are held.
#[derive(Debug, Clone, Copy)]
pub enum ExpertGateUp<'a> {
    /// One matrix of `[n_expert * 2 n_ff, n_embd]`: each expert's gate rows, then its up rows
    /// (the two tensors interleaved by expert at load), multiplied in one dispatch with the
    /// gated product in its store ([`crate::quant::mat_vec_id_glu`]).
    Stacked(&'a crate::quant::QMatrix),
    /// `ffn_gate_exps` and `ffn_up_exps` as they are (`[n_expert * n_ff, n_embd]` each: types
    /// that differ): two dispatches and the gated product's.
    Split(&'a crate::quant::QMatrix, &'a crate::quant::QMatrix),
}

impl ExpertGateUp<'_> {
    /// Rows of one projection over all experts (`n_expert * n_ff`) and its `k`.
    fn dims(&self) -> (usize, usize) {
        match self {
            ExpertGateUp::Stacked(m) => (m.rows() / 2, m.k()),
            ExpertGateUp::Split(g, u) if (g.rows(), g.k()) == (u.rows(), u.k()) => (g.rows(), g.k()),
            ExpertGateUp::Split(..) => (usize::MAX, 0),
        }
    }
}

/// Records `y[s, r] += b[ids[s] * b_stride + b_off + r]` for the `n_slots` rows of `rows`
/// of `y` (f32, packed): each slot's expert bias (ggml's `add_id`, kernel `add_id`). Ids of
/// `n_expert` or more leave their row as it is.
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small (`b` must hold `n_expert` rows of `b_stride`,
/// with `b_off + rows <= b_stride`); HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn add_id(
    s: &mut Stream,
    y: &Buffer,
    (n_slots, rows): (usize, usize),
    b: &Buffer,
    (n_expert, b_stride, b_off): (usize, usize, usize),
    ids: &Buffer,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "moe::add_id", reason });
    if b_off + rows > b_stride || b.size() < 4 * (n_expert * b_stride) as u64 {
        return bad(format!(
            "a bias of {n_expert} rows of {b_stride} f32 ({} bytes) does not hold {rows} values from {b_off}",
            b.size()
        ));
    }
    if y.size() < 4 * (n_slots * rows) as u64 || ids.size() < 4 * n_slots as u64 {
        return bad(format!("y and ids must hold {n_slots} rows of {rows} f32 and {n_slots} ids"));
    }
    if n_slots == 0 || rows == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, "add_id", 256)?;
    let pc = push_words(&[n_slots as u32, rows as u32, b_stride as u32, b_off as u32, n_expert as u32]);
    let groups = crate::launch::rows_grid(&dev, rows.div_ceil(256) as u32, n_slots);
    s.dispatch(&p, &[y.into(), b.into(), ids.into()], &pc, groups)?;
    Ok(())
}

/// Records the gated products of `n_slots` stacked gate|up rows (`both: f32[n_slots, 2
/// n_ff]`, each row its expert's gate products then its up products) with each slot's
/// expert biases added first (`b: f32[n_expert, 2 n_ff]`, the expert `ids[s]` of slot `s`):
/// `y[s, c] = act(both[s, c] + b[e, c], both[s, n_ff + c] + b[e, n_ff + c])` into `y: f32[n_slots,
/// n_ff]` (kernel `glu.<act>_f32_bias`: [`add_id`] then `nn::glu_halves` in one pass, the
/// same bits).
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn glu_biased(
    s: &mut Stream,
    act: crate::nn::GluActivation,
    both: &Buffer,
    (n_slots, n_ff): (usize, usize),
    (b, n_expert): (&Buffer, usize),
    ids: &Buffer,
    y: &Buffer,
) -> Result<()> {
    use crate::nn::GluActivation as A;
    let outputs = n_slots * n_ff;
    if both.size() < 8 * outputs as u64
        || y.size() < 4 * outputs as u64
        || b.size() < 8 * (n_expert * n_ff) as u64
        || ids.size() < 4 * n_slots as u64
        || 2 * outputs > u32::MAX as usize
    {
        return Err(OpsError::Shape {
            op: "moe::glu_biased",
            reason: format!(
                "{n_slots} rows of {n_ff} gated products over {n_expert} experts' biases: buffers too small"
            ),
        });
    }
    if outputs == 0 {
        return Ok(());
    }
    let name = match act {
        A::Silu => "glu.silu_f32_bias",
        A::Gelu => "glu.gelu_f32_bias",
        A::GeluErf => "glu.gelu_erf_f32_bias",
        A::SwigluOai => "glu.swiglu_oai_f32_bias",
    };
    let dev = s.device().clone();
    let p = pipeline(&dev, name, 256)?;
    let groups = grid(&dev, "moe::glu_biased", (outputs as u64).div_ceil(256))?;
    let pc = push_words(&[outputs as u32, n_ff as u32, n_expert as u32]);
    s.dispatch(&p, &[both.into(), both.into(), y.into(), ids.into(), b.into()], &pc, groups)?;
    Ok(())
}

/// Records the mixture-of-experts feed-forward of `t` tokens, `y_n = Σ_j w_nj
/// down_{e_nj}(act(gate_{e_nj} x_n) * up_{e_nj} x_n)` over the `r.k` experts `e_nj`
/// [`route`] chooses from `router x_n` (llama.cpp's `build_moe_ffn`; plus a shared
/// expert's `sigmoid(gate_inp x_n) down(act(gate x_n) up x_n)` where `w.shared` has one:
/// 3 dispatches more, in a decode step each beside a routed one, its output added in the
/// routed sums): `x, y: f32[t, n_embd]` (packed; `y` overwritten). Decode (below
/// `LinearOptions::mat_mat_from` tokens), per chunk of at most 65 535 / k tokens: the
/// router product ([`crate::quant::linear`]); the gate|up expert mat-vec of the chunk's `t
/// k` slots, each workgroup routing its token itself, with the biases and the gated
/// product in its store ([`crate::quant::mat_vec_id_fused`] with `route`); the down expert
/// mat-vec with the weighted sums (and the down bias) in its store (`sum`): 3 dispatches.
/// Split gate and up ([`ExpertGateUp::Split`]) take the routing pass ([`route`]), two
/// expert mat-vecs, [`add_id`] for biases and `nn::glu` before the down. From
/// `mat_mat_from` tokens on (prompts) the slots are grouped by expert ([`group`]) and the
/// expert products are grouped mat-mats ([`crate::quant::mat_mat_id`]: each expert's
/// matrix read once per tile of its tokens), the gated products written as the down
/// mat-mat's f16 x where it reads f16, then `moe_weighted_sum`.
///
/// # Errors
/// [`OpsError::Shape`] for matrices that do not fit `r` and each other or buffers too small;
/// as the ops it records.
#[allow(clippy::too_many_arguments)]
pub fn ffn(
    s: &mut Stream,
    w: MoeWeights<'_>,
    r: Routing,
    act: crate::nn::GluActivation,
    x: &Buffer,
    t: usize,
    y: &Buffer,
) -> Result<()> {
    let opts = crate::quant::LinearOptions::new(s.device().caps());
    ffn_with(s, w, r, act, (x, None), t, (y, false), &opts)
}

/// [`ffn`] of `norm(x)` where a [`crate::quant::PreNorm`] is given (the block's RMS norm:
/// for one token folded into the router's and the gate|up mat-vecs, each workgroup
/// normalising x itself, [`crate::quant::mat_vec_id_rms_norm`]; for more, a pass first:
/// `norm.rms_f16_out` writing the f16 x of the router's and the experts' mat-mats where
/// they all read f16, else `norm.rms`), adding to `y` where `accumulate` (the block's residual add in the weighted
/// sums' pass; `y` may then be `x`, the residual stream), with the token count from which
/// the products are grouped mat-mats given by `opts.mat_mat_from` (and the router's
/// [`crate::quant::linear`] takes `opts`).
///
/// # Errors
/// As [`ffn`]; a norm weight shorter than `n_embd`.
#[allow(clippy::too_many_arguments)]
pub fn ffn_with(
    s: &mut Stream,
    w: MoeWeights<'_>,
    r: Routing,
    act: crate::nn::GluActivation,
    (x, norm): (&Buffer, Option<crate::quant::PreNorm<'_>>),
    t: usize,
    (y, accumulate): (&Buffer, bool),
    opts: &crate::quant::LinearOptions,
) -> Result<()> {
    let n_embd = w.router.k();
    let (gu_rows, gu_k) = w.gate_up.dims();
    let n_ff = gu_rows / r.n_expert.max(1);
    let shared_fits = w.shared.is_none_or(|sh| {
        (sh.gate_inp.rows(), sh.gate_inp.k()) == (1, n_embd)
            && sh.gate_up.k() == n_embd
            && sh.gate_up.rows() == 2 * sh.down.k()
            && sh.down.rows() == n_embd
    });
    let fits = w.router.rows() == r.n_expert
        && gu_k == n_embd
        && gu_rows == r.n_expert * n_ff
        && w.down.k() == n_ff
        && w.down.rows() == r.n_expert * n_embd
        && shared_fits;
    if !fits {
        return Err(OpsError::Shape {
            op: "moe::ffn",
            reason: format!(
                "router [{}, {}], gate and up {:?}, down [{}, {}]{} do not make {} experts",
                w.router.rows(),
                w.router.k(),
                w.gate_up,
                w.down.rows(),
                w.down.k(),
                w.shared.map_or(String::new(), |sh| format!(
                    ", shared gate [{}, {}], gate|up [{}, {}], down [{}, {}]",
                    sh.gate_inp.rows(),
                    sh.gate_inp.k(),
                    sh.gate_up.rows(),
                    sh.gate_up.k(),
                    sh.down.rows(),
                    sh.down.k()
                )),
                r.n_expert
            ),
        });
    }
    let bytes = 4 * (t * n_embd) as u64;
    if x.size() < bytes || y.size() < bytes {
        return Err(OpsError::Shape {
            op: "moe::ffn",
            reason: format!("{t} tokens need x and y of {bytes} bytes each, got {} and {}", x.size(), y.size()),
        });
    }
    if norm.is_some_and(|n| n.weight.size() < 4 * n_embd as u64) {
        return Err(OpsError::Shape {
            op: "moe::ffn",
            reason: format!("the norm weight holds less than {n_embd} f32"),
        });
    }
    if x.handle() == y.handle() && !accumulate {
        return Err(OpsError::Shape { op: "moe::ffn", reason: "the output is the input".into() });
    }
    if r.k == 0 || r.k > MAX_USED.min(r.n_expert) {
        return Err(OpsError::Shape {
            op: "moe::ffn",
            reason: format!("{} experts per token of {}: 1 ..= {MAX_USED} and at most the experts", r.k, r.n_expert),
        });
    }
    let dev = s.device().clone();
    let k = r.k;
    let most = (u16::MAX as usize / k).max(1);
    let mut t0 = 0;
    while t0 < t {
        let tc = most.min(t - t0);
        let scratch = |bytes: usize| dev.alloc(bytes.max(4) as u64, vkml_hal::MemoryKind::DeviceLocal);
        // A chunk's rows in buffers of their own where there are several chunks.
        let whole = tc == t;
        let row_bytes = 4 * n_embd as u64;
        let (xc, yc) =
            if whole { (x.clone(), y.clone()) } else { (scratch(4 * tc * n_embd)?, scratch(4 * tc * n_embd)?) };
        if !whole {
            s.copy(x, t0 as u64 * row_bytes, &xc, 0, tc as u64 * row_bytes)?;
            if accumulate {
                s.copy(y, t0 as u64 * row_bytes, &yc, 0, tc as u64 * row_bytes)?;
            }
        }
        // A shared expert: its products first; its sigmoid-weighted output made beside the
        // routed gate|up and added in the routed sums (a decode step on the expert
        // mat-vecs), else added last.
        let shared = w.shared.map(|sh| shared_products(s, sh, act, (&xc, norm), tc, opts)).transpose()?;
        let pending = w.shared.zip(shared.as_ref()).map(|(sh, (logit, h))| (sh, logit, h));
        let added = ffn_chunk(s, &w, r, act, (&xc, norm), tc, (&yc, accumulate), pending, opts)?;
        if let Some((sh, logit, h)) = pending.filter(|_| !added) {
            shared_add(s, sh, (logit, h), tc, &yc, opts)?;
        }
        if !whole {
            s.copy(&yc, 0, y, t0 as u64 * row_bytes, tc as u64 * row_bytes)?;
        }
        t0 += tc;
    }
    Ok(())
}

/// A shared expert's products for `tc` tokens of `xc` (normalised by `norm`): its weight's
/// logit `f32[tc]` and its gated product `act(gate x) up x` `f32[tc, n_ff_shexp]`, two
/// [`crate::quant::linear`]s (the norm folded for one token, as the router's; one norm pass
/// for more), recorded before the routed experts (they read `xc`, which may be the output).
fn shared_products(
    s: &mut Stream,
    sh: SharedExpert<'_>,
    act: crate::nn::GluActivation,
    (xc, norm): (&Buffer, Option<crate::quant::PreNorm<'_>>),
    tc: usize,
    opts: &crate::quant::LinearOptions,
) -> Result<(Buffer, Buffer)> {
    use crate::quant::{linear, LinearEpilogue};
    let dev = s.device().clone();
    let scratch = |bytes: usize| dev.alloc(bytes.max(4) as u64, vkml_hal::MemoryKind::DeviceLocal);
    let (n_embd, n_sh) = (sh.down.rows(), sh.down.k());
    let (xs, fold) = match norm {
        Some(n) if tc > 1 => {
            let xn = scratch(4 * tc * n_embd)?;
            crate::nn::rms_norm(s, crate::Dtype::F32, xc, Some(n.weight), tc, n_embd, n.eps, &xn)?;
            (xn, None)
        }
        _ => (xc.clone(), norm),
    };
    let (logit, h) = (scratch(4 * tc)?, scratch(4 * tc * n_sh)?);
    linear(s, sh.gate_inp, &xs, tc, fold, &logit, LinearEpilogue::Store, opts)?;
    linear(s, sh.gate_up, &xs, tc, fold, &h, LinearEpilogue::Glu(act), opts)?;
    Ok((logit, h))
}

/// A shared expert's output `sigmoid(logit) down(h)` for one token into `y` (`f32[n_embd]`,
/// added where `accumulate`): the down mat-vec weighs its product in its store (an
/// expert-indexed mat-vec of one expert with a sigmoid-weighted sum,
/// [`crate::quant::WeightedSlots`]). Where it runs: [`crate::quant::mat_vec_id_runs`].
fn shared_down(
    s: &mut Stream,
    sh: SharedExpert<'_>,
    (logit, h): (&Buffer, &Buffer),
    y: &Buffer,
    accumulate: bool,
) -> Result<()> {
    use crate::quant::{mat_vec_id_fused, ExpertMatVec, WeightedSlots};
    let sum = WeightedSlots { k: 1, weights: logit, accumulate, sigmoid: true, addend: None, slot_rows: None };
    let e = ExpertMatVec {
        n_expert: 1,
        // (one expert: the kernel reads no ids, the logit stands in)
        ids: logit,
        n_slots: 1,
        x_slots: 1,
        norm: None,
        glu: None,
        bias: None,
        route: None,
        sum: Some(sum),
    };
    mat_vec_id_fused(s, sh.down, h, y, &e)
}

/// Adds a shared expert's output `sigmoid(logit) down(h)` to `y` (`f32[tc, n_embd]`): for
/// one token [`shared_down`] adding in its store; else the down [`crate::quant::linear`]
/// and `moe_weighted_sum` with sigmoid weights.
fn shared_add(
    s: &mut Stream,
    sh: SharedExpert<'_>,
    (logit, h): (&Buffer, &Buffer),
    tc: usize,
    y: &Buffer,
    opts: &crate::quant::LinearOptions,
) -> Result<()> {
    use crate::quant::{linear, mat_vec_id_runs, LinearEpilogue};
    let dev = s.device().clone();
    let n_embd = sh.down.rows();
    if tc == 1 && mat_vec_id_runs(dev.caps(), sh.down.ty()) {
        return shared_down(s, sh, (logit, h), y, true);
    }
    let d = dev.alloc(4 * (tc * n_embd) as u64, vkml_hal::MemoryKind::DeviceLocal)?;
    linear(s, sh.down, h, tc, None, &d, LinearEpilogue::Store, opts)?;
    weighted_sums(s, (logit, true), (&d, None), tc, 1, n_embd, y, true)
}

/// One chunk of [`ffn_with`]: `tc` tokens of `xc` (normalised by `norm`) through the router,
/// the routing, the experts and the weighted sums into `yc` (added where `accumulate`).
/// With `shared` (a shared expert, its gate logit and gated product), a decode step on the
/// expert mat-vecs whose shared down runs there too records it after the routed gate|up
/// (no barrier between them: neither reads what the other writes) into a scratch that the
/// routed sums add ([`crate::quant::WeightedSlots::addend`]): the block's dependent
/// dispatches are then the routed block's. Returns whether it added the shared expert's
/// output (else the caller does).
#[allow(clippy::too_many_arguments)]
fn ffn_chunk(
    s: &mut Stream,
    w: &MoeWeights<'_>,
    r: Routing,
    act: crate::nn::GluActivation,
    (xc, norm): (&Buffer, Option<crate::quant::PreNorm<'_>>),
    tc: usize,
    (yc, accumulate): (&Buffer, bool),
    shared: Option<(SharedExpert<'_>, &Buffer, &Buffer)>,
    opts: &crate::quant::LinearOptions,
) -> Result<bool> {
    use crate::quant::{linear, mat_vec_id_fused, ExpertMatVec, LinearEpilogue, RoutedSlots, WeightedSlots};
    use crate::tuning::MoeSums;
    let dev = s.device().clone();
    let scratch = |bytes: usize| dev.alloc(bytes.max(4) as u64, vkml_hal::MemoryKind::DeviceLocal);
    let (k, n_embd, n_ff) = (r.k, w.router.k(), w.down.k());
    let slots = tc * k;
    let (logits, ids, weights) = (scratch(4 * tc * r.n_expert)?, scratch(4 * slots)?, scratch(4 * slots)?);
    // The expert mat-vecs where they run; else (float experts, no subgroup arithmetic)
    // decode steps too take the grouped mat-mats.
    let mv = {
        use crate::quant::mat_vec_id_runs as runs;
        let gu = match w.gate_up {
            ExpertGateUp::Stacked(m) => runs(dev.caps(), m.ty()),
            ExpertGateUp::Split(g, u) => runs(dev.caps(), g.ty()) && runs(dev.caps(), u.ty()),
        };
        gu && runs(dev.caps(), w.down.ty())
    };
    let grouped_path = tc >= opts.mat_mat_from || !mv;
    // A prompt whose router and gate|up mat-mats read f16 x: the norm writes that x
    // once (no conversion pass before each).
    if let Some(n) = norm.filter(|_| tc >= opts.mat_mat_from && reads_f16(dev.caps(), w, tc, opts)) {
        let xn16 = scratch(2 * tc * n_embd)?;
        crate::nn::rms_norm_f16_out(s, xc, Some(n.weight), tc, n_embd, n.eps, &xn16)?;
        crate::quant::linear_f16(s, w.router, &xn16, tc, &logits, LinearEpilogue::Store, opts)?;
        route(s, (&logits, w.biases.map(|b| b.router)), tc, r, None, &ids, &weights)?;
        return grouped(s, w, r, act, (&xn16, true), tc, &ids, &weights, yc, accumulate).map(|()| false);
    }
    // One token on the expert mat-vecs: the norm in the router's and the gate|up kernels;
    // else a pass.
    let (xc, fold) = match norm {
        Some(n) if tc > 1 || !mv => {
            let xn = scratch(4 * tc * n_embd)?;
            crate::nn::rms_norm(s, crate::Dtype::F32, xc, Some(n.weight), tc, n_embd, n.eps, &xn)?;
            (xn, None)
        }
        _ => (xc.clone(), norm),
    };
    linear(s, w.router, &xc, tc, fold, &logits, LinearEpilogue::Store, opts)?;
    let h = scratch(4 * slots * n_ff)?;
    let nf = fold.map(|n| (n.weight, n.eps));
    let expert = |n_slots, x_slots| ExpertMatVec {
        n_expert: r.n_expert,
        ids: &ids,
        n_slots,
        x_slots,
        norm: nf,
        glu: None,
        bias: None,
        route: None,
        sum: None,
    };
    // Decode with a stacked gate|up: the routing (where it folds), the biases and the gated
    // product in its kernel (`include/mat_vec_moe.glsl`).
    let fold_route =
        !grouped_path && matches!(w.gate_up, ExpertGateUp::Stacked(_)) && crate::tuning::moe_route_in_gate_up();
    if !fold_route {
        route(s, (&logits, w.biases.map(|b| b.router)), tc, r, None, &ids, &weights)?;
        if grouped_path {
            return grouped(s, w, r, act, (&xc, false), tc, &ids, &weights, yc, accumulate).map(|()| false);
        }
    }
    let x_slots = if nf.is_some() { 0 } else { k };
    match w.gate_up {
        ExpertGateUp::Stacked(m) => {
            let route =
                RoutedSlots { logits: &logits, logit_bias: w.biases.map(|b| b.router), routing: r, weights: &weights };
            let e = ExpertMatVec {
                glu: Some(act),
                bias: w.biases.map(|b| b.gate_up),
                route: fold_route.then_some(route),
                ..expert(slots, x_slots)
            };
            mat_vec_id_fused(s, m, &xc, &h, &e)?;
        }
        ExpertGateUp::Split(gate, up) => {
            // One expert mat-vec over gate or up rows of every slot.
            let product = |s: &mut Stream, m: &crate::quant::QMatrix, out: &Buffer| {
                mat_vec_id_fused(s, m, &xc, out, &expert(slots, x_slots))
            };
            split_gated_products(s, (gate, up), w, act, (slots, n_ff, r.n_expert), &ids, &h, product)?;
        }
    }
    // A shared expert's down for one token, beside the routed gate|up.
    let addend = match shared {
        Some((sh, logit, hs)) if tc == 1 && crate::quant::mat_vec_id_runs(dev.caps(), sh.down.ty()) => {
            let sd = scratch(4 * n_embd)?;
            shared_down(s, sh, (logit, hs), &sd, false)?;
            Some(sd)
        }
        _ => None,
    };
    let on_dot = crate::quant::expert_sums_on_integer_dot(dev.caps(), w.down, k);
    let sums = crate::tuning::moe_sums(on_dot);
    if addend.is_none() && sums == MoeSums::Pass {
        // Each slot's down row (the slots over the whole GPU), then the weighted sums (with
        // the down bias and the residual add) in a pass.
        let d = scratch(4 * slots * n_embd)?;
        mat_vec_id_fused(s, w.down, &h, &d, &ExpertMatVec { norm: None, ..expert(slots, 1) })?;
        weighted_sums(s, (&weights, false), (&d, w.biases.map(|b| (&ids, b.down))), tc, k, n_embd, yc, accumulate)?;
        return Ok(false);
    }
    // The down products and the weighted sums (with the down bias, the shared expert's
    // output and the residual add) in one kernel: in each workgroup, or each slot's row
    // first and the sums by the last workgroup of its row group.
    let d = match sums {
        MoeSums::LastWorkgroup => Some(scratch(4 * slots * n_embd)?),
        _ => None,
    };
    let sum = WeightedSlots {
        k,
        weights: &weights,
        accumulate,
        sigmoid: false,
        addend: addend.as_ref(),
        slot_rows: d.as_ref(),
    };
    let e = ExpertMatVec { norm: None, bias: w.biases.map(|b| b.down), sum: Some(sum), ..expert(slots, 1) };
    mat_vec_id_fused(s, w.down, &h, yc, &e)?;
    Ok(addend.is_some())
}

/// The experts' gated products `h` (`[n_slots, n_ff]`) of [`ffn`]'s slots from split gate
/// and up matrices (a stacked gate|up has them in its own kernel's store): `product(s,
/// matrix, out)` writes `matrix`'s rows of every slot's expert into `out` (f32); then the
/// biases where `w` has them ([`add_id`]) and the activation (`nn::glu`).
#[allow(clippy::too_many_arguments)]
fn split_gated_products(
    s: &mut Stream,
    (gate, up): (&crate::quant::QMatrix, &crate::quant::QMatrix),
    w: &MoeWeights<'_>,
    act: crate::nn::GluActivation,
    (n_slots, n_ff, n_expert): (usize, usize, usize),
    ids: &Buffer,
    h: &Buffer,
    product: impl Fn(&mut Stream, &crate::quant::QMatrix, &Buffer) -> Result<()>,
) -> Result<()> {
    let dev = s.device().clone();
    let scratch = |bytes: usize| dev.alloc(bytes.max(4) as u64, vkml_hal::MemoryKind::DeviceLocal);
    let (g, u) = (scratch(4 * n_slots * n_ff)?, scratch(4 * n_slots * n_ff)?);
    product(s, gate, &g)?;
    product(s, up, &u)?;
    if let Some(b) = w.biases {
        add_id(s, &g, (n_slots, n_ff), b.gate_up, (n_expert, 2 * n_ff, 0), ids)?;
        add_id(s, &u, (n_slots, n_ff), b.gate_up, (n_expert, 2 * n_ff, n_ff), ids)?;
    }
    crate::nn::glu(s, crate::Dtype::F32, act, &g, &u, n_slots * n_ff, h)
}

/// Whether the router's and the experts' gate and up mat-mats of `t` tokens all read f16 x
/// (so a prompt's norm may write it: [`crate::quant::linear_reads_f16`], and the grouped
/// mat-mats' path).
fn reads_f16(caps: &vkml_hal::Capabilities, w: &MoeWeights<'_>, t: usize, opts: &crate::quant::LinearOptions) -> bool {
    use crate::quant::MatMatPath;
    let experts = match w.gate_up {
        ExpertGateUp::Stacked(m) => MatMatPath::best(caps, m).reads_f16_x(),
        ExpertGateUp::Split(g, u) => MatMatPath::best(caps, g).reads_f16_x() && MatMatPath::best(caps, u).reads_f16_x(),
    };
    experts && w.router.k().is_multiple_of(2) && crate::quant::linear_reads_f16(caps, w.router, t, opts)
}

/// The expert products and weighted sums of [`ffn`] for `t` routed tokens, grouped by
/// expert: [`group`], the gate|up grouped mat-mat on `x` (f32, or packed f16 where
/// `x_f16`; with the gated product in its store, f16 where the down mat-mat reads f16 x),
/// the down grouped mat-mat, the weighted sums.
#[allow(clippy::too_many_arguments)]
fn grouped(
    s: &mut Stream,
    w: &MoeWeights<'_>,
    r: Routing,
    act: crate::nn::GluActivation,
    (x, x_f16): (&Buffer, bool),
    t: usize,
    ids: &Buffer,
    weights: &Buffer,
    y: &Buffer,
    accumulate: bool,
) -> Result<()> {
    use crate::quant::{mat_mat_id, ExpertGroups, MatMatGlu, MatMatPath};
    let dev = s.device().clone();
    let scratch = |bytes: usize| dev.alloc(bytes.max(4) as u64, vkml_hal::MemoryKind::DeviceLocal);
    let (k, n_embd) = (r.k, w.router.k());
    let n_ff = w.down.k();
    let n_slots = t * k;
    let (first, slots) = (scratch(4 * (r.n_expert + 1))?, scratch(4 * n_slots)?);
    group(s, ids, t, k, r.n_expert, &first, &slots)?;
    let g = ExpertGroups { slots: &slots, first: &first, n_slots, max_per_expert: t };
    // A stacked gate|up: the gated products (with the biases where there are some) in the
    // mat-mat's store, f16 where the down mat-mat reads f16; split gate and up: f32
    // products, the down mat-mat converting them.
    let h_f16 = matches!(w.gate_up, ExpertGateUp::Stacked(_))
        && MatMatPath::best(dev.caps(), w.down).reads_f16_x()
        && n_ff.is_multiple_of(2);
    let h = scratch((if h_f16 { 2 } else { 4 }) * n_slots * n_ff)?;
    match w.gate_up {
        ExpertGateUp::Stacked(m) => {
            let glu = MatMatGlu { act, y_f16: h_f16 };
            mat_mat_id(s, m, r.n_expert, &g, x, (k, x_f16), &h, Some(glu), w.biases.map(|b| b.gate_up))?;
        }
        ExpertGateUp::Split(gate, up) => {
            let product = |s: &mut Stream, m: &crate::quant::QMatrix, out: &Buffer| {
                mat_mat_id(s, m, r.n_expert, &g, x, (k, x_f16), out, None, None)
            };
            split_gated_products(s, (gate, up), w, act, (n_slots, n_ff, r.n_expert), ids, &h, product)?;
        }
    }
    let d = scratch(4 * n_slots * n_embd)?;
    mat_mat_id(s, w.down, r.n_expert, &g, &h, (1, h_f16), &d, None, None)?;
    weighted_sums(s, (weights, false), (&d, w.biases.map(|b| (ids, b.down))), t, k, n_embd, y, accumulate)
}

/// `y[n] (+)= Σ_j weights[n, j] (d[n k + j] (+ b[ids[n k + j]]))` over `[n_embd]` rows for
/// each token `n` (added to `y` where `accumulate`; each slot's expert bias `b: f32[n_expert,
/// n_embd]` where `bias` gives `(ids, b)`, gpt-oss's down bias; each weight's sigmoid
/// instead where `sigmoid`, a shared expert's): `moe_weighted_sum`, one pass.
#[allow(clippy::too_many_arguments)]
fn weighted_sums(
    s: &mut Stream,
    (weights, sigmoid): (&Buffer, bool),
    (d, bias): (&Buffer, Option<(&Buffer, &Buffer)>),
    t: usize,
    k: usize,
    n_embd: usize,
    y: &Buffer,
    accumulate: bool,
) -> Result<()> {
    let dev = s.device().clone();
    let p = pipeline(&dev, "moe_weighted_sum", 256)?;
    let pc =
        push_words(&[k as u32, n_embd as u32, u32::from(accumulate), u32::from(bias.is_some()), u32::from(sigmoid)]);
    let groups = [n_embd.div_ceil(256) as u32, t as u32, 1];
    let (ids, b) = bias.unwrap_or((weights, weights));
    s.dispatch(&p, &[weights.into(), d.into(), y.into(), ids.into(), b.into()], &pc, groups)?;
    Ok(())
}
