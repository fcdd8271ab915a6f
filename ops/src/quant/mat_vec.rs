//! The quantized mat-vecs: `y = W x` for a few activation rows (decode), with their
//! fused epilogues ([`MatVecEpilogue`]) and the norm folded in ([`rms_norm_mat_vec`]).

use super::*;

/// Records the fused mat-vec `y[b, r] = sum_c m[r, c] * x[b, c]` for `b < batch`
/// (`x`: f32[batch * k], `y`: f32[batch * rows], both row-major), with the launch from
/// [`tuning::mat_vec_config`]. Batches above [`MAX_MAT_VEC_BATCH`] are split into
/// several dispatches.
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small; HAL errors.
pub fn mat_vec(s: &mut Stream, m: &QMatrix, x: &vkml_hal::Buffer, batch: usize, y: &vkml_hal::Buffer) -> Result<()> {
    let cfg = tuning::mat_vec_config(s.device().caps());
    mat_vec_with(s, m, x, batch, y, cfg)
}

/// [`mat_vec`] with an explicit launch configuration (tests use it to run every path).
///
/// # Errors
/// As [`mat_vec`]; [`OpsError::Shape`] for a workgroup size that is not a power of two
/// in 1..=128.
pub fn mat_vec_with(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
) -> Result<()> {
    mat_vec_fused(s, m, x, batch, y, cfg, MatVecEpilogue::Store)
}

/// What a mat-vec does with its dot products (`include/mat_vec_out.glsl`): the decode
/// step's fusions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MatVecEpilogue {
    /// `y[b, r] = t`.
    Store,
    /// `y[b, r] += t`: a residual add folded into the producing kernel.
    Add,
    /// Gated products in one pass: the matrix holds the gate rows then the up rows
    /// ([`QMatrix::concat_rows`] of gate and up, `2 n` rows), and `y[b, r] = act(gate_r . x)
    /// * (up_r . x)` for `r < n` (`y`: f32 `[batch, n]`), each `x` load serving both.
    Glu(GluActivation),
    /// `y[b, r] = cap · tanh(t / cap)`: soft-capped logits (Gemma 2's
    /// `final_logit_softcapping`), rounded as [`crate::elementwise::softcap`] rounds them.
    Softcap(f32),
    /// The gated products of [`MatVecEpilogue::Glu`] quantized to Q8_1 as they are made:
    /// `y` holds `rows / 64` Q8_1 blocks (36 bytes each, `quantize_q8_1`'s layout and
    /// arithmetic), the `x` of a [`mat_vec_q8_1`] (the down projection) without a quantize
    /// pass. Where [`glu_writes_q8_1`] holds only (one row of x quantized in the kernel).
    GluQ8_1(GluActivation),
}

impl MatVecEpilogue {
    pub(super) fn spec(self) -> u32 {
        match self {
            MatVecEpilogue::Store => 0,
            MatVecEpilogue::Add => 1,
            MatVecEpilogue::Glu(GluActivation::Silu) => 2,
            MatVecEpilogue::Glu(GluActivation::Gelu) => 3,
            MatVecEpilogue::Glu(GluActivation::GeluErf) => 4,
            MatVecEpilogue::Glu(GluActivation::SwigluOai) => 7,
            MatVecEpilogue::Softcap(_) => 6,
            MatVecEpilogue::GluQ8_1(a) => MatVecEpilogue::Glu(a).spec(),
        }
    }

    /// The specialization constants of `include/mat_vec_out.glsl` for this epilogue: 10, and
    /// for [`MatVecEpilogue::Softcap`] 14 and 15 (`1 / cap` as f32, `cap`).
    fn spec_constants(self) -> Vec<(u32, u32)> {
        let mut spec = vec![(10, self.spec())];
        if let MatVecEpilogue::Softcap(cap) = self {
            spec.push((14, ((1.0 / f64::from(cap)) as f32).to_bits()));
            spec.push((15, cap.to_bits()));
        }
        if let MatVecEpilogue::GluQ8_1(_) = self {
            spec.push((16, 1));
        }
        spec
    }
}

/// [`mat_vec_with`] with an output [`MatVecEpilogue`]: `y = W x` ([`MatVecEpilogue::Store`]),
/// `y += W x` ([`MatVecEpilogue::Add`]) or the gated product of a gate/up matrix
/// ([`MatVecEpilogue::Glu`]; `y` then has `m.rows() / 2` rows per batch column). Every
/// mat-vec kernel has every epilogue, the integer-dot one (`cfg.integer_dot`, x quantized
/// to Q8_1 by this call) included.
///
/// # Errors
/// As [`mat_vec_with`]; [`OpsError::Shape`] for a gated product over an odd row count.
pub fn mat_vec_fused(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
) -> Result<()> {
    mat_vec_core(s, m, x, false, None, batch, y, cfg, epilogue, None, None)
}

