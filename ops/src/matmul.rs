//! Batched float matmul (candle's `BackendStorage::matmul`) for F32, F16, BF16 and F64.
//! Kernels: `shader-src/shaders/matmul.comp`, `matmul_sg.comp`, `matmul_cm.comp`.
//!
//! `y[b, i, j] = sum_k a[b, i, k] * b[b, k, j]`, `y` packed `[batch, m, n]`. Each operand
//! is read through its strides ([`MatLayout`]): a transposed operand (candle's `t()`), a
//! broadcast batch (stride 0) and a row stride larger than the row all run without a
//! copy. Three kernels, chosen by [`tuning::matmul_config`] from the device's
//! capabilities and `m`:
//! - tiled: `tile x tile` outputs per workgroup, 4 x 4 per invocation, k in steps of 16
//!   through shared memory;
//! - subgroup: for a few rows (`m <= 8`), one subgroup per output column, lanes over k,
//!   `subgroupAdd`;
//! - cooperative matrix: F16 / BF16 on 16x16x16 tensor-core tiles, 128 x 128 outputs per
//!   workgroup; for F16 with 16-byte loads and double-buffered tiles (`matmul_cm4.comp`)
//!   where `a` is contiguous along k and `b` along n or k with strides and offsets in
//!   multiples of 8, else (and for BF16) element by element (`matmul_cm.comp`).
//!
//! Accumulation is in f32 for F32, F16 and BF16 (one rounding to the dtype on store) and
//! f64 for F64; the summation order differs from a CPU gemm, so results agree to rounding.

use vkml_hal::{Buffer, BufferArg, Stream};

use vkml_hal::PipelineOptions;

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::push_words;
use crate::tuning::{self, MatmulPath};

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

/// Output rows and columns per workgroup of the cooperative-matrix kernel.
const CM_TILE: usize = 128;

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
    dims: (usize, usize, usize, usize),
    a: &Buffer,
    al: MatLayout,
    b: &Buffer,
    bl: MatLayout,
    y: &Buffer,
) -> Result<()> {
    let path = tuning::matmul_config(s.device().caps(), dt, dims.1);
    matmul_with(s, path, dt, dims, a, al, b, bl, y)
}

/// [`matmul`] with the kernel chosen by the caller (tests and benchmarks compare paths).
///
/// # Errors
/// As [`matmul`]; [`OpsError::Shape`] for a path the device or `dt` cannot run (a
/// cooperative-matrix path without a fitting shape, a subgroup path for F64 or without
/// subgroup arithmetic, a tile that is not a multiple of 4).
#[allow(clippy::too_many_arguments)]
pub fn matmul_with(
    s: &mut Stream,
    path: MatmulPath,
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
    let caps = dev.caps();
    let lim = caps.limits.max_workgroup_count;
    let (name, options, groups, extra) = match path {
        MatmulPath::Tiled { tile } => {
            let invocations = (tile / 4).checked_mul(tile / 4);
            if tile == 0 || tile % 4 != 0 || invocations.is_none_or(|i| i > caps.limits.max_workgroup_invocations) {
                return Err(bad(format!("tile {tile} is not a multiple of 4 within the workgroup limit")));
            }
            let t = tile as usize;
            let options =
                PipelineOptions { spec_constants: vec![(0, (tile / 4) * (tile / 4)), (1, tile)], ..Default::default() };
            (crate::dtype::dtype_kernel!("matmul.", dt), options, [n.div_ceil(t), m.div_ceil(t), batch], None)
        }
        MatmulPath::Subgroup { workgroup } => {
            let sg = &caps.subgroup;
            let largest = sg.max_size.max(sg.size);
            if dt == Dtype::F64
                || !sg.operations.contains(&"arithmetic")
                || largest == 0
                || workgroup == 0
                || workgroup % largest != 0
                || workgroup > caps.limits.max_workgroup_invocations
            {
                return Err(bad(format!(
                    "the subgroup path needs subgroup arithmetic, a workgroup ({workgroup}) that is a multiple of the \
                     largest subgroup ({largest}) within the device's limit, and f32, f16 or bf16 (got {})",
                    dt.name()
                )));
            }
            let rows = m.min(tuning::MATMUL_SUBGROUP_MAX_ROWS);
            let options =
                PipelineOptions { spec_constants: vec![(0, workgroup), (1, rows as u32)], ..Default::default() };
            // Columns per workgroup: at least workgroup / largest subgroups run in it.
            let cols = (batch * n).div_ceil((workgroup / largest) as usize);
            let gx = cols.min(lim[0] as usize);
            let gz = cols.div_ceil(gx);
            (crate::dtype::dtype_kernel!("matmul_sg.", dt), options, [gx, m.div_ceil(rows), gz], Some(batch as u32))
        }
        MatmulPath::CoopMat { require_subgroup_size } => {
            let Some((_, device_requires)) = tuning::float_coopmat_subgroup(caps, dt) else {
                return Err(bad(format!(
                    "the cooperative-matrix path needs a 16x16x16 {} x {} + f32 shape and subgroups of 32; this device \
                     has none",
                    dt.name(),
                    dt.name()
                )));
            };
            // The 16-byte-load kernel where the layouts allow (matmul_cm4.comp's header).
            let al8 = |v: usize| v.is_multiple_of(8);
            let batch_ok = |bs: usize| batch == 1 || al8(bs);
            let a_vec = al.col == 1 && al8(al.row) && al8(al.offset) && batch_ok(al.batch) && al8(k);
            let b_nmajor = bl.col == 1 && al8(bl.row) && al8(n);
            let b_kmajor = bl.row == 1 && al8(bl.col) && al8(k);
            let b_vec = (b_nmajor || b_kmajor) && al8(bl.offset) && batch_ok(bl.batch);
            let (name, spec) = if dt == Dtype::F16 && a_vec && b_vec {
                ("matmul_cm4", vec![(1, u32::from(!b_nmajor))])
            } else {
                (crate::dtype::dtype_kernel!("matmul_cm.", dt), vec![])
            };
            let options = PipelineOptions {
                spec_constants: spec,
                // The kernels assume subgroups of exactly 32: required wherever the device
                // could run another size, whatever the caller asked.
                required_subgroup_size: (require_subgroup_size || device_requires).then_some(32),
                full_subgroups: caps.subgroup.full_subgroups,
            };
            (name, options, [n.div_ceil(CM_TILE), m.div_ceil(CM_TILE), batch], None)
        }
    };
    if groups.iter().zip(lim).any(|(&g, l)| g as u64 > u64::from(l)) {
        return Err(bad(format!("a grid of {groups:?} workgroups exceeds the device's {lim:?}")));
    }
    let mut words = vec![
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
    words.extend(extra);
    let k_ = dev.kernel(name)?;
    let p = dev.pipeline(&k_, &options)?;
    let args = [BufferArg::range(a, 0, a_end), BufferArg::range(b, 0, b_end), BufferArg::range(y, 0, y_bytes)];
    s.dispatch(&p, &args, &push_words(&words), groups.map(|g| g as u32))?;
    Ok(())
}
