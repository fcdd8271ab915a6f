//! Attention over an f16 KV cache: flash attention (streaming softmax) for prefill and
//! decode, with grouped-query heads, causal masking and, for decode, a split over the KV
//! length merged in the same dispatch (grouped-query kernel) or by a second pass.
//! Kernels: `shader-src/shaders/flash_attn.comp`, `flash_attn_combine.comp`,
//! `kv_append.comp`, `rope_kv.comp` (rotary embedding of Q and K with the cache append);
//! `flash_attn_gqa.comp` (the query heads of one KV head in one workgroup) where the device
//! has subgroup arithmetic; and for prefill
//! on devices with f16 cooperative matrices `flash_attn_cm.comp` ([`tensor_core_prefill`]).
//! The algorithm is FlashAttention's online softmax (Dao et al., 2022; the tensor-core loop
//! of FlashAttention-2, Dao, 2023) with FlashDecoding's split-KV (Dao et al., 2023).
//!
//! Layouts: queries and outputs `[t, n_heads, d]` (token-major, as a QKV mat-vec produces
//! them) of f32 or f16 ([`crate::Dtype`]; arithmetic in f32); the cache f16
//! `[n_kv_heads, ctx, d]`, one [`KvCache`] for K and one for V. The softmax reductions use
//! subgroup arithmetic where the device has it ([`crate::tuning::subgroup_reduce`]).
//!
//! The files: `cache.rs` the cache and its appends; `rope_kv.rs` the rotation with the
//! append and its prologue; `flash.rs` flash attention; `decode.rs` the decode step's fused
//! form.

use crate::error::{OpsError, Result};

/// Fewest query tokens for which [`flash_attn`] takes the tensor-core prefill kernel
/// where [`tensor_core_prefill`] allows it (below, the per-token kernel keeps its f32
/// operands at little cost).
pub const TENSOR_CORE_MIN_TOKENS: usize = 16;

/// Most query tokens for which a split attention merges its splits in the same dispatch
/// ([`SplitMerge::InPlace`]); more take the merge dispatch.
pub const IN_PLACE_MERGE_TOKENS: usize = 16;

/// How [`flash_attn_with`] merges the splits of a split-KV attention (`n_splits > 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitMerge {
    /// In the attention dispatch itself where the grouped-query kernel runs and at most
    /// [`IN_PLACE_MERGE_TOKENS`] queries: the last workgroup of each (query, KV head) to
    /// finish merges (counted with a device-scope atomic); else as [`SplitMerge::Dispatch`].
    InPlace,
    /// By a second dispatch, `flash_attn_combine.comp`.
    Dispatch,
}

/// Largest head dimension the kernel takes.
pub const MAX_HEAD_DIM: usize = 256;

/// Refuses K and V caches of different shapes (named `op` in the error).
pub(super) fn check_cache_pair(op: &'static str, k: &KvCache, v: &KvCache) -> Result<()> {
    if (k.n_kv_heads, k.ctx, k.d) != (v.n_kv_heads, v.ctx, v.d) {
        return Err(OpsError::Shape { op, reason: "K and V caches differ in shape".into() });
    }
    Ok(())
}

mod cache;
mod decode;
mod flash;
mod rope_kv;

pub use cache::*;
pub use decode::*;
pub use flash::*;
pub use rope_kv::*;
