//! Indexing ops: `index_select` and `gather`.

use candle_core::backend::{BackendDevice, BackendStorage};

use super::{CResult, Tensor};

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
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
}
