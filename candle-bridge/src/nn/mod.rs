//! candle-nn's ops that live outside `BackendStorage`, on Vulkan tensors, under candle-nn's
//! module and function names: [`ops`] (`softmax_last_dim`, `rms_norm`, `layer_norm`,
//! `sigmoid`, `silu`), [`rotary_emb`] (`rope`, `rope_i`, `rope_thd`) and [`kv_cache`]
//! (`ConcatKvCache`). Each is one of vkml-ops' kernels (`nn::softmax`, `nn::rms_norm`,
//! `nn::layer_norm`, `elementwise::sigmoid`, `nn::rope`) over a packed input, computed in
//! f32 (f16 inputs are read and written as f16; bf16 ones go through f32 copies), so a
//! candle model ported to the front keeps its code. The model layer's fused model ops stay
//! in vkml-models.

pub mod kv_cache;
pub mod ops;
pub mod rotary_emb;

use candle_core::DType;

use crate::front::Tensor;
use crate::vulkan::VulkanStorage;

type CResult<T> = candle_core::Result<T>;
type VTensor = Tensor<VulkanStorage>;

/// The kernel dtype of `x` (F32 or F16) and `x` in it: a bf16 (or f64) `x` as an f32 copy,
/// whose result [`back`] returns to `x`'s dtype.
fn kernel_input(x: &VTensor, op: &'static str) -> CResult<(vkml_ops::Dtype, VTensor)> {
    match x.dtype() {
        DType::F32 => Ok((vkml_ops::Dtype::F32, x.clone())),
        DType::F16 => Ok((vkml_ops::Dtype::F16, x.clone())),
        DType::BF16 | DType::F64 => Ok((vkml_ops::Dtype::F32, x.to_dtype(DType::F32)?)),
        other => Err(candle_core::Error::UnsupportedDTypeForOp(other, op)),
    }
}

/// `y` (the kernel's dtype) in `dtype`.
fn back(y: VTensor, dtype: DType) -> CResult<VTensor> {
    if y.dtype() == dtype {
        Ok(y)
    } else {
        y.to_dtype(dtype)
    }
}

/// `y = f(x)` for `xs` of `[.., n]`: `f` records the kernel on the stream, given the kernel
/// dtype ([`kernel_input`]), `x` packed from element 0, and `y` of the same shape in that
/// dtype; the result in `xs`'s dtype ([`back`]). `x` (and its packed view) live until `f`
/// has recorded.
fn map_rows(
    xs: &VTensor,
    op: &'static str,
    f: impl FnOnce(&mut vkml_hal::Stream, vkml_ops::Dtype, &vkml_hal::Buffer, &vkml_hal::Buffer) -> vkml_ops::Result<()>,
) -> CResult<VTensor> {
    let (dt, x) = kernel_input(xs, op)?;
    let p = x.storage().packed(x.layout())?;
    let l = candle_core::Layout::contiguous(x.shape().clone());
    let y = p.map(&l, x.dtype(), |s, y| f(s, dt, p.buffer(), y))?;
    back(VTensor::from_storage(y, x.shape().clone()), xs.dtype())
}

/// `w` as the packed f32 the kernels take for a weight, checked to be `[n]` and on `x`'s
/// device ([`f32_packed`]).
fn f32_weight(x: &VTensor, w: &VTensor, n: usize, what: &str, op: &str) -> CResult<VTensor> {
    if w.dims() != [n] {
        candle_core::bail!("{op}: {what} of shape {:?} for rows of {n}", w.dims())
    }
    on_device_of(x, w, what, op)?;
    f32_packed(w)
}

/// An error naming `op` and `what` where `t` is on another Vulkan device than `x`.
fn on_device_of(x: &VTensor, t: &VTensor, what: &str, op: &str) -> CResult<()> {
    use candle_core::backend::BackendDevice;
    if !x.device().same_device(t.device()) {
        candle_core::bail!("{op}: {what} is on another Vulkan device than x (move it with to_device first)")
    }
    Ok(())
}

/// `t` as f32 packed from element 0, in a tensor that holds its buffer (a packed view of a
/// temporary would leave the buffer to the recycler when the temporary drops, before the
/// kernel reading it is recorded).
fn f32_packed(t: &VTensor) -> CResult<VTensor> {
    let t = if t.dtype() == DType::F32 { t.clone() } else { t.to_dtype(DType::F32)? };
    if t.layout().is_contiguous() && t.layout().start_offset() == 0 {
        Ok(t)
    } else {
        // A copy from element 0 (`contiguous` would keep a contiguous view's offset).
        Ok(VTensor::from_storage(t.storage().packed(t.layout())?, t.shape().clone()))
    }
}
