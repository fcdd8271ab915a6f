//! [`VulkanStorage`]'s own methods: its buffer, views of it, and the kernels the trait
//! methods share (convolution, pooling, upsampling, indexing, raw copies).

use std::fmt;

use candle_core::{DType, Layout};
use vkml_hal::{Buffer, Stream};
use vkml_ops::conv::ConvParams;
use vkml_ops::elementwise::View;
use vkml_ops::index::{Mode, Packed};
use vkml_ops::spatial::{Pool, Resample};
use vkml_ops::Dtype;

use super::{cerr, contiguous, ops_dtype, packed, same_dims, same_dtype, split3, CResult, VulkanDevice, VulkanStorage};

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

impl VulkanStorage {
    /// The buffer (elements of [`BackendStorage::dtype`], packed).
    ///
    /// [`BackendStorage::dtype`]: candle_core::backend::BackendStorage::dtype
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
    /// What kernels that take plain buffers read. A shared result does not own the buffer:
    /// keep `self` alive until the ops reading the result are recorded (dropped earlier, an
    /// owned buffer goes back to the recycler and may serve an op recorded in between).
    ///
    /// # Errors
    /// Device errors of the copy.
    pub fn packed(&self, l: &Layout) -> CResult<VulkanStorage> {
        packed(self, l)
    }

    /// `to_dtype` where either side is `F8E4M3`, with the bits of candle's CPU: E4M3 to and
    /// from f32 on the GPU (`vkml_ops::fp8`), other dtypes through an f32 copy (exact
    /// both ways but from F64, which candle rounds once and an f32 step would round twice:
    /// refused); E4M3 to E4M3 a packed copy.
    pub(super) fn to_dtype_f8e4m3(&self, l: &Layout, dtype: DType) -> CResult<VulkanStorage> {
        let n = l.shape().elem_count();
        let dev = &self.device;
        if self.dtype == dtype {
            return super::packed_copy(self, l);
        }
        if self.dtype == DType::F8E4M3 {
            let x = super::packed(self, l)?;
            let f = dev.alloc(n, DType::F32)?;
            dev.with_stream(|s| vkml_ops::fp8::e4m3_to_f32(s, &x.buffer, n, &f).map_err(cerr))?;
            let f = dev.storage(f, DType::F32, n);
            return if dtype == DType::F32 {
                Ok(f)
            } else {
                candle_core::backend::BackendStorage::to_dtype(&f, &Layout::contiguous(l.shape()), dtype)
            };
        }
        if self.dtype == DType::F64 {
            candle_core::bail!(
                "vkml: F64 to F8E4M3 would round twice through F32 (candle rounds once): convert to F32 first"
            )
        }
        let f = if self.dtype == DType::F32 {
            super::packed(self, l)?
        } else {
            candle_core::backend::BackendStorage::to_dtype(self, l, DType::F32)?
        };
        let y = dev.alloc(n, DType::F8E4M3)?;
        dev.with_stream(|s| vkml_ops::fp8::f32_to_e4m3(s, &f.buffer, n, &y).map_err(cerr))?;
        Ok(dev.storage(y, DType::F8E4M3, n))
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
    pub(super) fn ids(&self, offset: usize) -> vkml_ops::Result<vkml_ops::index::Ids<'_>> {
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
    pub(super) fn pool(&self, pool: Pool, l: &Layout, kernel: (usize, usize), stride: (usize, usize)) -> CResult<Self> {
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
    pub(super) fn upsample(&self, mode: Resample, l: &Layout, out: [usize; 2]) -> CResult<Self> {
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
    pub(super) fn select(&self, mode: Mode, l: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> CResult<Self> {
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
    pub(super) fn scatter(
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
    pub(super) fn copy_raw(&self, l: &Layout, dst: &VulkanStorage, dst_offset: usize) -> CResult<()> {
        let Some((a, b)) = l.contiguous_offsets() else {
            if self.dtype.size_in_bytes() == 1 {
                // One-byte elements (F8E4M3): the bits through the U8 strided copy.
                let out = Layout::contiguous(l.shape());
                let dst_view = View { buffer: &dst.buffer, offset: dst_offset, strides: out.stride() };
                return self.device.with_stream(|s| {
                    vkml_ops::elementwise::copy(s, l.dims(), Dtype::U8, self.view(l), Dtype::U8, dst_view).map_err(cerr)
                });
            }
            return Err(candle_core::Error::UnsupportedDTypeForOp(self.dtype, "vulkan strided copy"));
        };
        let es = self.dtype.size_in_bytes() as u64;
        self.device.with_stream(|s| {
            s.copy(&self.buffer, a as u64 * es, &dst.buffer, dst_offset as u64 * es, (b - a) as u64 * es).map_err(cerr)
        })
    }
}

/// `l`'s dims as `[batch, channels, h, w]`.
fn dims4(l: &Layout, op: &str) -> CResult<[usize; 4]> {
    match *l.dims() {
        [b, c, h, w] => Ok([b, c, h, w]),
        ref d => candle_core::bail!("{op}: input of dims {d:?}, expected [batch, channels, h, w]"),
    }
}
