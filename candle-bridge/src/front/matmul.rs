//! Matrix products: `matmul` and `broadcast_matmul`.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::Shape;

use super::{CResult, Tensor};

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
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
}