/// The integer-dot mat-vec on activations already quantized to Q8_1 by [`quantize_q8_1`]
/// (`xq`: `batch * k / 32` blocks of 36 bytes): quantize once per decode step and share
/// `xq` between every matrix that reads the same activations (Q, K, V; gate, up).
///
/// # Errors
/// [`OpsError::Shape`] where the integer-dot kernel does not apply (a type outside
/// [`DOT_TYPES`], a device without integer dot products or subgroup rows, `cfg` without
/// `subgroup_rows`) or `xq` is too small; as [`mat_vec_with`] otherwise.
pub fn mat_vec_q8_1(
    s: &mut Stream,
    m: &QMatrix,
    xq: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
) -> Result<()> {
    mat_vec_q8_1_fused(s, m, xq, batch, y, cfg, MatVecEpilogue::Store)
}

/// [`mat_vec_q8_1`] with an output stage ([`MatVecEpilogue`], as [`mat_vec_fused`]):
/// `y += x Wᵀ`, or the gated product of a stacked gate/up matrix into `y: f32[batch, rows / 2]`.
///
/// # Errors
/// As [`mat_vec_q8_1`]; for [`MatVecEpilogue::Glu`], [`OpsError::Shape`] for an odd row count.
pub fn mat_vec_q8_1_fused(
    s: &mut Stream,
    m: &QMatrix,
    xq: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
) -> Result<()> {
    let cfg = MatVecConfig { integer_dot: true, ..cfg };
    mat_vec_core(s, m, xq, true, None, batch, y, cfg, epilogue, None, None)
}

/// Whether [`mat_vec_fused`] with `cfg` runs `m` on the integer-dot kernel, quantizing x
/// to Q8_1 first: then [`mat_vec_q8_1_fused`] on x quantized elsewhere (by
/// [`quantize_q8_1`], or by [`crate::nn::rms_norm_q8_1`] as it normalises) gives the same
/// result. Needs `cfg.integer_dot` and `cfg.subgroup_rows`, a type in [`DOT_TYPES`] (MXFP4
/// also `cfg.integer_dot_mxfp4`), and a device with integer dot products and a usable
/// subgroup size.
pub fn mat_vec_uses_q8_1(caps: &vkml_hal::Capabilities, m: &QMatrix, cfg: &MatVecConfig) -> bool {
    runs_subgroup_rows(caps, m, cfg)
        && cfg.integer_dot
        && caps.integer_dot.supported
        && DOT_TYPES.contains(&m.ty)
        && (m.ty != GgmlType::MXFP4 || cfg.integer_dot_mxfp4)
}

/// Shared memory of the x-quantizing integer-dot kernels (`mul_mat_vec_dot.*_x_f32`): the
/// quantized x, the reductions' partials and the Q8_1 gated products' rows.
const DOT_X_SHARED: usize = DOT_X_MAX_BLOCKS * 36 + 4 * 128 + 4 + 4 * DOT_X_MAX_WG_ROWS;

/// Whether `m` runs on a kernel with one subgroup per few rows (the block-wise or the
/// integer-dot kernel): a block type, `cfg.subgroup_rows` and a usable subgroup size.
fn runs_subgroup_rows(caps: &vkml_hal::Capabilities, m: &QMatrix, cfg: &MatVecConfig) -> bool {
    cfg.subgroup_rows && block_kernel(m.ty).is_some() && tuning::row_subgroup_size(caps).is_some()
}

/// Largest `k`, in 32-value blocks, that the integer-dot kernels quantizing `x`
/// themselves hold in shared memory (`mul_mat_vec_dot.comp`'s `MAX_XBLOCKS`).
pub const DOT_X_MAX_BLOCKS: usize = 512;

/// Whether the integer-dot mat-vec of `m` over `batch` rows of x quantizes its f32 `x` to
/// Q8_1 itself (kernel `mul_mat_vec_dot.*_x_f32`: each workgroup into shared memory, and
/// [`rms_norm_mat_vec`] normalising on the way) rather than after a `quantize_q8_1` or
/// `norm.rms_q8_1_f32` dispatch: where [`mat_vec_uses_q8_1`] holds and `cfg.dot_x_in_kernel`,
/// for one row of x with `k` a multiple of 32 up to 32 × [`DOT_X_MAX_BLOCKS`], on a device
/// with subgroup shuffles, subgroups of at least 8 and room for the quantized
/// x in shared memory. Both give the same Q8_1 blocks up to the rounding of the norm's sum
/// of squares.
pub fn dot_quantizes_x(caps: &vkml_hal::Capabilities, m: &QMatrix, batch: usize, cfg: &MatVecConfig) -> bool {
    let wg = cfg.dot_x_workgroup;
    // Subgroups of at least 8, and at most reduce.glsl's REDUCE_MAX (128) per workgroup.
    let sg_ok = tuning::row_subgroup_size(caps).is_some_and(|(sg, _)| sg >= 8 && wg >= sg && wg / sg <= 128);
    mat_vec_uses_q8_1(caps, m, cfg)
        && cfg.dot_x_in_kernel
        && batch == 1
        && m.k.is_multiple_of(32)
        && m.k / 32 <= DOT_X_MAX_BLOCKS
        && caps.subgroup.operations.contains(&"shuffle")
        && sg_ok
        && wg.is_power_of_two()
        && wg <= caps.limits.max_workgroup_invocations.min(caps.limits.max_workgroup_size[0])
        && caps.limits.max_storage_buffers_per_stage >= DOT_X_BINDINGS
        && (caps.limits.max_shared_memory as usize) >= DOT_X_SHARED
}

