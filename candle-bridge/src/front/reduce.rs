//! Reductions: `reduce` over any set of dims, candle's `sum` / `max` / `min` / `argmax` /
//! `argmin` (with their `_keepdim` forms), and `mean_keepdim`.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::ReduceOp;

use super::{CResult, Tensor};

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
    reduce_methods!(
        sum_keepdim, sum => Sum, max_keepdim, max => Max, min_keepdim, min => Min,
        argmax_keepdim, argmax => ArgMax, argmin_keepdim, argmin => ArgMin,
    );

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
}
