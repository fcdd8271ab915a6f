//! [`VulkanDevice`]'s own methods (opening, its stream, allocation, uploads, random
//! fills) and the recycler that serves its ops the buffers of dropped storages.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use candle_core::backend::BackendDevice;
use candle_core::{DType, Shape};
use parking_lot::Mutex;
use vkml_hal::{Buffer, Device, MemoryKind, Stream};

use super::{cerr, ops_dtype, CResult, Inner, VulkanDevice, VulkanStorage};

/// Bytes of a buffer for `n` elements of `dtype`: at least 4, so that every kernel
/// binding is non-empty, and a multiple of 4, so that kernels may read any dtype as
/// 32-bit words (the indices of the indexing ops, `where_cond`'s condition).
fn buffer_bytes(n: usize, dtype: DType) -> u64 {
    (n * dtype.size_in_bytes()).max(4).next_multiple_of(4) as u64
}

/// Most bytes of recycled buffers a device keeps (also at most 1/8 of its memory).
const RECYCLE_LIMIT: u64 = 4 << 30;

/// Device-local buffers whose storages were dropped, by size in bytes, for reuse by later
/// ops on the same stream.
///
/// A dropped storage's buffer may still be read or written by commands recorded but not
/// yet run, so the HAL's own cache takes it back only once those have completed: without
/// this, every op of a deferred step would get fresh memory (gigabytes for a long prompt
/// through a large model). Reuse here is safe because every user of these buffers records
/// on the device's one stream, which orders commands and inserts the barrier a reuse
/// needs (write after read), or into a replay, whose submissions run in queue order
/// between the stream's and whose own storages are never recycled (so no later op shares
/// memory a replay still writes); and because the host never writes them: host uploads
/// get fresh HAL buffers, and storages that share a buffer with another (views, buffers
/// passed in by the caller) are never recycled.
#[derive(Default)]
pub(super) struct Recycler {
    free: std::collections::HashMap<u64, Vec<Buffer>>,
    bytes: u64,
    limit: u64,
}

impl fmt::Debug for VulkanDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VulkanDevice({}: {})", self.inner.ordinal, self.inner.dev.caps().name)
    }
}

impl VulkanDevice {
    /// Wraps an open device. `ordinal` is what [`BackendDevice::location`] reports.
    ///
    /// # Errors
    /// HAL errors creating the stream (out of memory, device lost).
    pub fn from_device(dev: &Device, ordinal: usize) -> crate::Result<VulkanDevice> {
        let status = dev.alloc(4, MemoryKind::Readback)?;
        status.write(0, &[0; 4])?;
        Ok(VulkanDevice {
            inner: Arc::new(Inner {
                dev: dev.clone(),
                ordinal,
                stream: Mutex::new(Stream::new(dev)?),
                seed: Mutex::new((299_792_458, 0)),
                mat_mat_min_tokens: AtomicUsize::new(0),
                recycled: Mutex::new(Recycler {
                    limit: (dev.caps().memory.device_local_bytes / 8).min(RECYCLE_LIMIT),
                    ..Recycler::default()
                }),
                status,
                hops: Mutex::new(Vec::new()),
                feeds: AtomicU64::new(0),
                replay_step: Mutex::new(None),
                replaying: AtomicBool::new(false),
                replayed: Mutex::new(vkml_hal::StreamStats::default()),
            }),
        })
    }

    /// The vkml-hal device.
    pub fn hal(&self) -> &Device {
        &self.inner.dev
    }

    /// From how many activation rows the quantized products (vkml-models' `ModelStorage::qmatmul`
    /// and its fused forms) run as mat-mats instead of batched mat-vecs; `None` restores
    /// the device's default, [`vkml_ops::tuning::mat_mat_min_tokens`] (9 on GPUs; never on
    /// lavapipe, where setting it is how tests reach the mat-mat kernels).
    pub fn set_mat_mat_min_tokens(&self, n: Option<usize>) {
        self.inner.mat_mat_min_tokens.store(n.map_or(0, |n| n.max(2)), Ordering::Relaxed);
    }

    /// The current threshold of [`VulkanDevice::set_mat_mat_min_tokens`].
    pub fn mat_mat_min_tokens(&self) -> usize {
        match self.inner.mat_mat_min_tokens.load(Ordering::Relaxed) {
            0 => vkml_ops::tuning::mat_mat_min_tokens(self.inner.dev.caps()),
            n => n,
        }
    }

    /// What the device's stream has recorded and submitted so far, with what the
    /// submissions of its [`super::Replay`]s ran.
    pub fn stream_stats(&self) -> vkml_hal::StreamStats {
        let (s, r) = (self.inner.stream.lock().stats(), *self.inner.replayed.lock());
        vkml_hal::StreamStats {
            dispatches: s.dispatches + r.dispatches,
            transfers: s.transfers + r.transfers,
            barriers: s.barriers + r.barriers,
            submissions: s.submissions + r.submissions,
        }
    }

    /// Command buffers the device's own stream has submitted (not counting replays): the
    /// epoch of a host copy between devices (`transfer.rs`).
    pub(super) fn own_submissions(&self) -> u64 {
        self.inner.stream.lock().stats().submissions
    }

    /// Runs `f` with the device's stream (ops record their dispatches there).
    pub fn with_stream<T>(&self, f: impl FnOnce(&mut Stream) -> CResult<T>) -> CResult<T> {
        let mut s = self.inner.stream.lock();
        f(&mut s)
    }

