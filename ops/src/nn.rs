//! Transformer ops on rows in device buffers (contiguous, row-major), with f32 or f16
//! activations ([`Dtype`]; arithmetic in f32, parameters f32): rms_norm, layer_norm, the
//! decode fusion of the residual add with rms_norm ([`add_rms_norm`]), softmax over the
//! last dim with scale and mask, rotary embeddings (neox and interleaved, partial rotary
//! dims), gated silu/gelu, the row-broadcast bias add. Kernels:
//! `shader-src/shaders/{norm,softmax,rope,glu,bias_add}.comp`.
//!
//! The row reductions (norms, softmax) use subgroup arithmetic where the device has it
//! ([`crate::tuning::subgroup_reduce`]), else a portable shared-memory tree.
//!
//! Semantics follow candle-nn 0.11 (`ops::rms_norm`, `ops::layer_norm`,
//! `ops::softmax_last_dim`, `rotary_emb::rope` / `rope_i`, `ops::silu`, `Tensor::gelu`,
//! `Tensor::gelu_erf`), which the tests compare against.

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words, rows_grid};
use crate::tuning;

/// Workgroup size of the row kernels (norms, softmax): a power of two.
pub const ROW_WORKGROUP: u32 = 256;

fn need(op: &'static str, what: &str, b: &Buffer, elems: usize, dt: Dtype) -> Result<()> {
    let bytes = (dt.size() * elems) as u64;
    if b.size() < bytes {
        return Err(OpsError::Shape {
            op,
            reason: format!("{what} holds {} bytes, needs {elems} {} ({bytes} bytes)", b.size(), dt.name()),
        });
    }
    Ok(())
}

/// Records `y = x / sqrt(mean(x²) + eps) * w` over rows of `n` (candle-nn
/// `ops::rms_norm`). `x`, `y`: `dt[rows * n]`; `w`: `f32[n]`, or `None` for no scale.
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small; [`OpsError::MissingFeature`] for
/// [`Dtype::F16`] without 16-bit storage; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm(
    s: &mut Stream,
    dt: Dtype,
    x: &Buffer,
    w: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    y: &Buffer,
) -> Result<()> {
    norm(s, Norm::Rms, dt, x, w, None, rows, n, eps, y)
}

/// Records candle-nn's `rms_norm` of f32 `x` (`[rows, n]`, `n` even, weight `w: f32[n]` or
/// none) written as f16 (`y`: `[rows, n]` packed f16, rounded to nearest even as
/// `convert_f16` rounds): the prompt mat-mat's x in one pass instead of a norm and a
/// conversion (kernel `norm.rms_f16_out_f32[_sg]`).
///
/// # Errors
/// [`OpsError::Shape`] for an odd `n` or buffers too small; HAL errors.
pub fn rms_norm_f16_out(
    s: &mut Stream,
    x: &Buffer,
    w: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    y: &Buffer,
) -> Result<()> {
    let op = "rms_norm_f16_out";
    if !n.is_multiple_of(2) {
        return Err(OpsError::Shape { op, reason: format!("rows of {n}: f16 pairs need an even length") });
    }
    need(op, "y", y, rows * n, Dtype::F16)?;
    let kernels = ("norm.rms_f16_out_f32", "norm.rms_f16_out_f32_sg");
    rms_norm_other_out(s, op, kernels, x, w, rows, n, eps, y)
}

