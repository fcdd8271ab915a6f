//! Indexing ops of candle's `BackendStorage`: [`select`] (`index_select` and `gather`),
//! [`scatter`] (scatter_set and scatter_add_set) and [`index_add`], on packed row-major
//! operands of any [`Dtype`], with U8, U32 or I64 indices. Kernel:
//! `shader-src/shaders/index.comp`.
//!
//! Each operand is described as `[left, dim, right]`: the product of the dims before the
//! indexed one, the indexed dim, the product of the dims after it (candle's own split).
//! Operands are packed (contiguous) from an element offset; a candle backend packs strided
//! ones first.
//!
//! Out-of-range indices: an index `>= dim` (an I64 index below 0 or past `u32::MAX`
//! included) is skipped (a gathered element becomes 0) and sets a bit in the caller's
//! `status` buffer (`status[0] |= 1 << mode`, [`Mode::bit`]), which the caller reads after
//! the work has run and reports as an error: the GPU never reads or writes out of bounds,
//! and the host learns of the bad index where candle's CPU backend would have failed.
//!
//! Scatters and index_add run one invocation per destination element, which scans the
//! indices: the result does not depend on scheduling, a duplicate index in scatter_set
//! keeps the last source element (as candle's CPU loop does), and sums add in index order
//! (in f32 for F16 / BF16, rounded once; candle's CPU rounds each add). The cost is
//! `numel(dst) * n_idx` index reads.
//!
//! # Errors
//! Every op here fails as follows (each adds its own cases):
//! [`OpsError::UnsupportedDtype`] for a float index dtype; [`OpsError::Shape`] for sizes
//! past `u32::MAX`, an operand reaching past its buffer (the indices as whole words),
//! `y` overlapping `src`, `ids` or `base`, or a `status` buffer under 4 bytes;
//! [`OpsError::MissingFeature`] when the device cannot store `dt`; HAL errors.

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline_spec, push_words, word_end};
use crate::tuning::ELEMENTWISE_WORKGROUP;

/// An indexing op of index.comp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `y[l, i, r] = src[l, ids[i], r]`.
    IndexSelect,
    /// `y[l, i, r] = src[l, ids[l, i, r], r]`.
    Gather,
    /// `dst[l, ids[l, i, r], r] = src[l, i, r]`.
    ScatterSet,
    /// `dst[l, ids[l, i, r], r] += src[l, i, r]`.
    ScatterAdd,
    /// `y = base; y[l, ids[i], r] += src[l, i, r]`.
    IndexAdd,
}

impl Mode {
    /// The bit this op sets in `status[0]` on an out-of-range index.
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// candle's name of the op.
    pub fn name(self) -> &'static str {
        match self {
            Mode::IndexSelect => "index_select",
            Mode::Gather => "gather",
            Mode::ScatterSet => "scatter_set",
            Mode::ScatterAdd => "scatter_add_set",
            Mode::IndexAdd => "index_add",
        }
    }

    /// The op whose bit is set in a status word (the lowest), if any.
    pub fn from_status(word: u32) -> Option<Mode> {
        [Mode::IndexSelect, Mode::Gather, Mode::ScatterSet, Mode::ScatterAdd, Mode::IndexAdd]
            .into_iter()
            .find(|m| word & m.bit() != 0)
    }
}

/// Packed indices: a buffer of `ids_dt` (U8, U32 or I64) elements from element `offset`.
#[derive(Debug, Clone, Copy)]
pub struct Ids<'a> {
    /// The buffer; its size must be a multiple of 4 bytes (indices are read as words).
    pub buffer: &'a Buffer,
    /// The index dtype: U8, U32 or I64.
    pub dtype: Dtype,
    /// Element offset of the first index.
    pub offset: usize,
}

/// A packed operand: buffer and element offset.
#[derive(Debug, Clone, Copy)]
pub struct Packed<'a> {
    /// The buffer.
    pub buffer: &'a Buffer,
    /// Element offset of the first element.
    pub offset: usize,
}

