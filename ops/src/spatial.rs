//! Pooling and resampling over NCHW images (candle's `avg_pool2d`, `max_pool2d`,
//! `upsample_nearest1d`, `upsample_nearest2d`, `upsample_bilinear2d`). Kernels:
//! `shader-src/shaders/pool.comp`, `shader-src/shaders/resample.comp`.
//!
//! `x: [batch, c, h, w]` is read through its strides; `y: [batch, c, out_h, out_w]` is
//! packed from element 0. The 1-D forms are the 2-D ones with height 1.
//!
//! Semantics, as candle-core 0.11's CPU backend:
//! - pooling has no padding: `out = (in - k) / stride + 1`. avg_pool2d adds the window
//!   in row order rounding to the dtype after each add, then multiplies by `1 / (k_h
//!   k_w)` rounded to the dtype, and max_pool2d takes the first strictly larger element:
//!   both are bit-exact to the CPU (F32, F16, BF16, F64; max_pool2d on U8, U32, I64 too);
//! - nearest: source index `min(in - 1, floor(i * (in / out)))` in f64, as candle, from a
//!   table the host computes (any dtype, exact);
//! - bilinear: PyTorch's `area_pixel_compute_scale` indices and weights, computed on the
//!   host in f64 as candle does; the interpolation runs in f32 (f64 for F64) where candle
//!   uses f64, so F32 agrees to a few ulps and F16 / BF16 to one rounding; to the same
//!   size it is a copy, as candle's.
//!
//! Integer inputs: max_pool2d and the nearest upsamples take every dtype; avg_pool2d and
//! bilinear are float-only here (candle's CPU runs them on integers, truncating the
//! weights to 0).

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::elementwise::{view_span, View};
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline_spec, push_words};
use crate::tuning::ELEMENTWISE_WORKGROUP;

/// A pooling reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Mean of the window (float dtypes).
    Avg,
    /// Maximum of the window.
    Max,
}

impl Pool {
    /// candle's op name.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Avg => "avg_pool2d",
            Pool::Max => "max_pool2d",
        }
    }
}

/// Records `y = pool(x)` for `x: dt [batch, c, h, w]` (`dims`) with window `kernel` and
/// `stride` (`[h, w]`), no padding.
///
/// # Errors
/// [`OpsError::UnsupportedDtype`] for avg over an integer dtype; [`OpsError::Shape`] for a
/// zero window or stride, a window larger than the input, `x` past its buffer or element
/// 2^32 - 1, `y` too small or `x`'s buffer; missing device features for `dt`; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn pool2d(
    s: &mut Stream,
    dt: Dtype,
    pool: Pool,
    dims: [usize; 4],
    x: View<'_>,
    kernel: [usize; 2],
    stride: [usize; 2],
    y: &Buffer,
) -> Result<()> {
    let op = pool.name();
    if pool == Pool::Avg && !dt.is_float() {
        return Err(OpsError::UnsupportedDtype { op, dtype: dt.name(), supported: "f32, f16, bf16, f64" });
    }
    let [b, c, _, _] = dims;
    let [oh, ow] = pool_output(pool, dims, kernel, stride)?;
    let scale = 1.0 / (kernel[0] * kernel[1]) as f64;
    // The scale rounded to the dtype (candle's `T::from_f64`), as f32 bits and f64 bits.
    let scale_t = dt.round_f64(scale);
    let sb = scale_t.to_bits();
    let extra = [(scale_t as f32).to_bits(), sb as u32, (sb >> 32) as u32];
    let code = match pool {
        Pool::Avg => 0,
        Pool::Max => 1,
    };
    launch(
        s,
        op,
        crate::dtype::dtype_kernel!("pool.", dt),
        dt,
        code,
        [b, c, oh, ow],
        dims,
        x,
        &[kernel[0], kernel[1], stride[0], stride[1]],
        &extra,
        None,
        y,
    )
}

/// The output height and width of a pooling window `kernel` with `stride` over `x: [b, c,
/// h, w]` (`dims`): `(in - k) / stride + 1` per axis, no padding (candle's).
///
/// # Errors
/// [`OpsError::Shape`] (naming `pool`'s op) for a zero window or stride, or a window
/// larger than the input.
pub fn pool_output(pool: Pool, dims: [usize; 4], kernel: [usize; 2], stride: [usize; 2]) -> Result<[usize; 2]> {
    let bad = |reason: String| OpsError::Shape { op: pool.name(), reason };
    let [_, _, h, w] = dims;
    if kernel.contains(&0) || stride.contains(&0) {
        return Err(bad(format!("kernel {kernel:?} and stride {stride:?} must be at least 1")));
    }
    if kernel[0] > h || kernel[1] > w {
        return Err(bad(format!("the window {kernel:?} is larger than the input {h} x {w}")));
    }
    Ok([(h - kernel[0]) / stride[0] + 1, (w - kernel[1]) / stride[1] + 1])
}

