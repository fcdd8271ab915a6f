//! The expert-indexed mat-vec of a mixture-of-experts decode step: each slot's expert, an id
//! read on the device (from `moe::route`), multiplied with x in one dispatch per projection
//! (the block-wise kernels with `MV_IDS`, `include/mul_mat_vec_block.glsl`; llama.cpp's
//! `ggml_mul_mat_id` for one token).

use vkml_hal::{Buffer, BufferArg, PipelineOptions, Stream};

use vkml_quant::GgmlType;

use super::{block_kernel, MatVecEpilogue, QMatrix};
use crate::error::{OpsError, Result};
use crate::launch::{grid, push_words};
use crate::nn::GluActivation;
use crate::tuning;

/// Records `y[j, :] = W_{ids[j]} x_j` for the `n_slots` slots `j`: `m` holds `n_expert`
/// experts of `m.rows() / n_expert` rows each (a 3-D `ffn_*_exps` tensor, experts
/// outermost), `ids: u32[n_slots]` (each below `n_expert`; a slot may repeat an expert), `y:
/// f32[n_slots, rows / n_expert]`. `x_j` is row `j / x_slots` of `x: f32[.., k]`: with
/// `x_slots` 1 each slot's own row (the down projection: each expert's own input), with
/// `k_used` the row of the token whose `k_used` slots are consecutive (gate and up of
/// several tokens), with 0 row 0 for every slot. The sums are those of
/// [`super::mat_vec_with`] on the expert's matrix with the device's block-wise launch, bit
/// for bit.
///
/// # Errors
/// [`OpsError::Shape`] for rows not a multiple of `n_expert`, a matrix in several parts,
/// more than 65 535 slots, buffers too small, a device without the block-wise kernels
/// (subgroup arithmetic and sizes) or a type without one ([`super::BLOCK_TYPES`]); HAL
/// errors. Ids out of range are not checked on the device: the caller's router gives ids
/// below `n_expert`.
#[allow(clippy::too_many_arguments)]
pub fn mat_vec_id(
    s: &mut Stream,
    m: &QMatrix,
    n_expert: usize,
    ids: &Buffer,
    n_slots: usize,
    x: &Buffer,
    x_slots: usize,
    y: &Buffer,
) -> Result<()> {
    mat_vec_id_with(s, m, n_expert, ids, n_slots, x, x_slots, y, None, None)
}

/// [`mat_vec_id`] with the gated product in the store: each expert of `m` holds `2 n`
/// rows, its gate rows then its up rows (as `moe::MoeWeights::gate_up`), and slot `j`'s
/// `y[j, :] = act(gate_{ids[j]} x_j) * up_{ids[j]} x_j`, `f32[n_slots, n]`: the bits of
/// [`mat_vec_id`] of each half then `nn::glu`.
///
/// # Errors
/// As [`mat_vec_id`]; an odd number of rows per expert.
#[allow(clippy::too_many_arguments)]
pub fn mat_vec_id_glu(
    s: &mut Stream,
    m: &QMatrix,
    n_expert: usize,
    ids: &Buffer,
    n_slots: usize,
    x: &Buffer,
    x_slots: usize,
    y: &Buffer,
    act: GluActivation,
) -> Result<()> {
    mat_vec_id_with(s, m, n_expert, ids, n_slots, x, x_slots, y, Some(act), None)
}

/// [`mat_vec_id`] (or with `glu`, [`mat_vec_id_glu`]) of one token's slots on its x
/// normalised in the kernel: every slot reads `rms_norm(x)` (candle-nn's `rms_norm` with
/// weight `nw: f32[k]` and `eps`) of the one row `x: f32[k]`, each workgroup computing the
/// norm itself (`include/mat_vec_norm.glsl`, or the integer-dot kernels' quantize step),
/// so the norm needs no dispatch of its own. The results agree with `norm.rms` then
/// [`mat_vec_id`] to float rounding (the sum of squares is reduced in another order).
///
/// # Errors
/// As [`mat_vec_id`]; a norm weight shorter than `k`.
#[allow(clippy::too_many_arguments)]
pub fn mat_vec_id_rms_norm(
    s: &mut Stream,
    m: &QMatrix,
    n_expert: usize,
    ids: &Buffer,
    n_slots: usize,
    x: &Buffer,
    (nw, eps): (&Buffer, f32),
    y: &Buffer,
    glu: Option<GluActivation>,
) -> Result<()> {
    mat_vec_id_with(s, m, n_expert, ids, n_slots, x, 0, y, glu, Some((nw, eps)))
}

