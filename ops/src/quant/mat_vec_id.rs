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
    if nw.size() < 4 * m.k as u64 {
        return Err(OpsError::Shape {
            op: "mat_vec_id_rms_norm",
            reason: format!("the norm weight holds {} bytes, less than {} f32", nw.size(), m.k),
        });
    }
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
    let bad = |reason: String| Err(OpsError::Shape { op: "mat_vec_id", reason });
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
    // Output rows per slot: the expert's, or half of them for the gated products.
    let rows = if glu.is_some() { per_expert / 2 } else { per_expert };
    let x_rows = if x_slots == 0 { 1 } else { n_slots.div_ceil(x_slots) };
    if ids.size() < 4 * n_slots as u64 || x.size() < 4 * (x_rows * m.k) as u64 || y.size() < 4 * (n_slots * rows) as u64
    {
        return bad(format!(
            "{n_slots} slots of {rows} rows need {} bytes of ids, {} of x and {} of y, got {}, {} and {}",
            4 * n_slots,
            4 * x_rows * m.k,
            4 * n_slots * rows,
            ids.size(),
            x.size(),
            y.size()
        ));
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
    // (`dot_quantizes_x`): each workgroup quantizes its slot's x row to Q8_1.
    let dot = super::dot_quantizes_x(caps, m, 1, &cfg);
    let (kernel, workgroup) = if dot {
        (super::dot_kernel(m.ty, true)?, cfg.dot_x_workgroup.max(sg))
    } else {
        (kernel, cfg.workgroup.max(sg))
    };
    // Rows per subgroup for the whole dispatch (every slot's rows), not one expert's: the
    // slots already spread the grid over the GPU.
    let nr = if dot {
        tuning::dot_x_rows_per_subgroup(&cfg, rows * n_slots, m.k)
    } else {
        tuning::block_rows_per_subgroup(caps, &cfg, rows * n_slots, m.k, workgroup / sg)
    };
    // The gated products read two matrix rows per output row: half the rows per subgroup
    // (H100, qwen3moe-30b-a3b Q4_0 tg128: 4 rows 187.2 t/s, 2 rows 198.8, 1 row 188.7;
    // benches/RESULTS.md).
    let nr = if glu.is_some() { (nr / 2).max(1) } else { nr };
    let options = PipelineOptions {
        spec_constants: vec![
            (0, workgroup),
            (1, 1),
            (2, nr),
            (10, glu.map_or(0, |a| MatVecEpilogue::Glu(a).spec())),
            (11, u32::from(norm.is_some())),
            (17, 1),
            (18, x_slots as u32),
        ],
        required_subgroup_size: require.then_some(sg),
        full_subgroups: caps.subgroup.full_subgroups,
    };
    let p = dev.pipeline(&dev.kernel(kernel)?, &options)?;
    let [gx, gy, _] = grid(&dev, "mat_vec_id", (rows as u64).div_ceil(u64::from(workgroup / sg * nr)))?;
    let eps = norm.map_or(0, |n| n.1.to_bits());
    let pc = push_words(&[0, m.row_bytes as u32, m.k as u32, rows as u32, 1, rows as u32, eps]);
    let (xa, ya) = (BufferArg::from(x), BufferArg::from(y));
    // Binding 3 the norm weight (x stands in without one); 4-6 (post-norm residual, weight,
    // count) unused: stand-ins; the
    // ids at 7 (block kernels) or 8 (integer-dot kernels, whose 7 is their unused Q8_1
    // output).
    let nwa = norm.map_or(xa, |(nw, _)| BufferArg::range(nw, 0, 4 * m.k as u64));
    let mut args = vec![(&m.parts[0].buffer).into(), xa, ya, nwa, ya, xa, ya];
    if dot {
        args.push(ya);
    }
    args.push(ids.into());
    s.dispatch(&p, &args, &pc, [gx, gy, n_slots as u32])?;
    Ok(())
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
