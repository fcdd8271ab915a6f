//! vkml-ops: the host side of vkml's GPU kernels. Each op picks a kernel variant and a
//! launch shape from [`vkml_hal::Capabilities`] only ([`tuning`]), validates shapes and
//! dtypes, and records dispatches on a [`vkml_hal::Stream`].
//!
//! Built so far (issue 4, first slice): quantized weights on the device ([`quant::QMatrix`])
//! with dequantize, get_rows (embedding lookup) and fused mat-vec for F32, F16, BF16,
//! Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0; transformer ops ([`nn`]: norms, the fused residual
//! add + rms_norm, softmax, rope, gated activations) and flash attention over an f16 KV
//! cache ([`attention`]), on f32 or f16 activations ([`Dtype`]); strided element-wise
//! unary and binary maps and dtype-converting copies for a candle backend
//! ([`elementwise`]). Issue 6: every candle dtype in the element-wise ops, comparisons
//! and selection, reductions ([`reduce`]), indexing ([`index`]), float matmul
//! ([`matmul`]), convolutions ([`conv`]), pooling and resampling ([`spatial`]) and
//! seedable random fills ([`rand`]).

pub mod attention;
pub mod bench;
pub mod conv;
mod dtype;
pub mod elementwise;
pub mod error;
pub mod fp8;
pub mod index;
mod launch;
pub mod matmul;
pub mod moe;
pub mod nn;
pub mod quant;
pub mod rand;
pub mod reduce;
pub mod sampling;
pub mod spatial;
pub mod tuning;

pub use dtype::Dtype;
pub use error::{OpsError, Result};
