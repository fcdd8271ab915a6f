//! Errors of vkml-ops.

use vkml_quant::GgmlType;

/// Result alias for vkml-ops.
pub type Result<T, E = OpsError> = std::result::Result<T, E>;

/// What can go wrong in an op.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// From the HAL (device, memory, dispatch).
    #[error(transparent)]
    Hal(#[from] vkml_hal::Error),
    /// The op has no GPU kernel for this GGML type yet.
    #[error("{op} has no GPU kernel for {ty:?} yet (supported: {supported})")]
    UnsupportedType {
        /// The op.
        op: &'static str,
        /// The type asked for.
        ty: GgmlType,
        /// The types it does support.
        supported: String,
    },
    /// The op has no kernel for this element type.
    #[error("{op} does not support {dtype} (supported: {supported})")]
    UnsupportedDtype {
        /// The op.
        op: &'static str,
        /// The element type asked for (`Dtype::name`).
        dtype: &'static str,
        /// The element types it does support.
        supported: &'static str,
    },
    /// The device lacks a feature the op needs for these arguments.
    #[error("{op}: the device lacks {feature}, needed for {needed_for}")]
    MissingFeature {
        /// The op.
        op: &'static str,
        /// The Vulkan feature (as the specification names it).
        feature: &'static str,
        /// What needs it.
        needed_for: &'static str,
    },
    /// Shapes or sizes that do not fit together.
    #[error("{op}: {reason}")]
    Shape {
        /// The op.
        op: &'static str,
        /// What does not fit.
        reason: String,
    },
}
