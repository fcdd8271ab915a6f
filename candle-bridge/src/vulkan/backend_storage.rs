//! `impl BackendStorage for VulkanStorage`: candle's storage trait, every method
//! recorded on the device's stream.

use candle_core::backend::BackendStorage;
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::{CpuStorage, DType, Layout};
use vkml_ops::conv::ConvParams;
use vkml_ops::elementwise::{self, BinaryOp, UnaryOp, View};
use vkml_ops::index::{Mode, Packed};
use vkml_ops::matmul::MatLayout;
use vkml_ops::spatial::{Pool, Resample};

use super::candle_compat::params_fields;
use super::{
    cerr, contiguous, not_yet, ops_dtype, same_dims, same_dtype, split3, CResult, VulkanDevice, VulkanStorage,
};

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
            DType::F8E4M3 => CpuStorage::F8E4M3(bytes.into_iter().map(float8::F8E4M3::from_bits).collect()),
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
        if self.dtype == DType::F8E4M3 || dtype == DType::F8E4M3 {
            return self.to_dtype_f8e4m3(l, dtype);
        }
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
        if self.dtype == DType::F8E4M3 {
            // No Vulkan device vkml knows exposes 8-bit float products (VK_EXT_shader_float8's
            // cooperative-matrix types; the H100's driver 580 lists none): say what to do.
            candle_core::bail!(
                "vkml: matmul of F8E4M3 needs 8-bit float cooperative matrices ({}: none); convert to F16 or BF16 first (to_dtype on the device)",
                self.device.hal().caps().name
            )
        }
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
            Scalar::F8E4M3(x) => Some(u32::from(x.to_bits()) * 0x0101_0101),
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
                // F8E4M3 (held as bytes): its bits through the U8 kernel.
                let (v, dt) = match v {
                    Scalar::F8E4M3(x) => (Scalar::U8(x.to_bits()), vkml_ops::Dtype::U8),
                    v => (v, ops_dtype(self.dtype, "const_set")?),
                };
                let one = self.device.storage_from_slice_scalar(v)?;
                let strides = vec![0; l.dims().len()];
                let src = View { buffer: &one.buffer, offset: 0, strides: &strides };
                self.device.with_stream(|s| elementwise::copy(s, l.dims(), dt, src, dt, self.view(l)).map_err(cerr))
            }
        }
    }
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
