//! The quantized mat-mats: `y = W x` for many activation rows (prompts), scalar or on
//! cooperative matrices ([`MatMatPath`]).

use super::*;
use crate::attention::{QkvPrologue, RopeKv};

/// Rows and tokens per tile of the scalar quantized mat-mat (`mul_mat_q.comp`).
pub const MAT_MAT_TILE: usize = 64;

/// Tokens per tile of the cooperative-matrix mat-mats, and rows per tile of
/// `mul_mat_cm.comp` (`mul_mat_cm256.comp`'s tiles have 256 rows; [`mat_mat_kernel`]).
pub const MAT_MAT_CM_TILE: usize = 128;

/// Workgroups the cooperative-matrix mat-mats aim to launch: a grid of fewer tiles is
/// split over k (split-K) up to this many.
const MAT_MAT_TARGET_GROUPS: u64 = 128;

/// The kernel `mat_mat_with` runs on `path` for a `rows x k` matrix of type `ty` times
/// `n_tok` tokens on a device with `caps`, and its tile: (name, rows, tokens) per
/// workgroup ([`MAT_MAT_TILE`] square for the scalar kernel, [`MAT_MAT_CM_TILE`] tokens for
/// every cooperative-matrix one). [`MatMatPath::CoopMat`] runs `mul_mat_cm256`
/// (256 rows) where [`tuning::mat_mat_tall_tile`] says so and its grid alone has at least
/// 128 tiles, else `mul_mat_cm` (128 rows). A smaller grid would need split-K, whose
/// partial products cost more in a model's prompt than the taller tile saves (measured
/// with Q4_0 on tall tiles: llama-8b pp512 on the H100 at 3 460 t/s against 4 670 on
/// 128-row tiles; benches/RESULTS.md).
pub fn mat_mat_kernel(
    caps: &vkml_hal::Capabilities,
    path: MatMatPath,
    ty: GgmlType,
    rows: usize,
    n_tok: usize,
) -> (&'static str, usize, usize) {
    let tall_tiles = rows.div_ceil(256) as u64 * n_tok.div_ceil(MAT_MAT_CM_TILE) as u64;
    match path {
        MatMatPath::Scalar => ("mul_mat_q", MAT_MAT_TILE, MAT_MAT_TILE),
        MatMatPath::CoopMat2 => ("mul_mat_cm2", MAT_MAT_CM_TILE, MAT_MAT_CM_TILE),
        MatMatPath::CoopMatInt8 => ("mul_mat_cm_i8", MAT_MAT_CM_TILE, MAT_MAT_CM_TILE),
        MatMatPath::CoopMat if tuning::mat_mat_tall_tile(caps, ty) && tall_tiles >= MAT_MAT_TARGET_GROUPS => {
            ("mul_mat_cm256", 256, MAT_MAT_CM_TILE)
        }
        MatMatPath::CoopMat => ("mul_mat_cm", MAT_MAT_CM_TILE, MAT_MAT_CM_TILE),
    }
}

