//! candle-nn's `rotary_emb` on Vulkan tensors: `rope` (pairs `(i, i + d/2)`), `rope_i`
//! (pairs `(2i, 2i + 1)`) over `[b, h, t, d]`, and `rope_thd` (`rope` over `[b, t, h, d]`),
//! with `cos`, `sin` of `[t', d/2]`, `t' >= t` (the first `t` rows used), or per batch
//! `[b, t, d/2]` (one dispatch per batch), kernel `rope.*` (f32 arithmetic).

use vkml_ops::nn::{RopeShape, RopeStyle};

use super::{map_rows, CResult, VTensor};

/// The rotation of `xs: [b, h, t, d]` (`token_major`: `[t, b h, d]` as the kernel reads
/// it) by `cos`, `sin`: `[t', d/2]`, or `[b, t, d/2]` (each batch by its own tables).
fn rotate(
    xs: &VTensor,
    cos: &VTensor,
    sin: &VTensor,
    style: RopeStyle,
    token_major: bool,
    op: &'static str,
) -> CResult<VTensor> {
    let &[b, h, t, d] = xs.dims() else { candle_core::bail!("{op}: x of shape {:?}, not 4-D", xs.dims()) };
    super::on_device_of(xs, cos, "cos", op)?;
    super::on_device_of(xs, sin, "sin", op)?;
    if let (&[cb, ct, ch], &[sb, st, sh]) = (cos.dims(), sin.dims()) {
        // Per-batch tables (candle-nn's `[b, t, d/2]`): each batch by its own rows.
        if (cb, ct, ch) != (b, t, d / 2) || (sb, st, sh) != (b, t, d / 2) || d % 2 != 0 {
            candle_core::bail!(
                "{op}: per-batch cos {:?} and sin {:?} for x {:?}: they must be [{b}, {t}, {}]",
                cos.dims(),
                sin.dims(),
                xs.dims(),
                d / 2
            )
        }
        let row = |c: &VTensor, i: usize| c.narrow(0, i, 1)?.reshape((t, d / 2));
        let ys = (0..b)
            .map(|i| rotate(&xs.narrow(0, i, 1)?, &row(cos, i)?, &row(sin, i)?, style, token_major, op))
            .collect::<CResult<Vec<_>>>()?;
        return VTensor::cat(&ys.iter().collect::<Vec<_>>(), 0);
    }
    let bh = b * h;
    let tables = |c: &VTensor, what: &str| -> CResult<VTensor> {
        match c.dims() {
            &[rows, half] if half * 2 == d && rows >= t => {}
            other => candle_core::bail!(
                "{op}: {what} of shape {other:?} for x {:?}: it must be [>= {t}, {}] or [{b}, {t}, {}]",
                xs.dims(),
                d / 2,
                d / 2
            ),
        }
        super::f32_packed(c)
    };
    let (cs, sn) = (tables(cos, "cos")?, tables(sin, "sin")?);
    let sh = RopeShape { bh, t, d, rot: d, pos_offset: 0, positions: cos.dims()[0], token_major };
    let (cb, sb) = (cs.storage().buffer(), sn.storage().buffer());
    map_rows(xs, op, |s, dt, x, y| vkml_ops::nn::rope(s, dt, style, x, cb, sb, sh, y))
}

/// candle-nn's `rotary_emb::rope`: `xs: [b, h, t, d]`, dims `i` and `i + d/2` rotated by
/// `cos`, `sin: [t', d/2]` (rows `0..t`) or per batch `[b, t, d/2]`.
///
/// # Errors
/// Shapes that do not fit, dtypes other than F32, F16, BF16, F64; device errors.
pub fn rope(xs: &VTensor, cos: &VTensor, sin: &VTensor) -> CResult<VTensor> {
    rotate(xs, cos, sin, RopeStyle::Neox, false, "rope")
}

/// candle-nn's `rotary_emb::rope_i`: as [`rope`] with dims `2i` and `2i + 1` paired.
///
/// # Errors
/// As [`rope`].
pub fn rope_i(xs: &VTensor, cos: &VTensor, sin: &VTensor) -> CResult<VTensor> {
    rotate(xs, cos, sin, RopeStyle::Interleaved, false, "rope_i")
}

/// candle-nn's `rotary_emb::rope_thd`: [`rope`] of `xs: [b, t, h, d]`. One batch is read as
/// it lies (`[t, h, d]`, token-major); several go through a `[b, h, t, d]` copy and back.
///
/// # Errors
/// As [`rope`].
pub fn rope_thd(xs: &VTensor, cos: &VTensor, sin: &VTensor) -> CResult<VTensor> {
    let &[b, t, h, d] = xs.dims() else { candle_core::bail!("rope_thd: x of shape {:?}, not 4-D", xs.dims()) };
    if b == 1 {
        // [1, t, h, d] is [t, h, d]: the kernel's token-major layout with b h = h heads.
        let y = rotate(&xs.reshape((1, h, t, d))?, cos, sin, RopeStyle::Neox, true, "rope_thd")?;
        return y.reshape((1, t, h, d));
    }
    let bhtd = xs.transpose(1, 2)?.contiguous()?;
    rope(&bhtd, cos, sin)?.transpose(1, 2)?.contiguous()
}
