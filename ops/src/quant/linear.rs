//! One entry for a quantized linear layer: [`linear`] computes `epilogue(norm(x) Wᵀ)` and
//! picks the kernels itself from the row count and `Capabilities`: the mat-vec family
//! below [`LinearOptions::mat_mat_from`] rows (the norm and the epilogue folded into one
//! dispatch where the kernels allow: [`rms_norm_mat_vec`], [`mat_vec_fused`],
//! [`mat_vec_norm_add`]), the mat-mat ([`mat_mat_with`], [`MatMatPath::best`]) from
//! there with the residual add and the gated product in its store ([`MatMatGlu`]), the
//! norm and the other epilogues as kernels of their own around it. Callers pass buffers
//! and shapes only.

use vkml_hal::{Buffer, MemoryKind, Stream};

use super::{
    glu_writes_q8_1, mat_mat_rope_kv, mat_mat_with, mat_vec_bias, mat_vec_fused, mat_vec_fuses_norm_add,
    mat_vec_norm_add, mat_vec_q8_1_fused, mat_vec_uses_q8_1, rms_norm_mat_vec, rms_norm_mat_vec_scratch, MatMatGlu,
    MatMatOptions, MatMatPath, MatVecEpilogue, QMatrix,
};
use crate::attention::RopeKv;
use crate::elementwise::{binary, BinaryOp, View};
use crate::error::{OpsError, Result};
use crate::nn::{rms_norm, rms_norm_f16_out, GluActivation};
use crate::{tuning, Dtype};

/// An RMS norm of x's rows before the product (candle-nn's `rms_norm`: `x / sqrt(mean(x²) +
/// eps) * weight`).
#[derive(Debug, Clone, Copy)]
pub struct PreNorm<'a> {
    /// `f32[k]`.
    pub weight: &'a Buffer,
    /// Added to the mean square.
    pub eps: f32,
}

