//! The tensor front: [`Tensor`], candle's tensor methods (names, `Shape`, `Layout`,
//! `DType`, errors) over any `candle_core::backend::BackendStorage`.
//!
//! Candle's `Device`/`Storage` enums are closed, so a `candle_core::Tensor` cannot hold
//! [`crate::vulkan::VulkanStorage`]. This front is the same idea one level down: a
//! storage behind an `Arc` plus a `Layout`; view ops (`narrow`, `transpose`,
//! `broadcast_as`, `reshape` of a contiguous tensor) only change the layout, compute ops
//! call the storage's trait methods. Written generic over the storage, model code runs
//! on Vulkan ([`crate::vulkan::VulkanStorage`]) and on candle's own `CpuStorage`, which
//! is the conformance oracle (DESIGN.md, "candle-bridge").
//!
//! Ops candle keeps outside `BackendStorage` (candle-nn's `rms_norm` and rope, quantized
//! matmul and embedding, attention over a KV cache) are vkml-models' `ModelStorage`
//! trait, over [`Tensor::storage`], [`Tensor::layout`] and [`Tensor::from_storage`].
//!
//! Backprop is not tracked: the front is for inference.

use std::sync::Arc;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::{CpuStorage, DType, Layout, Shape, WithDType};

type CResult<T> = candle_core::Result<T>;

/// An n-dimensional array on a backend: a shared storage and a `Layout` into it.
/// Cheap to clone (the storage is shared).
pub struct Tensor<S: BackendStorage> {
    storage: Arc<S>,
    layout: Layout,
}

impl<S: BackendStorage> Clone for Tensor<S> {
    fn clone(&self) -> Self {
        Tensor { storage: self.storage.clone(), layout: self.layout.clone() }
    }
}

impl<S: BackendStorage + std::fmt::Debug> std::fmt::Debug for Tensor<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {:?}, {:?})", self.layout.dims(), self.storage.dtype(), self.storage)
    }
}

