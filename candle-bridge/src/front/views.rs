//! View ops: new layouts over the same storage (`narrow`, `transpose`, `broadcast_as`,
//! `permute`, `t`, `squeeze`, `unsqueeze`), and `contiguous` / `reshape`, which copy when
//! they must.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{Layout, Shape};

use super::{scratch_alloc, CResult, Tensor};

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
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
}