/// What [`linear`] does with the product `p = norm(x) Wᵀ`.
#[derive(Debug, Clone, Copy)]
pub enum LinearEpilogue<'a> {
    /// `y = p`, `y: f32[t, rows]`.
    Store,
    /// `y += p` (a residual add).
    Add,
    /// `y += p + b` (a residual add with the projection's bias `b: f32[rows]`, gpt-oss's
    /// `attn_output.bias`): in the mat-vec's store ([`mat_vec_bias`]); after the mat-mat,
    /// `nn::add_bias`.
    AddBias(&'a Buffer),
    /// `y = act(p_gate) * p_up` over the stacked `[gate; up]` rows, `y: f32[t, rows / 2]`.
    Glu(GluActivation),
    /// `y += rms_norm(p) * weight` (Gemma's post-norms: the product normalised, then added),
    /// `weight: f32[rows]`.
    NormAdd {
        /// `f32[rows]`.
        weight: &'a Buffer,
        /// Added to the mean square.
        eps: f32,
    },
    /// `y = cap · tanh(p / cap)` (Gemma 2's soft-capped logits), as
    /// [`crate::elementwise::softcap`] computes it: in the mat-vec's store, after the
    /// mat-mat.
    Softcap(f32),
    /// The product is a stacked Q|K|V (`rows` = [`RopeKv::qkv_rows`]): its query heads
    /// rotated into `y` (f32 `[t, n_heads, d]`), its key heads rotated into the key cache
    /// and its value heads copied into the value cache, as
    /// [`crate::attention::rope_kv_append`] does it ([`mat_mat_rope_kv`]: in the mat-mat's
    /// store for prompts where the kernel folds it).
    RopeKv(RopeKv<'a>),
}

/// The choices [`linear`] takes from its caller.
#[derive(Debug, Clone, Copy)]
pub struct LinearOptions {
    /// Rows of x from which the mat-mat runs instead of the mat-vecs
    /// ([`tuning::mat_mat_min_tokens`] by default).
    pub mat_mat_from: usize,
}

impl LinearOptions {
    /// The device's defaults.
    pub fn new(caps: &vkml_hal::Capabilities) -> LinearOptions {
        LinearOptions { mat_mat_from: tuning::mat_mat_min_tokens(caps) }
    }
}

/// A device-local scratch of `bytes` (at least 4).
fn scratch(s: &Stream, bytes: usize) -> Result<Buffer> {
    Ok(s.device().alloc(bytes.max(4) as u64, MemoryKind::DeviceLocal)?)
}

/// Records `y ⊕= epilogue(norm(x) Wᵀ)` for `x: f32[t, k]` (packed) and `w: [rows, k]`
/// (any type [`QMatrix`] holds), as [`LinearEpilogue`] and [`PreNorm`] describe it.
///
/// Below `opts.mat_mat_from` rows: one mat-vec dispatch with the norm and the epilogue
/// where the kernels fold them ([`rms_norm_mat_vec`]; [`mat_vec_norm_add`] where
/// [`mat_vec_fuses_norm_add`] holds), else the norm's kernel first and the post-norm as
/// `norm.rms` and an add after. From there: the norm's kernel (writing the f16 x of the
/// tensor-core paths, [`MatMatPath::reads_f16_x`]), the mat-mat (accumulating for `Add`,
/// writing the gated products for `Glu`: [`MatMatGlu`], rotating and appending for
/// `RopeKv`: [`mat_mat_rope_kv`]), then for the post-norm the norm and the add, for the
/// soft-cap its kernel. Results
/// agree with the composition of the separate ops to float rounding (sums of squares and
/// products reduced in other orders).
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small for the shapes, a `Glu` over an odd number of
/// rows, a `RopeKv` whose heads are not the matrix's rows or that
/// [`crate::attention::rope_kv_append`] refuses, `y` that is `x`; errors of the kernels it
/// records.
#[allow(clippy::too_many_arguments)]
pub fn linear(
    s: &mut Stream,
    w: &QMatrix,
    x: &Buffer,
    t: usize,
    norm: Option<PreNorm<'_>>,
    y: &Buffer,
    epilogue: LinearEpilogue<'_>,
    opts: &LinearOptions,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "linear", reason });
    if t == 0 {
        return Ok(());
    }
    if matches!(epilogue, LinearEpilogue::Glu(_)) && !w.rows.is_multiple_of(2) {
        return bad(format!("a gated product over {} rows: the stacked gate and up need an even count", w.rows));
    }
    if x.handle() == y.handle() {
        return bad("the output is the input".into());
    }
    if let Some(n) = norm {
        if n.weight.size() < 4 * w.k as u64 {
            return bad(format!("the norm weight holds {} bytes, less than {} f32", n.weight.size(), w.k));
        }
    }
    if let LinearEpilogue::RopeKv(r) = epilogue {
        if w.rows != r.qkv_rows() {
            return bad(format!(
                "a [{}, {}] matrix is not the Q|K|V of {} query and {} KV heads of {}",
                w.rows, w.k, r.n_heads, r.caches.0.n_kv_heads, r.caches.0.d
            ));
        }
        r.check("linear", t, y)?;
    }
    if let LinearEpilogue::NormAdd { weight, .. } = epilogue {
        if weight.size() < 4 * w.rows as u64 {
            return bad(format!("the post-norm weight holds {} bytes, less than {} f32", weight.size(), w.rows));
        }
    }
    let caps = s.device().caps().clone();
    let cfg = tuning::mat_vec_config(&caps);
    if let LinearEpilogue::AddBias(b) = epilogue {
        if b.size() < 4 * w.rows as u64 {
            return bad(format!("the bias holds {} bytes, less than {} f32", b.size(), w.rows));
        }
        if t < opts.mat_mat_from {
            let x = match norm {
                Some(n) => normalised(s, x, n, t, w.k)?,
                None => x.clone(),
            };
            return mat_vec_bias(s, w, &x, t, y, b, cfg, MatVecEpilogue::Add);
        }
        linear(s, w, x, t, norm, y, LinearEpilogue::Add, opts)?;
        return crate::nn::add_bias(s, crate::Dtype::F32, y, b, t, w.rows);
    }
    if t < opts.mat_mat_from {
        let ep = match epilogue {
            LinearEpilogue::Store => MatVecEpilogue::Store,
            LinearEpilogue::Add | LinearEpilogue::AddBias(_) => MatVecEpilogue::Add,
            LinearEpilogue::Glu(a) => MatVecEpilogue::Glu(a),
            LinearEpilogue::Softcap(cap) => MatVecEpilogue::Softcap(cap),
            LinearEpilogue::RopeKv(r) => {
                // The product, then rope_kv.comp on its rows (a decode step's attention
                // folds the rotation itself: attention::flash_attn_rope_decode).
                let p = scratch(s, 4 * t * w.rows)?;
                linear(s, w, x, t, norm, &p, LinearEpilogue::Store, opts)?;
                return r.append_product(s, &p, t, y);
            }
            LinearEpilogue::NormAdd { weight, eps } => {
                let x = match norm {
                    Some(n) => normalised(s, x, n, t, w.k)?,
                    None => x.clone(),
                };
                let p = scratch(s, 4 * t * w.rows)?;
                if mat_vec_fuses_norm_add(&caps, w, t, &cfg) {
                    return mat_vec_norm_add(s, w, &x, t, &p, y, weight, eps, cfg);
                }
                mat_vec_fused(s, w, &x, t, &p, cfg, MatVecEpilogue::Store)?;
                return norm_add(s, &p, t, w.rows, weight, eps, y);
            }
        };
        return match norm {
            Some(n) => {
                let need = rms_norm_mat_vec_scratch(&caps, w, t, &cfg);
                let sc = if need > 0 { Some(scratch(s, need as usize)?) } else { None };
                rms_norm_mat_vec(s, x, n.weight, n.eps, w, t, y, cfg, ep, sc.as_ref())
            }
            None => mat_vec_fused(s, w, x, t, y, cfg, ep),
        };
    }
    let path = MatMatPath::best(&caps, w);
    let (x, x_f16) = mat_mat_input(s, w, x, t, norm, path)?;
    linear_mat_mat(s, w, &x, x_f16, t, y, epilogue, path)
}