/// [`rms_norm`] of f32 rows with the result quantized to Q8_1 as it is made: `xq` gets
/// `rows * n / 32` blocks of 36 bytes (ggml's `block_q8_1`, rows in order), equal to
/// [`crate::quant::quantize_q8_1`] of what [`rms_norm`] writes (the same f32 row, the
/// same quantization code, `include/q8_1.glsl`). One dispatch instead of two for the
/// decode step's normalised inputs of [`crate::quant::mat_vec_q8_1`].
///
/// # Errors
/// [`OpsError::Shape`] for `n` not a multiple of 32 or buffers too small; HAL errors.
pub fn rms_norm_q8_1(
    s: &mut Stream,
    x: &Buffer,
    w: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    xq: &Buffer,
) -> Result<()> {
    let op = "rms_norm_q8_1";
    if !n.is_multiple_of(32) {
        return Err(OpsError::Shape { op, reason: format!("rows of {n} are not whole Q8_1 blocks of 32") });
    }
    let bytes = 36 * (rows * n / 32) as u64;
    if xq.size() < bytes {
        return Err(OpsError::Shape { op, reason: format!("xq holds {} bytes, needs {bytes}", xq.size()) });
    }
    rms_norm_other_out(s, op, ("norm.rms_q8_1_f32", "norm.rms_q8_1_f32_sg"), x, w, rows, n, eps, xq)
}

/// The RMS norm of f32 `x: [rows, n]` (weight `w: f32[n]` or none) by a `norm.comp`
/// variant writing another form than f32 into `out` (whose size the caller checked):
/// `kernels` is the variant without and with subgroup reductions.
#[allow(clippy::too_many_arguments)]
fn rms_norm_other_out(
    s: &mut Stream,
    op: &'static str,
    kernels: (&'static str, &'static str),
    x: &Buffer,
    w: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    out: &Buffer,
) -> Result<()> {
    need(op, "x", x, rows * n, Dtype::F32)?;
    if let Some(w) = w {
        need(op, "weight", w, n, Dtype::F32)?;
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let name = if tuning::subgroup_reduce(dev.caps()) { kernels.1 } else { kernels.0 };
    let p = pipeline(&dev, name, ROW_WORKGROUP)?;
    let pc = push_words(&[n as u32, rows as u32, eps.to_bits(), w.is_some() as u32, 0]);
    // An unused weight binding gets x (never read: has_w is 0).
    s.dispatch(&p, &[x.into(), w.unwrap_or(x).into(), out.into()], &pc, grid(&dev, op, rows as u64)?)?;
    Ok(())
}

/// Records `y = (x - mean) / sqrt(var + eps) * w + b` over rows of `n` (biased variance;
/// candle-nn `ops::layer_norm`). `x`, `y`: `dt[rows * n]`; `w`, `b`: `f32[n]` or `None`.
///
/// # Errors
/// As [`rms_norm`].
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    s: &mut Stream,
    dt: Dtype,
    x: &Buffer,
    w: Option<&Buffer>,
    b: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    y: &Buffer,
) -> Result<()> {
    norm(s, Norm::Layer, dt, x, w, b, rows, n, eps, y)
}

/// Records, in one kernel, the residual add of a decode step and the next rms_norm:
/// `h = x + residual` (written out: the next residual stream, rounded to `dt`) and
/// `y = rms_norm(h) * w` computed from the stored `h`. `x`, `residual`, `h`, `y`:
/// `dt[rows * n]`, four distinct buffers; `w`: `f32[n]`, or `None` for no scale.
/// Equivalent to an add followed by [`rms_norm`], without the round trip of `h`.
///
/// # Errors
/// As [`rms_norm`].
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm(
    s: &mut Stream,
    dt: Dtype,
    x: &Buffer,
    residual: &Buffer,
    w: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    h: &Buffer,
    y: &Buffer,
) -> Result<()> {
    norm(s, Norm::AddRms { residual, h }, dt, x, w, None, rows, n, eps, y)
}

#[derive(Clone, Copy)]
enum Norm<'a> {
    Rms,
    Layer,
    AddRms { residual: &'a Buffer, h: &'a Buffer },
}