/// Which quantized mat-mat kernel to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatMatPath {
    /// `mul_mat_q.comp`: f32 FMA on 64 x 64 tiles; runs on every device. Results equal
    /// the f32 dot products of the dequantized weights (up to summation order).
    Scalar,
    /// `mul_mat_cm.comp`: f16 cooperative matrices (tensor cores) with f32 accumulation
    /// on 128 x 128 tiles (`mul_mat_cm256.comp`'s 256 x 128 for Q8_0 on big grids where
    /// [`tuning::mat_mat_tall_tile`] says so: [`mat_mat_kernel`]); needs
    /// [`tuning::coopmat_subgroup_size`] and `k % 32 == 0`.
    /// Weights and activations are rounded to f16 before the products.
    CoopMat,
    /// `mul_mat_cm2.comp`: workgroup-scope cooperative matrices (`VK_NV_cooperative_matrix2`)
    /// on 128 x 128 tiles, weights decoded inside the tensor loads; the same rounding as
    /// [`MatMatPath::CoopMat`]. Needs [`tuning::coopmat2`], `k % 32 == 0` and a type in
    /// [`COOPMAT2_TYPES`]. On the H100 (driver 580.159.04) it runs at 35–62 TFLOP/s against
    /// 99–161 for [`MatMatPath::CoopMat`] (benches/RESULTS.md), so [`MatMatPath::best`]
    /// does not pick it.
    CoopMat2,
    /// `mul_mat_cm_i8.comp`: int8 cooperative matrices (16x16x32, int32 accumulation) on
    /// `x` quantized to Q8_1 (as [`quantize_q8_1`], in a tiled layout of
    /// `quantize_q8_1_tiles.comp`), each 32-block's scales applied to its exact int32
    /// product (ggml's `vec_dot_q4_0_q8_1` / `vec_dot_q8_0_q8_1` per pair), 128 x 128
    /// tiles, warp-specialized. Needs [`tuning::coopmat_int8`], `k % 32 == 0` and a type
    /// in [`COOPMAT_INT8_TYPES`]. Results carry the Q8_1 rounding of `x`. On the H100 it
    /// runs at 114-124 TFLOP/s against 148-159 for [`MatMatPath::CoopMat`]
    /// (benches/RESULTS.md), so [`MatMatPath::best`] does not pick it.
    CoopMatInt8,
}

/// The types [`MatMatPath::CoopMatInt8`] runs (`mul_mat_cm_i8.comp`'s variants).
pub const COOPMAT_INT8_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q8_0];

/// The types [`MatMatPath::CoopMat2`] has a decode for (`mul_mat_cm2.comp`'s variants).
pub const COOPMAT2_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K];

impl MatMatPath {
    /// Whether the path's kernel reads x as f16 (converted by [`mat_mat_with`] unless
    /// [`MatMatOptions::x_f16`]): the float cooperative-matrix paths.
    pub fn reads_f16_x(self) -> bool {
        matches!(self, MatMatPath::CoopMat | MatMatPath::CoopMat2)
    }

    /// The fastest path for `m` on a device: [`MatMatPath::CoopMat`] where
    /// [`tuning::coopmat_subgroup_size`] allows it and `k % 32 == 0`, else
    /// [`MatMatPath::Scalar`]. [`MatMatPath::CoopMat2`] is never chosen: on the H100 it is
    /// slower (benches/RESULTS.md).
    pub fn best(caps: &vkml_hal::Capabilities, m: &QMatrix) -> MatMatPath {
        if tuning::coopmat_subgroup_size(caps).is_some() && m.k.is_multiple_of(32) {
            MatMatPath::CoopMat
        } else {
            MatMatPath::Scalar
        }
    }
}

/// Launch options of [`mat_mat_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatMatOptions {
    /// The kernel.
    pub path: MatMatPath,
    /// Add the product to `y` instead of overwriting it (a residual add folded into the
    /// producing kernel).
    pub accumulate: bool,
    /// Split-K for [`MatMatPath::CoopMat`]: how many workgroups share each output tile's
    /// `k` range (their partial products are added by a second kernel). `None` splits
    /// only grids of fewer than 128 tiles, up to about 128 workgroups with chunks of at
    /// least 1024 `k` (256 for grids of fewer than 16 tiles; on the H100 a split of a
    /// 128-tile grid is slower, benches/RESULTS.md).
    /// A matrix held in several [`QPart`]s runs without a split (its outputs are written
    /// in place per part).
    pub split_k: Option<u32>,
    /// `x` is already f16 (`[n_tok, k]` packed, as `convert_f16` or
    /// `nn::rms_norm_f16_out` write it), so the conversion pass is skipped: for the paths
    /// that read f16 x ([`MatMatPath::reads_f16_x`]).
    pub x_f16: bool,
    /// The gated-product epilogue: `m` stacks the gate rows `[0, h)` over the up rows
    /// `[h, 2 h)` ([`QMatrix::concat_rows`]) and `y` receives `act(gate) * up`,
    /// `[n_tok, h]`, as [`MatMatGlu`] says.
    pub glu: Option<MatMatGlu>,
}

