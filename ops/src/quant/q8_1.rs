//! Q8_1 activations for the integer-dot kernels (ggml's `block_q8_1`).

use super::*;

/// Invocations per workgroup of the Q8_1 quantizers (`quantize_q8_1.comp`,
/// `quantize_q8_1_tiles.comp`).
pub(super) const Q8_1_WORKGROUP: u32 = 64;

/// Records the quantization of `n_blocks * 32` f32 values of `x` to Q8_1 blocks in `out`
/// (36 bytes each: f16 d, f16 s = d * sum(q), 32 x i8), as ggml's `quantize_row_q8_1_ref`
/// up to GPU division rounding (a quant may differ by one step at a rounding boundary).
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small; HAL errors.
pub fn quantize_q8_1(s: &mut Stream, x: &vkml_hal::Buffer, n_blocks: usize, out: &vkml_hal::Buffer) -> Result<()> {
    if x.size() < 128 * n_blocks as u64 || out.size() < 36 * n_blocks as u64 {
        return Err(OpsError::Shape {
            op: "quantize_q8_1",
            reason: format!("{n_blocks} blocks need x of {} bytes and out of {} bytes", 128 * n_blocks, 36 * n_blocks),
        });
    }
    if n_blocks == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, "quantize_q8_1", Q8_1_WORKGROUP)?;
    let groups = grid(&dev, "quantize_q8_1", (n_blocks as u64).div_ceil(u64::from(Q8_1_WORKGROUP)))?;
    s.dispatch(&p, &[x.into(), out.into()], &push_words(&[n_blocks as u32]), groups)?;
    Ok(())
}