/// How [`upsample2d`] samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resample {
    /// Nearest neighbour (candle's `upsample_nearest1d` / `upsample_nearest2d`).
    Nearest,
    /// Bilinear (candle's `upsample_bilinear2d`, float dtypes): `align_corners` and the
    /// optional scale factors as PyTorch's `interpolate`.
    Bilinear {
        /// Align the corner pixels' centres.
        align_corners: bool,
        /// Height scale factor the caller asked for (used instead of `in / out` when not
        /// aligning corners).
        scale_h: Option<f64>,
        /// Width scale factor, likewise.
        scale_w: Option<f64>,
    },
}

/// Records `y = resample(x)` for `x: dt [batch, c, h, w]` (`dims`) to `out = [out_h,
/// out_w]`.
///
/// # Errors
/// [`OpsError::UnsupportedDtype`] for bilinear over an integer dtype; [`OpsError::Shape`]
/// for an empty input with a non-empty output, `x` past its buffer or element 2^32 - 1,
/// `y` too small or `x`'s buffer; missing device features for `dt`; HAL errors (the
/// index table is a small upload).
pub fn upsample2d(
    s: &mut Stream,
    dt: Dtype,
    mode: Resample,
    dims: [usize; 4],
    x: View<'_>,
    out: [usize; 2],
    y: &Buffer,
) -> Result<()> {
    let op = match mode {
        Resample::Nearest => "upsample_nearest2d",
        Resample::Bilinear { .. } => "upsample_bilinear2d",
    };
    if matches!(mode, Resample::Bilinear { .. }) && !dt.is_float() {
        return Err(OpsError::UnsupportedDtype { op, dtype: dt.name(), supported: "f32, f16, bf16, f64" });
    }
    let [b, c, h, w] = dims;
    let [oh, ow] = out;
    if b * c * oh * ow == 0 {
        return Ok(());
    }
    // candle returns a bilinear resample to the same size unchanged, whatever the scale
    // factors: the identity table of the nearest kernel copies it.
    let mode = if [h, w] == out { Resample::Nearest } else { mode };
    if h == 0 || w == 0 {
        return Err(OpsError::Shape { op, reason: format!("cannot resample an empty {h} x {w} input to {oh} x {ow}") });
    }
    let mut tab: Vec<u32> = Vec::with_capacity(4 * (oh + ow));
    for (n_in, n_out, scale) in [(h, oh, 0), (w, ow, 1)] {
        for (i0, i1, wt) in axis_table(mode, n_in, n_out, scale) {
            let bits = wt.to_bits();
            let lo = if dt == Dtype::F64 { bits as u32 } else { (wt as f32).to_bits() };
            tab.extend([i0 as u32, i1 as u32, lo, (bits >> 32) as u32]);
        }
    }
    let table = s.device().upload(&tab)?;
    let code = u32::from(matches!(mode, Resample::Bilinear { .. }));
    launch(
        s,
        op,
        crate::dtype::dtype_kernel!("resample.", dt),
        dt,
        code,
        [b, c, oh, ow],
        dims,
        x,
        &[],
        &[],
        Some(&table),
        y,
    )
}

/// Per output position along one axis: `(i0, i1, weight of i1)`, candle-core 0.11's CPU
/// formulas (`UpsampleNearest*`, `UpsampleBilinear2D`). `axis` 0 = h, 1 = w (which scale
/// factor applies).
fn axis_table(mode: Resample, n_in: usize, n_out: usize, axis: usize) -> Vec<(usize, usize, f64)> {
    match mode {
        Resample::Nearest => {
            let scale = n_in as f64 / n_out as f64;
            (0..n_out)
                .map(|i| {
                    let j = usize::min(n_in - 1, (i as f64 * scale) as usize);
                    (j, j, 0.0)
                })
                .collect()
        }
        Resample::Bilinear { align_corners, scale_h, scale_w } => {
            let factor = if axis == 0 { scale_h } else { scale_w };
            let scale = if align_corners {
                if n_out > 1 {
                    (n_in - 1) as f64 / (n_out - 1) as f64
                } else {
                    0.0
                }
            } else if let Some(f) = factor {
                1.0 / f
            } else {
                n_in as f64 / n_out as f64
            };
            (0..n_out)
                .map(|i| {
                    let src = if align_corners { scale * i as f64 } else { scale * (i as f64 + 0.5) - 0.5 };
                    let src = src.max(0.0);
                    let i0 = (src.floor() as usize).min(n_in - 1);
                    let i1 = (i0 + 1).min(n_in - 1);
                    (i0, i1, (src - i0 as f64).clamp(0.0, 1.0))
                })
                .collect()
        }
    }
}