/// The gated-product epilogue of [`mat_mat_with`] ([`MatMatOptions::glu`]):
/// `y[n, j] = act(p[n, j]) * p[n, h + j]` for the products `p` with a stacked `[gate; up]`
/// matrix of `2 h` rows, the values [`crate::nn::glu_halves`] (f32) or
/// [`crate::nn::glu_halves_f16`] (f16) compute from them. `mul_mat_q`, `mul_mat_cm` and
/// `mul_mat_cm256` fold it into their store (include/mul_mat_glu.glsl: each tile holds a
/// gate half and the matching up half), so the `[n_tok, 2 h]` products never reach
/// memory; the other paths, and matrices held in several parts, run the product and then
/// the `glu` kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatMatGlu {
    /// The gate's activation.
    pub act: GluActivation,
    /// `y` is f16 `[n_tok, h]` packed two to a 32-bit word (the x of a tensor-core
    /// mat-mat, [`MatMatOptions::x_f16`]; `h` even) instead of f32.
    pub y_f16: bool,
}

impl MatMatOptions {
    /// `path`, overwriting `y`, automatic split-K, f32 x, no epilogue.
    pub fn new(path: MatMatPath) -> Self {
        MatMatOptions { path, accumulate: false, split_k: None, x_f16: false, glu: None }
    }
}

/// `n` f32 values of `x` (a multiple of 4) as packed f16 in a new buffer (`convert_f16`):
/// the x of the tensor-core mat-mats.
pub(super) fn convert_x_f16(s: &mut Stream, x: &vkml_hal::Buffer, n: usize) -> Result<vkml_hal::Buffer> {
    let dev = s.device().clone();
    let n4 = (n / 4) as u64;
    let x16 = dev.alloc((8 * n4).max(4), MemoryKind::DeviceLocal)?;
    let cvt = pipeline(&dev, "convert_f16", ELEMENTWISE_WORKGROUP)?;
    let groups = grid(&dev, "mat_mat", n4.div_ceil(u64::from(ELEMENTWISE_WORKGROUP)))?;
    s.dispatch(&cvt, &[x.into(), (&x16).into()], &push_words(&[n4 as u32]), groups)?;
    Ok(x16)
}

/// Whether `path`'s kernel folds the gated product into its store for `m`
/// ([`MatMatGlu`]): `mul_mat_q`, `mul_mat_cm` and `mul_mat_cm256`, on a matrix in one part.
fn folds_glu(path: MatMatPath, m: &QMatrix) -> bool {
    matches!(path, MatMatPath::Scalar | MatMatPath::CoopMat) && m.parts.len() == 1
}

/// Whether the mat-mat `kernel` has the rotation's and the expert grouping's push constants
/// and bindings (include/mul_mat_rope.glsl: 3-6, 9-11; include/mul_mat_ids.glsl: 7, 8;
/// include/mul_mat_glu.glsl's biases: 12).
pub(super) fn takes_rope(kernel: &str) -> bool {
    matches!(kernel, "mul_mat_q" | "mul_mat_cm" | "mul_mat_cm256")
}

/// Bindings 3-12 of the mat-mats [`takes_rope`] names: the rotation's tables and caches
/// (3-6, include/mul_mat_rope.glsl), the expert grouping's slots and first slots (7, 8,
/// include/mul_mat_ids.glsl), the rotation's prologue (9-11) and the gated product's
/// biases (12, include/mul_mat_glu.glsl), each from `rope`, `groups` and `glu_bias` where
/// given, else the weight `w` (or C, `c`, for the caches) bound in its place, unread.
pub(super) fn epilogue_bindings<'a>(
    w: &'a vkml_hal::Buffer,
    c: BufferArg<'a>,
    rope: Option<&RopeKv<'a>>,
    groups: Option<&super::ExpertGroups<'a>>,
    glu_bias: Option<&'a vkml_hal::Buffer>,
) -> [BufferArg<'a>; 10] {
    let [cos, sin, k, v]: [BufferArg<'a>; 4] = match rope {
        Some(r) => [r.rope.cos.into(), r.rope.sin.into(), r.caches.0.buffer().into(), r.caches.1.buffer().into()],
        None => [w.into(), w.into(), c, c],
    };
    let [slots, first]: [BufferArg<'a>; 2] = match groups {
        Some(g) => [g.slots.into(), g.first.into()],
        None => [w.into(), w.into()],
    };
    let [bias, q_norm, k_norm] = rope.map_or_else(QkvPrologue::default, |r| r.prologue).bindings(w);
    [cos, sin, k, v, slots, first, bias, q_norm, k_norm, glu_bias.unwrap_or(w).into()]
}