/// The gathering modes: `y[l, i, r] = src[l, ids[i], r]` ([`Mode::IndexSelect`],
/// candle's `index_select`, `ids` is `[n_idx]`) or `y[l, i, r] = src[l, ids[l, i, r], r]`
/// ([`Mode::Gather`], candle's `gather`, `ids` is `[left, n_idx, right]`).
///
/// `src` is `dt [left, d_src, right]`; `y` receives `[left, n_idx, right]` (packed from
/// `y.offset`).
///
/// # Errors
/// [`OpsError::Shape`] for a scattering `mode`; otherwise as the module's Errors section says.
#[allow(clippy::too_many_arguments)]
pub fn select(
    s: &mut Stream,
    mode: Mode,
    dt: Dtype,
    src: Packed<'_>,
    (left, d_src, right): (usize, usize, usize),
    ids: Ids<'_>,
    n_idx: usize,
    y: Packed<'_>,
    status: &Buffer,
) -> Result<()> {
    if !matches!(mode, Mode::IndexSelect | Mode::Gather) {
        return Err(OpsError::Shape { op: mode.name(), reason: "select takes index_select or gather".into() });
    }
    run(s, mode, dt, src, [left, d_src, right, n_idx, 0], ids, y, None, status)
}

/// `dst[l, ids[l, i, r], r] = src[l, i, r]`, or `+=` with `add` (candle's `scatter_set` /
/// `scatter_add_set`), in place
///
/// `dst` is `dt [left, d_dst, right]`; `ids` and `src` are `[left, n_idx, right]`.
///
/// # Errors
/// As the module's Errors section says.
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    s: &mut Stream,
    add: bool,
    dt: Dtype,
    dst: Packed<'_>,
    (left, d_dst, right): (usize, usize, usize),
    ids: Ids<'_>,
    src: Packed<'_>,
    n_idx: usize,
    status: &Buffer,
) -> Result<()> {
    let mode = if add { Mode::ScatterAdd } else { Mode::ScatterSet };
    run(s, mode, dt, src, [left, 0, right, n_idx, d_dst], ids, dst, None, status)
}

/// `y = base; y[l, ids[i], r] += src[l, i, r]` (candle's `index_add`)
///
/// `base` and `y` are `dt [left, d_dst, right]`, `ids` is `[n_idx]`, `src` is `[left,
/// n_idx, right]`.
///
/// # Errors
/// As the module's Errors section says.
#[allow(clippy::too_many_arguments)]
pub fn index_add(
    s: &mut Stream,
    dt: Dtype,
    base: Packed<'_>,
    (left, d_dst, right): (usize, usize, usize),
    ids: Ids<'_>,
    src: Packed<'_>,
    n_idx: usize,
    y: Packed<'_>,
    status: &Buffer,
) -> Result<()> {
    run(s, Mode::IndexAdd, dt, src, [left, 0, right, n_idx, d_dst], ids, y, Some(base), status)
}