/// Storage buffers the x-quantizing integer-dot kernels bind (`mul_mat_vec_dot.*_x_f32`:
/// the block kernels' 7, the Q8_1 gated products and the expert ids).
pub const DOT_X_BINDINGS: u32 = 9;

/// Most rows a workgroup of the x-quantizing integer-dot kernels holds for its Q8_1 gated
/// products (`mul_mat_vec_dot.comp`'s `MAX_WG_ROWS`).
pub const DOT_X_MAX_WG_ROWS: usize = 1024;

/// Whether the gated product over the stacked `[gate; up]` matrix `m` can be written as Q8_1
/// blocks by its own mat-vec ([`MatVecEpilogue::GluQ8_1`]): one row of x, quantized in the
/// kernel ([`dot_quantizes_x`]), one part, and `rows / 2` and each workgroup's rows whole
/// 32-row blocks (subgroup 0 of a workgroup quantizes its rows' products).
pub fn glu_writes_q8_1(caps: &vkml_hal::Capabilities, m: &QMatrix, cfg: &MatVecConfig) -> bool {
    let Some((sg, _)) = tuning::row_subgroup_size(caps) else { return false };
    let out_rows = m.rows / 2;
    let nr = tuning::dot_x_rows_per_subgroup(cfg, out_rows, m.k) as usize;
    let wg_rows = (cfg.dot_x_workgroup.max(sg) / sg.max(1)) as usize * nr;
    m.rows.is_multiple_of(2)
        && out_rows.is_multiple_of(32)
        && m.parts.len() == 1
        && wg_rows.is_multiple_of(32)
        && wg_rows <= DOT_X_MAX_WG_ROWS
        && dot_quantizes_x(caps, m, 1, cfg)
}

/// Whether [`rms_norm_mat_vec`] runs the norm inside the mat-vec (`include/mat_vec_norm.glsl`)
/// for `m`: on the block kernels with subgroup rows (not the integer-dot kernel, whose
/// workgroups would each quantize the whole normalised x: on the H100 that made llama-8b
/// Q4_0 decode 259 -> 139 t/s, every workgroup of 4 rows reading x's 16 KiB beside its
/// 9 KiB of weights; benches/RESULTS.md). A matrix in several parts runs one such
/// dispatch per part, each normalising x itself.
pub fn mat_vec_fuses_norm(caps: &vkml_hal::Capabilities, m: &QMatrix, cfg: &MatVecConfig) -> bool {
    runs_subgroup_rows(caps, m, cfg) && !mat_vec_uses_q8_1(caps, m, cfg) && cfg.workgroup <= 128
}

/// Most rows of a matrix whose one-row-per-workgroup vec4 mat-vec normalises x itself
/// ([`vec4_fuses_norm`]): each workgroup re-reads x for its one row.
pub const VEC4_NORM_MAX_ROWS: usize = 1024;

/// Whether [`rms_norm_mat_vec`] of one row of x runs the norm inside the vec4 mat-vec
/// (`mul_mat_vec_vec4.*_sg` with `include/mat_vec_norm.glsl`): a matrix without a block
/// kernel (F32, F16, BF16) of at most [`VEC4_NORM_MAX_ROWS`] rows (a mixture-of-experts
/// router), `k % 4 == 0`, subgroup arithmetic.
pub fn vec4_fuses_norm(caps: &vkml_hal::Capabilities, m: &QMatrix, batch: usize, cfg: &MatVecConfig) -> bool {
    batch == 1
        && !runs_subgroup_rows(caps, m, cfg)
        && cfg.vec4
        && cfg.subgroup_reduce
        && cfg.workgroup <= 128
        && m.k.is_multiple_of(4)
        && m.rows <= VEC4_NORM_MAX_ROWS
        && VEC4_TYPES.contains(&m.ty)
}

/// Where [`rms_norm_mat_vec`] normalises x for `m`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NormPath {
    /// Inside the block mat-vec ([`mat_vec_fuses_norm`]).
    InKernel,
    /// Inside the vec4 mat-vec ([`vec4_fuses_norm`]).
    InVec4Kernel,
    /// Inside the integer-dot mat-vec that quantizes x itself ([`dot_quantizes_x`]).
    InDotKernel,
    /// `norm.rms_q8_1_f32` into Q8_1 scratch, then the integer-dot mat-vec.
    Q8_1,
    /// `norm.rms_f32` into f32 scratch, then the mat-vec.
    F32,
}