/// Whether [`linear`] of `t` rows of `w` (under `opts`) runs a mat-mat that reads f16 x
/// ([`MatMatPath::reads_f16_x`]), so that a producer may write x as packed f16 for
/// [`linear_f16`] (as [`crate::attention::flash_attn_f16_out`] does for an output
/// projection).
pub fn linear_reads_f16(caps: &vkml_hal::Capabilities, w: &QMatrix, t: usize, opts: &LinearOptions) -> bool {
    t >= opts.mat_mat_from.max(1) && w.k.is_multiple_of(2) && MatMatPath::best(caps, w).reads_f16_x()
}

/// [`linear`] without a norm of `x` given as packed f16 `[t, k]` (the mat-mat's own
/// conversion skipped): the bits of [`linear`] of x's f32 values.
///
/// # Errors
/// [`OpsError::Shape`] where [`linear_reads_f16`] does not hold or `x` is too small; as
/// [`linear`].
pub fn linear_f16(
    s: &mut Stream,
    w: &QMatrix,
    x: &Buffer,
    t: usize,
    y: &Buffer,
    epilogue: LinearEpilogue<'_>,
    opts: &LinearOptions,
) -> Result<()> {
    let caps = s.device().caps().clone();
    if !linear_reads_f16(&caps, w, t, opts) {
        return Err(OpsError::Shape {
            op: "linear_f16",
            reason: format!(
                "{t} rows of a [{}, {}] {:?} matrix do not run a mat-mat that reads f16 x",
                w.rows, w.k, w.ty
            ),
        });
    }
    if x.size() < 2 * (t * w.k) as u64 {
        return Err(OpsError::Shape { op: "linear_f16", reason: format!("x holds less than {t} x {} f16", w.k) });
    }
    if let LinearEpilogue::RopeKv(r) = epilogue {
        r.check("linear_f16", t, y)?;
    }
    linear_mat_mat(s, w, x, true, t, y, epilogue, MatMatPath::best(&caps, w))
}