/// Validates and records one indexing op. `dims` = `[left, d_src, right, n_idx, d_dst]`.
///
/// # Errors
/// [`OpsError::UnsupportedDtype`] for a float index dtype; [`OpsError::Shape`] for sizes
/// past `u32::MAX`, an operand reaching past its buffer (the indices as whole words),
/// `y` overlapping `src`, `ids` or `base`, or a `status` buffer under 4 bytes;
/// [`OpsError::MissingFeature`] when the device cannot store `dt`; HAL errors.
#[allow(clippy::too_many_arguments)]
fn run(
    s: &mut Stream,
    mode: Mode,
    dt: Dtype,
    src: Packed<'_>,
    dims: [usize; 5],
    ids: Ids<'_>,
    y: Packed<'_>,
    base: Option<Packed<'_>>,
    status: &Buffer,
) -> Result<()> {
    let op = mode.name();
    let bad = |reason: String| OpsError::Shape { op, reason };
    let dev = s.device().clone();
    dt.require(&dev, op)?;
    let ids_code = match ids.dtype {
        Dtype::U8 => 0,
        Dtype::U32 => 1,
        Dtype::I64 => 2,
        other => return Err(OpsError::UnsupportedDtype { op, dtype: other.name(), supported: "u8, u32, i64 indices" }),
    };
    let [left, d_src, right, n_idx, d_dst] = dims;
    let gathers = matches!(mode, Mode::IndexSelect | Mode::Gather);
    let (n_src, n_ids, n_y) = if gathers {
        (left * d_src * right, if mode == Mode::Gather { left * n_idx * right } else { n_idx }, left * n_idx * right)
    } else {
        (left * n_idx * right, if mode == Mode::IndexAdd { n_idx } else { left * n_idx * right }, left * d_dst * right)
    };
    if n_y == 0 {
        return Ok(());
    }
    let fits = |what: &str, b: &Buffer, off: usize, n: usize, es: usize, words: bool| -> Result<u64> {
        let end = ((off + n) * es) as u64;
        if end > b.size() || u32::try_from(off + n).is_err() {
            return Err(bad(format!(
                "{what} (elements {off}..{}) reaches byte {end}, past its buffer of {} bytes",
                off + n,
                b.size()
            )));
        }
        let end = if words { word_end(op, what, b, end)? } else { end };
        Ok(end.max(4))
    };
    let es = dt.size();
    let src_end =
        if n_src == 0 { 4.min(src.buffer.size()) } else { fits("src", src.buffer, src.offset, n_src, es, false)? };
    let ids_end = if n_ids == 0 {
        4.min(ids.buffer.size())
    } else {
        fits("ids", ids.buffer, ids.offset, n_ids, ids.dtype.size(), true)?
    };
    let y_end = fits("y", y.buffer, y.offset, n_y, es, false)?;
    let base_end = match base {
        Some(b) => fits("base", b.buffer, b.offset, n_y, es, false)?,
        None => 0,
    };
    if status.size() < 4 {
        return Err(bad("the status buffer holds less than 4 bytes".into()));
    }
    let y_bytes = (y.offset * es) as u64..y_end;
    let overlaps =
        |b: &Buffer, r: std::ops::Range<u64>| b.id() == y.buffer.id() && r.start < y_bytes.end && y_bytes.start < r.end;
    let src_bytes = (src.offset * es) as u64..src_end;
    let ids_bytes = (ids.offset * ids.dtype.size()) as u64..ids_end;
    if overlaps(src.buffer, src_bytes) || overlaps(ids.buffer, ids_bytes) || overlaps(status, 0..4) {
        return Err(bad("y overlaps src, ids or status in the same buffer".into()));
    }
    if let Some(b) = base {
        if b.buffer.id() == y.buffer.id() && (b.offset != y.offset) {
            let r = (b.offset * es) as u64..base_end;
            if overlaps(b.buffer, r) {
                return Err(bad("y overlaps base other than in place".into()));
            }
        }
    }
    let words = [
        n_y as u32,
        left as u32,
        d_src as u32,
        right as u32,
        n_idx as u32,
        d_dst as u32,
        src.offset as u32,
        ids.offset as u32,
        y.offset as u32,
        base.map_or(0, |b| b.offset as u32),
    ];
    let wg = ELEMENTWISE_WORKGROUP;
    let p = pipeline_spec(&dev, crate::dtype::dtype_kernel!("index.", dt), wg, &[(1, mode as u32), (2, ids_code)])?;
    let base_arg = match base {
        Some(b) => BufferArg::range(b.buffer, 0, base_end),
        None => BufferArg::range(src.buffer, 0, src_end),
    };
    let args = [
        BufferArg::range(src.buffer, 0, src_end),
        BufferArg::range(ids.buffer, 0, ids_end),
        BufferArg::range(y.buffer, 0, y_end),
        base_arg,
        BufferArg::range(status, 0, 4),
    ];
    s.dispatch(&p, &args, &push_words(&words), grid(&dev, op, (n_y as u64).div_ceil(u64::from(wg)))?)?;
    Ok(())
}
