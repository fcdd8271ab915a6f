//! RMS normalisation with a learned scale (`*_norm.weight` tensors).

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;

use super::Weights;
use crate::error::Result;
use crate::storage::ModelStorage;
use crate::tensor::ModelTensor;

/// `x / sqrt(mean(x²) + eps) * w` over the last dim (candle-nn's `ops::rms_norm`, ggml's
/// `ggml_rms_norm` then `ggml_mul`). GGUF files store the final multiplier: Gemma's
/// `1 + w` is added by llama.cpp's converter.
#[derive(Debug)]
pub struct RmsNorm<S: ModelStorage> {
    /// `f32[n]`.
    pub weight: Tensor<S>,
    /// Added to the mean square.
    pub eps: f32,
}

impl<S: ModelStorage> RmsNorm<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Tensor `name` of `n` values.
    ///
    /// # Errors
    /// As [`Weights::vector`].
    pub fn load(w: &Weights<'_, S>, name: &str, n: usize, eps: f32) -> Result<Self> {
        Ok(RmsNorm { weight: w.vector(name, n)?, eps })
    }

    /// The norm of `x: f32[.., n]`.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    pub fn forward(&self, x: &Tensor<S>) -> Result<Tensor<S>> {
        Ok(x.rms_norm(&self.weight, self.eps)?)
    }
}
