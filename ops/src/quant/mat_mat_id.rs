//! The expert-grouped mat-mat of a mixture-of-experts prompt: each expert's matrix read
//! once per tile of the tokens routed to it (llama.cpp's `ggml_mul_mat_id` for batches), the
//! groups made on the device by `crate::moe::group`. Kernels: `mul_mat_q` and `mul_mat_cm`
//! (or `mul_mat_cm256`) with `MM_IDS` (include/mul_mat_ids.glsl).

use vkml_hal::{Buffer, BufferArg, PipelineOptions, Stream};

use super::{
    convert_x_f16, epilogue_bindings, kernel_spec_constants, mat_mat_kernel, type_kernels, MatMatGlu, MatMatPath,
    QMatrix,
};
use crate::error::{OpsError, Result};
use crate::launch::push_words;
use crate::tuning;

/// A routed batch's slots grouped by expert, as `crate::moe::group` writes them: expert
/// `e`'s slots are `slots[first[e] .. first[e + 1]]` in increasing order.
#[derive(Debug, Clone, Copy)]
pub struct ExpertGroups<'a> {
    /// `u32[n_slots]`: slot indices, grouped by expert.
    pub slots: &'a Buffer,
    /// `u32[n_expert + 1]`: where each expert's slots begin, then `n_slots`.
    pub first: &'a Buffer,
    /// The batch's slots (`tokens · k`).
    pub n_slots: usize,
    /// The most slots one expert may have (the tokens, as a token's `k` experts differ):
    /// the grid covers that many per expert, tiles past an expert's count exit at once.
    pub max_per_expert: usize,
}

