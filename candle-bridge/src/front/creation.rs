//! Tensors made on the device: `zeros`, `full`, `rand`, `randn`, and `cat` of others.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{DType, Layout, Shape};

use super::{CResult, Tensor};

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Zeros (candle's `Tensor::zeros`).
    ///
    /// # Errors
    /// Device errors.
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, dev: &S::Device) -> CResult<Self> {
        let shape = shape.into();
        Ok(Self::from_storage(dev.zeros_impl(&shape, dtype)?, shape))
    }

    /// `tensors` joined along `dim` (candle's `Tensor::cat`): equal dtypes, ranks and dims
    /// but `dim`'s; one strided copy (`copy2d`) per tensor into a fresh one.
    ///
    /// # Errors
    /// No tensors, `dim` past the rank, dtypes or other dims that differ; device errors.
    pub fn cat(tensors: &[&Self], dim: usize) -> CResult<Self> {
        let Some(first) = tensors.first() else { candle_core::bail!("cat of no tensors") };
        let rank = first.dims().len();
        if dim >= rank {
            return Err(
                candle_core::Error::DimOutOfRange { shape: first.shape().clone(), dim: dim as i32, op: "cat" }.bt()
            );
        }
        let mut dims = first.dims().to_vec();
        dims[dim] = 0;
        for t in tensors {
            let same = t.dims().len() == rank
                && t.dims().iter().zip(first.dims()).enumerate().all(|(i, (a, b))| i == dim || a == b);
            if !same || t.dtype() != first.dtype() {
                candle_core::bail!(
                    "cat along dim {dim}: {:?} {:?} does not fit {:?} {:?}",
                    t.dtype(),
                    t.dims(),
                    first.dtype(),
                    first.dims()
                )
            }
            dims[dim] += t.dims()[dim];
        }
        let (outer, inner): (usize, usize) = (dims[..dim].iter().product(), dims[dim + 1..].iter().product());
        let shape = Shape::from(dims.clone());
        let mut dst = first.storage.device().zeros_impl(&shape, first.dtype())?;
        let mut at = 0;
        for t in tensors {
            let c = t.contiguous()?;
            let row = t.dims()[dim] * inner;
            if row > 0 && outer > 0 {
                c.storage.copy2d(&mut dst, outer, row, row, dims[dim] * inner, c.layout.start_offset(), at * inner)?;
            }
            at += t.dims()[dim];
        }
        Ok(Self::from_storage(dst, shape))
    }

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
            DType::F8E4M3 => candle_core::scalar::Scalar::F8E4M3(float8::F8E4M3::from_f64(value)),
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
}