/// [`RopeKv`]'s specialization constants (include/mul_mat_rope.glsl): 6 = the style
/// (1 neox, 2 interleaved), 7 = query heads, 8 = KV heads, 9 = head dim, 10 = rotated
/// dims, 11 = cache slots; its prologue's 14 = bits (1 bias, 2 query norm, 4 key norm),
/// 15, 16 = the query and key norms' eps (f32 bits).
fn rope_spec_constants(r: &RopeKv<'_>) -> [(u32, u32); 9] {
    let style = match r.rope.style {
        crate::nn::RopeStyle::Neox => 1,
        crate::nn::RopeStyle::Interleaved => 2,
    };
    let c = r.caches.0;
    [
        (6, style),
        (7, r.n_heads as u32),
        (8, c.n_kv_heads as u32),
        (9, c.d as u32),
        (10, r.rope.rot as u32),
        (11, c.ctx as u32),
        (
            14,
            u32::from(r.prologue.bias.is_some())
                | u32::from(r.prologue.q_norm.is_some()) << 1
                | u32::from(r.prologue.k_norm.is_some()) << 2,
        ),
        (15, r.prologue.q_norm.map_or(0.0f32, |n| n.1).to_bits()),
        (16, r.prologue.k_norm.map_or(0.0f32, |n| n.1).to_bits()),
    ]
}

/// The specialization constants of mat-mat `kernel` on `path` for `ty`: the tuning's
/// ([`tuning::mat_mat_spec_constants`], none for the scalar kernel), the gated product's
/// and the rotation's epilogues where given, and `mul_mat_cm`'s strips per epilogue pass
/// (12) with either.
pub(super) fn kernel_spec_constants(
    caps: &vkml_hal::Capabilities,
    path: MatMatPath,
    kernel: &str,
    ty: GgmlType,
    glu: Option<MatMatGlu>,
    rope: Option<&RopeKv<'_>>,
) -> Vec<(u32, u32)> {
    let mut spec =
        if path == MatMatPath::Scalar { Vec::new() } else { tuning::mat_mat_spec_constants(caps, kernel, ty) };
    spec.extend(glu.map(glu_spec_constants).into_iter().flatten());
    spec.extend(rope.map(rope_spec_constants).into_iter().flatten());
    if kernel == "mul_mat_cm" && (glu.is_some() || rope.is_some()) {
        spec.push((12, tuning::mat_mat_epilogue_tiles(caps)));
    }
    spec
}

/// [`MatMatGlu`]'s specialization constants (include/mul_mat_glu.glsl): 4 = the
/// activation (1 silu, 2 gelu, 3 gelu_erf, 4 swiglu_oai), 5 = f16 output.
fn glu_spec_constants(glu: MatMatGlu) -> [(u32, u32); 2] {
    let act = match glu.act {
        GluActivation::Silu => 1,
        GluActivation::Gelu => 2,
        GluActivation::GeluErf => 3,
        GluActivation::SwigluOai => 4,
    };
    [(4, act), (5, u32::from(glu.y_f16))]
}

