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
//! their `Debug` form, see `params_fields`), `avg_pool2d`, `max_pool2d`, the upsamples,
//! and `rand_uniform` / `rand_normal` (Philox on the GPU, seeded by `set_seed`). None
//! falls back to the CPU.
//!
//! Out-of-range indices in the indexing ops are caught on the GPU (the kernels skip them
//! and set a bit in a per-device status word); the next host read
//! ([`BackendStorage::to_cpu_storage`], [`BackendDevice::synchronize`]) reports them as an
//! error naming the op, where candle's CPU backend fails at the call.
//!
//! The buffers of dropped storages go to the device's recycler and serve its next ops of
//! the same size on the same stream (see `Recycler`): a deferred step then reuses memory
//! as an eager one would.
//!
//! Other crates build ops of their own on the same stream through the public pieces
//! here ([`VulkanDevice::with_stream`], [`VulkanDevice::alloc`], [`VulkanDevice::storage`],
//! [`VulkanStorage::packed`]): vkml-models' model ops (quantized products, rope,
//! attention over a KV cache) are written that way.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::{CpuStorage, DType, DeviceLocation, Layout, Shape};
use parking_lot::Mutex;
use vkml_hal::{Buffer, Device, DeviceOptions, DeviceSelector, MemoryKind, Stream};
use vkml_ops::conv::ConvParams;
use vkml_ops::elementwise::{self, BinaryOp, UnaryOp, View};
use vkml_ops::index::{Mode, Packed};
use vkml_ops::matmul::MatLayout;
use vkml_ops::spatial::{Pool, Resample};
use vkml_ops::Dtype;

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
}

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
/// needs (write after read), and because the host never writes them: host uploads get
/// fresh HAL buffers, and storages that share a buffer with another (views, buffers
/// passed in by the caller) are never recycled.
#[derive(Default)]
struct Recycler {
    free: std::collections::HashMap<u64, Vec<Buffer>>,
    bytes: u64,
    limit: u64,
}

/// A Vulkan device as a candle backend device: a [`vkml_hal::Device`] plus the stream
/// its ops record on. Cheap to clone (shared).
#[derive(Clone)]
pub struct VulkanDevice {
    inner: Arc<Inner>,
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

    /// What the device's stream has recorded and submitted so far.
    pub fn stream_stats(&self) -> vkml_hal::StreamStats {
        self.inner.stream.lock().stats()
    }

    /// Runs `f` with the device's stream (ops record their dispatches there).
    pub fn with_stream<T>(&self, f: impl FnOnce(&mut Stream) -> CResult<T>) -> CResult<T> {
        let mut s = self.inner.stream.lock();
        f(&mut s)
    }

    /// Submits what was recorded (no wait). Buffer reads then wait for the work that
    /// wrote them.
    ///
    /// # Errors
    /// Device errors (device lost).
    pub fn flush(&self) -> CResult<()> {
        let mut s = self.inner.stream.lock();
        s.submit().map_err(cerr)?;
        Ok(())
    }

    /// Reports (and clears) the out-of-range bits the indexing kernels set, after waiting
    /// for the last submission that used the status word.
    fn check_status(&self) -> CResult<()> {
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

    /// A device-local buffer for `n` elements of `dtype` ([`buffer_bytes`]) that only
    /// device commands on this device's
    /// stream write: a recycled one when there is one of the size.
    pub fn alloc(&self, n: usize, dtype: DType) -> CResult<Buffer> {
        let bytes = buffer_bytes(n, dtype);
        {
            let mut r = self.inner.recycled.lock();
            if let Some(b) = r.free.get_mut(&bytes).and_then(Vec::pop) {
                r.bytes -= bytes;
                return Ok(b);
            }
        }
        self.inner.dev.alloc(bytes, MemoryKind::DeviceLocal).map_err(cerr)
    }

    /// Hands a buffer from [`VulkanDevice::alloc`] back for reuse by later ops, once
    /// nothing but commands already recorded refers to it.
    pub fn recycle(&self, b: Buffer) {
        let mut r = self.inner.recycled.lock();
        if b.kind() == MemoryKind::DeviceLocal && r.bytes + b.size() <= r.limit {
            r.bytes += b.size();
            r.free.entry(b.size()).or_default().push(b);
        }
    }

    /// A storage that owns `buffer` (from [`VulkanDevice::alloc`]): recycled on drop.
    pub fn storage(&self, buffer: Buffer, dtype: DType, len: usize) -> VulkanStorage {
        VulkanStorage { buffer, dtype, len, device: self.clone(), owned: true }
    }

    /// A storage over a buffer something else also holds: never recycled.
    pub fn shared_storage(&self, buffer: Buffer, dtype: DType, len: usize) -> VulkanStorage {
        VulkanStorage { buffer, dtype, len, device: self.clone(), owned: false }
    }

    /// Host data in a fresh buffer (never a recycled one: commands recorded but not yet
    /// run may still use those).
    fn upload_bytes(&self, bytes: &[u8], dtype: DType, len: usize) -> CResult<VulkanStorage> {
        let buffer = self.inner.dev.alloc(buffer_bytes(len, dtype), MemoryKind::DeviceLocal).map_err(cerr)?;
        buffer.write(0, bytes).map_err(cerr)?;
        Ok(self.storage(buffer, dtype, len))
    }
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

impl Drop for VulkanStorage {
    fn drop(&mut self) {
        if self.owned {
            self.device.recycle(self.buffer.clone());
        }
    }
}

impl fmt::Debug for VulkanStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VulkanStorage({:?}[{}] on {:?})", self.dtype, self.len, self.device)
    }
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

fn unary_op(name: &str) -> Option<UnaryOp> {
    Some(match name {
        "exp" => UnaryOp::Exp,
        "log" => UnaryOp::Log,
        "sin" => UnaryOp::Sin,
        "cos" => UnaryOp::Cos,
        "abs" => UnaryOp::Abs,
        "neg" => UnaryOp::Neg,
        "recip" => UnaryOp::Recip,
        "sqr" => UnaryOp::Sqr,
        "sqrt" => UnaryOp::Sqrt,
        "gelu" => UnaryOp::Gelu,
        "gelu_erf" => UnaryOp::GeluErf,
        "erf" => UnaryOp::Erf,
        "relu" => UnaryOp::Relu,
        "silu" => UnaryOp::Silu,
        "tanh" => UnaryOp::Tanh,
        "floor" => UnaryOp::Floor,
        "ceil" => UnaryOp::Ceil,
        "round" => UnaryOp::Round,
        "sign" => UnaryOp::Sign,
        _ => return None,
    })
}

fn binary_op(name: &str) -> Option<BinaryOp> {
    Some(match name {
        "add" => BinaryOp::Add,
        "sub" => BinaryOp::Sub,
        "mul" => BinaryOp::Mul,
        "div" => BinaryOp::Div,
        "maximum" => BinaryOp::Maximum,
        "minimum" => BinaryOp::Minimum,
        _ => return None,
    })
}

impl VulkanStorage {
    /// The buffer (elements of [`BackendStorage::dtype`], packed).
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// Elements the storage holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the storage holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `l`'s elements packed from element 0: this storage itself (shared, not copied)
    /// when `l` already is that, else a packed copy recorded on the device's stream.
    /// What kernels that take plain buffers read.
    ///
    /// # Errors
    /// Device errors of the copy.
    pub fn packed(&self, l: &Layout) -> CResult<VulkanStorage> {
        packed(self, l)
    }

