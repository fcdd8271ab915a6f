//! FP8 E4M3 conversions (candle's `DType::F8E4M3`, the OCP E4M3FN format: bias 7, 3
//! mantissa bits, no infinities, largest 448), kernel `fp8.comp`: bytes packed four to a
//! word, to and from f32 with the bits of candle's CPU (crate float8 0.7, after CUDA's
//! `cuda_fp8.hpp`: round to nearest even, saturating to +-448, NaN kept).

use vkml_hal::{Buffer, Stream};

use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};
use crate::tuning::ELEMENTWISE_WORKGROUP;

/// Checks `x` holds `x_bytes` and `y` holds `y_bytes` for `n` elements of `op`.
fn check(op: &'static str, n: usize, (x, x_bytes): (&Buffer, u64), (y, y_bytes): (&Buffer, u64)) -> Result<()> {
    if n > u32::MAX as usize {
        return Err(OpsError::Shape { op, reason: format!("{n} elements: at most 2^32 - 1") });
    }
    for (what, b, need) in [("x", x, x_bytes), ("y", y, y_bytes)] {
        if b.size() < need {
            return Err(OpsError::Shape { op, reason: format!("{what} holds {} bytes, needs {need}", b.size()) });
        }
    }
    Ok(())
}

/// Records `y[i] = x[i]` for `n` E4M3 values `x` (bytes, packed from byte 0) into f32 `y`:
/// exact; NaNs become f32 0x7FFFE000 (f16's canonical NaN widened, as candle's `to_f32`).
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small or more than 2^32 - 1 elements; HAL errors.
pub fn e4m3_to_f32(s: &mut Stream, x: &Buffer, n: usize, y: &Buffer) -> Result<()> {
    check("e4m3_to_f32", n, (x, n as u64), (y, 4 * n as u64))?;
    if n == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, "fp8.e4m3_to_f32", ELEMENTWISE_WORKGROUP)?;
    let groups = (n as u64).div_ceil(u64::from(ELEMENTWISE_WORKGROUP));
    s.dispatch(&p, &[x.into(), y.into()], &push_words(&[n as u32]), grid(&dev, "e4m3_to_f32", groups)?)?;
    Ok(())
}

/// Records `y[i] = e4m3(x[i])` for `n` f32 values into E4M3 bytes `y` (packed from byte 0;
/// the bytes of a last partial word past `n` are written as zero): round to nearest even,
/// `|x| <= 2^-10` to a signed zero, `|x| > 464` and infinities to `+-448`, NaN to `0x7F`
/// with its sign (candle's `F8E4M3::from_f32`).
///
/// # Errors
/// As [`e4m3_to_f32`].
pub fn f32_to_e4m3(s: &mut Stream, x: &Buffer, n: usize, y: &Buffer) -> Result<()> {
    let words = n.div_ceil(4) as u64;
    check("f32_to_e4m3", n, (x, 4 * n as u64), (y, 4 * words))?;
    if n == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, "fp8.f32_to_e4m3", ELEMENTWISE_WORKGROUP)?;
    let groups = words.div_ceil(u64::from(ELEMENTWISE_WORKGROUP));
    s.dispatch(&p, &[x.into(), y.into()], &push_words(&[n as u32]), grid(&dev, "f32_to_e4m3", groups)?)?;
    Ok(())
}
