//! Candle's quantized tensors on Vulkan: [`QTensor`] (a GGML block-quantized matrix in
//! device memory, from and to `candle_core::quantized::QTensor`) and [`QMatMul`]
//! (`candle_core::quantized::QMatMul::forward` over vkml-ops' quantized kernels), named as
//! candle names them.
//!
//! The blocks cross the border as they are (GGML's layouts, `ggml-common.h`): a candle
//! `QTensor` of any of candle's `GgmlDType`s uploads its raw bytes, and comes back with
//! the same bytes. Products run on the blocks (`vkml_ops::quant::linear`: mat-vec kernels
//! for few rows of x, mat-mat kernels from `VulkanDevice::mat_mat_min_tokens` rows), with
//! x in f32; candle's CPU `QMatMul` instead rounds x to Q8 blocks first (its dot products),
//! so the two agree to that rounding, and vkml's products to f32 summation order.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Shape};
use vkml_ops::quant::{LinearEpilogue, LinearOptions, QMatrix};
use vkml_quant::GgmlType;

use crate::front::Tensor;
use crate::vulkan::{cerr, VulkanDevice, VulkanStorage};

type CResult<T> = candle_core::Result<T>;

/// vkml-quant's name for a candle `GgmlDType` (the same GGML type ids).
pub fn ggml_type(dt: GgmlDType) -> GgmlType {
    match dt {
        GgmlDType::F32 => GgmlType::F32,
        GgmlDType::F16 => GgmlType::F16,
        GgmlDType::BF16 => GgmlType::BF16,
        GgmlDType::Q4_0 => GgmlType::Q4_0,
        GgmlDType::Q4_1 => GgmlType::Q4_1,
        GgmlDType::Q5_0 => GgmlType::Q5_0,
        GgmlDType::Q5_1 => GgmlType::Q5_1,
        GgmlDType::Q8_0 => GgmlType::Q8_0,
        GgmlDType::Q8_1 => GgmlType::Q8_1,
        GgmlDType::Q2K => GgmlType::Q2_K,
        GgmlDType::Q3K => GgmlType::Q3_K,
        GgmlDType::Q4K => GgmlType::Q4_K,
        GgmlDType::Q5K => GgmlType::Q5_K,
        GgmlDType::Q6K => GgmlType::Q6_K,
        GgmlDType::Q8K => GgmlType::Q8_K,
    }
}

/// A GGML block-quantized tensor on a Vulkan device, candle's `QTensor` there: a matrix of
/// `rows = product of all dims but the last` rows of `k = the last dim` values, each row
/// whole blocks of its type (`vkml_ops::quant::QMatrix`, held in several buffers where it
/// passes one binding).
#[derive(Debug, Clone)]
pub struct QTensor {
    matrix: QMatrix,
    dtype: GgmlDType,
    shape: Shape,
    device: VulkanDevice,
}

impl QTensor {
    /// The blocks of candle's `q` (its `data()`, any device) on `dev`.
    ///
    /// # Errors
    /// A shape of no dims or whose last dim is not a whole number of blocks, and a byte
    /// count that is not the shape's (`QMatrix::upload`'s checks); device errors (out of
    /// memory names the size).
    pub fn from_candle(q: &candle_core::quantized::QTensor, dev: &VulkanDevice) -> CResult<QTensor> {
        let (dtype, shape) = (q.dtype(), q.shape().clone());
        let ty = ggml_type(dtype);
        let Some(&k) = shape.dims().last() else {
            candle_core::bail!("a quantized tensor of shape {shape:?} has no rows of values")
        };
        let rows = shape.elem_count() / k.max(1);
        let bytes = q.data()?;
        let matrix = QMatrix::upload(dev.hal(), ty, rows, k, &bytes).map_err(|e| dev.named_error(e))?;
        Ok(QTensor { matrix, dtype, shape, device: dev.clone() })
    }

    /// `src` (`[.., k]`, any float dtype, on a Vulkan device) quantized to `dtype` on the
    /// device (candle's `QTensor::quantize`; `vkml_ops::quant::quantize`): the bytes of
    /// vkml-quant's CPU quantizers (ggml's reference) but where the device's division moves
    /// a value of a block of 32 across a rounding boundary (then one quant one step away),
    /// or where a device flushes subnormal intermediates of the k-quants' scale searches
    /// (sub-blocks of values below about 1e-5). The GPU writes `vkml_ops::quant::GPU_QUANTIZED`
    /// (every block type of candle's); F32, F16 and BF16 are the values converted on the
    /// device (round to nearest even, as candle's `from_f32`), their bytes copied in.
    ///
    /// # Errors
    /// A last dim that is not whole blocks; an input past one storage binding; device errors.
    pub fn quantize(src: &Tensor<VulkanStorage>, dtype: GgmlDType) -> CResult<QTensor> {
        let ty = ggml_type(dtype);
        let shape = src.shape().clone();
        let Some(&k) = shape.dims().last() else { candle_core::bail!("quantize: a scalar has no rows of values") };
        let rows = shape.elem_count() / k.max(1);
        let dev = src.storage().device().clone();
        let float = match dtype {
            GgmlDType::F32 => Some(DType::F32),
            GgmlDType::F16 => Some(DType::F16),
            GgmlDType::BF16 => Some(DType::BF16),
            _ => None,
        };
        let to = float.unwrap_or(DType::F32);
        let x = if src.dtype() == to { src.clone() } else { src.to_dtype(to)? };
        let xp = x.storage().packed(x.layout())?;
        let matrix = QMatrix::alloc(dev.hal(), ty, rows, k).map_err(cerr)?;
        dev.with_stream(|s| {
            if float.is_some() {
                // The values as they are: each part's rows copied from the packed tensor.
                let row_bytes = matrix.row_bytes();
                for part in matrix.parts() {
                    let len = part.rows() as u64 * row_bytes;
                    s.copy(xp.buffer(), part.row0() as u64 * row_bytes, part.buffer(), 0, len).map_err(cerr)?;
                }
                Ok(())
            } else {
                vkml_ops::quant::quantize(s, xp.buffer(), &matrix).map_err(cerr)
            }
        })?;
        Ok(QTensor { matrix, dtype, shape, device: dev })
    }

