//! candle-nn's ops that live outside `BackendStorage`, on Vulkan tensors, under candle-nn's
//! module and function names: [`ops`] (`softmax_last_dim`, `rms_norm`, `layer_norm`,
//! `sigmoid`), [`rotary_emb`] (`rope`, `rope_i`, `rope_thd`) and [`kv_cache`]
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

/// `w` as the packed f32 the kernels take for a weight, checked to be `[n]`: a tensor that
/// owns its buffer (a view of the caller's would leave the buffer to a temporary, recycled
/// when it drops while the kernel has yet to read it).
fn f32_weight(w: &VTensor, n: usize, what: &str, op: &str) -> CResult<VTensor> {
    if w.dims() != [n] {
        candle_core::bail!("{op}: {what} of shape {:?} for rows of {n}", w.dims())
    }
    let w = if w.dtype() == DType::F32 { w.clone() } else { w.to_dtype(DType::F32)? };
    packed_f32(&w)
}

/// `t` packed from element 0 as a tensor holding its own (or `t`'s shared) storage.
fn packed_f32(t: &VTensor) -> CResult<VTensor> {
    if t.layout().is_contiguous() && t.layout().start_offset() == 0 {
        Ok(t.clone())
    } else {
        t.contiguous()
    }
}