    /// Submits what was recorded (no wait). Buffer reads then wait for the work that
    /// wrote them. Values copied in from another device ([`VulkanStorage::to_device`])
    /// are copied first, after that device's work that produces them (which this
    /// submits, and waits for).
    ///
    /// # Errors
    /// Device errors (device lost), naming the device.
    pub fn flush(&self) -> CResult<()> {
        self.refuse_while_replaying("a submission")?;
        self.run_hops()?;
        let mut s = self.inner.stream.lock();
        s.submit().map_err(|e| self.named_error(e))?;
        Ok(())
    }

    /// Reports (and clears) the out-of-range bits the indexing kernels set, after waiting
    /// for the last submission that used the status word.
    pub(super) fn check_status(&self) -> CResult<()> {
        let mut w = [0u8; 4];
        self.inner.status.read(0, &mut w).map_err(cerr)?;
        let word = u32::from_le_bytes(w);
        if word == 0 {
            return Ok(());
        }
        self.inner.status.write(0, &[0; 4]).map_err(cerr)?;
        let op = vkml_ops::index::Mode::from_status(word).map_or("an indexing op", |m| m.name());
        Err(candle_core::Error::Msg(format!(
            "vkml: {op} got an index out of range for the indexed dim (the elements it addressed were skipped)"
        )))
    }

    /// A device-local buffer for `n` elements of `dtype`, that only device commands on this
    /// device's stream write: a recycled one when there is one of the size. Its size is at
    /// least 4 bytes and a multiple of 4 (every binding non-empty; any dtype readable as
    /// 32-bit words).
    ///
    /// # Errors
    /// Out of device memory (naming the size), device lost.
    pub fn alloc(&self, n: usize, dtype: DType) -> CResult<Buffer> {
        let bytes = buffer_bytes(n, dtype);
        {
            let mut r = self.inner.recycled.lock();
            if let Some(b) = r.free.get_mut(&bytes).and_then(Vec::pop) {
                r.bytes -= bytes;
                return Ok(b);
            }
        }
        self.inner.dev.alloc(bytes, MemoryKind::DeviceLocal).map_err(|e| self.named_error(e))
    }

    /// Hands a buffer from [`VulkanDevice::alloc`] back for reuse by later ops, once
    /// nothing but commands already recorded refers to it.
    pub fn recycle(&self, b: Buffer) {
        if self.replaying() {
            // A recording for replay writes it again at every submission.
            return;
        }
        let mut r = self.inner.recycled.lock();
        if b.kind() == MemoryKind::DeviceLocal && r.bytes + b.size() <= r.limit {
            r.bytes += b.size();
            r.free.entry(b.size()).or_default().push(b);
        }
    }

    /// A storage that owns `buffer` (from [`VulkanDevice::alloc`]): recycled on drop,
    /// unless made while [`VulkanDevice::record_replay`] records.
    pub fn storage(&self, buffer: Buffer, dtype: DType, len: usize) -> VulkanStorage {
        VulkanStorage { buffer, dtype, len, device: self.clone(), owned: !self.replaying() }
    }

    /// A storage over a buffer something else also holds: never recycled.
    pub fn shared_storage(&self, buffer: Buffer, dtype: DType, len: usize) -> VulkanStorage {
        VulkanStorage { buffer, dtype, len, device: self.clone(), owned: false }
    }

    /// Host data in a fresh buffer (never a recycled one: commands recorded but not yet
    /// run may still use those).
    pub(super) fn upload_bytes(&self, bytes: &[u8], dtype: DType, len: usize) -> CResult<VulkanStorage> {
        let buffer =
            self.inner.dev.alloc(buffer_bytes(len, dtype), MemoryKind::DeviceLocal).map_err(|e| self.named_error(e))?;
        buffer.write(0, bytes).map_err(cerr)?;
        Ok(self.storage(buffer, dtype, len))
    }
}

impl VulkanDevice {
    pub(super) fn storage_from_slice_scalar(&self, v: candle_core::scalar::Scalar) -> CResult<VulkanStorage> {
        use candle_core::scalar::Scalar;
        match v {
            Scalar::F32(x) => self.storage_from_slice(&[x]),
            Scalar::F16(x) => self.storage_from_slice(&[x]),
            Scalar::BF16(x) => self.storage_from_slice(&[x]),
            Scalar::F64(x) => self.storage_from_slice(&[x]),
            Scalar::U8(x) => self.storage_from_slice(&[x]),
            Scalar::U32(x) => self.storage_from_slice(&[x]),
            Scalar::I64(x) => self.storage_from_slice(&[x]),
            _ => Err(candle_core::Error::UnsupportedDTypeForOp(v.dtype(), "vulkan strided const_set")),
        }
    }
}

impl VulkanDevice {
    /// A new storage of `shape` filled on the GPU from `dist` with the device's seed and
    /// the next call number (`vkml_ops::rand`).
    pub(super) fn rand(
        &self,
        shape: &Shape,
        dtype: DType,
        dist: vkml_ops::rand::Distribution,
    ) -> CResult<VulkanStorage> {
        let op = dist.name();
        if !dtype.is_float() {
            return Err(candle_core::Error::UnsupportedDTypeForOp(dtype, op));
        }
        let dt = ops_dtype(dtype, op)?;
        let n = shape.elem_count();
        let y = self.alloc(n, dtype)?;
        // The call number moves on only for a fill that was recorded: a rejected one (bad
        // bounds) leaves the sequence as it was. The lock is held across the recording so
        // that concurrent fills take distinct numbers.
        let mut st = self.inner.seed.lock();
        let (seed, call) = *st;
        self.with_stream(|s| vkml_ops::rand::fill(s, dt, dist, seed, call, n, &y).map_err(cerr))?;
        st.1 += 1;
        drop(st);
        Ok(self.storage(y, dtype, n))
    }
}