fn check_same_shape(a: &Shape, b: &Shape, op: &'static str) -> CResult<()> {
    if a != b {
        return Err(candle_core::Error::ShapeMismatchBinaryOp { lhs: a.clone(), rhs: b.clone(), op }.bt());
    }
    Ok(())
}

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// A contiguous tensor of `shape` over `storage` (which must hold at least
    /// `shape.elem_count()` elements).
    pub fn from_storage(storage: S, shape: impl Into<Shape>) -> Self {
        Tensor { storage: Arc::new(storage), layout: Layout::contiguous(shape) }
    }

    /// A tensor from host data (candle's `Tensor::from_slice`).
    ///
    /// # Errors
    /// When `data.len()` is not the shape's element count; device errors.
    pub fn from_slice<T: WithDType>(data: &[T], shape: impl Into<Shape>, dev: &S::Device) -> CResult<Self> {
        let shape = shape.into();
        if shape.elem_count() != data.len() {
            return Err(candle_core::Error::ShapeMismatch { buffer_size: data.len(), shape }.bt());
        }
        Ok(Self::from_storage(dev.storage_from_slice(data)?, shape))
    }

    /// Zeros (candle's `Tensor::zeros`).
    ///
    /// # Errors
    /// Device errors.
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, dev: &S::Device) -> CResult<Self> {
        let shape = shape.into();
        Ok(Self::from_storage(dev.zeros_impl(&shape, dtype)?, shape))
    }

    /// A copy of a `candle_core::Tensor` (any device) on `dev`.
    ///
    /// # Errors
    /// Device errors; dtypes the backend cannot hold.
    pub fn from_candle(t: &candle_core::Tensor, dev: &S::Device) -> CResult<Self> {
        let t = t.to_device(&candle_core::Device::Cpu)?.contiguous()?;
        let (st, l) = t.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*st else { candle_core::bail!("to_device(Cpu) gave a non-CPU storage") };
        // `t` is contiguous, but its storage may be larger than the view.
        let mut packed = scratch_alloc(&candle_core::cpu_backend::CpuDevice, l.shape(), t.dtype())?;
        cpu.copy_strided_src(&mut packed, 0, l)?;
        Ok(Self::from_storage(dev.storage_from_cpu_storage_owned(packed)?, l.shape().clone()))
    }

    /// This tensor as a `candle_core::Tensor` on candle's CPU device.
    ///
    /// # Errors
    /// Device errors.
    pub fn to_candle(&self) -> CResult<candle_core::Tensor> {
        let c = self.contiguous()?;
        let all = c.storage.to_cpu_storage()?;
        let mut packed = scratch_alloc(&candle_core::cpu_backend::CpuDevice, c.layout.shape(), c.dtype())?;
        all.copy_strided_src(&mut packed, 0, &c.layout)?;
        Ok(candle_core::Tensor::from_storage(
            candle_core::Storage::Cpu(packed),
            c.layout.shape().clone(),
            candle_core::op::BackpropOp::none(),
            false,
        ))
    }

    /// The elements in row-major order (candle's `flatten_all()?.to_vec1()`).
    ///
    /// # Errors
    /// A dtype other than `T`; device errors.
    pub fn to_vec<T: WithDType>(&self) -> CResult<Vec<T>> {
        self.to_candle()?.flatten_all()?.to_vec1::<T>()
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The layout into the storage.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        self.layout.shape()
    }

    /// The dims.
    pub fn dims(&self) -> &[usize] {
        self.layout.dims()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// The device.
    pub fn device(&self) -> &S::Device {
        self.storage.device()
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.layout.shape().elem_count()
    }

    fn with_layout(&self, layout: Layout) -> Self {
        Tensor { storage: self.storage.clone(), layout }
    }

    fn wrap(&self, storage: S) -> Self {
        Self::from_storage(storage, self.shape().clone())
    }

    /// The storage for writing in place, with the layout it is read through: packed
    /// from element 0 and held by this tensor alone. A tensor that shares its storage
    /// (a clone, a view) or is strided gets a packed copy first, so other tensors never
    /// see the write (candle's copy-on-write `slice_set` contract).
    ///
    /// # Errors
    /// Device errors of the copy.
    pub fn storage_mut(&mut self) -> CResult<(&mut S, &Layout)> {
        if !self.layout.is_contiguous() || self.layout.start_offset() != 0 || Arc::get_mut(&mut self.storage).is_none()
        {
            let mut own = scratch_alloc(self.device(), self.shape(), self.dtype())?;
            self.storage.copy_strided_src(&mut own, 0, &self.layout)?;
            *self = self.wrap(own);
        }
        let storage = Arc::get_mut(&mut self.storage).expect("unique: made so above");
        Ok((storage, &self.layout))
    }

    /// candle's `narrow`: `len` entries of dim `dim` from `start` (a view).
    ///
    /// # Errors
    /// Out-of-range dims.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> CResult<Self> {
        Ok(self.with_layout(self.layout.narrow(dim, start, len)?))
    }

    /// candle's `transpose` (a view).
    ///
    /// # Errors
    /// Out-of-range dims.
    pub fn transpose(&self, d1: usize, d2: usize) -> CResult<Self> {
        Ok(self.with_layout(self.layout.transpose(d1, d2)?))
    }

    /// candle's `broadcast_as` (a view with stride-0 dims).
    ///
    /// # Errors
    /// Shapes that do not broadcast.
    pub fn broadcast_as(&self, shape: impl Into<Shape>) -> CResult<Self> {
        Ok(self.with_layout(self.layout.broadcast_as(shape)?))
    }

    /// candle's `contiguous`: this tensor if it is contiguous, else a packed copy.
    ///
    /// # Errors
    /// Device errors.
    pub fn contiguous(&self) -> CResult<Self> {
        if self.layout.is_contiguous() {
            return Ok(self.clone());
        }
        let dev = self.device();
        let mut dst = scratch_alloc(dev, self.shape(), self.dtype())?;
        self.storage.copy_strided_src(&mut dst, 0, &self.layout)?;
        Ok(self.wrap(dst))
    }

    /// candle's `reshape` (a view when contiguous, else a copy first).
    ///
    /// # Errors
    /// Element counts that differ.
    pub fn reshape(&self, shape: impl Into<Shape>) -> CResult<Self> {
        let shape = shape.into();
        if shape.elem_count() != self.elem_count() {
            return Err(candle_core::Error::ShapeMismatchBinaryOp {
                lhs: self.shape().clone(),
                rhs: shape,
                op: "reshape",
            }
            .bt());
        }
        let c = self.contiguous()?;
        let offset = c.layout.start_offset();
        Ok(c.with_layout(Layout::contiguous_with_offset(shape, offset)))
    }

    /// candle's `to_dtype`.
    ///
    /// # Errors
    /// Conversions the backend lacks.
    pub fn to_dtype(&self, dtype: DType) -> CResult<Self> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Ok(self.wrap(self.storage.to_dtype(&self.layout, dtype)?))
    }

    /// candle's `affine`: `x * mul + add`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn affine(&self, mul: f64, add: f64) -> CResult<Self> {
        Ok(self.wrap(self.storage.affine(&self.layout, mul, add)?))
    }

    /// A candle unary op (`candle_core::op::Silu`, `Exp`, ...), as `Tensor::silu` etc.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn unary<B: UnaryOpT>(&self) -> CResult<Self> {
        Ok(self.wrap(self.storage.unary_impl::<B>(&self.layout)?))
    }

    /// candle's `silu`: `x / (1 + exp(-x))`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn silu(&self) -> CResult<Self> {
        self.unary::<candle_core::op::Silu>()
    }

    /// A candle binary op on tensors of one shape (candle's `add`, `mul`, ...).
    ///
    /// # Errors
    /// Shapes or dtypes that differ.
    pub fn binary<B: BinaryOpT>(&self, rhs: &Self) -> CResult<Self> {
        check_same_shape(self.shape(), rhs.shape(), B::NAME)?;
        Ok(self.wrap(self.storage.binary_impl::<B>(&rhs.storage, &self.layout, &rhs.layout)?))
    }

    /// A candle binary op after broadcasting both sides to a common shape (candle's
    /// `broadcast_add`, `broadcast_mul`, ...).
    ///
    /// # Errors
    /// Shapes that do not broadcast, dtypes that differ.
    pub fn broadcast_binary<B: BinaryOpT>(&self, rhs: &Self) -> CResult<Self> {
        let shape = self.shape().broadcast_shape_binary_op(rhs.shape(), B::NAME)?;
        self.broadcast_as(shape.clone())?.binary::<B>(&rhs.broadcast_as(shape)?)
    }

    /// candle's `add`.
    ///
    /// # Errors
    /// As [`Tensor::binary`].
    pub fn add(&self, rhs: &Self) -> CResult<Self> {
        self.binary::<candle_core::op::Add>(rhs)
    }

    /// candle's `mul`.
    ///
    /// # Errors
    /// As [`Tensor::binary`].
    pub fn mul(&self, rhs: &Self) -> CResult<Self> {
        self.binary::<candle_core::op::Mul>(rhs)
    }

    /// candle's `broadcast_add`.
    ///
    /// # Errors
    /// As [`Tensor::broadcast_binary`].
    pub fn broadcast_add(&self, rhs: &Self) -> CResult<Self> {
        self.broadcast_binary::<candle_core::op::Add>(rhs)
    }

    /// candle's `broadcast_mul`.
    ///
    /// # Errors
    /// As [`Tensor::broadcast_binary`].
    pub fn broadcast_mul(&self, rhs: &Self) -> CResult<Self> {
        self.broadcast_binary::<candle_core::op::Mul>(rhs)
    }
}