    /// The blocks back as candle's `QTensor` on the CPU: the bytes uploaded, unchanged, but
    /// for MXFP4's negative zeros, which come back as zeros (the same values; the device
    /// layout of `vkml_ops::quant::mxfp4_layout` does not keep them).
    ///
    /// # Errors
    /// Device errors of the read-back.
    pub fn to_candle(&self) -> CResult<candle_core::quantized::QTensor> {
        // Blocks written on the device (`quantize`) are recorded work: submit it first.
        self.device.flush()?;
        let bytes = self.matrix.read_blocks().map_err(cerr)?;
        let storage = candle_core::quantized::QStorage::from_data(
            std::borrow::Cow::Owned(bytes),
            &candle_core::Device::Cpu,
            self.dtype,
        )?;
        candle_core::quantized::QTensor::new(storage, self.shape.clone())
    }

    /// candle's GGML type.
    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    /// The shape (its last dim: values per row).
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The device matrix (`[rows, k]`).
    pub fn matrix(&self) -> &QMatrix {
        &self.matrix
    }

    /// The values as f32 (candle's `QTensor::dequantize`): ggml's block decoding on the
    /// device (`vkml_ops::quant::dequantize`).
    ///
    /// # Errors
    /// Device errors.
    pub fn dequantize(&self) -> CResult<Tensor<VulkanStorage>> {
        let n = self.shape.elem_count();
        let y = self.device.alloc(n, DType::F32)?;
        self.device.with_stream(|s| vkml_ops::quant::dequantize(s, &self.matrix, &y).map_err(cerr))?;
        Ok(Tensor::from_storage(self.device.storage(y, DType::F32, n), self.shape.clone()))
    }
}

/// candle's `QMatMul` on Vulkan: `x Wᵀ` for a [`QTensor`] `W` of `[n, k]` (2-D, or any
/// shape read as `[rows, k]`) and `x` of `[.., k]` (any leading dims, broadcast over the one
/// weight), f32 or f16; the result `[.., n]` in x's dtype. f16 x is computed in f32 (as
/// candle's CUDA and Metal kernels take f32 activations) and rounded back.
#[derive(Debug, Clone)]
pub struct QMatMul {
    w: std::sync::Arc<QTensor>,
}

impl QMatMul {
    /// Over `w` (candle's `QMatMul::from_qtensor`; the weight stays in its blocks whatever
    /// its type).
    pub fn from_qtensor(w: QTensor) -> QMatMul {
        QMatMul { w: std::sync::Arc::new(w) }
    }

    /// Over a shared `w` (candle's `QMatMul::from_arc`).
    pub fn from_arc(w: std::sync::Arc<QTensor>) -> QMatMul {
        QMatMul { w }
    }

    /// The weight.
    pub fn weight(&self) -> &QTensor {
        &self.w
    }

    /// `x Wᵀ` (candle's `Module::forward` of `QMatMul`): `x: [.., k]` f32 or f16 → `[.., n]`.
    ///
    /// # Errors
    /// `x`'s last dim other than `k`, a dtype other than F32/F16, `x` on another device;
    /// kernel and device errors.
    pub fn forward(&self, x: &Tensor<VulkanStorage>) -> CResult<Tensor<VulkanStorage>> {
        let m = self.w.matrix();
        let (n, k) = (m.rows(), m.k());
        let dims = x.dims();
        if dims.last() != Some(&k) {
            candle_core::bail!("QMatMul: x of shape {dims:?} against a weight of {n} x {k}: its last dim must be {k}")
        }
        let in_dtype = x.dtype();
        if !matches!(in_dtype, DType::F32 | DType::F16) {
            return Err(candle_core::Error::UnsupportedDTypeForOp(in_dtype, "QMatMul"));
        }
        let dev = x.storage().device();
        if !dev.same_device(&self.w.device) {
            candle_core::bail!("QMatMul: x is on {dev:?}, the weight on {:?}", self.w.device)
        }
        let t = x.elem_count() / k.max(1);
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("checked above") = n;
        let xf = if in_dtype == DType::F32 { x.clone() } else { x.to_dtype(DType::F32)? };
        let xp = xf.storage().packed(xf.layout())?;
        let y = dev.alloc(t * n, DType::F32)?;
        let opts = LinearOptions { mat_mat_from: dev.mat_mat_min_tokens() };
        dev.with_stream(|s| {
            vkml_ops::quant::linear(s, m, xp.buffer(), t, None, &y, LinearEpilogue::Store, &opts).map_err(cerr)
        })?;
        let out = Tensor::from_storage(dev.storage(y, DType::F32, t * n), out_dims);
        if in_dtype == DType::F32 {
            Ok(out)
        } else {
            out.to_dtype(in_dtype)
        }
    }
}