fn norm_path(caps: &vkml_hal::Capabilities, m: &QMatrix, batch: usize, cfg: &MatVecConfig) -> NormPath {
    if mat_vec_fuses_norm(caps, m, cfg) {
        NormPath::InKernel
    } else if dot_quantizes_x(caps, m, batch, cfg) {
        NormPath::InDotKernel
    } else if vec4_fuses_norm(caps, m, batch, cfg) {
        NormPath::InVec4Kernel
    } else if mat_vec_uses_q8_1(caps, m, cfg) && m.k.is_multiple_of(32) {
        NormPath::Q8_1
    } else {
        NormPath::F32
    }
}

/// Bytes of scratch [`rms_norm_mat_vec`] needs for `m` and `batch` rows of x: 0 where the
/// norm runs inside the mat-vec, else room for the normalised x (Q8_1 where the
/// integer-dot kernel runs, f32 otherwise). A caller with a buffer pool passes one of
/// these from it.
pub fn rms_norm_mat_vec_scratch(caps: &vkml_hal::Capabilities, m: &QMatrix, batch: usize, cfg: &MatVecConfig) -> u64 {
    match norm_path(caps, m, batch, cfg) {
        NormPath::InKernel | NormPath::InDotKernel | NormPath::InVec4Kernel => 0,
        NormPath::Q8_1 => 36 * (batch * m.k / 32) as u64,
        NormPath::F32 => 4 * (batch * m.k) as u64,
    }
}

/// The mat-vec of a normalised x: `y = rms_norm(x) Wᵀ` (candle-nn's `rms_norm` with
/// weight `nw: f32[k]` and `eps`, then [`mat_vec_fused`] with `epilogue`) for `x:
/// f32[batch, k]`. Where [`mat_vec_fuses_norm`] holds, one dispatch: each workgroup
/// normalises x itself as it loads it; else the norm's own kernel first into `scratch`
/// (at least [`rms_norm_mat_vec_scratch`] bytes): `norm.rms_q8_1_f32`, writing Q8_1,
/// where the integer-dot kernel runs, `norm.rms_f32` otherwise. The results agree to
/// float rounding (the sum of squares is reduced in another order).
///
/// # Errors
/// As [`mat_vec_fused`]; [`OpsError::Shape`] for a norm weight shorter than `k` or a
/// scratch buffer too small.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_mat_vec(
    s: &mut Stream,
    x: &vkml_hal::Buffer,
    nw: &vkml_hal::Buffer,
    eps: f32,
    m: &QMatrix,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
    scratch: Option<&vkml_hal::Buffer>,
) -> Result<()> {
    let dev = s.device().clone();
    let bad = |reason: String| Err(OpsError::Shape { op: "rms_norm_mat_vec", reason });
    if nw.size() < 4 * m.k as u64 {
        return bad(format!("the norm weight holds {} bytes, less than {} f32", nw.size(), m.k));
    }
    let path = norm_path(dev.caps(), m, batch, &cfg);
    if matches!(path, NormPath::InKernel | NormPath::InDotKernel | NormPath::InVec4Kernel) {
        return mat_vec_core(s, m, x, false, Some((nw, eps)), batch, y, cfg, epilogue, None, None);
    }
    let need = rms_norm_mat_vec_scratch(dev.caps(), m, batch, &cfg);
    let Some(scratch) = scratch.filter(|b| b.size() >= need) else {
        return bad(format!("the normalised x needs a scratch buffer of {need} bytes"));
    };
    if path == NormPath::Q8_1 {
        crate::nn::rms_norm_q8_1(s, x, Some(nw), batch, m.k, eps, scratch)?;
        return mat_vec_q8_1_fused(s, m, scratch, batch, y, cfg, epilogue);
    }
    crate::nn::rms_norm(s, Dtype::F32, x, Some(nw), batch, m.k, eps, scratch)?;
    mat_vec_fused(s, m, scratch, batch, y, cfg, epilogue)
}

/// The residual add of a normalised projection, folded into the mat-vec
/// ([`mat_vec_norm_add`]): `residual += rms_norm(y) * weight`.
#[derive(Debug, Clone, Copy)]
struct PostNorm<'a> {
    residual: &'a vkml_hal::Buffer,
    weight: &'a vkml_hal::Buffer,
    eps: f32,
    /// The matrix's count of finished workgroups (zero between dispatches).
    count: &'a vkml_hal::Buffer,
}

/// The mat-vec kernels' epilogue number of the post-norm residual add
/// (`include/mat_vec_post_norm.glsl`).
const POST_NORM_EPILOGUE: u32 = 5;