#[allow(clippy::too_many_arguments)]
fn norm(
    s: &mut Stream,
    kind: Norm<'_>,
    dt: Dtype,
    x: &Buffer,
    w: Option<&Buffer>,
    b: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    y: &Buffer,
) -> Result<()> {
    let op = match kind {
        Norm::Rms => "rms_norm",
        Norm::Layer => "layer_norm",
        Norm::AddRms { .. } => "add_rms_norm",
    };
    let dev = s.device().clone();
    dt.require_activation(&dev, op)?;
    need(op, "x", x, rows * n, dt)?;
    need(op, "y", y, rows * n, dt)?;
    if let Norm::AddRms { residual, h } = kind {
        need(op, "residual", residual, rows * n, dt)?;
        need(op, "h", h, rows * n, dt)?;
    }
    if let Some(w) = w {
        need(op, "weight", w, n, Dtype::F32)?;
    }
    if let Some(b) = b {
        need(op, "bias", b, n, Dtype::F32)?;
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let name = match (kind, dt == Dtype::F16, tuning::subgroup_reduce(dev.caps())) {
        (Norm::Rms, false, false) => "norm.rms_f32",
        (Norm::Rms, false, true) => "norm.rms_f32_sg",
        (Norm::Rms, true, false) => "norm.rms_f16",
        (Norm::Rms, true, true) => "norm.rms_f16_sg",
        (Norm::Layer, false, false) => "norm.layer_f32",
        (Norm::Layer, false, true) => "norm.layer_f32_sg",
        (Norm::Layer, true, false) => "norm.layer_f16",
        (Norm::Layer, true, true) => "norm.layer_f16_sg",
        (Norm::AddRms { .. }, false, false) => "norm.add_rms_f32",
        (Norm::AddRms { .. }, false, true) => "norm.add_rms_f32_sg",
        (Norm::AddRms { .. }, true, false) => "norm.add_rms_f16",
        (Norm::AddRms { .. }, true, true) => "norm.add_rms_f16_sg",
    };
    let p = pipeline(&dev, name, ROW_WORKGROUP)?;
    // An unused weight or bias binding gets x (never read: has_w / has_b are 0).
    let wb = w.unwrap_or(x);
    let mut bindings: Vec<BufferArg<'_>> = vec![x.into(), wb.into(), y.into()];
    match kind {
        Norm::Rms => {}
        Norm::Layer => bindings.push(b.unwrap_or(x).into()),
        Norm::AddRms { residual, h } => bindings.extend([BufferArg::from(residual), h.into()]),
    }
    let pc = push_words(&[n as u32, rows as u32, eps.to_bits(), w.is_some() as u32, b.is_some() as u32]);
    s.dispatch(&p, &bindings, &pc, grid(&dev, op, rows as u64)?)?;
    Ok(())
}

/// Records `y = softmax(x * scale + mask)` over rows of `n` (candle-nn
/// `ops::softmax_last_dim` of the scaled, masked logits). `x`, `y`: `dt[rows * n]`;
/// `mask` is `(buffer f32[mask_rows * n], mask_rows)`, row `r` using mask row
/// `r % mask_rows` (additive: 0 keeps, -inf removes). Rows that are all -inf give zeros.
///
/// # Errors
/// As [`rms_norm`], and [`OpsError::Shape`] for a mask of zero rows.
#[allow(clippy::too_many_arguments)]
pub fn softmax(
    s: &mut Stream,
    dt: Dtype,
    x: &Buffer,
    mask: Option<(&Buffer, usize)>,
    rows: usize,
    n: usize,
    scale: f32,
    y: &Buffer,
) -> Result<()> {
    let dev = s.device().clone();
    dt.require_activation(&dev, "softmax")?;
    need("softmax", "x", x, rows * n, dt)?;
    need("softmax", "y", y, rows * n, dt)?;
    if let Some((m, mr)) = mask {
        if mr == 0 {
            return Err(OpsError::Shape { op: "softmax", reason: "a mask needs at least one row".into() });
        }
        need("softmax", "mask", m, mr * n, Dtype::F32)?;
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let name = match (dt == Dtype::F16, tuning::subgroup_reduce(dev.caps())) {
        (false, false) => "softmax.f32",
        (false, true) => "softmax.f32_sg",
        (true, false) => "softmax.f16",
        (true, true) => "softmax.f16_sg",
    };
    let p = pipeline(&dev, name, ROW_WORKGROUP)?;
    let (mb, mr) = mask.unwrap_or((x, 0));
    let pc = push_words(&[n as u32, rows as u32, scale.to_bits(), mr as u32]);
    s.dispatch(&p, &[x.into(), mb.into(), y.into()], &pc, grid(&dev, "softmax", rows as u64)?)?;
    Ok(())
}

/// How rotary embeddings pair dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(i, i + rot/2)` (GPT-NeoX, llama in HF layout; candle's `rope`).
    Neox,
    /// Pairs `(2i, 2i + 1)` (original llama / GGUF llama; candle's `rope_i`).
    Interleaved,
}

/// Shape of a rope application: `x` and `y` are `dt[bh, t, d]`, or `dt[t, bh, d]` with
/// `token_major` (the layout a Q or K projection of `t` tokens writes); the first `rot`
/// dims of each vector rotate (even, ≤ d), the rest pass through; position of step `j` is
/// `pos_offset + j`, indexing rows of the cos/sin tables (f32[positions, rot/2]).
#[derive(Debug, Clone, Copy)]
pub struct RopeShape {
    /// Batch x heads.
    pub bh: usize,
    /// Sequence length.
    pub t: usize,
    /// Head dimension.
    pub d: usize,
    /// Rotated dims (partial rotary when < d).
    pub rot: usize,
    /// Position of the first step.
    pub pos_offset: usize,
    /// Rows in the cos/sin tables.
    pub positions: usize,
    /// `x`, `y` are `[t, bh, d]` rather than `[bh, t, d]`.
    pub token_major: bool,
}

/// Records rotary embeddings `y = rope(x)` (candle-nn `rotary_emb::rope` or `rope_i` on
/// the first `rot` dims, the rest copied); `cos`, `sin`: `f32[positions, rot/2]`.
///
/// # Errors
/// [`OpsError::Shape`] for an odd `d` or `rot`, `rot > d`, positions past the tables, or
/// buffers too small; [`OpsError::MissingFeature`] for [`Dtype::F16`] without 16-bit
/// storage; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    s: &mut Stream,
    dt: Dtype,
    style: RopeStyle,
    x: &Buffer,
    cos: &Buffer,
    sin: &Buffer,
    sh: RopeShape,
    y: &Buffer,
) -> Result<()> {
    let dev = s.device().clone();
    dt.require_activation(&dev, "rope")?;
    check_rope_tables("rope", cos, sin, sh)?;
    let rows = sh.bh * sh.t;
    need("rope", "x", x, rows * sh.d, dt)?;
    need("rope", "y", y, rows * sh.d, dt)?;
    if rows == 0 || sh.d == 0 {
        return Ok(());
    }
    let name = match (style, dt == Dtype::F16) {
        (RopeStyle::Neox, false) => "rope.neox_f32",
        (RopeStyle::Neox, true) => "rope.neox_f16",
        (RopeStyle::Interleaved, false) => "rope.interleaved_f32",
        (RopeStyle::Interleaved, true) => "rope.interleaved_f16",
    };
    let p = pipeline(&dev, name, 64)?;
    let tok_div = if sh.token_major { sh.bh.max(1) } else { 1 };
    let pc = push_words(&[sh.d as u32, sh.t as u32, rows as u32, sh.rot as u32, sh.pos_offset as u32, tok_div as u32]);
    let grid = rows_grid(&dev, (sh.d / 2).div_ceil(64) as u32, rows);
    s.dispatch(&p, &[x.into(), cos.into(), sin.into(), y.into()], &pc, grid)?;
    Ok(())
}

