//! [`Dtype`]: the element type of the activation buffers an op reads and writes.

use vkml_hal::Device;

use crate::error::{OpsError, Result};

/// Element type of an op's activation buffers (inputs and outputs such as `x`, `y`, the
/// residual stream, gate/up, queries and attention output), packed and contiguous.
///
/// Kernels always compute in f32: f16 values are widened on load and rounded to nearest
/// even on store. Parameter buffers (norm weight and bias, the softmax mask, rope cos/sin
/// tables) stay f32 in both cases; the KV cache is always f16 ([`crate::attention::KvCache`]).
///
/// [`Dtype::F16`] needs the device's `storageBuffer16BitAccess` feature
/// (`Capabilities::types::storage_buffer_16bit`) for every op except
/// [`crate::attention::kv_append`]; without it those ops return
/// [`OpsError::MissingFeature`]. `shaderFloat16` is not needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dtype {
    /// IEEE 754 binary32, 4 bytes.
    #[default]
    F32,
    /// IEEE 754 binary16, 2 bytes (`half::f16`).
    F16,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
        }
    }

    /// Lower-case name (`f32`, `f16`), as in kernel variant names.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
        }
    }

    /// Checks that `dev` can load and store this type in storage buffers.
    pub(crate) fn require(self, dev: &Device, op: &'static str) -> Result<()> {
        if self == Dtype::F16 && !dev.caps().types.storage_buffer_16bit {
            return Err(OpsError::MissingFeature {
                op,
                feature: "storageBuffer16BitAccess",
                needed_for: "f16 activation buffers",
            });
        }
        Ok(())
    }
}
