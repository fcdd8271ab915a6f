//! Quantizing on the GPU: f32 values to GGML blocks in a [`QMatrix`] (kernels
//! `quantize.comp` for the types quantized block by block without a search: the blocks of 32,
//! MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0, Q2_0; `quantize_k.comp` for the k-quants and IQ4_NL /
//! IQ4_XS), as vkml-quant's CPU quantizers (ggml's `quantize_row_*_ref`) do it.

use vkml_hal::{Buffer, Stream};
use vkml_quant::GgmlType;

use super::{part_bytes, QMatrix};
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};

/// The types [`quantize`] writes.
pub const GPU_QUANTIZED: [GgmlType; 20] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
];

/// Records the quantization of `x: f32[m.rows() * m.k()]` (row-major, packed from element 0)
/// into `m`'s blocks, every part of it: one dispatch per part of workgroups of 64. The blocks
/// of 32 (Q4_0 .. Q8_1), NVFP4, TQ1_0, TQ2_0, Q1_0 and Q2_0 (`quantize.comp`): two blocks per
/// invocation; MXFP4 (17 bytes a block, `quantize.comp`) four, 17 whole words. The k-quants
/// and IQ4 types (`quantize_k.comp`): one invocation per sub-block, the searches of a
/// super-block's 8 (Q4_K, Q5_K, IQ4_XS) or 16 (Q2_K, Q3_K, Q6_K, Q8_K) sub-blocks side by
/// side, the super-block assembled in shared memory (IQ4_NL: one invocation per block of 32).
///
/// The bytes are the CPU's (vkml-quant's `quantize`, over the whole of `x`), but:
/// - the blocks of 32 (Q4_0 .. Q8_1, `quantize.comp`) use the device's division and
///   reciprocal, not correctly rounded in Vulkan (lavapipe's are): where they round
///   otherwise, a value across a rounding boundary, one quant one step away;
/// - MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0 and Q2_0 (`quantize.comp`) divide correctly rounded in
///   integer arithmetic (1 / amax, amax / 6) and take MXFP4's floor(log2(amax)) from amax's
///   bits as a correctly rounded log2f rounds it (glibc's does, for every amax just below a
///   power of two; another libm's CPU result may differ there), so they differ only where a
///   device flushes subnormals: MXFP4 blocks of largest magnitude below 2^-123 (their level
///   scale is subnormal), TQ1_0, TQ2_0 and Q2_0 blocks of subnormal largest magnitude
///   (below 1.2e-38) or of one of 2^126 and more (1 / amax subnormal; their f16 scale is
///   infinite anyway), Q1_0's bit of a negative subnormal value;
/// - the k-quants and IQ4 types (`quantize_k.comp`) divide and take square roots correctly
///   rounded in integer arithmetic (a scale search is sensitive to the last bit), so they
///   differ only where intermediates go subnormal (the fits multiply sums of x^2 and x^3:
///   sub-blocks of values below about 1e-5) on a device that flushes those to zero;
/// - the CPU's IQ4_NL gives a block whose largest magnitude is below 1e-15 (scale 0) the
///   quants of the previous block that is not (ggml's scratch buffer); the device looks for
///   it up to 16 blocks back, so after a longer run of such blocks its quants are zeros
///   (both decode to zeros).
///
/// The k-quants cost more than a pass over memory: each sub-block's scale search tries up to
/// 21 trial scales (on an H200, 4096 x 4096 f32 to Q4_K took about 2.4 ms with one
/// invocation per super-block, to Q4_0 73 µs; on lavapipe, 256 x 1024 to Q4_K about 5 ms,
/// Q4_0 0.7 ms).
///
/// # Errors
/// [`OpsError::UnsupportedType`] for types other than [`GPU_QUANTIZED`] (the float types are
/// converted elsewhere or quantized on the CPU, `vkml_quant::quantize`; the grid IQ types,
/// IQ1_S .. IQ3_S, nowhere); [`OpsError::Shape`] for an `x` too small or past one binding;
/// HAL errors.
pub fn quantize(s: &mut Stream, x: &Buffer, m: &QMatrix) -> Result<()> {
    // The kernel and the blocks each workgroup of WG writes (quantize.comp: two per
    // invocation, MXFP4 four; quantize_k.comp: one invocation per sub-block, 8 or 16 per super-block,
    // one per IQ4_NL block).
    let (name, per_group) = match m.ty() {
        GgmlType::Q4_0 => ("quantize.q4_0", 128),
        GgmlType::Q4_1 => ("quantize.q4_1", 128),
        GgmlType::Q5_0 => ("quantize.q5_0", 128),
        GgmlType::Q5_1 => ("quantize.q5_1", 128),
        GgmlType::Q8_0 => ("quantize.q8_0", 128),
        GgmlType::Q8_1 => ("quantize.q8_1", 128),
        GgmlType::Q4_K => ("quantize_k.q4_k", 8),
        GgmlType::Q5_K => ("quantize_k.q5_k", 8),
        GgmlType::Q6_K => ("quantize_k.q6_k", 4),
        GgmlType::Q2_K => ("quantize_k.q2_k", 4),
        GgmlType::Q3_K => ("quantize_k.q3_k", 4),
        GgmlType::Q8_K => ("quantize_k.q8_k", 4),
        GgmlType::IQ4_NL => ("quantize_k.iq4_nl", 64),
        GgmlType::IQ4_XS => ("quantize_k.iq4_xs", 8),
        GgmlType::MXFP4 => ("quantize.mxfp4", 256),
        GgmlType::NVFP4 => ("quantize.nvfp4", 128),
        GgmlType::TQ1_0 => ("quantize.tq1_0", 128),
        GgmlType::TQ2_0 => ("quantize.tq2_0", 128),
        GgmlType::Q1_0 => ("quantize.q1_0", 128),
        GgmlType::Q2_0 => ("quantize.q2_0", 128),
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
    // quantize_k.comp's staging in shared memory is sized for this workgroup.
    const WG: u32 = 64;
    let p = pipeline(&dev, name, WG)?;
    let blocks_per_row = (m.k() / m.ty().block_size()) as u64;
    for part in m.parts() {
        let n_blocks = part.rows() as u64 * blocks_per_row;
        let words = part_bytes(m.ty(), part.rows(), m.row_bytes()) / 4;
        let x_off = part.row0() as u64 * m.k() as u64;
        let pc = push_words(&[x_off as u32, n_blocks as u32, words as u32]);
        let g = grid(&dev, "quantize", n_blocks.div_ceil(per_group))?;
        s.dispatch(&p, &[x.into(), part.buffer().into()], &pc, g)?;
    }
    Ok(())
}
