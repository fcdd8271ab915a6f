//! vkml-candle: Candle's backend traits on Vulkan, a tensor front over them, and
//! conversions to and from candle's own tensors.
//!
//! - [`vulkan`]: `VulkanDevice: BackendDevice`, `VulkanStorage: BackendStorage`
//!   (candle-core 0.11), deferred execution on one stream per device, every trait method
//!   on the GPU.
//! - [`front`]: [`front::Tensor`], candle's tensor methods over any `BackendStorage`
//!   (Vulkan here, or candle's own `CpuStorage`), with `from_candle` / `to_candle`.
//! - [`quantized`]: candle's `QTensor` and `QMatMul` on Vulkan (GGML blocks as they are).
//! - [`nn`]: candle-nn's ops outside `BackendStorage` (softmax, norms, rope, KV cache) on
//!   Vulkan tensors, under candle-nn's names.
//!
//! Crossing from candle and back, in one place:
//! - tensors: [`front::Tensor::from_candle`] / [`front::Tensor::to_candle`], every candle
//!   dtype the Vulkan storage holds (F32, F16, BF16, F64, U8, U32, I64 computed; F8E4M3
//!   converted to and from them but from F64; I16, I32 as bytes), values unchanged;
//! - quantized weights: [`quantized::QTensor::from_candle`] / [`quantized::QTensor::to_candle`],
//!   every candle `GgmlDType`, bytes unchanged; [`quantized::QTensor::quantize`] on the device;
//!   [`quantized::QMatMul`] for candle's `QMatMul`;
//! - candle-nn's ops outside `BackendStorage`: [`nn`]; users' own kernels on tensors:
//!   [`vulkan::VulkanDevice::register_kernel`].
//!
//! Models, and the model ops candle keeps outside `BackendStorage`, live in vkml-models.

pub mod error;
pub mod front;
pub mod nn;
pub mod quantized;
pub mod vulkan;

pub use error::{Error, Result};
