//! The output head: final norm, projection to the vocabulary, optional soft-capping.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;

use super::{Embedding, RmsNorm, Weights};
use crate::error::Result;
use crate::storage::ModelStorage;
use crate::tensor::ModelTensor;

/// `output_norm.weight`, then `output.weight` (or the token embedding where the file
/// has no `output.weight`: tied), then `cap · tanh(logits / cap)` where the model
/// soft-caps its logits (`{arch}.final_logit_softcapping`, Gemma 2).
#[derive(Debug)]
pub struct OutputHead<S: ModelStorage> {
    /// The final norm.
    pub norm: RmsNorm<S>,
    /// `None`: tied to the token embedding (on the embedding's device).
    pub weight: Option<S::QWeight>,
    /// Final logit soft-capping.
    pub softcap: Option<f32>,
}

impl<S: ModelStorage> OutputHead<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// `output_norm.weight` and `output.weight` (`[vocab, n_embd]`) if present. Where the
    /// head is tied and `own_copy` (it sits on another device than the embedding: a layer
    /// split), `token_embd.weight` is loaded again, onto the head's device.
    ///
    /// # Errors
    /// As [`Weights::matrix`] and [`Weights::vector`].
    pub fn load(
        w: &mut Weights<'_, S>,
        vocab: usize,
        n_embd: usize,
        eps: f32,
        softcap: Option<f32>,
        own_copy: bool,
    ) -> Result<Self> {
        let weight = if w.has("output.weight") {
            Some(w.matrix("output.weight", vocab, n_embd)?)
        } else if own_copy {
            Some(w.matrix_again("token_embd.weight", vocab, n_embd)?)
        } else {
            None
        };
        Ok(OutputHead { norm: RmsNorm::load(w, "output_norm.weight", n_embd, eps)?, weight, softcap })
    }

    /// Logits `f32[t, vocab]` of `x: f32[t, n_embd]`.
    ///
    /// # Errors
    /// Device errors.
    pub fn forward(&self, x: &Tensor<S>, embedding: &Embedding<S>) -> Result<Tensor<S>> {
        let w = self.weight.as_ref().unwrap_or(&embedding.weight);
        Ok(match self.softcap {
            Some(c) => x.rms_norm_linear_softcap(&self.norm.weight, self.norm.eps, w, c)?,
            None => x.rms_norm_linear(&self.norm.weight, self.norm.eps, w, None)?,
        })
    }
}