/// Candle's unary tensor methods, each through [`Tensor::unary`].
macro_rules! unary_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("candle's `", stringify!($name), "`.")]
            ///
            /// # Errors
            /// Dtypes the backend lacks.
            pub fn $name(&self) -> CResult<Self> {
                self.unary::<candle_core::op::$op>()
            }
        )*
    };
}

/// Candle's binary tensor methods, same-shape and broadcasting forms.
macro_rules! binary_methods {
    ($($name:ident, $bname:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("candle's `", stringify!($name), "` (same shapes).")]
            ///
            /// # Errors
            /// As [`Tensor::binary`].
            pub fn $name(&self, rhs: &Self) -> CResult<Self> {
                self.binary::<candle_core::op::$op>(rhs)
            }

            #[doc = concat!("candle's `", stringify!($bname), "`.")]
            ///
            /// # Errors
            /// As [`Tensor::broadcast_binary`].
            pub fn $bname(&self, rhs: &Self) -> CResult<Self> {
                self.broadcast_binary::<candle_core::op::$op>(rhs)
            }
        )*
    };
}

/// Candle's comparisons (U8 results).
macro_rules! cmp_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("candle's `", stringify!($name), "`: 1 where it holds, else 0 (U8).")]
            ///
            /// # Errors
            /// Shapes or dtypes that differ.
            pub fn $name(&self, rhs: &Self) -> CResult<Self> {
                self.cmp(CmpOp::$op, rhs)
            }
        )*
    };
}