/// The mat-mat of [`linear`] on `path` with its epilogue, x f32 or f16 (`x_f16`).
#[allow(clippy::too_many_arguments)]
fn linear_mat_mat(
    s: &mut Stream,
    w: &QMatrix,
    x: &Buffer,
    x_f16: bool,
    t: usize,
    y: &Buffer,
    epilogue: LinearEpilogue<'_>,
    path: MatMatPath,
) -> Result<()> {
    let x = x.clone();
    let mat_mat = |s: &mut Stream, out: &Buffer, accumulate: bool| {
        mat_mat_with(s, w, &x, t, out, MatMatOptions { accumulate, x_f16, ..MatMatOptions::new(path) })
    };
    match epilogue {
        LinearEpilogue::Store => mat_mat(s, y, false),
        LinearEpilogue::Add => mat_mat(s, y, true),
        LinearEpilogue::AddBias(b) => {
            mat_mat(s, y, true)?;
            crate::nn::add_bias(s, crate::Dtype::F32, y, b, t, w.rows)
        }
        LinearEpilogue::Glu(act) => {
            let glu = Some(MatMatGlu { act, y_f16: false });
            mat_mat_with(s, w, &x, t, y, MatMatOptions { x_f16, glu, ..MatMatOptions::new(path) })
        }
        LinearEpilogue::RopeKv(r) => {
            mat_mat_rope_kv(s, w, &x, t, y, MatMatOptions { x_f16, ..MatMatOptions::new(path) }, &r)
        }
        LinearEpilogue::NormAdd { weight, eps } => {
            let p = scratch(s, 4 * t * w.rows)?;
            mat_mat(s, &p, false)?;
            norm_add(s, &p, t, w.rows, weight, eps, y)
        }
        LinearEpilogue::Softcap(cap) => {
            let p = scratch(s, 4 * t * w.rows)?;
            mat_mat(s, &p, false)?;
            let strides = [w.rows, 1];
            crate::elementwise::softcap(
                s,
                Dtype::F32,
                &[t, w.rows],
                View { buffer: &p, offset: 0, strides: &strides },
                cap,
                y,
            )
        }
    }
}

/// Records the gated feed-forward with its residual add: `acc += down(act(p_gate) * p_up)`,
/// `p = norm(x) gate_upᵀ` over the stacked `[gate; up]` rows (`gate_up: [2 n, k]`, `down:
/// [k, n]`, `x`, `acc`: f32 `[t, k]`; `acc` may be `x`, the residual stream):
/// [`linear`] with [`LinearEpilogue::Glu`] into scratch, then with [`LinearEpilogue::Add`].
/// For one row where [`glu_writes_q8_1`] holds for `gate_up` and the down projection runs
/// on Q8_1 activations ([`mat_vec_uses_q8_1`]), the gate|up mat-vec writes its products as
/// Q8_1 blocks ([`MatVecEpilogue::GluQ8_1`]) that the down mat-vec reads as they are (no
/// quantization of x in each of its workgroups, which then may be small): the bits of the
/// two `linear` calls, whose down mat-vec quantizes the same products the same way (in its
/// own workgroups, or for `n` above 32 × `DOT_X_MAX_BLOCKS` in `quantize_q8_1.comp`: the
/// same arithmetic, include/q8_1.glsl's). From
/// `opts.mat_mat_from` rows on, where the down mat-mat reads f16 x
/// ([`MatMatPath::reads_f16_x`]), the gate|up mat-mat writes the gated products as that f16
/// x ([`MatMatGlu`] with `y_f16`): the bits of the two calls, whose mat-mat converts the f32
/// products.
///
/// # Errors
/// [`OpsError::Shape`] for matrices that do not chain (`down.k() != gate_up.rows() / 2`,
/// `down.rows() != gate_up.k()`) or buffers too small; as [`linear`].
#[allow(clippy::too_many_arguments)]
pub fn glu_down(
    s: &mut Stream,
    gate_up: &QMatrix,
    down: &QMatrix,
    act: GluActivation,
    x: &Buffer,
    t: usize,
    norm: Option<PreNorm<'_>>,
    acc: &Buffer,
    opts: &LinearOptions,
) -> Result<()> {
    let n = gate_up.rows / 2;
    if !gate_up.rows.is_multiple_of(2) || down.k != n || down.rows != gate_up.k {
        return Err(OpsError::Shape {
            op: "glu_down",
            reason: format!(
                "gate|up [{}, {}] and down [{}, {}] do not chain (down must be [k, rows / 2])",
                gate_up.rows, gate_up.k, down.rows, down.k
            ),
        });
    }
    let caps = s.device().caps().clone();
    let cfg = tuning::mat_vec_config(&caps);
    let q8_1 = t == 1
        && t < opts.mat_mat_from
        && glu_writes_q8_1(&caps, gate_up, &cfg)
        && mat_vec_uses_q8_1(&caps, down, &cfg)
        && norm.is_none_or(|nm| nm.weight.size() >= 4 * gate_up.k as u64);
    if q8_1 {
        let xq = scratch(s, 36 * n / 32)?;
        let ep = MatVecEpilogue::GluQ8_1(act);
        match norm {
            Some(nm) => rms_norm_mat_vec(s, x, nm.weight, nm.eps, gate_up, 1, &xq, cfg, ep, None)?,
            None => mat_vec_fused(s, gate_up, x, 1, &xq, cfg, ep)?,
        }
        return mat_vec_q8_1_fused(s, down, &xq, 1, acc, cfg, MatVecEpilogue::Add);
    }
    if t >= opts.mat_mat_from && n.is_multiple_of(2) {
        let path = MatMatPath::best(&caps, down);
        if path.reads_f16_x() {
            // Prompts on the tensor-core paths: the gate|up mat-mat writes its gated
            // products as the f16 x of the down mat-mat (the bits of glu then convert_f16).
            let up_path = MatMatPath::best(&caps, gate_up);
            let (xg, x_f16) = mat_mat_input(s, gate_up, x, t, norm, up_path)?;
            let g16 = scratch(s, 2 * t * n)?;
            let glu = Some(MatMatGlu { act, y_f16: true });
            mat_mat_with(s, gate_up, &xg, t, &g16, MatMatOptions { x_f16, glu, ..MatMatOptions::new(up_path) })?;
            let o = MatMatOptions { accumulate: true, x_f16: true, ..MatMatOptions::new(path) };
            return mat_mat_with(s, down, &g16, t, acc, o);
        }
    }
    let g = scratch(s, 4 * t * n)?;
    linear(s, gate_up, x, t, norm, &g, LinearEpilogue::Glu(act), opts)?;
    linear(s, down, &g, t, None, acc, LinearEpilogue::Add, opts)
}