#[allow(clippy::too_many_arguments)]
fn mat_vec_id_with(
    s: &mut Stream,
    m: &QMatrix,
    n_expert: usize,
    ids: &Buffer,
    n_slots: usize,
    x: &Buffer,
    x_slots: usize,
    y: &Buffer,
    glu: Option<GluActivation>,
    norm: Option<(&Buffer, f32)>,
) -> Result<()> {
    let e = ExpertMatVec { n_expert, ids, n_slots, x_slots, norm, glu, bias: None, route: None, sum: None };
    mat_vec_id_fused(s, m, x, y, &e)
}

/// The routing an expert-indexed gate|up mat-vec folds in ([`ExpertMatVec::route`]):
/// each workgroup ranks its token's experts from the router's logits itself
/// (`include/moe_route.glsl`, the arithmetic of [`crate::moe::route`] without a selection
/// bias), so the routing needs no dispatch of its own.
#[derive(Debug, Clone, Copy)]
pub struct RoutedSlots<'a> {
    /// The router's logits, `f32[tokens, routing.n_expert]`.
    pub logits: &'a Buffer,
    /// The router's own bias, `f32[n_expert]` (gpt-oss's `ffn_gate_inp.bias`).
    pub logit_bias: Option<&'a Buffer>,
    /// Experts, experts per token (the slots of token `n` are `n k .. n k + k`), gating,
    /// normalisation and scale of the weights.
    pub routing: crate::moe::Routing,
    /// Where each slot's weight goes, `f32[n_slots]` (the ids go to [`ExpertMatVec::ids`]).
    pub weights: &'a Buffer,
}

/// The weighted sums an expert-indexed down mat-vec folds in ([`ExpertMatVec::sum`]).
#[derive(Debug, Clone, Copy)]
pub struct WeightedSlots<'a> {
    /// Slots per token: `y` row `n` is the sum over slots `n k .. n k + k`.
    pub k: usize,
    /// Each slot's weight, `f32[n_slots]`.
    pub weights: &'a Buffer,
    /// Add the sums to `y` (the block's residual add) instead of storing them.
    pub accumulate: bool,
    /// Weigh by each weight's sigmoid instead (a shared expert's gate logit, Qwen2-MoE).
    pub sigmoid: bool,
    /// A term added to each sum after the slots' (`f32[n_slots / k, rows]`, before the
    /// residual where `accumulate`): Qwen2-MoE's shared expert output, made beside the
    /// routed products, so that the sums need not wait for a pass of its own after them.
    pub addend: Option<&'a Buffer>,
    /// Scratch for each slot's row, `f32[n_slots, rows]`: where given and the sums run on
    /// the integer-dot kernel ([`expert_sums_on_integer_dot`]), each slot's workgroups
    /// multiply its own expert into its row there, and the last of a token's k workgroups
    /// of a row group (counted on a device-scope atomic) takes the group's sums: k times
    /// the workgroups of the folded sums, and no pass after them. The sums' order and
    /// arithmetic are the folded ones. Elsewhere (the block kernels, whose subgroups split
    /// a token's experts; more than [`SLOT_COUNTS`] row groups of all tokens) unused.
    pub slot_rows: Option<&'a Buffer>,
}

/// The counts of finished workgroups a matrix keeps for the weighted sums by the last
/// workgroup ([`WeightedSlots::slot_rows`]): tokens times row groups of a dispatch, at most.
pub const SLOT_COUNTS: usize = 4096;

