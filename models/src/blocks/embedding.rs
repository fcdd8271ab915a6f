//! Token embedding: rows of the quantized `token_embd.weight`, optionally scaled.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;

use super::Weights;
use crate::error::Result;
use crate::storage::ModelStorage;
use crate::tensor::ModelTensor;

/// `token_embd.weight` (`[vocab, n_embd]`, kept in its GGML type) and the factor its
/// rows are multiplied by (Gemma: `sqrt(n_embd)`, llama.cpp's `inp_scaled`).
#[derive(Debug)]
pub struct Embedding<S: ModelStorage> {
    /// The matrix; also the output projection of models with tied embeddings.
    pub weight: S::QWeight,
    /// `None`: rows as stored.
    pub scale: Option<f32>,
}

impl<S: ModelStorage> Embedding<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// `token_embd.weight` of `vocab` rows of `n_embd`.
    ///
    /// # Errors
    /// As [`Weights::matrix`].
    pub fn load(w: &mut Weights<'_, S>, vocab: usize, n_embd: usize, scale: Option<f32>) -> Result<Self> {
        Ok(Embedding { weight: w.matrix("token_embd.weight", vocab, n_embd)?, scale })
    }

    /// Rows `ids: u32[t]` as `f32[t, n_embd]`.
    ///
    /// # Errors
    /// Device errors (ids are checked by the runner first).
    pub fn forward(&self, ids: &Tensor<S>) -> Result<Tensor<S>> {
        Ok(Tensor::qembedding(ids, &self.weight, self.scale)?)
    }
}
