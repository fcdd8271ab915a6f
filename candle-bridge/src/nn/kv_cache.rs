//! candle-nn's `kv_cache::ConcatKvCache` on Vulkan tensors: keys and values appended by
//! concatenation along one dim ([`crate::front::Tensor::cat`]).

use super::{CResult, VTensor};

/// Keys and values grown by concatenating each step's along `dim` (candle-nn's
/// `ConcatKvCache`: `dim` 2 for `[b, h, t, d]`, 1 for `[b, t, h, d]`).
#[derive(Debug, Clone)]
pub struct ConcatKvCache {
    k: Option<VTensor>,
    v: Option<VTensor>,
    dim: usize,
}

impl ConcatKvCache {
    /// An empty cache concatenating along `dim`.
    pub fn new(dim: usize) -> Self {
        ConcatKvCache { k: None, v: None, dim }
    }

    /// Positions held (`dim`'s size; 0 when empty).
    pub fn current_seq_len(&self) -> usize {
        self.k.as_ref().and_then(|k| k.dims().get(self.dim).copied()).unwrap_or(0)
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.k.is_none()
    }

    /// The concatenation dim.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Appends `k` and `v` and returns all keys and values so far.
    ///
    /// # Errors
    /// Shapes or dtypes that do not fit the cached ones along `dim`; device errors.
    pub fn append(&mut self, k: &VTensor, v: &VTensor) -> CResult<(VTensor, VTensor)> {
        let join = |old: &Option<VTensor>, new: &VTensor| match old {
            None => new.contiguous(),
            Some(o) => VTensor::cat(&[o, new], self.dim),
        };
        let (k, v) = (join(&self.k, k)?, join(&self.v, v)?);
        self.k = Some(k.clone());
        self.v = Some(v.clone());
        Ok((k, v))
    }

    /// Empties the cache.
    pub fn reset(&mut self) {
        self.k = None;
        self.v = None;
    }

    /// The keys held.
    pub fn k(&self) -> Option<&VTensor> {
        self.k.as_ref()
    }

    /// The values held.
    pub fn v(&self) -> Option<&VTensor> {
        self.v.as_ref()
    }
}