/// Records the quantized mat-mat for prompts, `y[n, r] = sum_c m[r, c] * x[n, c]` for
/// `n < n_tok` (`x`: f32 `[n_tok, k]`, `y`: f32 `[n_tok, rows]`, row-major), on the
/// fastest path the device offers ([`MatMatPath::CoopMat`] where it applies, else
/// [`MatMatPath::Scalar`]). Weight blocks are decoded into shared memory once per tile and
/// reused by every token of the tile. Use [`mat_vec`] for a few tokens and this from
/// about 8 on.
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small or a grid past the device's limits;
/// [`OpsError::UnsupportedType`]; HAL errors.
pub fn mat_mat(s: &mut Stream, m: &QMatrix, x: &vkml_hal::Buffer, n_tok: usize, y: &vkml_hal::Buffer) -> Result<()> {
    let path = MatMatPath::best(s.device().caps(), m);
    mat_mat_with(s, m, x, n_tok, y, MatMatOptions::new(path))
}

/// [`mat_mat`] with explicit [`MatMatOptions`].
///
/// # Errors
/// As [`mat_mat`]; [`OpsError::Shape`] when the path is [`MatMatPath::CoopMat`] and the
/// device lacks cooperative matrices (f16, 16x16x16, subgroups of 32) or `k % 32 != 0`,
/// or for a split-K of 0.
pub fn mat_mat_with(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    n_tok: usize,
    y: &vkml_hal::Buffer,
    opts: MatMatOptions,
) -> Result<()> {
    mat_mat_store(s, m, x, n_tok, y, opts, None)
}

/// The Q|K|V mat-mat of a prompt with its rotation and cache append ([`RopeKv`]): `m`'s
/// product with `x` (`[n_tok, k]`, f32 or f16 as `opts.x_f16` says) rotated and appended
/// as [`crate::attention::rope_kv_append`] does it, the rotated query heads into `q_out`
/// (f32 `[n_tok, n_heads, d]`), the same bits. `mul_mat_q`, `mul_mat_cm` and
/// `mul_mat_cm256` do it in their store where a head's rows lie in one tile (the tile's
/// rows a multiple of `d`) and `m` is in one part (include/mul_mat_rope.glsl); elsewhere
/// the product goes to scratch and `rope_kv.comp` follows.
///
/// # Errors
/// As [`mat_mat_with`]; [`OpsError::Shape`] for `m` of other than
/// [`RopeKv::qkv_rows`] rows, `opts.accumulate` or `opts.glu`, and what
/// `rope_kv_append` refuses (caches, tables, positions, `q_out` too small).
pub fn mat_mat_rope_kv(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    n_tok: usize,
    q_out: &vkml_hal::Buffer,
    opts: MatMatOptions,
    rope: &RopeKv<'_>,
) -> Result<()> {
    mat_mat_store(s, m, x, n_tok, q_out, opts, Some(rope))
}

/// Whether `path`'s `kernel` (tile of `tile_rows`) rotates and appends in its store for `m`
/// and `rope` ([`mat_mat_rope_kv`]): whole heads in a tile, and with head norms heads of
/// at least 16 dims (so that the scales of a pass, `tile_rows / d` per staged token, fit
/// the shared memory the staging leaves: 2 048 floats, include/mul_mat_cm.glsl).
fn folds_rope(path: MatMatPath, m: &QMatrix, tile_rows: usize, rope: &RopeKv<'_>) -> bool {
    let d = rope.caches.0.d;
    let norms = rope.prologue.q_norm.is_some() || rope.prologue.k_norm.is_some();
    matches!(path, MatMatPath::Scalar | MatMatPath::CoopMat)
        && m.parts.len() == 1
        && tile_rows.is_multiple_of(d)
        && (!norms || d >= 16)
}

