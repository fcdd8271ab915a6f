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

mod creation;
mod elementwise;
mod indexing;
mod matmul;
mod reduce;
mod spatial;
mod views;

use std::sync::Arc;

use candle_core::backend::{BackendDevice, BackendStorage};
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