/// Whether [`mat_vec_norm_add`] runs in one dispatch for `m` and `batch` rows of f32 x: on
/// the block kernels with subgroup rows, or on the integer-dot kernel that quantizes x
/// itself ([`dot_quantizes_x`]), for a matrix in one part and at most
/// [`MAX_MAT_VEC_BATCH`] rows.
pub fn mat_vec_fuses_norm_add(caps: &vkml_hal::Capabilities, m: &QMatrix, batch: usize, cfg: &MatVecConfig) -> bool {
    let kernel = if mat_vec_uses_q8_1(caps, m, cfg) {
        dot_quantizes_x(caps, m, batch, cfg)
    } else {
        runs_subgroup_rows(caps, m, cfg)
    };
    kernel && m.parts.len() == 1 && (1..=MAX_MAT_VEC_BATCH).contains(&batch)
}

/// Gemma's sandwich-norm residual add folded into the projection feeding it:
/// `residual += rms_norm(x Wᵀ) * nw` (candle-nn's `rms_norm` with weight `nw: f32[rows]` and
/// `eps`, then an add) for `x: f32[batch, k]` and `residual: f32[batch, rows]`, where
/// [`mat_vec_fuses_norm_add`] holds: one dispatch that stores `x Wᵀ` into `y` (f32
/// `[batch, rows]`, scratch) and whose last workgroup, counted on a device-scope atomic,
/// normalises it and adds it to `residual` (`include/mat_vec_post_norm.glsl`). The sum of
/// squares is reduced in another order than `nn::rms_norm`'s. The count lives in the
/// matrix (`QMatrix`'s `done_count`, left zero by each dispatch): one stream at a time
/// may run this on a matrix.
///
/// # Errors
/// [`OpsError::Shape`] where [`mat_vec_fuses_norm_add`] does not hold, a buffer is too
/// small, or `y` is the residual; as [`mat_vec_fused`] otherwise.
#[allow(clippy::too_many_arguments)]
pub fn mat_vec_norm_add(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    residual: &vkml_hal::Buffer,
    nw: &vkml_hal::Buffer,
    eps: f32,
    cfg: MatVecConfig,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "mat_vec_norm_add", reason });
    if !mat_vec_fuses_norm_add(s.device().caps(), m, batch, &cfg) {
        return bad(format!("no one-dispatch form for {:?} over {batch} rows here (see mat_vec_fuses_norm_add)", m.ty));
    }
    let out = 4 * (batch * m.rows) as u64;
    if residual.size() < out || nw.size() < 4 * m.rows as u64 {
        return bad(format!("the residual needs {out} bytes and the norm weight {} f32", m.rows));
    }
    if y.id() == residual.id() {
        return bad("y (the product's scratch) and the residual must be different buffers".into());
    }
    let count = match m.done_count.get() {
        Some(c) => c,
        None => {
            let c = s.device().alloc(4, MemoryKind::DeviceLocal)?;
            s.fill(&c, 0, 4, 0)?;
            m.done_count.get_or_init(|| c)
        }
    };
    let post = PostNorm { residual, weight: nw, eps, count };
    mat_vec_core(s, m, x, false, None, batch, y, cfg, MatVecEpilogue::Store, Some(post), None)
}

