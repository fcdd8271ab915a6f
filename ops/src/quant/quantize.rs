//! Quantizing on the GPU: f32 values to GGML blocks in a [`QMatrix`] (kernel
//! `quantize.comp`), as vkml-quant's CPU quantizers (ggml's `quantize_row_*_ref`) do it.

use vkml_hal::{Buffer, Stream};
use vkml_quant::GgmlType;

use super::QMatrix;
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};

/// The types [`quantize`] writes.
pub const GPU_QUANTIZED: [GgmlType; 6] =
    [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q8_1];

/// Records the quantization of `x: f32[m.rows() * m.k()]` (row-major, packed from element 0)
/// into `m`'s blocks, every part of it: one dispatch per part, each invocation two blocks.
/// The bytes are the CPU's but where the device's division or reciprocal (not correctly
/// rounded in Vulkan) moves a value across a rounding boundary: one quant one step away.
///
/// # Errors
/// [`OpsError::UnsupportedType`] for types other than [`GPU_QUANTIZED`] (the k-quants and
/// IQ types are quantized on the CPU, `vkml_quant::quantize`); [`OpsError::Shape`] for an
/// `x` too small or past one binding; HAL errors.
pub fn quantize(s: &mut Stream, x: &Buffer, m: &QMatrix) -> Result<()> {
    let name = match m.ty() {
        GgmlType::Q4_0 => "quantize.q4_0",
        GgmlType::Q4_1 => "quantize.q4_1",
        GgmlType::Q5_0 => "quantize.q5_0",
        GgmlType::Q5_1 => "quantize.q5_1",
        GgmlType::Q8_0 => "quantize.q8_0",
        GgmlType::Q8_1 => "quantize.q8_1",
        ty => {
            return Err(OpsError::UnsupportedType {
                op: "quantize",
                ty,
                supported: format!("{GPU_QUANTIZED:?} (quantize others on the CPU: vkml_quant::quantize)"),
            })
        }
    };
    let n = m.rows() as u64 * m.k() as u64;
    let dev = s.device().clone();
    if x.size() < 4 * n || 4 * n > dev.caps().limits.max_storage_buffer_range {
        return Err(OpsError::Shape {
            op: "quantize",
            reason: format!(
                "x holds {} bytes for {n} f32, at most one binding of {} bytes",
                x.size(),
                dev.caps().limits.max_storage_buffer_range
            ),
        });
    }
    const WG: u32 = 64;
    let p = pipeline(&dev, name, WG)?;
    let blocks_per_row = (m.k() / 32) as u64;
    for part in m.parts() {
        let n_blocks = part.rows() as u64 * blocks_per_row;
        let words = (part.rows() as u64 * m.row_bytes()).div_ceil(4);
        let x_off = part.row0() as u64 * m.k() as u64;
        let pc = push_words(&[x_off as u32, n_blocks as u32, words as u32]);
        let g = grid(&dev, "quantize", n_blocks.div_ceil(2).div_ceil(u64::from(WG)))?;
        s.dispatch(&p, &[x.into(), part.buffer().into()], &pc, g)?;
    }
    Ok(())
}
