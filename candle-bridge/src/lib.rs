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
//! Models, and the model ops candle keeps outside `BackendStorage`, live in vkml-models.

pub mod error;
pub mod front;
pub mod nn;
pub mod quantized;
pub mod vulkan;

pub use error::{Error, Result};
