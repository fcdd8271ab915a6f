//! Transformer ops on f32 rows in device buffers (contiguous, row-major): rms_norm,
//! layer_norm, softmax over the last dim with scale and mask, rotary embeddings
//! (neox and interleaved, partial rotary dims), gated silu/gelu. Kernels:
//! `shader-src/shaders/{norm,softmax,rope,glu}.comp`.
//!
//! Semantics follow candle-nn 0.11 (`ops::rms_norm`, `ops::layer_norm`,
//! `ops::softmax_last_dim`, `rotary_emb::rope` / `rope_i`, `ops::silu`, `Tensor::gelu`,
//! `Tensor::gelu_erf`), which the tests compare against.

use vkml_hal::{Buffer, Stream};

use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};

/// Workgroup size of the row kernels (norms, softmax): a power of two.
pub const ROW_WORKGROUP: u32 = 256;

fn need(op: &'static str, what: &str, b: &Buffer, elems: usize) -> Result<()> {
    if b.size() < 4 * elems as u64 {
        return Err(OpsError::Shape { op, reason: format!("{what} holds {} bytes, needs {} f32", b.size(), elems) });
    }
    Ok(())
}

/// Records `y = x / sqrt(mean(x²) + eps) * w` over rows of `n` (`x`, `y`: f32[rows * n];
/// `w`: f32[n], or `None` for no scale).
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small; HAL errors.
pub fn rms_norm(
    s: &mut Stream,
    x: &Buffer,
    w: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    y: &Buffer,
) -> Result<()> {
    norm(s, "rms_norm", "norm.rms", x, w, None, rows, n, eps, y)
}

/// Records `y = (x - mean) / sqrt(var + eps) * w + b` over rows of `n` (biased variance;
/// `w`, `b`: f32[n] or `None`).
///
/// # Errors
/// As [`rms_norm`].
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    s: &mut Stream,
    x: &Buffer,
    w: Option<&Buffer>,
    b: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    y: &Buffer,
) -> Result<()> {
    norm(s, "layer_norm", "norm.layer", x, w, b, rows, n, eps, y)
}

#[allow(clippy::too_many_arguments)]
fn norm(
    s: &mut Stream,
    op: &'static str,
    kernel: &str,
    x: &Buffer,
    w: Option<&Buffer>,
    b: Option<&Buffer>,
    rows: usize,
    n: usize,
    eps: f32,
    y: &Buffer,
) -> Result<()> {
    need(op, "x", x, rows * n)?;
    need(op, "y", y, rows * n)?;
    if let Some(w) = w {
        need(op, "weight", w, n)?;
    }
    if let Some(b) = b {
        need(op, "bias", b, n)?;
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, kernel, ROW_WORKGROUP)?;
    // Unused optional bindings get x (never read: has_w / has_b are 0).
    let wb = w.unwrap_or(x);
    let bb = b.unwrap_or(x);
    let pc = push_words(&[n as u32, rows as u32, eps.to_bits(), w.is_some() as u32, b.is_some() as u32]);
    s.dispatch(&p, &[x.into(), wb.into(), bb.into(), y.into()], &pc, grid(&dev, op, rows as u64)?)?;
    Ok(())
}

/// Records `y = softmax(x * scale + mask)` over rows of `n`; `mask` is
/// `(buffer f32[mask_rows * n], mask_rows)`, row `r` using mask row `r % mask_rows`
/// (additive: 0 keeps, -inf removes). Rows that are all -inf give zeros.
///
/// # Errors
/// As [`rms_norm`].
pub fn softmax(
    s: &mut Stream,
    x: &Buffer,
    mask: Option<(&Buffer, usize)>,
    rows: usize,
    n: usize,
    scale: f32,
    y: &Buffer,
) -> Result<()> {
    need("softmax", "x", x, rows * n)?;
    need("softmax", "y", y, rows * n)?;
    if let Some((m, mr)) = mask {
        if mr == 0 {
            return Err(OpsError::Shape { op: "softmax", reason: "a mask needs at least one row".into() });
        }
        need("softmax", "mask", m, mr * n)?;
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, "softmax", ROW_WORKGROUP)?;
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

/// Shape of a rope application: `x` is f32[bh, t, d]; the first `rot` dims of each
/// vector rotate (even, ≤ d), the rest pass through; position of step `j` is
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
}

/// Records rotary embeddings `y = rope(x)`.
///
/// # Errors
/// [`OpsError::Shape`] for an odd `d` or `rot`, `rot > d`, positions past the tables, or
/// buffers too small; HAL errors.
pub fn rope(
    s: &mut Stream,
    style: RopeStyle,
    x: &Buffer,
    cos: &Buffer,
    sin: &Buffer,
    sh: RopeShape,
    y: &Buffer,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "rope", reason });
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
    let rows = sh.bh * sh.t;
    need("rope", "x", x, rows * sh.d)?;
    need("rope", "y", y, rows * sh.d)?;
    need("rope", "cos", cos, sh.positions * sh.rot / 2)?;
    need("rope", "sin", sin, sh.positions * sh.rot / 2)?;
    if rows == 0 || sh.d == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let name = match style {
        RopeStyle::Neox => "rope.neox",
        RopeStyle::Interleaved => "rope.interleaved",
    };
    let p = pipeline(&dev, name, 64)?;
    let gx = (sh.d / 2).div_ceil(64) as u32;
    let max_y = dev.caps().limits.max_workgroup_count[1] as usize;
    let gy = rows.min(max_y);
    let gz = rows.div_ceil(gy);
    let pc = push_words(&[sh.d as u32, sh.t as u32, rows as u32, sh.rot as u32, sh.pos_offset as u32]);
    s.dispatch(&p, &[x.into(), cos.into(), sin.into(), y.into()], &pc, [gx, gy as u32, gz as u32])?;
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
}

/// Records `y = act(gate) * up` over `n` elements.
///
/// # Errors
/// As [`rms_norm`].
pub fn glu(s: &mut Stream, act: GluActivation, gate: &Buffer, up: &Buffer, n: usize, y: &Buffer) -> Result<()> {
    need("glu", "gate", gate, n)?;
    need("glu", "up", up, n)?;
    need("glu", "y", y, n)?;
    if n == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let name = match act {
        GluActivation::Silu => "glu.silu",
        GluActivation::Gelu => "glu.gelu",
        GluActivation::GeluErf => "glu.gelu_erf",
    };
    let p = pipeline(&dev, name, 256)?;
    let groups = grid(&dev, "glu", (n as u64).div_ceil(256))?;
    s.dispatch(&p, &[gate.into(), up.into(), y.into()], &push_words(&[n as u32]), groups)?;
    Ok(())
}