/// One expert-indexed mat-vec of a MoE decode step and what it folds in
/// (`include/mat_vec_moe.glsl`), for [`mat_vec_id_fused`].
#[derive(Debug, Clone, Copy)]
pub struct ExpertMatVec<'a> {
    /// Experts in the matrix (its rows are `n_expert` experts of equal rows).
    pub n_expert: usize,
    /// Each slot's expert, `u32[n_slots]` (below `n_expert`); written here where `route`.
    /// Not read for a matrix of one expert (expert 0), where any buffer of `n_slots` words
    /// stands in.
    pub ids: &'a Buffer,
    /// Slots (at most 65 535).
    pub n_slots: usize,
    /// Slot `j` reads x row `j / x_slots` (0: row 0 for every slot).
    pub x_slots: usize,
    /// An RMS norm `(weight f32[k], eps)` of the one row x, computed in each workgroup.
    pub norm: Option<(&'a Buffer, f32)>,
    /// The gated product: each expert holds its gate rows, then its up rows.
    pub glu: Option<GluActivation>,
    /// Expert biases, f32: `[n_expert, 2 n]` (gate then up) with `glu`, added before the
    /// activation; `[n_expert, rows]` with `sum`, added before the weight. Not without one
    /// of them.
    pub bias: Option<&'a Buffer>,
    /// The routing, in the kernel (with `glu`, as the gate|up product of a decode step).
    pub route: Option<RoutedSlots<'a>>,
    /// The weighted sums over each token's slots into `y: f32[n_slots / k, rows]` (not with
    /// `glu` or `norm`).
    pub sum: Option<WeightedSlots<'a>>,
}