/// Candle's reductions over one dim, keeping it (`*_keepdim`) or not.
macro_rules! reduce_methods {
    ($($keep:ident, $drop:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("candle's `", stringify!($keep), "`: the reduction over `dim`, kept as size 1.")]
            ///
            /// # Errors
            /// Out-of-range dims; dtypes the backend lacks.
            pub fn $keep(&self, dim: usize) -> CResult<Self> {
                self.reduce(ReduceOp::$op, &[dim], true)
            }

            #[doc = concat!("candle's `", stringify!($drop), "`: the reduction over `dim`, which is removed.")]
            ///
            /// # Errors
            /// Out-of-range dims; dtypes the backend lacks.
            pub fn $drop(&self, dim: usize) -> CResult<Self> {
                self.reduce(ReduceOp::$op, &[dim], false)
            }
        )*
    };
}

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    unary_methods!(
        exp => Exp, log => Log, sin => Sin, cos => Cos, tanh => Tanh, abs => Abs, neg => Neg,
        recip => Recip, sqr => Sqr, sqrt => Sqrt, gelu => Gelu, gelu_erf => GeluErf, erf => Erf,
        relu => Relu, floor => Floor, ceil => Ceil, round => Round, sign => Sign,
    );

    binary_methods!(
        sub, broadcast_sub => Sub, div, broadcast_div => Div,
        maximum, broadcast_maximum => Maximum, minimum, broadcast_minimum => Minimum,
    );

    cmp_methods!(eq => Eq, ne => Ne, lt => Lt, le => Le, gt => Gt, ge => Ge);

    reduce_methods!(
        sum_keepdim, sum => Sum, max_keepdim, max => Max, min_keepdim, min => Min,
        argmax_keepdim, argmax => ArgMax, argmin_keepdim, argmin => ArgMin,
    );

    /// A filled tensor (candle's `Tensor::full`; `ones` is `full(1.0, ..)`).
    ///
    /// # Errors
    /// Device errors.
    pub fn full(value: f64, shape: impl Into<Shape>, dtype: DType, dev: &S::Device) -> CResult<Self> {
        let shape = shape.into();
        let mut st = dev.zeros_impl(&shape, dtype)?;
        let v = match dtype {
            DType::U8 => candle_core::scalar::Scalar::U8(value as u8),
            DType::U32 => candle_core::scalar::Scalar::U32(value as u32),
            DType::I64 => candle_core::scalar::Scalar::I64(value as i64),
            DType::BF16 => candle_core::scalar::Scalar::BF16(half::bf16::from_f64(value)),
            DType::F16 => candle_core::scalar::Scalar::F16(half::f16::from_f64(value)),
            DType::F32 => candle_core::scalar::Scalar::F32(value as f32),
            DType::F64 => candle_core::scalar::Scalar::F64(value),
            other => return Err(candle_core::Error::UnsupportedDTypeForOp(other, "full")),
        };
        st.const_set(v, &Layout::contiguous(shape.clone()))?;
        Ok(Self::from_storage(st, shape))
    }

    /// Uniform values in `[lo, hi)` (candle's `Tensor::rand`), from the device's seeded
    /// generator.
    ///
    /// # Errors
    /// Integer dtypes, `lo >= hi`; device errors.
    pub fn rand(lo: f64, hi: f64, shape: impl Into<Shape>, dtype: DType, dev: &S::Device) -> CResult<Self> {
        let shape = shape.into();
        Ok(Self::from_storage(dev.rand_uniform(&shape, dtype, lo, hi)?, shape))
    }

    /// Normal values (candle's `Tensor::randn`), from the device's seeded generator.
    ///
    /// # Errors
    /// Integer dtypes, a negative `std`; device errors.
    pub fn randn(mean: f64, std: f64, shape: impl Into<Shape>, dtype: DType, dev: &S::Device) -> CResult<Self> {
        let shape = shape.into();
        Ok(Self::from_storage(dev.rand_normal(&shape, dtype, mean, std)?, shape))
    }

    /// candle's `permute` (a view).
    ///
    /// # Errors
    /// `dims` not a permutation of the tensor's dims.
    pub fn permute(&self, dims: &[usize]) -> CResult<Self> {
        Ok(self.with_layout(self.layout.permute(dims)?))
    }

    /// candle's `t`: the last two dims swapped (a view).
    ///
    /// # Errors
    /// Tensors of rank below 2.
    pub fn t(&self) -> CResult<Self> {
        let r = self.dims().len();
        if r < 2 {
            return Err(candle_core::Error::UnexpectedNumberOfDims {
                expected: 2,
                got: r,
                shape: self.shape().clone(),
            }
            .bt());
        }
        self.transpose(r - 2, r - 1)
    }

    /// candle's `unsqueeze`: a size-1 dim inserted at `dim` (a view).
    ///
    /// # Errors
    /// `dim` past the rank.
    pub fn unsqueeze(&self, dim: usize) -> CResult<Self> {
        let mut dims = self.dims().to_vec();
        if dim > dims.len() {
            candle_core::bail!("unsqueeze: dim {dim} past the rank {}", dims.len());
        }
        let mut strides = self.layout.stride().to_vec();
        let inner = if dim < dims.len() { strides[dim] * dims[dim] } else { 1 };
        dims.insert(dim, 1);
        strides.insert(dim, inner);
        Ok(self.with_layout(Layout::new(dims.into(), strides, self.layout.start_offset())))
    }

    /// candle's `squeeze`: a size-1 dim removed (a view; other sizes leave the tensor as is).
    ///
    /// # Errors
    /// `dim` past the rank.
    pub fn squeeze(&self, dim: usize) -> CResult<Self> {
        let mut dims = self.dims().to_vec();
        if dim >= dims.len() {
            candle_core::bail!("squeeze: dim {dim} past the rank {}", dims.len());
        }
        if dims[dim] != 1 {
            return Ok(self.clone());
        }
        let mut strides = self.layout.stride().to_vec();
        dims.remove(dim);
        strides.remove(dim);
        Ok(self.with_layout(Layout::new(dims.into(), strides, self.layout.start_offset())))
    }

    /// candle's `powf`: `x^e`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn powf(&self, e: f64) -> CResult<Self> {
        Ok(self.wrap(self.storage.powf(&self.layout, e)?))
    }

    /// candle's `elu`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn elu(&self, alpha: f64) -> CResult<Self> {
        Ok(self.wrap(self.storage.elu(&self.layout, alpha)?))
    }

    /// A comparison (candle's `cmp`), U8 result.
    ///
    /// # Errors
    /// Shapes or dtypes that differ.
    pub fn cmp(&self, op: CmpOp, rhs: &Self) -> CResult<Self> {
        check_same_shape(self.shape(), rhs.shape(), "cmp")?;
        Ok(self.wrap(self.storage.cmp(op, &rhs.storage, &self.layout, &rhs.layout)?))
    }

    /// candle's `where_cond`: `on_true` where `self` (U8, U32 or I64) is non-zero, else
    /// `on_false`.
    ///
    /// # Errors
    /// Shapes that differ; value dtypes that differ.
    pub fn where_cond(&self, on_true: &Self, on_false: &Self) -> CResult<Self> {
        check_same_shape(self.shape(), on_true.shape(), "where_cond")?;
        check_same_shape(self.shape(), on_false.shape(), "where_cond")?;
        let st = self.storage.where_cond(
            &self.layout,
            &on_true.storage,
            &on_true.layout,
            &on_false.storage,
            &on_false.layout,
        )?;
        Ok(self.wrap(st))
    }

    /// A reduction over `dims` (candle's `sum_keepdim` etc. over several dims); with
    /// `keepdim` the reduced dims stay as size 1, else they are removed.
    ///
    /// # Errors
    /// Out-of-range dims; dtypes the backend lacks.
    pub fn reduce(&self, op: ReduceOp, dims: &[usize], keepdim: bool) -> CResult<Self> {
        let rank = self.dims().len();
        if let Some(&d) = dims.iter().find(|&&d| d >= rank) {
            return Err(
                candle_core::Error::DimOutOfRange { shape: self.shape().clone(), dim: d as i32, op: "reduce" }.bt()
            );
        }
        let st = self.storage.reduce_op(op, &self.layout, dims)?;
        let kept: Vec<usize> =
            self.dims().iter().enumerate().map(|(i, &d)| if dims.contains(&i) { 1 } else { d }).collect();
        let t = Self::from_storage(st, kept);
        if keepdim {
            return Ok(t);
        }
        let out: Vec<usize> =
            self.dims().iter().enumerate().filter(|(i, _)| !dims.contains(i)).map(|(_, &d)| d).collect();
        t.reshape(out)
    }

    /// candle's `mean_keepdim`: the sum over `dim` divided by its size.
    ///
    /// # Errors
    /// As [`Tensor::reduce`].
    pub fn mean_keepdim(&self, dim: usize) -> CResult<Self> {
        let n = *self.dims().get(dim).unwrap_or(&1);
        self.sum_keepdim(dim)?.affine(1.0 / n as f64, 0.0)
    }

    /// candle's `matmul`: `[..., m, k] x [..., k, n]` with equal batch dims; transposed and
    /// strided operands are read in place where the backend can.
    ///
    /// # Errors
    /// Ranks below 2, batch dims or inner dims that differ, dtypes that differ.
    pub fn matmul(&self, rhs: &Self) -> CResult<Self> {
        let (ad, bd) = (self.dims(), rhs.dims());
        let r = ad.len();
        if r < 2 || bd.len() != r {
            return Err(candle_core::Error::ShapeMismatchBinaryOp {
                lhs: self.shape().clone(),
                rhs: rhs.shape().clone(),
                op: "matmul",
            }
            .bt());
        }
        let (m, k, n) = (ad[r - 2], ad[r - 1], bd[r - 1]);
        if bd[r - 2] != k || ad[..r - 2] != bd[..r - 2] {
            return Err(candle_core::Error::ShapeMismatchBinaryOp {
                lhs: self.shape().clone(),
                rhs: rhs.shape().clone(),
                op: "matmul",
            }
            .bt());
        }
        let batch: usize = ad[..r - 2].iter().product();
        let st = self.storage.matmul(&rhs.storage, (batch, m, n, k), &self.layout, &rhs.layout)?;
        let mut out = ad[..r - 2].to_vec();
        out.extend([m, n]);
        Ok(Self::from_storage(st, out))
    }

    /// candle's `broadcast_matmul`: the batch dims broadcast to a common shape first.
    ///
    /// # Errors
    /// As [`Tensor::matmul`]; batch dims that do not broadcast.
    pub fn broadcast_matmul(&self, rhs: &Self) -> CResult<Self> {
        let (ad, bd) = (self.dims(), rhs.dims());
        if ad.len() < 2 || bd.len() < 2 {
            return self.matmul(rhs);
        }
        let (ab, bb) = (Shape::from(&ad[..ad.len() - 2]), Shape::from(&bd[..bd.len() - 2]));
        let batch = ab.broadcast_shape_binary_op(&bb, "broadcast_matmul")?;
        let mut a_shape = batch.dims().to_vec();
        a_shape.extend(&ad[ad.len() - 2..]);
        let mut b_shape = batch.dims().to_vec();
        b_shape.extend(&bd[bd.len() - 2..]);
        self.broadcast_as(a_shape)?.matmul(&rhs.broadcast_as(b_shape)?)
    }

    /// candle's `index_select`: entries `ids` (a 1-D U8, U32 or I64 tensor) along `dim`.
    ///
    /// # Errors
    /// Out-of-range dims, ids of rank other than 1; out-of-range ids (reported at the next
    /// read on Vulkan).
    pub fn index_select(&self, ids: &Self, dim: usize) -> CResult<Self> {
        if ids.dims().len() != 1 || dim >= self.dims().len() {
            candle_core::bail!("index_select: ids of dims {:?} on dim {dim} of {:?}", ids.dims(), self.dims());
        }
        let st = self.storage.index_select(&ids.storage, &self.layout, &ids.layout, dim)?;
        let mut out = self.dims().to_vec();
        out[dim] = ids.elem_count();
        Ok(Self::from_storage(st, out))
    }

    /// candle's `gather`: `y[.., i, ..] = self[.., ids[.., i, ..], ..]` along `dim`.
    ///
    /// # Errors
    /// Out-of-range dims, ids whose other dims differ from `self`'s.
    pub fn gather(&self, ids: &Self, dim: usize) -> CResult<Self> {
        if dim >= self.dims().len() || ids.dims().len() != self.dims().len() {
            candle_core::bail!("gather: ids of dims {:?} on dim {dim} of {:?}", ids.dims(), self.dims());
        }
        let st = self.storage.gather(&self.layout, &ids.storage, &ids.layout, dim)?;
        Ok(Self::from_storage(st, ids.shape().clone()))
    }

    /// candle's `avg_pool2d_with_stride` on `[b, c, h, w]`.
    ///
    /// # Errors
    /// Ranks other than 4, windows larger than the input; dtypes the backend lacks.
    pub fn avg_pool2d_with_stride(&self, kernel: (usize, usize), stride: (usize, usize)) -> CResult<Self> {
        self.pool(false, kernel, stride)
    }

    /// candle's `max_pool2d_with_stride` on `[b, c, h, w]`.
    ///
    /// # Errors
    /// As [`Tensor::avg_pool2d_with_stride`].
    pub fn max_pool2d_with_stride(&self, kernel: (usize, usize), stride: (usize, usize)) -> CResult<Self> {
        self.pool(true, kernel, stride)
    }

    fn pool(&self, max: bool, kernel: (usize, usize), stride: (usize, usize)) -> CResult<Self> {
        let &[b, c, h, w] = self.dims() else { candle_core::bail!("pool2d takes [b, c, h, w], got {:?}", self.dims()) };
        let pool = if max { vkml_ops::spatial::Pool::Max } else { vkml_ops::spatial::Pool::Avg };
        let [oh, ow] = vkml_ops::spatial::pool_output(pool, [b, c, h, w], [kernel.0, kernel.1], [stride.0, stride.1])
            .map_err(candle_core::Error::wrap)?;
        let st = if max {
            self.storage.max_pool2d(&self.layout, kernel, stride)?
        } else {
            self.storage.avg_pool2d(&self.layout, kernel, stride)?
        };
        Ok(Self::from_storage(st, (b, c, oh, ow)))
    }

    /// candle's `upsample_nearest2d` on `[b, c, h, w]`.
    ///
    /// # Errors
    /// Ranks other than 4; device errors.
    pub fn upsample_nearest2d(&self, out_h: usize, out_w: usize) -> CResult<Self> {
        let &[b, c, _, _] = self.dims() else {
            candle_core::bail!("upsample_nearest2d takes [b, c, h, w], got {:?}", self.dims())
        };
        let st = self.storage.upsample_nearest2d(&self.layout, out_h, out_w)?;
        Ok(Self::from_storage(st, (b, c, out_h, out_w)))
    }
}

/// A storage for `shape` that the caller overwrites completely. `zeros_impl` rather than
/// the `unsafe` `alloc_uninit`: the fill is one cheap dispatch (a memset on the CPU).
///
/// # Errors
/// The device's allocation errors.
pub fn scratch_alloc<D: BackendDevice>(dev: &D, shape: &Shape, dtype: DType) -> CResult<D::Storage> {
    dev.zeros_impl(shape, dtype)
}

/// The CPU storage of a front tensor is candle's own.
pub type CpuTensor = Tensor<CpuStorage>;