/// The x of `w`'s mat-mat on `path` for `norm(x)`, and whether it is f16: `x` itself
/// without a norm; with one, the norm's kernel writing the f16 x the tensor-core paths
/// read ([`rms_norm_f16_out`]: no conversion pass) or f32.
fn mat_mat_input(
    s: &mut Stream,
    w: &QMatrix,
    x: &Buffer,
    t: usize,
    norm: Option<PreNorm<'_>>,
    path: MatMatPath,
) -> Result<(Buffer, bool)> {
    let Some(n) = norm else { return Ok((x.clone(), false)) };
    if path.reads_f16_x() && w.k.is_multiple_of(2) {
        let xn = scratch(s, 2 * t * w.k)?;
        rms_norm_f16_out(s, x, Some(n.weight), t, w.k, n.eps, &xn)?;
        return Ok((xn, true));
    }
    Ok((normalised(s, x, n, t, w.k)?, false))
}

/// `norm` of `x: f32[t, k]` into a new f32 scratch (`norm.rms`).
fn normalised(s: &mut Stream, x: &Buffer, norm: PreNorm<'_>, t: usize, k: usize) -> Result<Buffer> {
    let xn = scratch(s, 4 * t * k)?;
    rms_norm(s, Dtype::F32, x, Some(norm.weight), t, k, norm.eps, &xn)?;
    Ok(xn)
}

/// `acc += rms_norm(p) * weight` for `p: f32[t, n]`: `norm.rms`, then an add.
fn norm_add(s: &mut Stream, p: &Buffer, t: usize, n: usize, weight: &Buffer, eps: f32, acc: &Buffer) -> Result<()> {
    let q = scratch(s, 4 * t * n)?;
    rms_norm(s, Dtype::F32, p, Some(weight), t, n, eps, &q)?;
    let strides = [n, 1];
    let view = |buffer| View { buffer, offset: 0, strides: &strides };
    binary(s, BinaryOp::Add, Dtype::F32, &[t, n], view(acc), view(&q), acc)
}
