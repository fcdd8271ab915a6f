//! Convolutions (candle's `conv1d`, `conv2d`, `conv_transpose1d`, `conv_transpose2d`;
//! PyTorch's `Conv2d` / `ConvTranspose2d` with one group) for F32, F16, BF16 and F64.
//! Kernel: `shader-src/shaders/conv.comp`.
//!
//! Shapes (NCHW): `x: [batch, c_in, in_h, in_w]`; `w: [c_out, c_in, k_h, k_w]`, or
//! `[c_in, c_out, k_h, k_w]` when transposed (PyTorch's weight layouts); `y: [batch,
//! c_out, out_h, out_w]` packed. A 1-D convolution is the 2-D one with `in_h = k_h = 1`
//! and zero padding on h ([`ConvParams::conv1d`]). Both operands are read through their
//! strides, so permuted or narrowed inputs need no copy.
//!
//! Direct: one invocation per output element, summing `c_in k_h k_w` products in f32 (f64
//! for F64), rounded once to the dtype. The order differs from candle's CPU (im2col then
//! gemm), so results agree to rounding. Groups are candle's `Tensor`-level loop over
//! channel blocks and do not reach the backend.

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::elementwise::{view_span, View};
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline_spec, push_words};
use crate::tuning::ELEMENTWISE_WORKGROUP;

/// The geometry of one convolution; `[h, w]` pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvParams {
    /// Batch size.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Input height and width.
    pub input: [usize; 2],
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Zero padding on each side (forward), or the amount trimmed from each side of the
    /// output (transposed), as in PyTorch.
    pub padding: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Dilation of the kernel taps.
    pub dilation: [usize; 2],
    /// Extra rows / columns at the end of a transposed convolution's output (must be 0
    /// for the forward one).
    pub output_padding: [usize; 2],
    /// A transposed convolution.
    pub transposed: bool,
}

impl ConvParams {
    /// A 1-D convolution over `l_in` with kernel `k`, as the 2-D one with height 1.
    #[allow(clippy::too_many_arguments)]
    pub fn conv1d(
        batch: usize,
        c_in: usize,
        c_out: usize,
        l_in: usize,
        k: usize,
        padding: usize,
        stride: usize,
        dilation: usize,
        output_padding: usize,
        transposed: bool,
    ) -> ConvParams {
        ConvParams {
            batch,
            c_in,
            c_out,
            input: [1, l_in],
            kernel: [1, k],
            padding: [0, padding],
            stride: [1, stride],
            dilation: [1, dilation],
            output_padding: [0, output_padding],
            transposed,
        }
    }

    /// A 2-D convolution with the same padding, stride, dilation and output padding on
    /// both axes (candle's `ParamsConv2D` / `ParamsConvTranspose2D`).
    #[allow(clippy::too_many_arguments)]
    pub fn conv2d(
        batch: usize,
        c_in: usize,
        c_out: usize,
        input: [usize; 2],
        kernel: [usize; 2],
        padding: usize,
        stride: usize,
        dilation: usize,
        output_padding: usize,
        transposed: bool,
    ) -> ConvParams {
        ConvParams {
            batch,
            c_in,
            c_out,
            input,
            kernel,
            padding: [padding; 2],
            stride: [stride; 2],
            dilation: [dilation; 2],
            output_padding: [output_padding; 2],
            transposed,
        }
    }

    /// Output height and width: `(in + 2 pad - dil (k - 1) - 1) / stride + 1` forward,
    /// `(in - 1) stride - 2 pad + dil (k - 1) + output_padding + 1` transposed (PyTorch).
    ///
    /// # Errors
    /// [`OpsError::Shape`] for a zero stride, dilation or kernel size, a kernel that does
    /// not fit the padded input, an empty transposed output, or output padding on a
    /// forward convolution.
    pub fn output(&self) -> Result<[usize; 2]> {
        let op = self.name();
        let bad = |reason: String| OpsError::Shape { op, reason };
        let mut out = [0; 2];
        for (a, o) in out.iter_mut().enumerate() {
            let (i, k, p, s, d, op_) = (
                self.input[a],
                self.kernel[a],
                self.padding[a],
                self.stride[a],
                self.dilation[a],
                self.output_padding[a],
            );
            if s == 0 || d == 0 || k == 0 {
                return Err(bad(format!("stride {s}, dilation {d} and kernel size {k} must all be at least 1")));
            }
            let span = d * (k - 1) + 1;
            *o = if self.transposed {
                let full = i.saturating_sub(1) * s + span + op_;
                if i == 0 || full <= 2 * p {
                    return Err(bad(format!("input {i} with padding {p} leaves no output")));
                }
                full - 2 * p
            } else {
                if op_ != 0 {
                    return Err(bad("a forward convolution has no output padding".into()));
                }
                if i + 2 * p < span {
                    return Err(bad(format!(
                        "the kernel spans {span} (size {k}, dilation {d}), more than the padded input {}",
                        i + 2 * p
                    )));
                }
                (i + 2 * p - span) / s + 1
            };
        }
        Ok(out)
    }

    /// `y`'s shape `[batch, c_out, out_h, out_w]`.
    ///
    /// # Errors
    /// As [`ConvParams::output`].
    pub fn y_dims(&self) -> Result<[usize; 4]> {
        let [oh, ow] = self.output()?;
        Ok([self.batch, self.c_out, oh, ow])
    }

