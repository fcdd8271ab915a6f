//! Reductions over any set of dims (candle's `BackendStorage::reduce_op`: sum, min, max,
//! argmin, argmax) on a strided view of any [`Dtype`]. Kernel:
//! `shader-src/shaders/reduce.comp`.
//!
//! The output keeps the reduced dims as size 1 (candle's keepdim shape) and is packed
//! from element 0 of `y`: `y` is `dt` for sum / min / max, U32 for argmin / argmax.
//!
//! Semantics, as candle-core 0.11's CPU backend:
//! - sum accumulates in the dtype's compute type (f32 for F16 and BF16, rounded once at
//!   the end, where candle's CPU adds in half precision; f64 for F64; integers wrap). The
//!   order differs from the CPU's sequential one for long reductions (a tree over the
//!   workgroup), so float sums agree to rounding, not bit for bit;
//! - min / max / argmin / argmax are exact: the first of equal extremes wins, NaN elements
//!   are skipped, and a NaN first element is the result (candle's fold starts from the
//!   first element and replaces it only on a strict comparison). argmin / argmax return
//!   the index along the reduced dims (row-major over them when there are several).
//!
//! Launch: one invocation per output walking the reduced elements in order when there
//! are at most [`SERIAL_MAX`] of them, else one workgroup of [`ELEMENTWISE_WORKGROUP`]
//! invocations per output.

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::elementwise::{View, MAX_RANK};
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline_spec, push_words};
use crate::tuning::ELEMENTWISE_WORKGROUP;

/// Reductions with one invocation per output up to this many reduced elements.
pub const SERIAL_MAX: usize = 64;

/// candle's `ReduceOp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Index (u32) of the first minimum.
    ArgMin,
    /// Index (u32) of the first maximum.
    ArgMax,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::ArgMin, ReduceOp::ArgMax];

    /// candle's name (`sum`, `min`, `max`, `argmin`, `argmax`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::ArgMax => "argmax",
        }
    }

    /// Whether the output is a U32 index.
    pub fn is_arg(self) -> bool {
        matches!(self, ReduceOp::ArgMin | ReduceOp::ArgMax)
    }
}