/// Checks the rotary shape of [`rope`] and [`crate::attention::rope_kv_append`] (named
/// `op` in the error): head dim `sh.d` and rotary dims `sh.rot` even with `rot <= d`,
/// positions `sh.pos_offset..+ sh.t` inside the tables, and `cos`, `sin` holding
/// `f32[sh.positions, sh.rot / 2]`.
pub(crate) fn check_rope_tables(op: &'static str, cos: &Buffer, sin: &Buffer, sh: RopeShape) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op, reason });
    if !sh.d.is_multiple_of(2) || !sh.rot.is_multiple_of(2) || sh.rot > sh.d {
        return bad(format!("head dim {} and rotary dims {} must be even with rot <= d", sh.d, sh.rot));
    }
    if sh.pos_offset + sh.t > sh.positions {
        return bad(format!(
            "positions {}..{} exceed the {}-row cos/sin tables",
            sh.pos_offset,
            sh.pos_offset + sh.t,
            sh.positions
        ));
    }
    need(op, "cos", cos, sh.positions * sh.rot / 2, Dtype::F32)?;
    need(op, "sin", sin, sh.positions * sh.rot / 2, Dtype::F32)
}

/// Records the row-broadcast bias add `x[r, :] += b` in place for `r < rows` (`x`:
/// `dt[rows * n]`, `b`: `f32[n]`; candle's `broadcast_add` of a bias, as qwen2's Q/K/V
/// projections need).
///
/// # Errors
/// As [`rms_norm`].
pub fn add_bias(s: &mut Stream, dt: Dtype, x: &Buffer, b: &Buffer, rows: usize, n: usize) -> Result<()> {
    let dev = s.device().clone();
    dt.require_activation(&dev, "add_bias")?;
    need("add_bias", "x", x, rows * n, dt)?;
    need("add_bias", "b", b, n, Dtype::F32)?;
    if rows * n == 0 {
        return Ok(());
    }
    let total = u32::try_from(rows * n)
        .map_err(|_| OpsError::Shape { op: "add_bias", reason: format!("{rows} x {n} elements exceed 2^32") })?;
    let p = pipeline(&dev, if dt == Dtype::F16 { "bias_add.f16" } else { "bias_add.f32" }, 256)?;
    let groups = grid(&dev, "add_bias", u64::from(total).div_ceil(256))?;
    s.dispatch(&p, &[x.into(), b.into()], &push_words(&[total, n as u32]), groups)?;
    Ok(())
}

