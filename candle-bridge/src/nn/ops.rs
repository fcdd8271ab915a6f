//! candle-nn's `ops` on Vulkan tensors: `softmax_last_dim`, `rms_norm`, `layer_norm`,
//! `sigmoid` (same names, arguments and results; f32 arithmetic).

use candle_core::Layout;

use super::{f32_weight, map_rows, CResult, VTensor};

/// The softmax over the last dim (candle-nn's `ops::softmax_last_dim`): `exp(x - max) / sum`
/// per row, kernel `softmax` (f32 arithmetic).
///
/// # Errors
/// A scalar `x`; a dtype other than F32, F16, BF16, F64; device errors.
pub fn softmax_last_dim(xs: &VTensor) -> CResult<VTensor> {
    let Some(&n) = xs.dims().last() else { candle_core::bail!("softmax_last_dim of a scalar") };
    let rows = xs.elem_count() / n.max(1);
    map_rows(xs, "softmax_last_dim", |s, dt, x, y| vkml_ops::nn::softmax(s, dt, x, None, rows, n, 1.0, y))
}

/// `x / sqrt(mean(x²) + eps) * alpha` over the last dim (candle-nn's `ops::rms_norm`;
/// `alpha: [n]`), kernel `norm.rms*`.
///
/// # Errors
/// `alpha` not `[n]`; dtypes as [`softmax_last_dim`]; device errors.
pub fn rms_norm(xs: &VTensor, alpha: &VTensor, eps: f32) -> CResult<VTensor> {
    let Some(&n) = xs.dims().last() else { candle_core::bail!("rms_norm of a scalar") };
    let w = f32_weight(xs, alpha, n, "alpha", "rms_norm")?;
    let (rows, wb) = (xs.elem_count() / n.max(1), w.storage().buffer());
    map_rows(xs, "rms_norm", |s, dt, x, y| vkml_ops::nn::rms_norm(s, dt, x, Some(wb), rows, n, eps, y))
}

/// `(x - mean) / sqrt(var + eps) * alpha + beta` over the last dim, biased variance
/// (candle-nn's `ops::layer_norm`; `alpha`, `beta`: `[n]`), kernel `norm.layer*`.
///
/// # Errors
/// `alpha` or `beta` not `[n]`; dtypes as [`softmax_last_dim`]; device errors.
pub fn layer_norm(xs: &VTensor, alpha: &VTensor, beta: &VTensor, eps: f32) -> CResult<VTensor> {
    let Some(&n) = xs.dims().last() else { candle_core::bail!("layer_norm of a scalar") };
    let w = f32_weight(xs, alpha, n, "alpha", "layer_norm")?;
    let b = f32_weight(xs, beta, n, "beta", "layer_norm")?;
    let (rows, wb, bb) = (xs.elem_count() / n.max(1), w.storage().buffer(), b.storage().buffer());
    map_rows(xs, "layer_norm", |s, dt, x, y| vkml_ops::nn::layer_norm(s, dt, x, Some(wb), Some(bb), rows, n, eps, y))
}

/// `x / (1 + exp(-x))` element-wise (candle-nn's `ops::silu`: candle's `Tensor::silu`,
/// kernel `unary.*`).
///
/// # Errors
/// As the front's `silu`.
pub fn silu(xs: &VTensor) -> CResult<VTensor> {
    xs.silu()
}

/// `1 / (1 + exp(-x))` element-wise (candle-nn's `ops::sigmoid`), kernel `unary.*` (f32
/// arithmetic for f32, f16, bf16), strided `x` read in place.
///
/// # Errors
/// A dtype other than F32, F16, BF16; device errors.
pub fn sigmoid(xs: &VTensor) -> CResult<VTensor> {
    let dt = crate::vulkan::ops_dtype(xs.dtype(), "sigmoid")?;
    let st = xs.storage();
    let l = xs.layout();
    let view = vkml_ops::elementwise::View { buffer: st.buffer(), offset: l.start_offset(), strides: l.stride() };
    let y = st.map(&Layout::contiguous(xs.shape().clone()), xs.dtype(), |s, y| {
        vkml_ops::elementwise::sigmoid(s, dt, xs.dims(), view, y)
    })?;
    Ok(VTensor::from_storage(y, xs.shape().clone()))
}
