//! Errors of vkml-models.

/// Result alias for vkml-models.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The GGUF file is malformed (from vkml-quant's validating reader).
    #[error("GGUF: {0}")]
    Gguf(#[from] vkml_quant::gguf::GgufError),
    /// A kernel refused its arguments or failed (shapes, unsupported types, device errors).
    #[error(transparent)]
    Ops(#[from] vkml_ops::OpsError),
    /// From the HAL (no device, out of memory, device lost).
    #[error(transparent)]
    Hal(#[from] vkml_hal::Error),
    /// The model file is valid GGUF but not a model this code runs: a missing or
    /// ill-typed metadata key, a missing tensor, a shape that does not fit, an
    /// unsupported architecture or tokenizer.
    #[error("model: {0}")]
    Model(String),
    /// More tokens than the context (KV cache) holds.
    #[error("{tokens} tokens exceed the context of {ctx} positions")]
    Context {
        /// Positions that were asked for (cache position + new tokens).
        tokens: usize,
        /// Positions the KV cache holds.
        ctx: usize,
    },
    /// The tokenizer or chat template failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A sampling setting is out of range, or the logits cannot be sampled.
    #[error("sampling: {0}")]
    Sampling(String),
    /// From candle (the backends' ops, CPU-side tensors in sampling).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl From<vkml_candle::Error> for Error {
    fn from(e: vkml_candle::Error) -> Self {
        match e {
            vkml_candle::Error::Ops(e) => Error::Ops(e),
            vkml_candle::Error::Hal(e) => Error::Hal(e),
            vkml_candle::Error::Candle(e) => Error::Candle(e),
        }
    }
}

pub(crate) fn model_err(msg: impl Into<String>) -> Error {
    Error::Model(msg.into())
}