/// Activation of a gated linear unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GluActivation {
    /// `g / (1 + exp(-g))` (SwiGLU).
    Silu,
    /// GELU, tanh approximation (GeGLU as in candle's `gelu`).
    Gelu,
    /// GELU with erf (candle's `gelu_erf`); erf to 1.2e-7.
    GeluErf,
    /// gpt-oss's clamped SwiGLU of gate and up together (ggml's `swiglu_oai`, with
    /// llama.cpp's α = 1.702 and limit 7): `x = min(g, 7)`, `y = clamp(u, -7, 7)`,
    /// `x / (1 + exp(-α x)) · (y + 1)`.
    SwigluOai,
}

/// Records the gated product of the two halves of each row of `both` (`f32[t, 2n]`,
/// row-major: gate columns `0 .. n`, up columns `n .. 2n`, as a product with a
/// `concat_rows(gate, up)` matrix writes them): `y[i, j] = act(both[i, j]) * both[i, n + j]`
/// into `y` (`f32[t, n]`) in one pass (kernel `glu.<act>_f32` reading the halves;
/// candle-nn's `silu(gate) * up` and the GELU variants).
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small or more than 2^32 - 1 elements; HAL errors.
pub fn glu_halves(s: &mut Stream, act: GluActivation, both: &Buffer, t: usize, n: usize, y: &Buffer) -> Result<()> {
    glu_with(s, Dtype::F32, act, both, both, t * n, n, y)
}

