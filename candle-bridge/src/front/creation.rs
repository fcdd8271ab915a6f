//! Tensors made on the device: `zeros`, `full`, `rand`, `randn`.

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
}