/// Records the expert-indexed mat-vec `e` describes: `y[j, :] = W_{ids[j]} x_j` for each
/// slot `j` (as [`mat_vec_id`]), with the gated product ([`mat_vec_id_glu`]), the norm
/// ([`mat_vec_id_rms_norm`]), the experts' biases, the routing (the ids and weights written
/// by the kernel itself) or the weighted sums as `e` says. A MoE decode step's block is then
/// three dispatches: the router's mat-vec, gate|up routed, down summed.
///
/// # Errors
/// As [`mat_vec_id`]; a combination the kernels do not take (`sum` with `glu` or `norm`,
/// `route` without `glu`, a bias without either, `k` not dividing the slots), routing out
/// of [`crate::moe::MAX_EXPERTS`] / [`crate::moe::MAX_USED`], buffers too small.
pub fn mat_vec_id_fused(s: &mut Stream, m: &QMatrix, x: &Buffer, y: &Buffer, e: &ExpertMatVec<'_>) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "mat_vec_id", reason });
    let ExpertMatVec { n_expert, ids, n_slots, x_slots, norm, glu, bias, route, sum } = *e;
    if n_expert == 0 || !m.rows.is_multiple_of(n_expert) {
        return bad(format!("{} rows are not {n_expert} experts of equal rows", m.rows));
    }
    if m.parts.len() != 1 {
        return bad(format!("the experts lie in {} parts: they must fit one storage binding", m.parts.len()));
    }
    let per_expert = m.rows / n_expert;
    if glu.is_some() && !per_expert.is_multiple_of(2) {
        return bad(format!("{per_expert} rows per expert are not gate and up rows of equal count"));
    }
    if let Some(w) = sum {
        if glu.is_some() || norm.is_some() || route.is_some() || w.k == 0 || !n_slots.is_multiple_of(w.k) {
            return bad(format!(
                "weighted sums of {n_slots} slots, {} per token, with a gated product, norm or routing",
                w.k
            ));
        }
    }
    if (route.is_some() && glu.is_none()) || (bias.is_some() && glu.is_none() && sum.is_none()) {
        return bad("the routing and biases go with the gated products (biases also with the sums)".into());
    }
    if let Some((nw, _)) = norm.filter(|(nw, _)| nw.size() < 4 * m.k as u64) {
        return bad(format!("the norm weight holds {} bytes, less than {} f32", nw.size(), m.k));
    }
    // Output rows per slot: the expert's, or half of them for the gated products.
    let rows = if glu.is_some() { per_expert / 2 } else { per_expert };
    let x_rows = if sum.is_some() {
        n_slots
    } else if x_slots == 0 {
        1
    } else {
        n_slots.div_ceil(x_slots)
    };
    let y_rows = sum.map_or(n_slots, |w| n_slots / w.k);
    if let Some(d) = sum.and_then(|w| w.slot_rows).filter(|d| d.size() < 4 * (n_slots * rows) as u64) {
        return bad(format!("the slots' rows hold {} bytes, {} needed", d.size(), 4 * n_slots * rows));
    }
    if ids.size() < 4 * n_slots as u64 || x.size() < 4 * (x_rows * m.k) as u64 || y.size() < 4 * (y_rows * rows) as u64
    {
        return bad(format!(
            "{n_slots} slots of {rows} rows need {} bytes of ids, {} of x and {} of y, got {}, {} and {}",
            4 * n_slots,
            4 * x_rows * m.k,
            4 * y_rows * rows,
            ids.size(),
            x.size(),
            y.size()
        ));
    }
    if let Some(b) = bias {
        let need = 4 * (n_expert * if glu.is_some() { 2 * rows } else { rows }) as u64;
        if b.size() < need {
            return bad(format!("the expert biases hold {} bytes, {need} needed", b.size()));
        }
    }
    if let Some(r) = route {
        let rt = r.routing;
        if rt.n_expert != n_expert || rt.k == 0 || rt.k > crate::moe::MAX_USED || rt.k > n_expert {
            return bad(format!("routing {} of {} experts for a matrix of {n_expert}", rt.k, rt.n_expert));
        }
        if n_expert > crate::moe::MAX_EXPERTS || !n_slots.is_multiple_of(rt.k) {
            return bad(format!(
                "{n_slots} slots of {} per token, {n_expert} experts: at most {}",
                rt.k,
                crate::moe::MAX_EXPERTS
            ));
        }
        let tokens = (n_slots / rt.k) as u64;
        if r.logits.size() < 4 * tokens * n_expert as u64
            || r.weights.size() < 4 * n_slots as u64
            || r.logit_bias.is_some_and(|b| b.size() < 4 * n_expert as u64)
        {
            return bad(format!(
                "{tokens} tokens' routing needs logits of {} bytes and weights of {}",
                4 * tokens * n_expert as u64,
                4 * n_slots
            ));
        }
    }
    if sum.is_some_and(|w| w.weights.size() < 4 * n_slots as u64) {
        return bad(format!("the weights of {n_slots} slots need {} bytes", 4 * n_slots));
    }
    if let Some(a) = sum.and_then(|w| w.addend).filter(|a| a.size() < 4 * (y_rows * rows) as u64) {
        return bad(format!("the sums' addend holds {} bytes, {} needed", a.size(), 4 * y_rows * rows));
    }
    if n_slots > u16::MAX as usize {
        return bad(format!("{n_slots} slots: at most 65535"));
    }
    let dev = s.device().clone();
    let caps = dev.caps();
    let cfg = tuning::mat_vec_config(caps);
    let (Some((sg, require)), Some(kernel)) = (row_subgroups(caps), block_kernel(m.ty)) else {
        return bad(format!(
            "{:?} experts need a block-wise mat-vec kernel and subgroup arithmetic with a usable subgroup size",
            m.ty
        ));
    };
    if n_slots == 0 || rows == 0 {
        return Ok(());
    }
    // The integer-dot kernel where the dense mat-vec would quantize x itself
    // (`dot_quantizes_x`): each workgroup quantizes its slot's x row (with the sums, its
    // token's k rows) to Q8_1.
    let dot = quantizes_x(caps, &cfg, m, sum.map_or(1, |w| w.k));
    // The sums by the last workgroup of each token's row group (the experts' products as
    // many workgroups as without the sums), where the caller gives the slots' rows and
    // their counts fit the matrix's.
    let last_rows = match sum.and_then(|w| w.slot_rows) {
        Some(d) if dot => {
            let wg_rows = (cfg.dot_x_workgroup.max(sg) / sg) as usize
                * tuning::dot_x_rows_per_subgroup(&cfg, rows * n_slots, m.k) as usize;
            (rows.div_ceil(wg_rows) * y_rows <= SLOT_COUNTS).then_some(d)
        }
        _ => None,
    };
    let sum_last = last_rows.is_some();
    // The weighted sums on the block kernels: one subgroup per expert of the token, so that
    // each subgroup's rows share their x loads (H200, gpt-oss-20b's MXFP4 down, 4 experts
    // of 2880 x 2880: 35 us with the experts in turn in each subgroup, one row each).
    let split = !dot
        && sum
            .is_some_and(|w| w.k as u64 * u64::from(sg) <= u64::from(caps.limits.max_workgroup_invocations.min(1024)));
    let (kernel, workgroup) = if dot {
        (super::dot_kernel(m.ty, true)?, cfg.dot_x_workgroup.max(sg))
    } else if let (true, Some(w)) = (split, sum) {
        (kernel, w.k as u32 * sg)
    } else {
        (kernel, cfg.workgroup.max(sg))
    };
    // Rows per subgroup for the whole dispatch (every slot's rows, each token's with the
    // sums), not one expert's: the slots already spread the grid over the GPU.
    let grid_rows = rows * if sum_last { n_slots } else { y_rows };
    let nr = if dot {
        tuning::dot_x_rows_per_subgroup(&cfg, grid_rows, m.k)
    } else {
        tuning::block_rows_per_subgroup(caps, &cfg, grid_rows, m.k, workgroup / sg)
    };
    let nr = if glu.is_some() { tuning::expert_glu_rows_per_subgroup(caps, m.ty, nr) } else { nr };
    // The weighted sums: one workgroup per row group of the token's k experts, so fewer
    // rows per subgroup, until the grid holds two workgroups per compute unit (H200,
    // gpt-oss-20b's MXFP4 down, 4 experts of 2880 x 2880: 180 workgroups took 45 us).
    let nr = match sum {
        _ if sum_last => nr,
        Some(_) if split => tuning::block_rows_per_subgroup(caps, &cfg, grid_rows, m.k, 1),
        Some(_) => {
            let per_wg = (workgroup / sg) as usize;
            let target = 2 * caps.compute_units.count.max(1) as usize;
            let mut nr = nr;
            while nr > 1 && rows.div_ceil(per_wg * nr as usize) * y_rows < target {
                nr /= 2;
            }
            nr
        }
        None => nr,
    };
    let epilogue = match (glu, sum) {
        (Some(a), _) => MatVecEpilogue::Glu(a).spec(),
        (None, Some(w)) if w.accumulate && !sum_last => MatVecEpilogue::Add.spec(),
        _ => 0,
    };
    let (gating, flags, scale, n_route, k_route) = match route {
        Some(r) => {
            let g = match r.routing.gating {
                crate::moe::ExpertGating::Softmax => 1,
                crate::moe::ExpertGating::Sigmoid => 2,
                crate::moe::ExpertGating::SoftmaxWeight => 3,
            };
            let flags = u32::from(r.routing.norm_w) | u32::from(r.logit_bias.is_some()) << 1;
            (g, flags, r.routing.w_scale.to_bits(), n_expert as u32, r.routing.k as u32)
        }
        None => {
            let (sigmoid, addend) = sum.map_or((false, false), |w| (w.sigmoid, w.addend.is_some()));
            // (bit 5: the last workgroup adds its sums to the residual)
            let add_last = sum_last && sum.is_some_and(|w| w.accumulate);
            (0, u32::from(sigmoid) << 2 | u32::from(addend) << 4 | u32::from(add_last) << 5, 0, 1, 1)
        }
    };
    // (a matrix of one expert: the kernel takes expert 0 and reads no ids)
    let flags = flags | u32::from(n_expert == 1) << 3;
    let mut options = PipelineOptions {
        spec_constants: vec![
            (0, workgroup),
            (1, 1),
            (2, nr),
            (10, epilogue),
            (11, u32::from(norm.is_some())),
            (17, 1),
            (18, x_slots as u32),
            (19, gating),
            (20, n_route),
            (21, k_route),
            (22, flags),
            (23, scale),
            (24, u32::from(bias.is_some())),
            (25, sum.map_or(0, |w| w.k as u32)),
        ],
        required_subgroup_size: require.then_some(sg),
        full_subgroups: caps.subgroup.full_subgroups,
    };
    if dot {
        // (the integer-dot kernels' sums by the last workgroup; the block kernels have no
        // constant 27)
        options.spec_constants.push((27, u32::from(sum_last)));
    } else {
        // (the block kernels' split sums and one-pass norm; the integer-dot kernels have
        // no constant 26 or 12)
        options.spec_constants.push((26, u32::from(split)));
        options.spec_constants.push((12, u32::from(cfg.norm_one_pass)));
    }
    let p = dev.pipeline(&dev.kernel(kernel)?, &options)?;
    // (rows per workgroup: each subgroup's, or with the split sums the workgroup's)
    let wg_rows = if split { nr } else { workgroup / sg * nr };
    let [gx, gy, _] = grid(&dev, "mat_vec_id", (rows as u64).div_ceil(u64::from(wg_rows)))?;
    let eps = norm.map_or(0, |n| n.1.to_bits());
    let pc = push_words(&[0, m.row_bytes as u32, m.k as u32, rows as u32, 1, rows as u32, eps]);
    let xa = BufferArg::from(x);
    // Binding 2 the products (with the sums by the last workgroup, the slots' rows); 3 the
    // norm weight (x stands in without one); 4-6 the post-norm residual, weight and count,
    // which only the sums by the last workgroup use (y and the matrix's counts); the ids
    // at 7 (block kernels) or 8 (integer-dot kernels, whose 7 is their unused Q8_1
    // output); then include/mat_vec_moe.glsl's weights, logits, router bias (or the sums'
    // addend) and expert biases (y stands in for those not used).
    let (ya, counts) = match last_rows {
        Some(d) => {
            let need = (gx * gy) as usize * y_rows;
            debug_assert!(need <= SLOT_COUNTS, "{need} counts of the sums by the last workgroup");
            let c = match m.slot_counts.get() {
                Some(c) => c,
                None => {
                    let c = dev.alloc(4 * SLOT_COUNTS as u64, vkml_hal::MemoryKind::DeviceLocal)?;
                    s.fill(&c, 0, 4 * SLOT_COUNTS as u64, 0)?;
                    m.slot_counts.get_or_init(|| c)
                }
            };
            (BufferArg::from(d), BufferArg::from(c))
        }
        None => (BufferArg::from(y), BufferArg::from(y)),
    };
    let nwa = norm.map_or(xa, |(nw, _)| BufferArg::range(nw, 0, 4 * m.k as u64));
    let mut args = vec![(&m.parts[0].buffer).into(), xa, ya, nwa, y.into(), xa, counts];
    if dot {
        args.push(ya);
    }
    args.push(ids.into());
    let weights = route.map(|r| r.weights).or(sum.map(|w| w.weights));
    args.push(weights.map_or(ya, BufferArg::from));
    args.push(route.map_or(ya, |r| r.logits.into()));
    // (the router's bias; the sums' addend at the same binding)
    let bias_or_addend = route.and_then(|r| r.logit_bias).or(sum.and_then(|w| w.addend));
    args.push(bias_or_addend.map_or(ya, BufferArg::from));
    args.push(bias.map_or(ya, BufferArg::from));
    let gz = if sum_last { n_slots } else { y_rows };
    s.dispatch(&p, &args, &pc, [gx, gy, gz as u32])?;
    Ok(())
}

