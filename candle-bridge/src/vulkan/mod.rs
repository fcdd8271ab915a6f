//! Candle's backend traits on vkml: [`VulkanDevice`] implements
//! `candle_core::backend::BackendDevice` and [`VulkanStorage`] implements
//! `candle_core::backend::BackendStorage` (candle-core 0.11), computing with vkml-ops'
//! kernels on a vkml-hal device.
//!
//! Execution is deferred the way a CUDA stream defers it: every op records its dispatches
//! on the device's one [`Stream`] and returns at once; the command buffer is submitted
//! when the host needs a result ([`BackendStorage::to_cpu_storage`],
//! [`BackendDevice::synchronize`]). A model step that reads back only its logits is
//! therefore one command buffer with one host wait.
//!
//! Dtypes: F32, F16, BF16, F64, U8, U32, I64 (`vkml_ops::Dtype`; F64 needs the device's
//! `shaderFloat64`, and each type its storage feature). A storage holds candle's other
//! dtypes (I16, I32, the f8/f6/f4 formats) as bytes only: creation, copies to and from
//! the CPU, `try_clone`, and contiguous copies; their arithmetic gets candle's
//! `UnsupportedDTypeForOp`.
//!
//! On the GPU (issue 6): creation (`zeros_impl`, `alloc_uninit`, `storage_from_*`),
//! `to_cpu_storage`, `synchronize`, `try_clone`, `affine`, `powf`, `elu`, every `UnaryOpT`,
//! every `BinaryOpT` with arbitrary strides and broadcast, `cmp`, `where_cond`,
//! `reduce_op` over any set of dims, `to_dtype` between every pair, `index_select`,
//! `gather`, `scatter_set`, `scatter_add_set`, `index_add`, `matmul` (batched, strided and
//! transposed operands read in place), `copy_strided_src`, `copy2d`, `const_set`, the
//! convolutions (`conv1d`, `conv2d` and their transposes; candle's params are read from
//! their `Debug` form, see `candle_compat::params_fields`), `avg_pool2d`, `max_pool2d`,
//! the upsamples, and `rand_uniform` / `rand_normal` (Philox on the GPU, seeded by
//! `set_seed`). None falls back to the CPU.
//!
//! Out-of-range indices in the indexing ops are caught on the GPU (the kernels skip them
//! and set a bit in a per-device status word); the next host read
//! ([`BackendStorage::to_cpu_storage`], [`BackendDevice::synchronize`]) reports them as an
//! error naming the op, where candle's CPU backend fails at the call.
//!
//! The buffers of dropped storages go to the device's recycler and serve its next ops of
//! the same size on the same stream (see `device::Recycler`): a deferred step then reuses
//! memory as an eager one would.
//!
//! Other crates build ops of their own on the same stream through the public pieces
//! here ([`VulkanDevice::with_stream`], [`VulkanDevice::alloc`], [`VulkanDevice::storage`],
//! [`VulkanStorage::packed`]): vkml-models' model ops (quantized products, rope,
//! attention over a KV cache) are written that way.
//!
//! [`BackendDevice::synchronize`]: candle_core::backend::BackendDevice::synchronize

mod backend_device;
mod backend_storage;
mod candle_compat;
mod custom;
mod device;
mod replay;
mod storage;
mod transfer;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use parking_lot::Mutex;
use vkml_hal::{Buffer, Device, Stream, StreamStats};
use vkml_ops::Dtype;

pub use custom::CustomKernel;
use device::Recycler;
pub use replay::Replay;
use transfer::Hop;

type CResult<T> = candle_core::Result<T>;

