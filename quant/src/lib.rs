//! vkml-quant: GGML block-quantized formats on the CPU and the GGUF file format (no Vulkan).
//!
//! * [`GgmlType`]: every tensor type GGUF can name (ids, block sizes, bytes per block), from
//!   ggml `include/ggml.h` and `src/ggml-common.h`.
//! * [`blocks`]: `#[repr(C)]` block structs with ggml's exact layouts.
//! * [`dequant`]: CPU dequantization of every type, bit-identical to ggml's
//!   `dequantize_row_*`.
//! * [`mod@quantize`]: ggml-compatible reference quantizers (`quantize_row_*_ref`) and the Q8_1 /
//!   Q8_K activation quantizers.
//! * [`dot`]: reference integer dot products (`ggml_vec_dot_*_generic`) for checking GPU paths.
//! * [`gguf`]: validating GGUF v2/v3 reader (mmap, zero-copy tensor views), v3 writer, and
//!   [`gguf::inspect::render`] for `vkml gguf inspect`.
//!
//! All multi-byte data is little-endian; the crate refuses to build on big-endian targets.

#![warn(missing_docs)]

#[cfg(target_endian = "big")]
compile_error!("vkml-quant reads GGUF/GGML little-endian data by casting and supports little-endian targets only");

pub mod blocks;
pub mod dequant;
pub mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_x86;
pub mod gguf;
pub mod quantize;
pub mod tables;
pub mod types;

pub use dequant::{dequantize, dequantize_to_vec};
pub use dot::{dot_activations, vec_dot_q8_1, vec_dot_q8_1_rows, vec_dot_q8_k, vec_dot_q8_k_rows};
pub use quantize::{quantize, quantize_q8_1, quantize_q8_k};
pub use types::{GgmlType, UnknownGgmlType, QK_K};

/// Errors of the block (de)quantization and dot-product functions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The input is not a whole number of blocks (`n_bytes` is a byte count for block data
    /// and an element count for float input).
    #[error("{n_bytes} is not a whole number of {ty} blocks ({} elements / {} bytes each)", ty.block_size(), ty.type_size())]
    PartialBlock {
        /// The type.
        ty: GgmlType,
        /// The offending length.
        n_bytes: usize,
    },
    /// Output or activation length does not match the input.
    #[error("length mismatch: expected {expected}, got {got}")]
    LengthMismatch {
        /// Expected length.
        expected: usize,
        /// Given length.
        got: usize,
    },
    /// The operation is not implemented for this type.
    #[error("operation not supported for type {0}")]
    Unsupported(GgmlType),
}
