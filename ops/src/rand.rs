//! Seedable random fills on the GPU (candle's `rand_uniform` / `rand_normal`) for F32,
//! F16, BF16 and F64. Kernel: `shader-src/shaders/rand.comp`.
//!
//! Counter-based: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as
//! easy as 1, 2, 3", SC 2011), keyed by the 64-bit `seed`, with counter `(block, call, 0)`
//! where `call` numbers the fills made from one seed. A `(seed, call)` pair gives the same
//! random words on every device and for every launch shape, so the same uniform values
//! (exact arithmetic); normal values go through the device's `log` / `cos` / `sin` (f32)
//! and agree across devices to those functions' precision. The caller (vkml-candle's
//! device) advances `call` after each fill so that consecutive fills differ.
//!
//! - uniform: `lo + (hi - lo) u`, `u` with 24 random bits (53 for F64), every value in
//!   `[lo, hi)` of the dtype (a value that rounds up to `hi` becomes the largest value
//!   below it);
//! - normal: `mean + std z`, `z` by the Box-Muller transform, in f32 (F64: in f64 from
//!   53-bit uniforms, with `include/math64.glsl`'s `log`, `cos`, `sin`).

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline_spec, push_words};
use crate::tuning::ELEMENTWISE_WORKGROUP;

/// The distribution of a fill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Uniform on `[lo, hi)`.
    Uniform {
        /// Lower bound (inclusive).
        lo: f64,
        /// Upper bound (exclusive).
        hi: f64,
    },
    /// Normal with this mean and standard deviation.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
}

impl Distribution {
    /// candle's op name: `rand_uniform` or `rand_normal`.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform { .. } => "rand_uniform",
            Distribution::Normal { .. } => "rand_normal",
        }
    }
}

/// Records filling `y[0..n]` (`dt`) with draws from `dist` for `(seed, call)`.
///
/// # Errors
/// [`OpsError::UnsupportedDtype`] for an integer `dt`; [`OpsError::Shape`] for
/// non-finite parameters, `lo >= hi` once rounded to `dt`, a negative `std`, `n` past
/// 2^32 - 1 or `y` too small; missing device features for `dt`; HAL errors.
pub fn fill(s: &mut Stream, dt: Dtype, dist: Distribution, seed: u64, call: u64, n: usize, y: &Buffer) -> Result<()> {
    let op = dist.name();
    let bad = |reason: String| OpsError::Shape { op, reason };
    if !dt.is_float() {
        return Err(OpsError::UnsupportedDtype { op, dtype: dt.name(), supported: "f32, f16, bf16, f64" });
    }
    let dev = s.device().clone();
    dt.require(&dev, op)?;
    if n == 0 {
        return Ok(());
    }
    let y_bytes = n as u64 * dt.size() as u64;
    if u32::try_from(n).is_err() || y.size() < y_bytes {
        return Err(bad(format!("y holds {} bytes, needs {n} {} (at most 2^32 - 1)", y.size(), dt.name())));
    }
    let (code, a, b, hb) = match dist {
        Distribution::Uniform { lo, hi } => {
            if !lo.is_finite() || !hi.is_finite() {
                return Err(bad(format!("bounds {lo} and {hi} must be finite")));
            }
            let (lo_t, hi_t) = (dt.round_f64(lo), dt.round_f64(hi));
            if lo_t >= hi_t {
                return Err(bad(format!("lo {lo} must be below hi {hi} in {}", dt.name())));
            }
            (0, lo_t, hi_t - lo_t, below(dt, hi_t))
        }
        Distribution::Normal { mean, std } => {
            if !mean.is_finite() || !std.is_finite() || std < 0.0 {
                return Err(bad(format!("mean {mean} and std {std} must be finite, std >= 0")));
            }
            (1, mean, std, 0.0)
        }
    };
    // Parameters as f32 bits (f64 bits in lo / hi words for F64).
    let param = |v: f64| -> [u32; 2] {
        if dt == Dtype::F64 {
            let b = v.to_bits();
            [b as u32, (b >> 32) as u32]
        } else {
            [(v as f32).to_bits(), 0]
        }
    };
    let mut words = vec![n as u32, seed as u32, (seed >> 32) as u32, call as u32, (call >> 32) as u32];
    for v in [a, b, hb] {
        words.extend(param(v));
    }
    let per = if dt == Dtype::F64 { 2 } else { 4 };
    let wg = ELEMENTWISE_WORKGROUP;
    let groups = grid(&dev, op, (n.div_ceil(per) as u64).div_ceil(u64::from(wg)))?;
    let pl = pipeline_spec(&dev, crate::dtype::dtype_kernel!("rand.", dt), wg, &[(1, code)])?;
    s.dispatch(&pl, &[BufferArg::range(y, 0, y_bytes)], &push_words(&words), groups)?;
    Ok(())
}

/// The largest value of `dt` below `v` (a finite value of `dt`).
fn below(dt: Dtype, v: f64) -> f64 {
    match dt {
        Dtype::F16 => half::f16::from_bits(step_down16(half::f16::from_f64(v).to_bits())).to_f64(),
        Dtype::BF16 => half::bf16::from_bits(step_down16(half::bf16::from_f64(v).to_bits())).to_f64(),
        Dtype::F32 => {
            let b = (v as f32).to_bits();
            f64::from(f32::from_bits(if b & 0x7fff_ffff == 0 {
                0x8000_0001
            } else if b >> 31 == 0 {
                b - 1
            } else {
                b + 1
            }))
        }
        _ => {
            let b = v.to_bits();
            f64::from_bits(if b & !(1 << 63) == 0 {
                (1 << 63) | 1
            } else if b >> 63 == 0 {
                b - 1
            } else {
                b + 1
            })
        }
    }
}

/// The next sign-magnitude 16-bit float below `b` (finite).
fn step_down16(b: u16) -> u16 {
    if b & 0x7fff == 0 {
        0x8001
    } else if b >> 15 == 0 {
        b - 1
    } else {
        b + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_is_the_previous_value() {
        assert_eq!(below(Dtype::F32, 1.0), f64::from(f32::from_bits(1.0f32.to_bits() - 1)));
        assert_eq!(below(Dtype::F32, -1.0), f64::from(f32::from_bits((-1.0f32).to_bits() + 1)));
        assert_eq!(below(Dtype::F16, 1.0), 1.0 - 2f64.powi(-11));
        assert_eq!(below(Dtype::BF16, 1.0), 1.0 - 2f64.powi(-8));
        assert_eq!(below(Dtype::F64, 0.0), -f64::from_bits(1));
        assert_eq!(below(Dtype::F16, 0.0), -2f64.powi(-24));
    }
}
