//! Spatial ops on `[b, c, h, w]`: the 2-D pools and `upsample_nearest2d`.

use candle_core::backend::{BackendDevice, BackendStorage};

use super::{CResult, Tensor};

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
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