/// [`mat_mat_with`] and [`mat_mat_rope_kv`]: the product stored as `opts` and `rope` say.
fn mat_mat_store(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    n_tok: usize,
    y: &vkml_hal::Buffer,
    opts: MatMatOptions,
    rope: Option<&RopeKv<'_>>,
) -> Result<()> {
    let dev = s.device().clone();
    if let Some(r) = rope {
        let bad = |reason: String| Err(OpsError::Shape { op: "mat_mat_rope_kv", reason });
        if m.rows != r.qkv_rows() {
            return bad(format!(
                "a [{}, {}] matrix is not the Q|K|V of {} query and {} KV heads of {}",
                m.rows, m.k, r.n_heads, r.caches.0.n_kv_heads, r.caches.0.d
            ));
        }
        if opts.accumulate || opts.glu.is_some() {
            return bad("the rotation and cache append take the plain product (no accumulate, no gated product)".into());
        }
        r.check("mat_mat_rope_kv", n_tok, y)?;
        let (_, tile_rows, _) = mat_mat_kernel(dev.caps(), opts.path, m.ty, m.rows, n_tok);
        if !folds_rope(opts.path, m, tile_rows, r) {
            // The product, then rope_kv.comp on its rows.
            let p = dev.alloc((4 * n_tok * m.rows).max(4) as u64, MemoryKind::DeviceLocal)?;
            mat_mat_store(s, m, x, n_tok, &p, opts, None)?;
            return r.append_product(s, &p, n_tok, y);
        }
    }
    if let Some(glu) = opts.glu {
        let bad = |reason: String| Err(OpsError::Shape { op: "mat_mat", reason });
        let h = m.rows / 2;
        if !m.rows.is_multiple_of(2) || (glu.y_f16 && !h.is_multiple_of(2)) {
            return bad(format!(
                "a gated product over {} rows{}: the stacked gate and up need an even count",
                m.rows,
                if glu.y_f16 { " written as f16 pairs" } else { "" }
            ));
        }
        if opts.accumulate {
            return bad("the gated product overwrites y: it cannot accumulate".into());
        }
        let yb = (if glu.y_f16 { 2 } else { 4 }) * (n_tok * h) as u64;
        if y.size() < yb {
            return bad(format!("{n_tok} rows of {h} gated products need y of {yb} bytes, got {}", y.size()));
        }
        if !folds_glu(opts.path, m) {
            // The product, then the gated product in its own pass.
            let both = dev.alloc((4 * n_tok * m.rows).max(4) as u64, MemoryKind::DeviceLocal)?;
            mat_mat_with(s, m, x, n_tok, &both, MatMatOptions { glu: None, ..opts })?;
            return if glu.y_f16 {
                crate::nn::glu_halves_f16(s, glu.act, &both, n_tok, h, y)
            } else {
                crate::nn::glu_halves(s, glu.act, &both, n_tok, h, y)
            };
        }
    }
    if opts.x_f16 {
        let bad = |reason: String| Err(OpsError::Shape { op: "mat_mat", reason });
        if !opts.path.reads_f16_x() {
            return bad(format!("{:?} reads f32 x, not f16", opts.path));
        }
        // (a gated product's or a rotation's smaller y was checked above)
        let yb = if opts.glu.is_some() || rope.is_some() { 0 } else { 4 * (n_tok * m.rows) as u64 };
        let xb = 2 * (n_tok * m.k) as u64;
        if x.size() < xb || y.size() < yb {
            return bad(format!(
                "{n_tok} rows need f16 x of {xb} bytes and y of {yb}, got {} and {}",
                x.size(),
                y.size()
            ));
        }
    } else if opts.glu.is_some() || rope.is_some() {
        // (y checked above)
        check_io_rows("mat_mat", m, 0, x, n_tok, y)?;
    } else {
        check_io("mat_mat", m, x, n_tok, y)?;
    }
    let (_, tile_rows, tile_tokens) = mat_mat_kernel(dev.caps(), opts.path, m.ty, m.rows, n_tok);
    let options = match opts.path {
        MatMatPath::Scalar => PipelineOptions::default(),
        MatMatPath::CoopMat | MatMatPath::CoopMat2 | MatMatPath::CoopMatInt8 => {
            // The special paths' own needs first: (path, what it is, device check, what
            // the device needs, the types it has).
            let special = match opts.path {
                MatMatPath::CoopMat2 => Some((
                    "workgroup-scope",
                    tuning::coopmat2(dev.caps()),
                    "VK_NV_cooperative_matrix2 (workgroup scope, flexible dimensions, tensor addressing, block loads) and bufferDeviceAddress",
                    COOPMAT2_TYPES,
                )),
                MatMatPath::CoopMatInt8 => Some((
                    "int8",
                    tuning::coopmat_int8(dev.caps()),
                    "VK_KHR_cooperative_matrix with 16x16x32 s8 x s8 + s32 and 16x16x16 f16 x f16 + f32 subgroup shapes, int8 arithmetic and subgroups of 32",
                    COOPMAT_INT8_TYPES,
                )),
                _ => None,
            };
            if let Some((what, offered, needs, types)) = special {
                if !offered {
                    return Err(OpsError::Shape {
                        op: "mat_mat",
                        reason: format!("the {what} cooperative-matrix path needs {needs}; this device lacks them"),
                    });
                }
                if !m.k.is_multiple_of(32) || !types.contains(&m.ty) {
                    return Err(OpsError::Shape {
                        op: "mat_mat",
                        reason: format!(
                            "the {what} cooperative-matrix path needs k % 32 == 0 and one of {types:?}; got {:?} with k = {}",
                            m.ty, m.k
                        ),
                    });
                }
            }
            // Every kernel tiles subgroups of 32 (tuning::coopmat2 and coopmat_int8 imply it);
            // specialization constants per part's kernel, below.
            let Some(options) = tuning::coopmat_pipeline_options(dev.caps(), Vec::new()) else {
                return Err(OpsError::Shape {
                    op: "mat_mat",
                    reason: "the cooperative-matrix path needs VK_KHR_cooperative_matrix with a 16x16x16 f16 x f16 + f32 shape and subgroups of 32; this device has none".into(),
                });
            };
            if !m.k.is_multiple_of(32) {
                return Err(OpsError::Shape {
                    op: "mat_mat",
                    reason: format!("the cooperative-matrix path needs k % 32 == 0, k = {}", m.k),
                });
            }
            options
        }
    };
    if opts.split_k == Some(0) {
        return Err(OpsError::Shape { op: "mat_mat", reason: "split_k must be at least 1".into() });
    }
    if n_tok == 0 || m.rows == 0 {
        return Ok(());
    }
    let gx = m.rows.div_ceil(tile_rows) as u64;
    let gy = n_tok.div_ceil(tile_tokens) as u64;
    let lim = dev.caps().limits.max_workgroup_count;
    if gx > u64::from(lim[0]) || gy > u64::from(lim[1]) {
        return Err(OpsError::Shape { op: "mat_mat", reason: format!("{gx} x {gy} tiles exceed the device's grid") });
    }
    // y from row `row0` on, with the matrix's row stride: a part's outputs (QPart rows
    // start at offsets meeting the storage-buffer alignment).
    let y_from =
        |row0: usize, rows: usize| BufferArg::range(y, 4 * row0 as u64, (4 * ((n_tok - 1) * m.rows + rows)) as u64);
    // Split-K: each output tile's k range is shared by `splits` workgroups (chunks a
    // multiple of 256, so no block straddles two), so that a grid of few tiles still
    // keeps every multiprocessor's memory pipeline busy: chunks of at least 1024, or of 256
    // for a grid of fewer than 16 tiles (a mixture-of-experts router: 128 rows, 4 tiles).
    let min_chunk = if gx * gy < 16 { 256 } else { 1024 };
    let max_splits = (m.k / min_chunk).max(1) as u64;
    // (The scalar kernel has none; a matrix in several parts is large and runs without
    // one, each part's outputs written in place; the gated product and the rotation need
    // whole sums.)
    let want = if m.parts.len() > 1 || opts.path == MatMatPath::Scalar || opts.glu.is_some() || rope.is_some() {
        1
    } else {
        opts.split_k.map_or_else(|| MAT_MAT_TARGET_GROUPS.div_ceil(gx * gy).min(max_splits), u64::from).max(1)
    };
    let k_chunk = (m.k as u64).div_ceil(want).next_multiple_of(256);
    let splits = (m.k as u64).div_ceil(k_chunk);
    if splits > u64::from(lim[2]) {
        return Err(OpsError::Shape { op: "mat_mat", reason: format!("split-K {splits} exceeds the device's grid") });
    }
    // The tensor-core kernels read x as f16 or Q8_1: converted once here, it is half the
    // bytes (or less) each of the rows / 128 workgroup columns re-reads from L2.
    let x16 = if opts.path == MatMatPath::Scalar || opts.x_f16 {
        None
    } else if opts.path == MatMatPath::CoopMatInt8 {
        // Q8_1 in the kernel's tiled layout (quantize_q8_1_tiles.comp): per 128-token tile
        // and k-block, 4 KiB of quants; then the f16 scales, 256 bytes per tile and block.
        let n_pad = (gy as usize) * tile_tokens;
        let xq = dev.alloc((n_pad * m.k + n_pad * m.k / 16) as u64, MemoryKind::DeviceLocal)?;
        let qp = pipeline(&dev, "quantize_q8_1_tiles", Q8_1_WORKGROUP)?;
        let pairs = (n_pad / 2 * m.k / 32) as u64;
        let groups = grid(&dev, "mat_mat", pairs.div_ceil(u64::from(Q8_1_WORKGROUP)))?;
        s.dispatch(&qp, &[x.into(), (&xq).into()], &push_words(&[n_tok as u32, m.k as u32, n_pad as u32]), groups)?;
        Some(xq)
    } else {
        Some(convert_x_f16(s, x, n_tok * m.k)?)
    };
    let x_arg = x16.as_ref().unwrap_or(x);
    let out_len = (n_tok * m.rows) as u64;
    let partials = if splits > 1 { Some(dev.alloc(4 * splits * out_len, MemoryKind::DeviceLocal)?) } else { None };
    let accumulate = opts.accumulate && partials.is_none();
    for part in &m.parts {
        // Each part its own kernel choice and grid (one kernel but for a short last part).
        let (name, tile_rows, _) = mat_mat_kernel(dev.caps(), opts.path, m.ty, part.rows, n_tok);
        let spec_constants = kernel_spec_constants(dev.caps(), opts.path, name, m.ty, opts.glu, rope);
        let options = PipelineOptions { spec_constants, ..options.clone() };
        let k = type_kernels("mat_mat", m.ty)?;
        let kernel = match opts.path {
            MatMatPath::Scalar => k.mul_mat_q,
            MatMatPath::CoopMat2 => k.mul_mat_cm2,
            MatMatPath::CoopMatInt8 => k.mul_mat_cm_i8,
            MatMatPath::CoopMat if name == "mul_mat_cm256" => k.mul_mat_cm256,
            MatMatPath::CoopMat => k.mul_mat_cm,
        };
        let p = dev.pipeline(&dev.kernel(kernel)?, &options)?;
        let mut words = vec![
            0,
            m.row_bytes as u32,
            m.k as u32,
            part.rows as u32,
            n_tok as u32,
            u32::from(accumulate),
            k_chunk as u32,
            m.rows as u32,
        ];
        let c_arg: BufferArg<'_> = if opts.glu.is_some() || rope.is_some() {
            y.into()
        } else {
            partials.as_ref().map_or_else(|| y_from(part.row0, part.rows), Into::into)
        };
        let mut bindings: Vec<BufferArg<'_>> = vec![(&part.buffer).into(), x_arg.into(), c_arg];
        if takes_rope(name) {
            // The rotation's push constant (pos0) and the grouping's (x_slots, unused
            // here), then bindings 3-11.
            words.extend([rope.map_or(0, |r| r.pos0 as u32), 1]);
            bindings.extend(epilogue_bindings(&part.buffer, c_arg, rope, None, None));
        }
        let groups = [part.rows.div_ceil(tile_rows) as u32, gy as u32, splits as u32];
        s.dispatch(&p, &bindings, &push_words(&words), groups)?;
    }
    if let Some(part) = &partials {
        let red = pipeline(&dev, "reduce_partials", ELEMENTWISE_WORKGROUP)?;
        let groups = grid(&dev, "mat_mat", out_len.div_ceil(u64::from(ELEMENTWISE_WORKGROUP)))?;
        let pc = push_words(&[out_len as u32, splits as u32, u32::from(opts.accumulate)]);
        s.dispatch(&red, &[part.into(), y.into()], &pc, groups)?;
    }
    Ok(())
}