    /// Wraps a buffer holding `len` elements of `dtype`.
    ///
    /// # Errors
    /// When the buffer is smaller than `len` elements.
    pub fn from_buffer(device: &VulkanDevice, buffer: Buffer, dtype: DType, len: usize) -> CResult<VulkanStorage> {
        if buffer.size() < (len * dtype.size_in_bytes()) as u64 {
            return Err(candle_core::Error::Msg(format!(
                "vkml: a buffer of {} bytes cannot hold {len} elements of {dtype:?}",
                buffer.size()
            )));
        }
        Ok(device.shared_storage(buffer, dtype, len))
    }

    pub(crate) fn view<'a>(&'a self, l: &'a Layout) -> View<'a> {
        View { buffer: &self.buffer, offset: l.start_offset(), strides: l.stride() }
    }

    /// Runs `f(stream, output buffer)` to fill a new contiguous storage of `l`'s shape
    /// and `dtype` on this storage's device: how a kernel of another crate records into a
    /// fresh output on the device's stream.
    ///
    /// # Errors
    /// Allocation errors, and `f`'s, as candle errors.
    pub fn map(
        &self,
        l: &Layout,
        dtype: DType,
        f: impl FnOnce(&mut Stream, &Buffer) -> vkml_ops::Result<()>,
    ) -> CResult<VulkanStorage> {
        let n = l.shape().elem_count();
        let y = self.device.alloc(n, dtype)?;
        self.device.with_stream(|s| f(s, &y).map_err(cerr))?;
        Ok(self.device.storage(y, dtype, n))
    }

    /// This storage as the indices of an indexing op (its dtype: U8, U32 or I64), packed
    /// from element `offset`.
    fn ids(&self, offset: usize) -> vkml_ops::Result<vkml_ops::index::Ids<'_>> {
        let dtype = match self.dtype {
            DType::U8 => Dtype::U8,
            DType::U32 => Dtype::U32,
            DType::I64 => Dtype::I64,
            other => {
                return Err(vkml_ops::OpsError::UnsupportedDtype {
                    op: "indexing",
                    dtype: match other {
                        DType::F32 => "f32",
                        DType::F16 => "f16",
                        DType::BF16 => "bf16",
                        DType::F64 => "f64",
                        _ => "this dtype",
                    },
                    supported: "u8, u32, i64 indices",
                })
            }
        };
        Ok(vkml_ops::index::Ids { buffer: &self.buffer, dtype, offset })
    }