    /// `w`'s shape: `[c_out, c_in, k_h, k_w]`, or `[c_in, c_out, k_h, k_w]` transposed.
    pub fn w_dims(&self) -> [usize; 4] {
        let (a, b) = if self.transposed { (self.c_in, self.c_out) } else { (self.c_out, self.c_in) };
        [a, b, self.kernel[0], self.kernel[1]]
    }

    fn name(&self) -> &'static str {
        if self.transposed {
            "conv_transpose2d"
        } else {
            "conv2d"
        }
    }
}

/// Records `y = conv(x, w)` (or the transposed convolution) for `p`; `x` and `w` are 4-D
/// views of `dt` (4 strides each, in elements), `y` is packed from element 0.
///
/// # Errors
/// [`OpsError::UnsupportedDtype`] for an integer `dt`; [`OpsError::Shape`] for bad
/// geometry ([`ConvParams::output`]), an operand past its buffer or past element 2^32 -
/// 1, `y` too small or sharing a buffer with an input, sizes past u32; missing device
/// features for `dt`; HAL errors.
pub fn conv(s: &mut Stream, dt: Dtype, p: &ConvParams, x: View<'_>, w: View<'_>, y: &Buffer) -> Result<()> {
    let op = p.name();
    let bad = |reason: String| OpsError::Shape { op, reason };
    if !dt.is_float() {
        return Err(OpsError::UnsupportedDtype { op, dtype: dt.name(), supported: "f32, f16, bf16, f64" });
    }
    let dev = s.device().clone();
    dt.require(&dev, op)?;
    let yd = p.y_dims()?;
    let n = yd.iter().product::<usize>();
    if n == 0 {
        return Ok(());
    }
    let xd = [p.batch, p.c_in, p.input[0], p.input[1]];
    let wd = p.w_dims();
    let es = dt.size() as u64;
    let (x_end, w_end) = if p.c_in == 0 {
        (es.min(x.buffer.size()), es.min(w.buffer.size()))
    } else {
        (view_span(op, "x", &xd, &x, dt)?.1, view_span(op, "w", &wd, &w, dt)?.1)
    };
    let y_bytes = n as u64 * es;
    if y.size() < y_bytes {
        return Err(bad(format!("y holds {} bytes, needs {yd:?} {}", y.size(), dt.name())));
    }
    if y.id() == x.buffer.id() || y.id() == w.buffer.id() {
        return Err(bad("y shares a buffer with an input".into()));
    }
    let words: Vec<u32> = [n, p.c_in, p.c_out, p.input[0], p.input[1], yd[2], yd[3], p.kernel[0], p.kernel[1]]
        .into_iter()
        .chain(p.padding)
        .chain(p.stride)
        .chain(p.dilation)
        .chain([x.offset])
        .chain(x.strides.iter().copied())
        .chain([w.offset])
        .chain(w.strides.iter().copied())
        .map(|v| u32::try_from(v).map_err(|_| bad(format!("size or stride {v} exceeds u32"))))
        .collect::<Result<_>>()?;
    let wg = ELEMENTWISE_WORKGROUP;
    let groups = grid(&dev, op, (n as u64).div_ceil(u64::from(wg)))?;
    let pl = pipeline_spec(&dev, crate::dtype::dtype_kernel!("conv.", dt), wg, &[(1, u32::from(p.transposed))])?;
    let args =
        [BufferArg::range(x.buffer, 0, x_end), BufferArg::range(w.buffer, 0, w_end), BufferArg::range(y, 0, y_bytes)];
    s.dispatch(&pl, &args, &push_words(&words), groups)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p2(input: usize, k: usize, pad: usize, stride: usize, dil: usize, op: usize, tr: bool) -> ConvParams {
        ConvParams::conv1d(1, 1, 1, input, k, pad, stride, dil, op, tr)
    }

    /// Output sizes against PyTorch's formulas, worked by hand for a few cases.
    #[test]
    fn output_sizes() {
        // Conv1d(k=3, pad=1, stride=2) over 10: (10 + 2 - 2 - 1) / 2 + 1 = 5.
        assert_eq!(p2(10, 3, 1, 2, 1, 0, false).output().unwrap(), [1, 5]);
        // Dilation 2, kernel 3 spans 5: (7 - 5) / 1 + 1 = 3.
        assert_eq!(p2(7, 3, 0, 1, 2, 0, false).output().unwrap(), [1, 3]);
        // ConvTranspose1d(k=3, stride=2, pad=1, output_padding=1) over 5: 4*2 - 2 + 2 + 1 + 1 = 10.
        assert_eq!(p2(5, 3, 1, 2, 1, 1, true).output().unwrap(), [1, 10]);
        assert!(p2(2, 3, 0, 1, 1, 0, false).output().is_err(), "kernel wider than the input");
        assert!(p2(4, 3, 0, 0, 1, 0, false).output().is_err(), "stride 0");
        assert!(p2(4, 3, 0, 1, 1, 1, false).output().is_err(), "output padding on a forward conv");
        assert!(p2(1, 1, 1, 1, 1, 0, true).output().is_err(), "padding trims everything");
    }
}