#[allow(clippy::too_many_arguments)]
fn mat_vec_core(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    pre_quantized: bool,
    norm: Option<(&vkml_hal::Buffer, f32)>,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
    post: Option<PostNorm<'_>>,
    bias: Option<&vkml_hal::Buffer>,
) -> Result<()> {
    let dev = s.device().clone();
    if let Some(b) = bias {
        let plain = matches!(epilogue, MatVecEpilogue::Store | MatVecEpilogue::Add) && post.is_none();
        if !plain || b.size() < 4 * m.rows as u64 {
            return Err(OpsError::Shape {
                op: "mat_vec",
                reason: format!("a bias goes with the store and add epilogues and holds {} f32", m.rows),
            });
        }
    }
    let q8_1_out = matches!(epilogue, MatVecEpilogue::GluQ8_1(_));
    let glu = q8_1_out || matches!(epilogue, MatVecEpilogue::Glu(_));
    if glu && !m.rows.is_multiple_of(2) {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: format!("a gated product needs the gate and up rows stacked (an even count), got {}", m.rows),
        });
    }
    let out_rows = if glu { m.rows / 2 } else { m.rows };
    if pre_quantized {
        let need = 36 * (batch * m.k / 32) as u64;
        if x.size() < need || y.size() < 4 * (batch * out_rows) as u64 {
            return Err(OpsError::Shape {
                op: "mat_vec_q8_1",
                reason: format!(
                    "{batch} Q8_1 rows of {} need xq of {need} bytes and y of {} bytes, got {} and {}",
                    m.k,
                    4 * batch * out_rows,
                    x.size(),
                    y.size()
                ),
            });
        }
    } else if q8_1_out {
        let need = 36 * (out_rows / 32) as u64;
        if batch != 1 || !out_rows.is_multiple_of(32) || x.size() < 4 * m.k as u64 || y.size() < need {
            return Err(OpsError::Shape {
                op: "mat_vec",
                reason: format!(
                    "Q8_1 gated products: one row of x ({} bytes of f32) and rows / 2 = {out_rows} a multiple of 32 into {need} bytes, got {batch} rows, {} and {} bytes",
                    4 * m.k,
                    x.size(),
                    y.size()
                ),
            });
        }
    } else {
        check_io_rows("mat_vec", m, out_rows, x, batch, y)?;
    }
    if !(1..=8).contains(&cfg.rows_per_subgroup) || !(1..=8).contains(&cfg.dot_rows_per_subgroup) {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: format!(
                "rows_per_subgroup {} and dot_rows_per_subgroup {} must be in 1..=8",
                cfg.rows_per_subgroup, cfg.dot_rows_per_subgroup
            ),
        });
    }
    if !cfg.workgroup.is_power_of_two() || cfg.workgroup > 128 {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: format!("workgroup {} is not a power of two ≤ 128", cfg.workgroup),
        });
    }
    if batch == 0 || m.rows == 0 {
        return Ok(());
    }
    if q8_1_out && (pre_quantized || !glu_writes_q8_1(dev.caps(), m, &cfg)) {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: "Q8_1 gated products need the integer-dot kernel quantizing f32 x itself in workgroups of whole Q8_1 blocks of rows, one part (see glu_writes_q8_1)".into(),
        });
    }
    if glu && m.parts.len() > 1 {
        // The gate and up rows of a split matrix lie in different parts: both halves into
        // a scratch [batch, 2 out_rows], then act(gate) * up on its strided halves.
        let both = dev.alloc(4 * (batch * m.rows) as u64, MemoryKind::DeviceLocal)?;
        mat_vec_core(s, m, x, pre_quantized, norm, batch, &both, cfg, MatVecEpilogue::Store, None, None)?;
        let MatVecEpilogue::Glu(act) = epilogue else { unreachable!("glu is a Glu epilogue") };
        return crate::nn::glu_halves(s, act, &both, batch, out_rows, y);
    }
    let caps = dev.caps();
    let block = block_kernel(m.ty);
    let row_sg = tuning::row_subgroup_size(caps).filter(|_| cfg.subgroup_rows && block.is_some());
    let use_dot = mat_vec_uses_q8_1(caps, m, &cfg);
    if pre_quantized && !use_dot {
        return Err(OpsError::Shape {
            op: "mat_vec_q8_1",
            reason: format!(
                "Q8_1 activations need the integer-dot kernel: a type in {DOT_TYPES:?} (got {:?}), integer dot products and subgroup rows on the device (integer dot {}, subgroup rows {}), and cfg.subgroup_rows",
                m.ty,
                caps.integer_dot.supported,
                tuning::row_subgroup_size(caps).is_some()
            ),
        });
    }
    // The integer-dot kernel quantizing f32 x itself (no quantize dispatch).
    let dot_x = use_dot && !pre_quantized && dot_quantizes_x(caps, m, batch, &cfg);
    let vec4_norm = norm.is_some() && row_sg.is_none() && vec4_fuses_norm(caps, m, batch, &cfg);
    if norm.is_some() && (pre_quantized || (use_dot && !dot_x) || (row_sg.is_none() && !vec4_norm)) {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: "the norm prologue needs a block kernel with subgroup rows (see mat_vec_fuses_norm) or an integer-dot kernel quantizing x (see dot_quantizes_x)".into(),
        });
    }
    // x as Q8_1 for the integer-dot kernel: 36 bytes per 32 values, all batch rows.
    let xq = if pre_quantized || dot_x {
        None
    } else if use_dot {
        let xq = dev.alloc(36 * (batch * m.k / 32) as u64, MemoryKind::DeviceLocal)?;
        quantize_q8_1(s, x, batch * m.k / 32, &xq)?;
        Some(xq)
    } else {
        None
    };
    let (nr, workgroup) = if dot_x {
        (tuning::dot_x_rows_per_subgroup(&cfg, out_rows, m.k), cfg.dot_x_workgroup)
    } else if use_dot {
        (cfg.dot_rows_per_subgroup, cfg.workgroup)
    } else {
        let sg = row_sg.map_or(1, |(sg, _)| sg);
        let out = if glu { out_rows } else { m.parts.iter().map(|p| p.rows).max().unwrap_or(0) };
        (tuning::block_rows_per_subgroup(caps, &cfg, out, m.k, cfg.workgroup.max(sg) / sg), cfg.workgroup)
    };
    if !(1..=8).contains(&nr) {
        return Err(OpsError::Shape { op: "mat_vec", reason: format!("{nr} rows per subgroup: must be in 1..=8") });
    }
    let groups = |rows: usize| match row_sg {
        Some((sg, _)) => grid(&dev, "mat_vec", (rows as u64).div_ceil(u64::from(workgroup.max(sg) / sg * nr))),
        None => grid(&dev, "mat_vec", rows as u64),
    };
    // (the row-per-workgroup kernels: vec4 where the type and k allow)
    let vec4 = row_sg.is_none() && cfg.vec4 && m.k.is_multiple_of(4) && VEC4_TYPES.contains(&m.ty);
    let pipeline_for = |nb: usize| -> Result<std::sync::Arc<vkml_hal::Pipeline>> {
        let (name, options) = match row_sg {
            Some((sg, require)) => (
                if use_dot { dot_kernel(m.ty, dot_x)? } else { block.expect("row_sg holds for block types only") },
                PipelineOptions {
                    spec_constants: {
                        let mut spec = vec![(0, workgroup.max(sg)), (1, nb as u32), (2, nr)];
                        if post.is_some() {
                            spec.push((10, POST_NORM_EPILOGUE));
                        } else {
                            spec.extend(epilogue.spec_constants());
                        }
                        if !use_dot || dot_x {
                            spec.push((11, u32::from(norm.is_some())));
                            if !use_dot {
                                // (the block kernels' one-pass norm; the integer-dot kernels have none)
                                spec.push((12, u32::from(cfg.norm_one_pass)));
                            }
                            spec.push((24, u32::from(bias.is_some())));
                        }
                        spec
                    },
                    required_subgroup_size: require.then_some(sg),
                    full_subgroups: caps.subgroup.full_subgroups,
                },
            ),
            None => {
                let k = type_kernels("mat_vec", m.ty)?;
                let kernel = match (vec4, cfg.subgroup_reduce) {
                    (true, true) => k.mul_mat_vec_vec4_sg,
                    (true, false) => k.mul_mat_vec_vec4,
                    (false, true) => k.mul_mat_vec_sg,
                    (false, false) => k.mul_mat_vec,
                };
                // (the vec4 kernel normalising x itself: a workgroup of its own size, at most
                // 128 of the device's smallest subgroups, the kernel's shared partials)
                let wg = if vec4_norm {
                    let sg_min = if caps.subgroup.min_size > 0 { caps.subgroup.min_size } else { caps.subgroup.size };
                    cfg.vec4_norm_workgroup.min(128 * sg_min.max(1))
                } else {
                    cfg.workgroup
                };
                let mut spec = [vec![(0, wg)], epilogue.spec_constants()].concat();
                if vec4 && cfg.subgroup_reduce {
                    // (the norm prologue of the vec4 subgroup kernels)
                    spec.push((11, u32::from(vec4_norm)));
                    spec.push((12, u32::from(cfg.norm_one_pass)));
                }
                (kernel, PipelineOptions { spec_constants: spec, ..Default::default() })
            }
        };
        Ok(dev.pipeline(&dev.kernel(name)?, &options)?)
    };
    for b0 in (0..batch).step_by(MAX_MAT_VEC_BATCH) {
        let nb = (batch - b0).min(MAX_MAT_VEC_BATCH);
        // Later batch chunks bind sub-ranges of x and y, which must meet the device's
        // storage-buffer offset alignment.
        let x_off = (4 * b0 * m.k) as u64;
        let y_off = (4 * b0 * out_rows) as u64;
        let align = dev.caps().limits.min_storage_buffer_offset_alignment.max(1);
        if !x_off.is_multiple_of(align) || !y_off.is_multiple_of(align) {
            return Err(OpsError::Shape {
                op: "mat_vec",
                reason: format!("batch > {MAX_MAT_VEC_BATCH} needs k and rows giving {align}-byte aligned chunks"),
            });
        }
        let p = pipeline_for(nb)?;
        let xq_ref = if pre_quantized { Some(x) } else { xq.as_ref() };
        let x_arg = match xq_ref {
            // Q8_1 rows: 36 bytes per 32 values; the chunk's offset must be aligned as well.
            Some(xq) => {
                let off = (36 * b0 * m.k / 32) as u64;
                if !off.is_multiple_of(align) {
                    return Err(OpsError::Shape {
                        op: "mat_vec",
                        reason: format!(
                            "batch > {MAX_MAT_VEC_BATCH} with integer dot needs {align}-byte aligned Q8_1 rows"
                        ),
                    });
                }
                BufferArg::range(xq, off, (36 * nb * m.k / 32) as u64)
            }
            None => BufferArg::range(x, x_off, (4 * nb * m.k) as u64),
        };
        // One dispatch per part: its rows of each batch column, y bound from the part's
        // first output (an aligned offset: QPart rows start at multiples of the alignment)
        // with the matrix's row stride. A gated product has one part (handled above).
        for part in &m.parts {
            let rows = if glu { out_rows } else { part.rows };
            let eps = norm.map(|n| n.1).or(post.map(|p| p.eps)).map_or(0, f32::to_bits);
            let pc = push_words(&[0, m.row_bytes as u32, m.k as u32, rows as u32, nb as u32, out_rows as u32, eps]);
            let y_arg = if q8_1_out {
                BufferArg::range(y, 0, 36 * (out_rows / 32) as u64)
            } else {
                BufferArg::range(y, y_off + 4 * part.row0 as u64, (4 * ((nb - 1) * out_rows + rows)) as u64)
            };
            let mut args = vec![(&part.buffer).into(), x_arg, y_arg];
            if row_sg.is_some() && (!use_dot || dot_x) {
                // The norm weight (binding 3 of the block kernels; unread without the
                // prologue, where x stands in).
                args.push(match norm {
                    Some((nw, _)) => BufferArg::range(nw, 0, 4 * m.k as u64),
                    None => x_arg,
                });
                // The post-norm epilogue's residual, weight and count (bindings 4-6;
                // without it y and x stand in, adding no dependency).
                match post {
                    Some(pn) => {
                        args.push(BufferArg::range(pn.residual, 0, (4 * nb * out_rows) as u64));
                        args.push(BufferArg::range(pn.weight, 0, 4 * out_rows as u64));
                        args.push(pn.count.into());
                    }
                    None => args.extend([y_arg, x_arg, y_arg]),
                }
            }
            if row_sg.is_some() && (!use_dot || dot_x) {
                // Binding 7: the Q8_1 gated products of the integer-dot kernels, the expert
                // ids of the block kernels (mat_vec_id); y stands in, unused, here.
                args.push(y_arg);
            }
            if dot_x {
                // Binding 8: the integer-dot kernels' expert ids (mat_vec_id), unused here.
                args.push(y_arg);
            }
            if row_sg.is_some() && (!use_dot || dot_x) {
                // The next four: include/mat_vec_moe.glsl's weights, logits, router bias
                // (mat_vec_id_fused; unused here) and the bias, the part's rows.
                args.extend([y_arg; 3]);
                args.push(bias.map_or(y_arg, |b| BufferArg::range(b, 4 * part.row0 as u64, 4 * rows as u64)));
            }
            if vec4 && cfg.subgroup_reduce {
                // Binding 3 of the vec4 subgroup kernels: the norm weight (x stands in).
                args.push(match norm {
                    Some((nw, _)) => BufferArg::range(nw, 0, 4 * m.k as u64),
                    None => x_arg,
                });
            }
            s.dispatch(&p, &args, &pc, groups(rows)?)?;
        }
    }
    // Kernels without the bias binding: a pass after.
    if let Some(b) = bias.filter(|_| row_sg.is_none() || (use_dot && !dot_x)) {
        crate::nn::add_bias(s, crate::Dtype::F32, y, b, batch, out_rows)?;
    }
    Ok(())
}