    /// A convolution of `self: [batch, c_in, (in_h,) in_w]` (`l`) with `kernel` (`kl`, PyTorch's
    /// layout: `[c_out, c_in, (k_h,) k_w]`, or `[c_in, c_out, ...]` when transposed) for
    /// `p`: the 1-D forms (rank-3 layouts) have `p.input[0] = p.kernel[0] = 1`. Both
    /// operands are read through their strides. Returns `[batch, c_out, (out_h,) out_w]`.
    ///
    /// This is what the `conv*` trait methods run once they have read candle's params;
    /// it is public because candle-core 0.11 offers no way to build those params outside
    /// itself.
    ///
    /// # Errors
    /// Dtype mismatch or an integer dtype; layouts of another rank or shape than `p`
    /// gives; bad geometry (`ConvParams::output`); device errors.
    pub fn conv(&self, l: &Layout, kernel: &Self, kl: &Layout, p: &ConvParams) -> CResult<Self> {
        let op = if p.transposed { "conv_transpose" } else { "conv" };
        same_dtype(self, kernel, op)?;
        if !self.dtype.is_float() {
            return Err(candle_core::Error::UnsupportedDTypeForOp(self.dtype, op));
        }
        let dt = ops_dtype(self.dtype, op)?;
        let one_d = l.dims().len() == 3;
        let x_dims = [p.batch, p.c_in, p.input[0], p.input[1]];
        let w_dims = p.w_dims();
        let as4 = |dims: &[usize], st: &[usize], want: [usize; 4], what: &str| -> CResult<[usize; 4]> {
            let (d4, s4) = match (dims, st) {
                (&[a, b, c], &[sa, sb, sc]) if one_d => ([a, b, 1, c], [sa, sb, 0, sc]),
                (&[a, b, c, d], &[sa, sb, sc, sd]) if !one_d => ([a, b, c, d], [sa, sb, sc, sd]),
                _ => candle_core::bail!("{op}: {what} has dims {dims:?}, not the rank of the input"),
            };
            if d4 != want || (one_d && (p.input[0] != 1 || p.kernel[0] != 1)) {
                candle_core::bail!("{op}: {what} has dims {dims:?}, the params give {want:?}");
            }
            Ok(s4)
        };
        let xs = as4(l.dims(), l.stride(), x_dims, "the input")?;
        let ws = as4(kl.dims(), kl.stride(), w_dims, "the kernel")?;
        let yd = p.y_dims().map_err(cerr)?;
        let out = if one_d { Layout::contiguous((yd[0], yd[1], yd[3])) } else { Layout::contiguous(yd.to_vec()) };
        let x = View { buffer: &self.buffer, offset: l.start_offset(), strides: &xs };
        let w = View { buffer: &kernel.buffer, offset: kl.start_offset(), strides: &ws };
        self.map(&out, self.dtype, |s, y| vkml_ops::conv::conv(s, dt, p, x, w, y))
    }

    /// `avg_pool2d` / `max_pool2d` of `self: [b, c, h, w]` (`l`).
    fn pool(&self, pool: Pool, l: &Layout, kernel: (usize, usize), stride: (usize, usize)) -> CResult<Self> {
        let dt = ops_dtype(self.dtype, pool.name())?;
        if pool == Pool::Avg && !self.dtype.is_float() {
            return Err(candle_core::Error::UnsupportedDTypeForOp(self.dtype, pool.name()));
        }
        let dims = dims4(l, pool.name())?;
        let (k, st) = ([kernel.0, kernel.1], [stride.0, stride.1]);
        let [oh, ow] = vkml_ops::spatial::pool_output(pool, dims, k, st).map_err(cerr)?;
        let out = Layout::contiguous((dims[0], dims[1], oh, ow));
        self.map(&out, self.dtype, |s, y| vkml_ops::spatial::pool2d(s, dt, pool, dims, self.view(l), k, st, y))
    }

    /// `upsample_*` of `self: [b, c, h, w]`, or `[b, c, w]` for the 1-D nearest form
    /// (`out[0] == 1`), to `out`.
    fn upsample(&self, mode: Resample, l: &Layout, out: [usize; 2]) -> CResult<Self> {
        let op = if mode == Resample::Nearest { "upsample_nearest" } else { "upsample_bilinear2d" };
        let dt = ops_dtype(self.dtype, op)?;
        if mode != Resample::Nearest && !self.dtype.is_float() {
            return Err(candle_core::Error::UnsupportedDTypeForOp(self.dtype, op));
        }
        let (dims, strides, y) = match (l.dims(), l.stride()) {
            (&[b, c, w], &[sb, sc, sw]) if out[0] == 1 && mode == Resample::Nearest => {
                ([b, c, 1, w], vec![sb, sc, 0, sw], Layout::contiguous((b, c, out[1])))
            }
            (&[b, c, h, w], st) => ([b, c, h, w], st.to_vec(), Layout::contiguous((b, c, out[0], out[1]))),
            (d, _) => candle_core::bail!("{op}: input of dims {d:?}, expected [batch, channels, (h,) w]"),
        };
        let x = View { buffer: &self.buffer, offset: l.start_offset(), strides: &strides };
        self.map(&y, self.dtype, |s, yb| vkml_ops::spatial::upsample2d(s, dt, mode, dims, x, out, yb))
    }

