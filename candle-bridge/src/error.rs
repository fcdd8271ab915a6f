//! Errors of vkml-candle's own constructors (candle's trait methods return
//! `candle_core::Error`, with vkml's messages kept).

/// Result alias for vkml-candle.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong opening a device for candle.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kernel refused its arguments or failed (shapes, unsupported types, device errors).
    #[error(transparent)]
    Ops(#[from] vkml_ops::OpsError),
    /// From the HAL (no device, out of memory, device lost).
    #[error(transparent)]
    Hal(#[from] vkml_hal::Error),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