/// Whether the expert mat-vecs run `m` on the integer-dot kernel, each workgroup
/// quantizing `x_rows` rows of x (a token's k rows with the weighted sums) to Q8_1.
fn quantizes_x(caps: &vkml_hal::Capabilities, cfg: &tuning::MatVecConfig, m: &QMatrix, x_rows: usize) -> bool {
    super::dot_quantizes_x(caps, m, 1, cfg) && x_rows * m.k / 32 <= super::DOT_X_MAX_BLOCKS
}

/// Whether [`mat_vec_id_fused`] takes the weighted sums of a token's `k` experts of `m`
/// ([`WeightedSlots`]) on the integer-dot kernel, whose subgroups take the k experts in
/// turn (the block kernels split them over the subgroups of a workgroup).
pub fn expert_sums_on_integer_dot(caps: &vkml_hal::Capabilities, m: &QMatrix, k: usize) -> bool {
    quantizes_x(caps, &tuning::mat_vec_config(caps), m, k)
}

/// The subgroup size (and whether the pipeline must require it) of the block-wise
/// mat-vecs the expert-indexed ones run on, where the device runs them.
fn row_subgroups(caps: &vkml_hal::Capabilities) -> Option<(u32, bool)> {
    tuning::row_subgroup_size(caps).filter(|_| tuning::mat_vec_config(caps).subgroup_rows)
}

/// Whether the expert-indexed mat-vecs ([`mat_vec_id`], [`mat_vec_id_glu`],
/// [`mat_vec_id_rms_norm`]) run `ty` experts on this device: a block-wise kernel for the
/// type (not the float types) and subgroup arithmetic with a usable subgroup size. Where
/// not, `moe::ffn` runs decode steps on the grouped mat-mats.
pub fn mat_vec_id_runs(caps: &vkml_hal::Capabilities, ty: GgmlType) -> bool {
    row_subgroups(caps).is_some() && block_kernel(ty).is_some()
}