    /// `index_select` or `gather` (`mode`) of `self` (`l`) along `dim` by `ids` (`ids_l`):
    /// both operands packed first where strided, out-of-range indices reported through
    /// the device's status word.
    fn select(&self, mode: Mode, l: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> CResult<Self> {
        let op = mode.name();
        let dt = ops_dtype(self.dtype, op)?;
        let (left, d_src, right) = split3(l.dims(), dim);
        let (n_idx, out) = if mode == Mode::Gather {
            let n_idx = ids_l.dims()[dim];
            if split3(ids_l.dims(), dim) != (left, n_idx, right) {
                candle_core::bail!(
                    "gather: indices {:?} do not match the source {:?} on dim {dim}",
                    ids_l.dims(),
                    l.dims()
                );
            }
            (n_idx, Layout::contiguous(ids_l.shape()))
        } else {
            let n_idx = ids_l.shape().elem_count();
            let mut out_dims = l.dims().to_vec();
            out_dims[dim] = n_idx;
            (n_idx, Layout::contiguous(out_dims))
        };
        let (src, so) = contiguous(self, l)?;
        let (idx, io) = contiguous(ids, ids_l)?;
        let status = &self.device.inner.status;
        self.map(&out, self.dtype, |s, y| {
            vkml_ops::index::select(
                s,
                mode,
                dt,
                Packed { buffer: &src.buffer, offset: so },
                (left, d_src, right),
                idx.ids(io)?,
                n_idx,
                Packed { buffer: y, offset: 0 },
                status,
            )
        })
    }

    /// scatter_set / scatter_add_set in place on `self` (`l` contiguous).
    #[allow(clippy::too_many_arguments)]
    fn scatter(
        &mut self,
        add: bool,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> CResult<()> {
        let op = if add { "scatter_add_set" } else { "scatter_set" };
        same_dtype(self, src, op)?;
        let dt = ops_dtype(self.dtype, op)?;
        if !l.is_contiguous() {
            candle_core::bail!("{op}: the destination must be contiguous, got {l:?}");
        }
        same_dims(ids_l, src_l, op)?;
        let (left, d_dst, right) = split3(l.dims(), dim);
        let n_idx = ids_l.dims()[dim];
        if split3(ids_l.dims(), dim) != (left, n_idx, right) {
            candle_core::bail!(
                "{op}: indices {:?} do not match the destination {:?} on dim {dim}",
                ids_l.dims(),
                l.dims()
            );
        }
        let (idx, io) = contiguous(ids, ids_l)?;
        let (sp, so) = contiguous(src, src_l)?;
        let status = &self.device.inner.status;
        let dst = Packed { buffer: &self.buffer, offset: l.start_offset() };
        let ids = idx.ids(io).map_err(cerr)?;
        self.device.with_stream(|s| {
            vkml_ops::index::scatter(
                s,
                add,
                dt,
                dst,
                (left, d_dst, right),
                ids,
                Packed { buffer: &sp.buffer, offset: so },
                n_idx,
                status,
            )
            .map_err(cerr)
        })
    }

    /// Byte-exact strided copy for dtypes the kernels do not compute on: only layouts
    /// whose elements are one contiguous run.
    fn copy_raw(&self, l: &Layout, dst: &VulkanStorage, dst_offset: usize) -> CResult<()> {
        let Some((a, b)) = l.contiguous_offsets() else {
            return Err(candle_core::Error::UnsupportedDTypeForOp(self.dtype, "vulkan strided copy"));
        };
        let es = self.dtype.size_in_bytes() as u64;
        self.device.with_stream(|s| {
            s.copy(&self.buffer, a as u64 * es, &dst.buffer, dst_offset as u64 * es, (b - a) as u64 * es).map_err(cerr)
        })
    }
}

impl BackendStorage for VulkanStorage {
    type Device = VulkanDevice;

    fn try_clone(&self, _: &Layout) -> CResult<Self> {
        let y = self.device.alloc(self.len, self.dtype)?;
        let bytes = (self.len * self.dtype.size_in_bytes()) as u64;
        self.device.with_stream(|s| s.copy(&self.buffer, 0, &y, 0, bytes).map_err(cerr))?;
        Ok(self.device.storage(y, self.dtype, self.len))
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn device(&self) -> &VulkanDevice {
        &self.device
    }

    fn to_cpu_storage(&self) -> CResult<CpuStorage> {
        self.device.flush()?;
        let mut bytes = vec![0u8; self.len * self.dtype.size_in_bytes()];
        self.buffer.read(0, &mut bytes).map_err(cerr)?;
        self.device.check_status()?;
        fn cast<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
            let mut v = vec![T::zeroed(); b.len() / std::mem::size_of::<T>()];
            bytemuck::cast_slice_mut(&mut v).copy_from_slice(b);
            v
        }
        Ok(match self.dtype {
            DType::U8 => CpuStorage::U8(bytes),
            DType::U32 => CpuStorage::U32(cast(&bytes)),
            DType::I16 => CpuStorage::I16(cast(&bytes)),
            DType::I32 => CpuStorage::I32(cast(&bytes)),
            DType::I64 => CpuStorage::I64(cast(&bytes)),
            DType::BF16 => CpuStorage::BF16(cast(&bytes)),
            DType::F16 => CpuStorage::F16(cast(&bytes)),
            DType::F32 => CpuStorage::F32(cast(&bytes)),
            DType::F64 => CpuStorage::F64(cast(&bytes)),
            dt => return Err(candle_core::Error::UnsupportedDTypeForOp(dt, "vulkan to_cpu_storage")),
        })
    }

    fn affine(&self, l: &Layout, mul: f64, add: f64) -> CResult<Self> {
        let dt = ops_dtype(self.dtype, "affine")?;
        self.map(l, self.dtype, |s, y| elementwise::affine(s, dt, l.dims(), self.view(l), mul, add, y))
    }

    fn powf(&self, l: &Layout, e: f64) -> CResult<Self> {
        let dt = ops_dtype(self.dtype, "powf")?;
        self.map(l, self.dtype, |s, y| elementwise::powf(s, dt, l.dims(), self.view(l), e, y))
    }

    fn elu(&self, l: &Layout, alpha: f64) -> CResult<Self> {
        let dt = ops_dtype(self.dtype, "elu")?;
        self.map(l, self.dtype, |s, y| elementwise::elu(s, dt, l.dims(), self.view(l), alpha, y))
    }

    fn reduce_op(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> CResult<Self> {
        use vkml_ops::reduce::{self, ReduceOp as R};
        let r = match op {
            ReduceOp::Sum => R::Sum,
            ReduceOp::Min => R::Min,
            ReduceOp::Max => R::Max,
            ReduceOp::ArgMin => R::ArgMin,
            ReduceOp::ArgMax => R::ArgMax,
        };
        let dt = ops_dtype(self.dtype, r.name())?;
        let out_dt = if r.is_arg() { DType::U32 } else { self.dtype };
        let mut out_dims = l.dims().to_vec();
        for &d in dims {
            if d < out_dims.len() {
                out_dims[d] = 1;
            }
        }
        let out = Layout::contiguous(out_dims);
        self.map(&out, out_dt, |s, y| reduce::reduce(s, r, dt, l.dims(), self.view(l), dims, y))
    }

    fn cmp(&self, op: CmpOp, rhs: &Self, l: &Layout, rl: &Layout) -> CResult<Self> {
        use vkml_ops::elementwise::CmpOp as C;
        same_dtype(self, rhs, "cmp")?;
        same_dims(l, rl, "cmp")?;
        let c = match op {
            CmpOp::Eq => C::Eq,
            CmpOp::Ne => C::Ne,
            CmpOp::Lt => C::Lt,
            CmpOp::Le => C::Le,
            CmpOp::Gt => C::Gt,
            CmpOp::Ge => C::Ge,
        };
        let dt = ops_dtype(self.dtype, "cmp")?;
        self.map(l, DType::U8, |s, y| elementwise::cmp(s, c, dt, l.dims(), self.view(l), rhs.view(rl), y))
    }

    fn to_dtype(&self, l: &Layout, dtype: DType) -> CResult<Self> {
        let src = ops_dtype(self.dtype, "to_dtype")?;
        let dst = ops_dtype(dtype, "to_dtype")?;
        let out = Layout::contiguous(l.shape());
        self.map(l, dtype, |s, y| {
            elementwise::copy(s, l.dims(), src, self.view(l), dst, View { buffer: y, offset: 0, strides: out.stride() })
        })
    }

    fn unary_impl<B: UnaryOpT>(&self, l: &Layout) -> CResult<Self> {
        let dt = ops_dtype(self.dtype, B::NAME)?;
        let op = unary_op(B::NAME).ok_or_else(|| not_yet(B::NAME))?;
        self.map(l, self.dtype, |s, y| elementwise::unary(s, op, dt, l.dims(), self.view(l), y))
    }

    fn binary_impl<B: BinaryOpT>(&self, rhs: &Self, l: &Layout, rl: &Layout) -> CResult<Self> {
        same_dtype(self, rhs, B::NAME)?;
        same_dims(l, rl, B::NAME)?;
        let dt = ops_dtype(self.dtype, B::NAME)?;
        let op = binary_op(B::NAME).ok_or_else(|| not_yet(B::NAME))?;
        self.map(l, self.dtype, |s, y| elementwise::binary(s, op, dt, l.dims(), self.view(l), rhs.view(rl), y))
    }

    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> CResult<Self> {
        same_dtype(t, f, "where_cond")?;
        same_dims(l, tl, "where_cond")?;
        same_dims(l, fl, "where_cond")?;
        let cdt = ops_dtype(self.dtype, "where_cond")?;
        let dt = ops_dtype(t.dtype, "where_cond")?;
        self.map(l, t.dtype, |s, y| {
            elementwise::where_cond(s, l.dims(), cdt, self.view(l), dt, t.view(tl), f.view(fl), y)
        })
    }

    fn conv1d(&self, l: &Layout, k: &Self, kl: &Layout, p: &candle_core::conv::ParamsConv1D) -> CResult<Self> {
        let [b, l_in, c_out, c_in, k_size, pad, stride, dil] =
            params_fields(p, ["b_size", "l_in", "c_out", "c_in", "k_size", "padding", "stride", "dilation"])?;
        self.conv(l, k, kl, &ConvParams::conv1d(b, c_in, c_out, l_in, k_size, pad, stride, dil, 0, false))
    }

    fn conv_transpose1d(
        &self,
        l: &Layout,
        k: &Self,
        kl: &Layout,
        p: &candle_core::conv::ParamsConvTranspose1D,
    ) -> CResult<Self> {
        let [b, l_in, c_out, c_in, k_size, pad, out_pad, stride, dil] = params_fields(
            p,
            ["b_size", "l_in", "c_out", "c_in", "k_size", "padding", "output_padding", "stride", "dilation"],
        )?;
        self.conv(l, k, kl, &ConvParams::conv1d(b, c_in, c_out, l_in, k_size, pad, stride, dil, out_pad, true))
    }

    fn conv2d(&self, l: &Layout, k: &Self, kl: &Layout, p: &candle_core::conv::ParamsConv2D) -> CResult<Self> {
        let [b, i_h, i_w, k_h, k_w, c_out, c_in, pad, stride, dil] =
            params_fields(p, ["b_size", "i_h", "i_w", "k_h", "k_w", "c_out", "c_in", "padding", "stride", "dilation"])?;
        let cp = ConvParams::conv2d(b, c_in, c_out, [i_h, i_w], [k_h, k_w], pad, stride, dil, 0, false);
        self.conv(l, k, kl, &cp)
    }

    fn conv_transpose2d(
        &self,
        l: &Layout,
        k: &Self,
        kl: &Layout,
        p: &candle_core::conv::ParamsConvTranspose2D,
    ) -> CResult<Self> {
        let [b, i_h, i_w, k_h, k_w, c_out, c_in, pad, out_pad, stride, dil] = params_fields(
            p,
            ["b_size", "i_h", "i_w", "k_h", "k_w", "c_out", "c_in", "padding", "output_padding", "stride", "dilation"],
        )?;
        let cp = ConvParams::conv2d(b, c_in, c_out, [i_h, i_w], [k_h, k_w], pad, stride, dil, out_pad, true);
        self.conv(l, k, kl, &cp)
    }

    fn avg_pool2d(&self, l: &Layout, kernel: (usize, usize), stride: (usize, usize)) -> CResult<Self> {
        self.pool(Pool::Avg, l, kernel, stride)
    }

    fn max_pool2d(&self, l: &Layout, kernel: (usize, usize), stride: (usize, usize)) -> CResult<Self> {
        self.pool(Pool::Max, l, kernel, stride)
    }

    fn upsample_nearest1d(&self, l: &Layout, out: usize) -> CResult<Self> {
        self.upsample(Resample::Nearest, l, [1, out])
    }

    fn upsample_nearest2d(&self, l: &Layout, out_h: usize, out_w: usize) -> CResult<Self> {
        self.upsample(Resample::Nearest, l, [out_h, out_w])
    }

    fn upsample_bilinear2d(
        &self,
        l: &Layout,
        out_h: usize,
        out_w: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> CResult<Self> {
        self.upsample(Resample::Bilinear { align_corners, scale_h, scale_w }, l, [out_h, out_w])
    }

    fn gather(&self, l: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> CResult<Self> {
        self.select(Mode::Gather, l, ids, ids_l, dim)
    }

    fn scatter_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> CResult<()> {
        self.scatter(false, l, ids, ids_l, src, src_l, dim)
    }

    fn scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> CResult<()> {
        self.scatter(true, l, ids, ids_l, src, src_l, dim)
    }

    fn index_select(&self, ids: &Self, l: &Layout, ids_l: &Layout, dim: usize) -> CResult<Self> {
        self.select(Mode::IndexSelect, l, ids, ids_l, dim)
    }

    fn index_add(
        &self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> CResult<Self> {
        same_dtype(self, src, "index_add")?;
        let dt = ops_dtype(self.dtype, "index_add")?;
        let (left, d_dst, right) = split3(l.dims(), dim);
        let n_idx = ids_l.shape().elem_count();
        if src_l.dims().len() != l.dims().len() || split3(src_l.dims(), dim) != (left, n_idx, right) {
            candle_core::bail!(
                "index_add: src {:?} does not match dst {:?} with {n_idx} indices on dim {dim}",
                src_l.dims(),
                l.dims()
            );
        }
        let (base, bo) = contiguous(self, l)?;
        let (idx, io) = contiguous(ids, ids_l)?;
        let (sp, spo) = contiguous(src, src_l)?;
        let status = &self.device.inner.status;
        self.map(&Layout::contiguous(l.shape()), self.dtype, |s, y| {
            vkml_ops::index::index_add(
                s,
                dt,
                Packed { buffer: &base.buffer, offset: bo },
                (left, d_dst, right),
                idx.ids(io)?,
                Packed { buffer: &sp.buffer, offset: spo },
                n_idx,
                Packed { buffer: y, offset: 0 },
                status,
            )
        })
    }

    fn matmul(&self, rhs: &Self, (b, m, n, k): (usize, usize, usize, usize), l: &Layout, rl: &Layout) -> CResult<Self> {
        same_dtype(self, rhs, "matmul")?;
        let dt = ops_dtype(self.dtype, "matmul")?;
        let (a, al) = mat_layout(self, l, b, "lhs")?;
        let (bb, bl) = mat_layout(rhs, rl, b, "rhs")?;
        let out = Layout::contiguous((b, m, n));
        self.map(&out, self.dtype, |s, y| {
            vkml_ops::matmul::matmul(s, dt, (b, m, n, k), &a.buffer, al, &bb.buffer, bl, y)
        })
    }

    fn copy_strided_src(&self, dst: &mut Self, dst_offset: usize, l: &Layout) -> CResult<()> {
        if self.dtype != dst.dtype {
            return Err(candle_core::Error::DTypeMismatchBinaryOp {
                lhs: self.dtype,
                rhs: dst.dtype,
                op: "copy_strided_src",
            }
            .bt());
        }
        let Ok(dt) = ops_dtype(self.dtype, "copy_strided_src") else {
            return self.copy_raw(l, dst, dst_offset);
        };
        let out = Layout::contiguous(l.shape());
        let dst_view = View { buffer: &dst.buffer, offset: dst_offset, strides: out.stride() };
        self.device.with_stream(|s| elementwise::copy(s, l.dims(), dt, self.view(l), dt, dst_view).map_err(cerr))
    }

    fn copy2d(
        &self,
        dst: &mut Self,
        d1: usize,
        d2: usize,
        src_stride1: usize,
        dst_stride1: usize,
        src_offset: usize,
        dst_offset: usize,
    ) -> CResult<()> {
        if self.dtype != dst.dtype {
            return Err(
                candle_core::Error::DTypeMismatchBinaryOp { lhs: self.dtype, rhs: dst.dtype, op: "copy2d" }.bt()
            );
        }
        let Ok(dt) = ops_dtype(self.dtype, "copy2d") else {
            // Raw bytes: one copy per row.
            let es = self.dtype.size_in_bytes() as u64;
            return self.device.with_stream(|s| {
                for r in 0..d1 {
                    let (so, dof) = ((src_offset + r * src_stride1) as u64, (dst_offset + r * dst_stride1) as u64);
                    s.copy(&self.buffer, so * es, &dst.buffer, dof * es, d2 as u64 * es).map_err(cerr)?;
                }
                Ok(())
            });
        };
        let src = View { buffer: &self.buffer, offset: src_offset, strides: &[src_stride1, 1] };
        let dv = View { buffer: &dst.buffer, offset: dst_offset, strides: &[dst_stride1, 1] };
        self.device.with_stream(|s| elementwise::copy(s, &[d1, d2], dt, src, dt, dv).map_err(cerr))
    }

    fn const_set(&mut self, v: candle_core::scalar::Scalar, l: &Layout) -> CResult<()> {
        use candle_core::scalar::Scalar;
        // A 32-bit fill pattern of the value, for layouts that are one contiguous run.
        let pattern = match v {
            Scalar::F32(x) => Some(x.to_bits()),
            Scalar::U32(x) => Some(x),
            Scalar::I32(x) => Some(x as u32),
            Scalar::F16(x) => Some(u32::from(x.to_bits()) * 0x1_0001),
            Scalar::BF16(x) => Some(u32::from(x.to_bits()) * 0x1_0001),
            Scalar::I16(x) => Some(u32::from(x as u16) * 0x1_0001),
            Scalar::U8(x) => Some(u32::from(x) * 0x0101_0101),
            _ => None,
        };
        let es = self.dtype.size_in_bytes();
        match (pattern, l.contiguous_offsets()) {
            (Some(p), Some((a, b))) if (a * es).is_multiple_of(4) && (b * es).is_multiple_of(4) => self
                .device
                .with_stream(|s| s.fill(&self.buffer, (a * es) as u64, ((b - a) * es) as u64, p).map_err(cerr)),
            _ => {
                // Strided or unaligned: a one-element storage of the value, broadcast by
                // a strided copy (which refuses a destination that writes an element twice).
                let one = self.device.storage_from_slice_scalar(v)?;
                let strides = vec![0; l.dims().len()];
                let dt = ops_dtype(self.dtype, "const_set")?;
                let src = View { buffer: &one.buffer, offset: 0, strides: &strides };
                self.device.with_stream(|s| elementwise::copy(s, l.dims(), dt, src, dt, self.view(l)).map_err(cerr))
            }
        }
    }
}

impl VulkanDevice {
    fn storage_from_slice_scalar(&self, v: candle_core::scalar::Scalar) -> CResult<VulkanStorage> {
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
    fn rand(&self, shape: &Shape, dtype: DType, dist: vkml_ops::rand::Distribution) -> CResult<VulkanStorage> {
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

impl BackendDevice for VulkanDevice {
    type Storage = VulkanStorage;

    /// Opens the Vulkan device with enumeration index `ordinal` (as `vkml info` lists).
    fn new(ordinal: usize) -> CResult<Self> {
        let dev = Device::open(&DeviceSelector::Ordinal(ordinal), DeviceOptions::default()).map_err(cerr)?;
        VulkanDevice::from_device(&dev, ordinal).map_err(cerr)
    }

    /// Candle's `DeviceLocation` is a closed enum (Cpu, Cuda, Metal) with no Vulkan
    /// variant; this reports the ordinal as `Cuda { gpu_id }`, the variant for a discrete
    /// GPU index. Use [`VulkanDevice::hal`] for the device's name and capabilities.
    fn location(&self) -> DeviceLocation {
        DeviceLocation::Cuda { gpu_id: self.inner.ordinal }
    }

    fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> CResult<VulkanStorage> {
        let n = shape.elem_count();
        let buffer = self.alloc(n, dtype)?;
        let bytes = buffer.size();
        self.with_stream(|s| s.fill(&buffer, 0, bytes & !3, 0).map_err(cerr))?;
        Ok(self.storage(buffer, dtype, n))
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> CResult<VulkanStorage> {
        let n = shape.elem_count();
        Ok(self.storage(self.alloc(n, dtype)?, dtype, n))
    }

    fn storage_from_slice<T: candle_core::WithDType>(&self, data: &[T]) -> CResult<VulkanStorage> {
        self.storage_from_cpu_storage(&T::to_cpu_storage(data))
    }

    fn storage_from_cpu_storage(&self, c: &CpuStorage) -> CResult<VulkanStorage> {
        fn b<T: bytemuck::Pod>(v: &[T]) -> &[u8] {
            bytemuck::cast_slice(v)
        }
        let (bytes, len) = match c {
            CpuStorage::U8(v) => (b(v), v.len()),
            CpuStorage::U32(v) => (b(v), v.len()),
            CpuStorage::I16(v) => (b(v), v.len()),
            CpuStorage::I32(v) => (b(v), v.len()),
            CpuStorage::I64(v) => (b(v), v.len()),
            CpuStorage::BF16(v) => (b(v), v.len()),
            CpuStorage::F16(v) => (b(v), v.len()),
            CpuStorage::F32(v) => (b(v), v.len()),
            CpuStorage::F64(v) => (b(v), v.len()),
            other => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(other.dtype(), "vulkan storage_from_cpu_storage"))
            }
        };
        self.upload_bytes(bytes, c.dtype(), len)
    }

    fn storage_from_cpu_storage_owned(&self, c: CpuStorage) -> CResult<VulkanStorage> {
        self.storage_from_cpu_storage(&c)
    }

    fn rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, hi: f64) -> CResult<VulkanStorage> {
        self.rand(shape, dtype, vkml_ops::rand::Distribution::Uniform { lo, hi })
    }

    fn rand_normal(&self, shape: &Shape, dtype: DType, mean: f64, std: f64) -> CResult<VulkanStorage> {
        self.rand(shape, dtype, vkml_ops::rand::Distribution::Normal { mean, std })
    }

    /// Sets the seed and restarts its sequence: fills after `set_seed(s)` repeat those
    /// after any earlier `set_seed(s)`.
    fn set_seed(&self, seed: u64) -> CResult<()> {
        *self.inner.seed.lock() = (seed, 0);
        Ok(())
    }

    fn get_current_seed(&self) -> CResult<u64> {
        Ok(self.inner.seed.lock().0)
    }

    fn synchronize(&self) -> CResult<()> {
        self.inner.stream.lock().finish_and_wait().map_err(cerr)?;
        self.check_status()
    }
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

/// A matmul operand `[batch dims..., rows, cols]` (`l`) as a [`MatLayout`]: read in place
/// when its batch dims of size > 1 merge into one stride (or there are none), else from a
/// packed copy.
fn mat_layout(s: &VulkanStorage, l: &Layout, batch: usize, what: &str) -> CResult<(VulkanStorage, MatLayout)> {
    let (dims, st) = (l.dims(), l.stride());
    let r = dims.len();
    if r < 2 || dims[..r - 2].iter().product::<usize>() != batch {
        candle_core::bail!("matmul: {what} of shape {dims:?} is not [{batch} batches, rows, cols]");
    }
    // Innermost batch dim of size > 1 gives the stride; each outer one must equal the
    // inner stride times the extent merged so far.
    let mut bstride: Option<usize> = None;
    let mut extent = 1usize;
    let mut mergeable = true;
    for i in (0..r - 2).rev() {
        if dims[i] == 1 {
            continue;
        }
        match bstride {
            None => bstride = Some(st[i]),
            Some(inner) => mergeable &= st[i] == inner * extent,
        }
        extent *= dims[i];
    }
    if mergeable {
        let ml = MatLayout { offset: l.start_offset(), batch: bstride.unwrap_or(0), row: st[r - 2], col: st[r - 1] };
        return Ok((s.device.shared_storage(s.buffer.clone(), s.dtype, s.len), ml));
    }
    let (p, off) = contiguous(s, l)?;
    let (rows, cols) = (dims[r - 2], dims[r - 1]);
    Ok((p, MatLayout { offset: off, batch: rows * cols, row: cols, col: 1 }))
}

/// The numeric fields `names` of one of candle's conv params structs, read from its
/// `Debug` form (`ParamsConv1D { b_size: 2, l_in: 9, ... }`): candle-core 0.11 keeps their
/// fields `pub(crate)` with no accessors, so a backend outside candle-core has no other
/// way to read them.
///
/// # Errors
/// A field missing or not a number (a candle-core whose params differ from 0.11's).
fn params_fields<const N: usize>(p: &impl fmt::Debug, names: [&str; N]) -> CResult<[usize; N]> {
    let text = format!("{p:?}");
    let mut out = [0; N];
    for (o, name) in out.iter_mut().zip(names) {
        // Every field follows "{ " or ", ", so " name: " does not match "output_name: ".
        let pat = format!(" {name}: ");
        let value = text.find(&pat).map(|i| &text[i + pat.len()..]).and_then(|rest| {
            let digits: &str = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())];
            digits.parse::<usize>().ok()
        });
        *o = value.ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "vkml: cannot read `{name}` from candle's conv params `{text}` (vkml-candle reads candle-core 0.11's)"
            ))
        })?;
    }
    Ok(out)
}

/// `l`'s dims as `[batch, channels, h, w]`.
fn dims4(l: &Layout, op: &str) -> CResult<[usize; 4]> {
    match *l.dims() {
        [b, c, h, w] => Ok([b, c, h, w]),
        ref d => candle_core::bail!("{op}: input of dims {d:?}, expected [batch, channels, h, w]"),
    }
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


#[cfg(test)]
mod tests {
    use super::params_fields;

    /// The `Debug` form `derive(Debug)` gives candle-core 0.11's `ParamsConvTranspose1D`
    /// (same struct name, fields and order): `padding` is found apart from
    /// `output_padding`, and a missing field is an error naming it.
    #[test]
    fn reads_conv_params_from_debug() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct ParamsConvTranspose1D {
            b_size: usize,
            l_in: usize,
            c_out: usize,
            c_in: usize,
            k_size: usize,
            padding: usize,
            output_padding: usize,
            stride: usize,
            dilation: usize,
        }
        let p = ParamsConvTranspose1D {
            b_size: 2,
            l_in: 17,
            c_out: 3,
            c_in: 5,
            k_size: 4,
            padding: 6,
            output_padding: 1,
            stride: 12,
            dilation: 7,
        };
        let got = params_fields(&p, ["output_padding", "padding", "stride", "l_in", "dilation", "b_size"]).unwrap();
        assert_eq!(got, [1, 6, 12, 17, 7, 2]);
        let err = params_fields(&p, ["groups"]).unwrap_err().to_string();
        assert!(err.contains("`groups`"), "{err}");
    }
}