/// Records `y[j, :] = W_{e(j)} x_j` for every slot `j` of `groups` (`e(j)` its expert),
/// expert by expert: `m` holds `n_expert` experts of `m.rows() / n_expert` rows each (a 3-D
/// `ffn_*_exps` tensor, experts outermost); `x_j` is row `j / x_slots` of `x` (`[.., k]`,
/// f32, or packed f16 with `x_f16` on a path that reads it: [`MatMatPath::reads_f16_x`]);
/// `y: f32[n_slots, rows / n_expert]`, or with `glu` (each expert's rows its gate then its
/// up rows) `[n_slots, rows / n_expert / 2]` of `act(gate) * up`, f32 or packed f16 as
/// [`MatMatGlu`] says. Each row's sums are those of [`super::mat_mat_with`] on the expert's
/// matrix on the same path, bit for bit (each output depends on its token and row only).
/// With `glu_bias` (f32 `[n_expert, rows / n_expert]`: each expert's gate biases, then its
/// up biases; gpt-oss's), the biases join the gate and up sums before the activation, as
/// the product, then `moe`'s biased gated-product pass, would make them (its bits).
///
/// # Errors
/// [`OpsError::Shape`] for rows not a multiple of `n_expert` (or an odd gate|up), a matrix
/// in several parts, buffers too small for the shapes (the biases too), biases without
/// `glu`, or a grid past the device's limits;
/// [`OpsError::UnsupportedType`]; HAL errors. The groups' contents are not checked on the
/// device: `crate::moe::group` writes them.
#[allow(clippy::too_many_arguments)]
pub fn mat_mat_id(
    s: &mut Stream,
    m: &QMatrix,
    n_expert: usize,
    groups: &ExpertGroups<'_>,
    x: &Buffer,
    (x_slots, x_f16): (usize, bool),
    y: &Buffer,
    glu: Option<MatMatGlu>,
    glu_bias: Option<&Buffer>,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "mat_mat_id", reason });
    if n_expert == 0 || !m.rows.is_multiple_of(n_expert) {
        return bad(format!("{} rows are not {n_expert} experts of equal rows", m.rows));
    }
    if m.parts.len() != 1 {
        return bad(format!("the experts lie in {} parts: they must fit one storage binding", m.parts.len()));
    }
    let rows = m.rows / n_expert;
    let n_slots = groups.n_slots;
    if x_slots == 0 {
        return bad("x_slots must be at least 1".into());
    }
    let dev = s.device().clone();
    let path = MatMatPath::best(dev.caps(), m);
    if x_f16 && !path.reads_f16_x() {
        return bad(format!("{path:?} reads f32 x, not f16"));
    }
    let out_rows = match glu {
        Some(g) if !rows.is_multiple_of(2) || (g.y_f16 && !rows.is_multiple_of(4)) => {
            return bad(format!("a gated product over {rows} rows per expert: the gate and up halves need even counts"))
        }
        Some(_) => rows / 2,
        None => rows,
    };
    if let Some(b) = glu_bias {
        if glu.is_none() || b.size() < 4 * m.rows as u64 {
            return bad(format!("gate and up biases ({} bytes) need a gated product and {} f32", b.size(), m.rows));
        }
    }
    let y_f16 = glu.is_some_and(|g| g.y_f16);
    let x_rows = n_slots.div_ceil(x_slots);
    let xb = (if x_f16 { 2 } else { 4 }) * (x_rows * m.k) as u64;
    let yb = (if y_f16 { 2 } else { 4 }) * (n_slots * out_rows) as u64;
    if x.size() < xb || y.size() < yb {
        return bad(format!("{n_slots} slots need x of {xb} bytes and y of {yb}, got {} and {}", x.size(), y.size()));
    }
    if groups.slots.size() < 4 * n_slots as u64 || groups.first.size() < 4 * (n_expert as u64 + 1) {
        return bad(format!("the groups need {n_slots} slots and {} firsts", n_expert + 1));
    }
    if n_slots == 0 || rows == 0 {
        return Ok(());
    }
    let (name, tile_rows, tile_tokens) = mat_mat_kernel(dev.caps(), path, m.ty, rows, groups.max_per_expert);
    let k = type_kernels("mat_mat_id", m.ty)?;
    let kernel = match name {
        "mul_mat_q" => k.mul_mat_q,
        "mul_mat_cm256" => k.mul_mat_cm256,
        _ => k.mul_mat_cm,
    };
    let mut spec_constants = kernel_spec_constants(dev.caps(), path, name, m.ty, glu, None);
    spec_constants.push((13, 1)); // MM_IDS
    if glu_bias.is_some() {
        spec_constants.push((17, 1)); // MM_GLU_BIAS
    }
    let options = match path {
        MatMatPath::Scalar => PipelineOptions { spec_constants, ..PipelineOptions::default() },
        _ => tuning::coopmat_pipeline_options(dev.caps(), spec_constants).ok_or_else(|| OpsError::Shape {
            op: "mat_mat_id",
            reason: "the cooperative-matrix path needs a 16x16x16 f16 shape and subgroups of 32".into(),
        })?,
    };
    let gx = rows.div_ceil(tile_rows) as u64;
    let gy = groups.max_per_expert.max(1).div_ceil(tile_tokens) as u64;
    let lim = dev.caps().limits.max_workgroup_count;
    if gx > u64::from(lim[0]) || gy > u64::from(lim[1]) || n_expert as u64 > u64::from(lim[2]) {
        return bad(format!("{gx} x {gy} tiles of {n_expert} experts exceed the device's grid"));
    }
    // The tensor-core kernels read x as f16: converted once here.
    let x16 = if path.reads_f16_x() && !x_f16 { Some(convert_x_f16(s, x, x_rows * m.k)?) } else { None };
    let x_arg = x16.as_ref().unwrap_or(x);
    let p = dev.pipeline(&dev.kernel(kernel)?, &options)?;
    // Push constants of include/mul_mat_ids.glsl's kernels: rows of one expert, the
    // slots as n_tok (unused grouped but for bounds), no accumulate, no split, C's stride.
    let words =
        [0, m.row_bytes as u32, m.k as u32, rows as u32, n_slots as u32, 0, m.k as u32, rows as u32, 0, x_slots as u32];
    let w = &m.parts[0].buffer;
    let mut bindings: Vec<BufferArg<'_>> = vec![w.into(), x_arg.into(), y.into()];
    bindings.extend(epilogue_bindings(w, y.into(), None, Some(groups), glu_bias));
    s.dispatch(&p, &bindings, &push_words(&words), [gx as u32, gy as u32, n_expert as u32])?;
    Ok(())
}