/// A vkml error as a candle error (its message kept).
pub fn cerr(e: impl fmt::Display + Send + Sync + 'static) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// The error of a `BackendStorage`/`BackendDevice` method that has no Vulkan kernel yet.
pub(crate) fn not_yet(method: &str) -> candle_core::Error {
    candle_core::Error::Msg(format!("vkml: {method} is not implemented on Vulkan yet"))
}

struct Inner {
    dev: Device,
    ordinal: usize,
    /// Where ops record; submitted by `flush`.
    stream: Mutex<Stream>,
    /// The random seed and how many fills have been made from it (Philox's call
    /// counter, `vkml_ops::rand`).
    seed: Mutex<(u64, u64)>,
    /// From how many rows of `x` `qmatmul` runs mat-mats; 0: the device's
    /// [`vkml_ops::tuning::mat_mat_min_tokens`].
    mat_mat_min_tokens: AtomicUsize,
    /// Buffers of dropped storages and scratch, for the device's next ops.
    recycled: Mutex<Recycler>,
    /// One u32 the indexing kernels OR their out-of-range bits into
    /// (`vkml_ops::index::Mode::bit`); host-visible, read and cleared after each wait.
    status: Buffer,
    /// Host copies from other devices that this device's recorded work reads, done
    /// before its next submission (`transfer.rs`).
    hops: Mutex<Vec<Hop>>,
    /// 1 + the submission number of the command buffer that last fed a hop to another
    /// device (0: none): while that command buffer is still being recorded, a hop into
    /// this device ends it first (`transfer.rs`).
    feeds: AtomicU64,
    /// While `record_replay` records: its step buffer, and the flag that keeps the storages
    /// made meanwhile out of the recycler.
    replay_step: Mutex<Option<Buffer>>,
    replaying: AtomicBool,
    /// What the replays submitted so far ran (`Replay::submit`), for `stream_stats`.
    replayed: Mutex<StreamStats>,
}

/// A Vulkan device as a candle backend device: a [`vkml_hal::Device`] plus the stream
/// its ops record on. Cheap to clone (shared).
#[derive(Clone)]
pub struct VulkanDevice {
    inner: Arc<Inner>,
}

/// A buffer of `len` elements of a candle dtype on a [`VulkanDevice`]; what a candle
/// `Layout` indexes (offsets and strides in elements).
pub struct VulkanStorage {
    buffer: Buffer,
    dtype: DType,
    len: usize,
    device: VulkanDevice,
    /// The storage alone holds the buffer: it is recycled on drop.
    owned: bool,
}

/// The vkml-ops dtype of a candle dtype that kernels compute on.
pub(crate) fn ops_dtype(dt: DType, op: &'static str) -> CResult<Dtype> {
    match dt {
        DType::F32 => Ok(Dtype::F32),
        DType::F16 => Ok(Dtype::F16),
        DType::BF16 => Ok(Dtype::BF16),
        DType::F64 => Ok(Dtype::F64),
        DType::U8 => Ok(Dtype::U8),
        DType::U32 => Ok(Dtype::U32),
        DType::I64 => Ok(Dtype::I64),
        _ => Err(candle_core::Error::UnsupportedDTypeForOp(dt, op)),
    }
}

/// `[left, dim, right]` of `dims` around `dim` (candle's split for the indexing ops).
fn split3(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    (dims[..dim].iter().product(), dims[dim], dims[dim + 1..].iter().product())
}

/// A storage holding `l`'s elements packed from element 0: `s` itself when it already
/// is, else a copy. Kernels of vkml-ops that take plain buffers read it.
fn packed(s: &VulkanStorage, l: &Layout) -> CResult<VulkanStorage> {
    match contiguous(s, l)? {
        (p, 0) => Ok(p),
        _ => packed_copy(s, l),
    }
}

/// `s`'s elements of `l` packed: `(s, start offset)` when `l` is contiguous, else a packed
/// copy (on the GPU) from offset 0.
fn contiguous(s: &VulkanStorage, l: &Layout) -> CResult<(VulkanStorage, usize)> {
    if l.is_contiguous() {
        return Ok((s.device.shared_storage(s.buffer.clone(), s.dtype, s.len), l.start_offset()));
    }
    Ok((packed_copy(s, l)?, 0))
}

/// A new storage holding `s`'s elements of `l` in row-major order from element 0.
fn packed_copy(s: &VulkanStorage, l: &Layout) -> CResult<VulkanStorage> {
    let n = l.shape().elem_count();
    let mut dst = s.device.storage(s.device.alloc(n, s.dtype)?, s.dtype, n);
    s.copy_strided_src(&mut dst, 0, l)?;
    Ok(dst)
}

fn same_dtype(a: &VulkanStorage, b: &VulkanStorage, op: &'static str) -> CResult<()> {
    if a.dtype != b.dtype {
        return Err(candle_core::Error::DTypeMismatchBinaryOp { lhs: a.dtype, rhs: b.dtype, op }.bt());
    }
    Ok(())
}

fn same_dims(l: &Layout, r: &Layout, op: &'static str) -> CResult<()> {
    if l.dims() != r.dims() {
        return Err(
            candle_core::Error::ShapeMismatchBinaryOp { lhs: l.shape().clone(), rhs: r.shape().clone(), op }.bt()
        );
    }
    Ok(())
}