/// Validates and records one pool / resample launch: push constants `n, c, out_h, out_w`,
/// then `geom` (pool: window and stride), `x`'s offset and strides, then `extra`.
#[allow(clippy::too_many_arguments)]
fn launch(
    s: &mut Stream,
    op: &'static str,
    kernel: &'static str,
    dt: Dtype,
    code: u32,
    yd: [usize; 4],
    xd: [usize; 4],
    x: View<'_>,
    geom: &[usize],
    extra: &[u32],
    table: Option<&Buffer>,
    y: &Buffer,
) -> Result<()> {
    let bad = |reason: String| OpsError::Shape { op, reason };
    let dev = s.device().clone();
    dt.require(&dev, op)?;
    let n = yd.iter().product::<usize>();
    if n == 0 {
        return Ok(());
    }
    let (_, x_end) = view_span(op, "x", &xd, &x, dt)?;
    let es = dt.size() as u64;
    let y_bytes = n as u64 * es;
    if y.size() < y_bytes {
        return Err(bad(format!("y holds {} bytes, needs {yd:?} {}", y.size(), dt.name())));
    }
    if y.id() == x.buffer.id() {
        return Err(bad("y shares a buffer with x".into()));
    }
    let mut words: Vec<u32> = [n, yd[1], yd[2], yd[3]]
        .into_iter()
        .chain(geom.iter().copied())
        .chain([x.offset])
        .chain(x.strides.iter().copied())
        .map(|v| u32::try_from(v).map_err(|_| bad(format!("size or stride {v} exceeds u32"))))
        .collect::<Result<_>>()?;
    words.extend_from_slice(extra);
    let wg = ELEMENTWISE_WORKGROUP;
    let groups = grid(&dev, op, (n as u64).div_ceil(u64::from(wg)))?;
    let pl = pipeline_spec(&dev, kernel, wg, &[(1, code)])?;
    let mut args = vec![BufferArg::range(x.buffer, 0, x_end)];
    if let Some(t) = table {
        args.push(BufferArg::range(t, 0, t.size()));
    }
    args.push(BufferArg::range(y, 0, y_bytes));
    s.dispatch(&pl, &args, &push_words(&words), groups)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nearest indices as candle's f64 formula, including the case where `i * (in / out)`
    /// lands exactly on an integer.
    #[test]
    fn nearest_table() {
        let t = axis_table(Resample::Nearest, 3, 9, 0);
        let idx: Vec<usize> = t.iter().map(|e| e.0).collect();
        let want: Vec<usize> = (0..9).map(|i| usize::min(2, (i as f64 * (3.0 / 9.0)) as usize)).collect();
        assert_eq!(idx, want);
        assert_eq!(axis_table(Resample::Nearest, 4, 2, 0).iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 2]);
    }

    /// Bilinear taps against PyTorch's documented behaviour: doubling 2 pixels without
    /// aligned corners samples at -0.25 (clamped to 0), 0.25, 0.75, 1.25; with aligned
    /// corners at 0, 1/3, 2/3, 1.
    #[test]
    fn bilinear_table() {
        let m = Resample::Bilinear { align_corners: false, scale_h: None, scale_w: None };
        let t = axis_table(m, 2, 4, 0);
        assert_eq!(t, vec![(0, 1, 0.0), (0, 1, 0.25), (0, 1, 0.75), (1, 1, 0.25)]);
        let m = Resample::Bilinear { align_corners: true, scale_h: None, scale_w: None };
        let t = axis_table(m, 2, 4, 1);
        assert_eq!(t[0], (0, 1, 0.0));
        assert!((t[1].2 - 1.0 / 3.0).abs() < 1e-15 && (t[2].2 - 2.0 / 3.0).abs() < 1e-15);
        assert_eq!((t[3].0, t[3].1), (1, 1));
    }
}