/// [`glu_halves`] writing `y` as f16 (`[t, n]` packed, two to a 32-bit word: the bits
/// `glu_halves` then `convert_f16` give), the x of a tensor-core mat-mat
/// (`MatMatOptions::x_f16`) in one pass (kernel `glu.<act>_f32_to_f16`).
///
/// # Errors
/// [`OpsError::Shape`] for an odd `n`, buffers too small or more than 2^32 - 1 elements;
/// HAL errors.
pub fn glu_halves_f16(s: &mut Stream, act: GluActivation, both: &Buffer, t: usize, n: usize, y: &Buffer) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "glu_halves_f16", reason });
    let outputs = t * n;
    if !n.is_multiple_of(2) {
        return bad(format!("rows of {n} products: f16 pairs need an even count"));
    }
    if both.size() < 8 * outputs as u64 || y.size() < 2 * outputs as u64 {
        return bad(format!(
            "{t} rows of {n} products need {} bytes of f32 gate|up and {} bytes of f16 out, got {} and {}",
            8 * outputs,
            2 * outputs,
            both.size(),
            y.size()
        ));
    }
    if 2 * outputs > u32::MAX as usize {
        return bad(format!("{} elements: at most 2^32 - 1", 2 * outputs));
    }
    if outputs == 0 {
        return Ok(());
    }
    let name = match act {
        GluActivation::Silu => "glu.silu_f32_to_f16",
        GluActivation::Gelu => "glu.gelu_f32_to_f16",
        GluActivation::GeluErf => "glu.gelu_erf_f32_to_f16",
        GluActivation::SwigluOai => "glu.swiglu_oai_f32_to_f16",
    };
    let dev = s.device().clone();
    let p = pipeline(&dev, name, 256)?;
    let groups = grid(&dev, "glu_halves_f16", (outputs as u64 / 2).div_ceil(256))?;
    s.dispatch(&p, &[both.into(), both.into(), y.into()], &push_words(&[outputs as u32, n as u32]), groups)?;
    Ok(())
}

/// Records `y = act(gate) * up` over `n` elements (`gate`, `up`, `y`: `dt[n]`; candle-nn
/// `ops::silu`, `Tensor::gelu`, `Tensor::gelu_erf` times `up`).
///
/// # Errors
/// As [`rms_norm`].
pub fn glu(
    s: &mut Stream,
    dt: Dtype,
    act: GluActivation,
    gate: &Buffer,
    up: &Buffer,
    n: usize,
    y: &Buffer,
) -> Result<()> {
    glu_with(s, dt, act, gate, up, n, 0, y)
}

/// [`glu`] over `n` outputs; with `half > 0`, `gate` = `up` holds rows of `2 half` (gate
/// then up columns, [`glu_halves`]).
#[allow(clippy::too_many_arguments)]
fn glu_with(
    s: &mut Stream,
    dt: Dtype,
    act: GluActivation,
    gate: &Buffer,
    up: &Buffer,
    n: usize,
    half: usize,
    y: &Buffer,
) -> Result<()> {
    let dev = s.device().clone();
    dt.require_activation(&dev, "glu")?;
    let inputs = if half > 0 { 2 * n } else { n };
    need("glu", "gate", gate, inputs, dt)?;
    need("glu", "up", up, inputs, dt)?;
    need("glu", "y", y, n, dt)?;
    if inputs > u32::MAX as usize {
        return Err(OpsError::Shape { op: "glu", reason: format!("{inputs} elements: at most 2^32 - 1") });
    }
    if n == 0 {
        return Ok(());
    }
    let name = match (act, dt == Dtype::F16) {
        (GluActivation::Silu, false) => "glu.silu_f32",
        (GluActivation::Silu, true) => "glu.silu_f16",
        (GluActivation::Gelu, false) => "glu.gelu_f32",
        (GluActivation::Gelu, true) => "glu.gelu_f16",
        (GluActivation::GeluErf, false) => "glu.gelu_erf_f32",
        (GluActivation::GeluErf, true) => "glu.gelu_erf_f16",
        (GluActivation::SwigluOai, false) => "glu.swiglu_oai_f32",
        (GluActivation::SwigluOai, true) => "glu.swiglu_oai_f16",
    };
    let p = pipeline(&dev, name, 256)?;
    let groups = grid(&dev, "glu", (n as u64).div_ceil(256))?;
    s.dispatch(&p, &[gate.into(), up.into(), y.into()], &push_words(&[n as u32, half as u32]), groups)?;
    Ok(())
}