/// `y (+)= W x + b` (the store or, with [`MatVecEpilogue::Add`], the add epilogue of
/// [`mat_vec_fused`]) with a bias `b: f32[rows]` added in the store of the block-wise and
/// integer-dot kernels (`include/mat_vec_moe.glsl`'s plain bias; gpt-oss's
/// `attn_output.bias` with the residual add), and by `nn::add_bias` after the others.
///
/// # Errors
/// As [`mat_vec_fused`]; another epilogue, a bias shorter than `rows`.
#[allow(clippy::too_many_arguments)]
pub fn mat_vec_bias(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    b: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
) -> Result<()> {
    mat_vec_core(s, m, x, false, None, batch, y, cfg, epilogue, None, Some(b))
}

/// The integer-dot mat-vec kernel for `ty`: on Q8_1 `x` quantized before it, or
/// (`x_f32`) quantizing f32 `x` itself ([`dot_quantizes_x`]).
pub(super) fn dot_kernel(ty: GgmlType, x_f32: bool) -> Result<&'static str> {
    Ok(match (ty, x_f32) {
        (GgmlType::Q4_0, false) => "mul_mat_vec_dot.q4_0",
        (GgmlType::Q4_0, true) => "mul_mat_vec_dot.q4_0_x_f32",
        (GgmlType::Q8_0, false) => "mul_mat_vec_dot.q8_0",
        (GgmlType::Q8_0, true) => "mul_mat_vec_dot.q8_0_x_f32",
        (GgmlType::MXFP4, false) => "mul_mat_vec_dot.mxfp4",
        (GgmlType::MXFP4, true) => "mul_mat_vec_dot.mxfp4_x_f32",
        (ty, _) => {
            return Err(OpsError::UnsupportedType { op: "mat_vec_q8_1", ty, supported: format!("{DOT_TYPES:?}") })
        }
    })
}
