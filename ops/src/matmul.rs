//! Batched float matmul (candle's `BackendStorage::matmul`) for F32, F16, BF16 and F64.
//! Kernel: `shader-src/shaders/matmul.comp`.
//!
//! `y[b, i, j] = sum_k a[b, i, k] * b[b, k, j]`, `y` packed `[batch, m, n]`. Each operand
//! is read through its strides ([`MatLayout`]): a transposed operand (candle's `t()`), a
//! broadcast batch (stride 0) and a row stride larger than the row all run without a
//! copy. Tiles of 64 x 64 outputs per workgroup of 256 invocations, 4 x 4 per invocation,
//! k in steps of 16 through shared memory. Accumulation is in f32 for F32, F16 and BF16
//! (one rounding on store) and f64 for F64; the summation order differs from a CPU gemm,
//! so results agree to rounding.

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{pipeline, push_words};

/// Where the elements of one operand are: element `(b, r, c)` is at `offset + b * batch +
/// r * row + c * col` (elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatLayout {
    /// Element offset of `(0, 0, 0)`.
    pub offset: usize,
    /// Stride between batches (0 broadcasts one matrix).
    pub batch: usize,
    /// Stride between rows.
    pub row: usize,
    /// Stride between columns.
    pub col: usize,
}

/// Output rows and columns per workgroup.
const TILE: usize = 64;

/// Records `y = a b` for `batch` pairs of `a: [m, k]`, `b: [k, n]` (`dt`), `y` packed
/// `[batch, m, n]` from element 0.
///
/// # Errors
/// [`OpsError::UnsupportedDtype`] for an integer `dt`; [`OpsError::Shape`] for an operand
/// reaching past its buffer or past element `u32::MAX`, `y` too small or sharing a buffer
/// with an input, or a grid past the device's limits; [`OpsError::MissingFeature`] when
/// the device cannot store `dt`; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    s: &mut Stream,
    dt: Dtype,
    (batch, m, n, k): (usize, usize, usize, usize),
    a: &Buffer,
    al: MatLayout,
    b: &Buffer,
    bl: MatLayout,
    y: &Buffer,
) -> Result<()> {
    const OP: &str = "matmul";
    let bad = |reason: String| OpsError::Shape { op: OP, reason };
    if !dt.is_float() {
        return Err(OpsError::UnsupportedDtype { op: OP, dtype: dt.name(), supported: "f32, f16, bf16, f64" });
    }
    let dev = s.device().clone();
    dt.require(&dev, OP)?;
    if batch * m * n == 0 {
        return Ok(());
    }
    let es = dt.size() as u64;
    let span = |what: &str, buf: &Buffer, l: MatLayout, rows: usize, cols: usize| -> Result<u64> {
        let last = if rows * cols == 0 {
            l.offset
        } else {
            l.offset + (batch - 1) * l.batch + (rows - 1) * l.row + (cols - 1) * l.col
        };
        if u32::try_from(last).is_err() || (last as u64 + 1) * es > buf.size() {
            return Err(bad(format!(
                "{what} ({rows} x {cols}, {l:?}) reaches element {last}, past its buffer of {} bytes or past 2^32 - 1",
                buf.size()
            )));
        }
        Ok((last as u64 + 1) * es)
    };
    let a_end = span("a", a, al, m, k)?;
    let b_end = span("b", b, bl, k, n)?;
    let y_bytes = (batch * m * n) as u64 * es;
    if u32::try_from(batch * m * n).is_err() || y.size() < y_bytes {
        return Err(bad(format!("y holds {} bytes, needs {batch} x {m} x {n} {}", y.size(), dt.name())));
    }
    if y.id() == a.id() || y.id() == b.id() {
        return Err(bad("y shares a buffer with an input".into()));
    }
    let groups = [n.div_ceil(TILE), m.div_ceil(TILE), batch];
    let lim = dev.caps().limits.max_workgroup_count;
    if groups.iter().zip(lim).any(|(&g, l)| g as u64 > u64::from(l)) {
        return Err(bad(format!("a grid of {groups:?} workgroups exceeds the device's {lim:?}")));
    }
    let words = [
        m as u32,
        n as u32,
        k as u32,
        al.offset as u32,
        al.batch as u32,
        al.row as u32,
        al.col as u32,
        bl.offset as u32,
        bl.batch as u32,
        bl.row as u32,
        bl.col as u32,
    ];
    let p = pipeline(&dev, &format!("matmul.{}", dt.name()), 256)?;
    let args = [BufferArg::range(a, 0, a_end), BufferArg::range(b, 0, b_end), BufferArg::range(y, 0, y_bytes)];
    s.dispatch(&p, &args, &push_words(&words), groups.map(|g| g as u32))?;
    Ok(())
}