/// `y = reduce(x)` over `dims` of `shape`
///
/// Records the reduction `op` of `x` (`dt`, a [`View`] over `shape`) over the dims listed
/// in `dims` (any order, each once; empty copies `x`), writing the `numel(shape) /
/// prod(shape[dims])` results packed from element 0 of `y` (U32 for argmin / argmax, else
/// `dt`), row-major over the kept dims. `y` must be another buffer than `x`'s.
///
/// # Errors
/// [`OpsError::Shape`] for a dim out of range or listed twice, an empty reduction (a
/// reduced dim of size 0 with outputs left), a stride count that differs from the rank,
/// `x` reaching past its buffer, more than [`MAX_RANK`] kept or reduced dims after
/// dropping size-1 dims and merging, more than `u32::MAX` elements, `y` too small or
/// `x`'s buffer; [`OpsError::MissingFeature`] when the device cannot store `dt`; HAL
/// errors.
pub fn reduce(
    s: &mut Stream,
    op: ReduceOp,
    dt: Dtype,
    shape: &[usize],
    x: View<'_>,
    dims: &[usize],
    y: &Buffer,
) -> Result<()> {
    let name = op.name();
    let bad = |reason: String| OpsError::Shape { op: name, reason };
    let dev = s.device().clone();
    dt.require(&dev, name)?;
    if x.strides.len() != shape.len() {
        return Err(bad(format!("x has {} strides for the {}-dim shape {shape:?}", x.strides.len(), shape.len())));
    }
    let mut reduced = vec![false; shape.len()];
    for &d in dims {
        if d >= shape.len() || reduced[d] {
            return Err(bad(format!("reduce dims {dims:?} out of range or repeated for shape {shape:?}")));
        }
        reduced[d] = true;
    }
    let numel: usize = shape.iter().product();
    let r_n: usize = shape.iter().zip(&reduced).filter(|(_, &r)| r).map(|(&d, _)| d).product();
    let n_out = numel
        .checked_div(r_n)
        .unwrap_or_else(|| shape.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).product());
    if n_out == 0 {
        return Ok(());
    }
    if r_n == 0 {
        return Err(bad(format!("{name} over dims {dims:?} of shape {shape:?} reduces zero elements")));
    }
    let big = |v: usize| u32::try_from(v).map_err(|_| bad(format!("shape {shape:?} has more than 2^32 - 1 elements")));
    big(numel)?;
    // The last element addressed must be in the buffer.
    let last = shape.iter().zip(x.strides).map(|(&d, &st)| (d - 1) * st).sum::<usize>() + x.offset;
    let elems = x.buffer.size() / dt.size() as u64;
    if last as u64 >= elems {
        return Err(bad(format!("x reaches element {last}, past its buffer of {elems} {} elements", dt.name())));
    }
    big(last)?;
    let merge = |keep: bool| -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for i in 0..shape.len() {
            if reduced[i] == keep || shape[i] == 1 {
                continue;
            }
            let (d, st) = (shape[i], x.strides[i]);
            if let Some(last) = out.last_mut() {
                if st.checked_mul(d) == Some(last.1) {
                    *last = (last.0 * d, st);
                    continue;
                }
            }
            out.push((d, st));
        }
        out
    };
    let kept = merge(true);
    let red = merge(false);
    if kept.len() > MAX_RANK || red.len() > MAX_RANK {
        return Err(bad(format!(
            "{} kept and {} reduced dims after merging exceed the supported {MAX_RANK}",
            kept.len(),
            red.len()
        )));
    }
    let out_dt = if op.is_arg() { Dtype::U32 } else { dt };
    let out_bytes = n_out as u64 * out_dt.size() as u64;
    if y.size() < out_bytes {
        return Err(bad(format!("y holds {} bytes, needs {n_out} {} ({out_bytes} bytes)", y.size(), out_dt.name())));
    }
    if y.id() == x.buffer.id() {
        return Err(bad("y is x's buffer".into()));
    }
    let pad = |v: &[(usize, usize)]| -> ([u32; MAX_RANK], [u32; MAX_RANK]) {
        let mut sh = [1u32; MAX_RANK];
        let mut st = [0u32; MAX_RANK];
        for (j, &(d, s)) in v.iter().enumerate() {
            sh[j] = d as u32;
            st[j] = s as u32;
        }
        (sh, st)
    };
    let (ks, kst) = pad(&kept);
    let (rs, rst) = pad(&red);
    let mut words = vec![n_out as u32, r_n as u32, x.offset as u32, kept.len() as u32, red.len() as u32];
    words.extend(ks);
    words.extend(kst);
    words.extend(rs);
    words.extend(rst);
    let serial = r_n <= SERIAL_MAX;
    let code = match op {
        ReduceOp::Sum => 0,
        ReduceOp::Min | ReduceOp::ArgMin => 1,
        ReduceOp::Max | ReduceOp::ArgMax => 2,
    };
    let kernel = if op.is_arg() {
        crate::dtype::dtype_kernel!("reduce.arg_", dt)
    } else {
        crate::dtype::dtype_kernel!("reduce.", dt)
    };
    let wg = ELEMENTWISE_WORKGROUP;
    let p = pipeline_spec(&dev, kernel, wg, &[(1, code), (2, u32::from(serial))])?;
    let groups = if serial {
        grid(&dev, name, (n_out as u64).div_ceil(u64::from(wg)))?
    } else {
        grid(&dev, name, n_out as u64)?
    };
    let args = [BufferArg::range(x.buffer, 0, (last as u64 + 1) * dt.size() as u64), BufferArg::range(y, 0, out_bytes)];
    s.dispatch(&p, &args, &push_words(&words), groups)?;
    Ok(())
}
