//! MXFP4's device layout: how a [`QMatrix`](super::QMatrix) part holds ggml's
//! `block_mxfp4 { u8 e; u8 qs[16]; }` (17 bytes, ggml-common.h) so that every block's
//! codes are one aligned 16-byte load.
//!
//! A part's blocks, in GGUF order (block `b` at GGUF byte `17 b` of the part), go in groups
//! of [`GROUP_BLOCKS`]: group `g = b / 16` takes [`GROUP_BYTES`] bytes from byte `272 g`,
//! the 16 E8M0 scales first (block `b`'s `e` at byte `272 g + b % 16`), then the 16 blocks'
//! `qs` (block `b`'s at bytes `272 g + 16 + 16 (b % 16)` ..` + 16`, unchanged). A partial
//! last group is laid out as a whole one; no kernel reads its missing blocks' bytes (zero
//! after an upload, whatever the allocation held after `quantize` or `concat_rows`). A
//! kernel finds block `b` from the GGUF byte offset `17 b` it already computes
//! (`include/quant.glsl`'s `mxfp4_e` and `mxfp4_qs`).
//!
//! Negative zero (code 8) is stored as zero (code 0): the same value for every kernel,
//! and it lets the integer-dot mat-vec negate codes bytewise without a carry
//! (`mul_mat_vec_dot.comp`). ggml's quantizer never writes code 8 (`best_index_mxfp4`
//! keeps the first of equal errors), so only files that carry it see it change.

use vkml_hal::{Buffer, Stream};

use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};

/// GGUF bytes of a block (ggml's `sizeof(block_mxfp4)`).
pub const BLOCK_BYTES: usize = 17;
/// Blocks per group.
pub const GROUP_BLOCKS: usize = 16;
/// Bytes per group: 16 scales and 16 × 16 code bytes, 16 blocks' GGUF bytes.
pub const GROUP_BYTES: usize = GROUP_BLOCKS * BLOCK_BYTES;

/// Device bytes holding `blocks` blocks (whole groups; a multiple of 16).
pub fn device_bytes(blocks: usize) -> usize {
    blocks.div_ceil(GROUP_BLOCKS) * GROUP_BYTES
}

/// `gguf` (whole blocks in GGUF order, `17 n` bytes) in the device layout, negative zeros
/// made zero: [`device_bytes`]`(n)` bytes (the tests' whole-part form of [`write`]).
#[cfg(test)]
fn to_device(gguf: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(device_bytes(gguf.len() / BLOCK_BYTES));
    to_device_into(gguf, &mut out);
    out
}

/// `gguf` (whole blocks in GGUF order) in the device layout, negative zeros made zero,
/// appended to `out`.
fn to_device_into(gguf: &[u8], out: &mut Vec<u8>) {
    debug_assert!(gguf.len().is_multiple_of(BLOCK_BYTES));
    // A group's 16 blocks are 272 GGUF bytes too.
    for blocks in gguf.chunks(GROUP_BYTES) {
        let mut group = [0u8; GROUP_BYTES];
        let (scales, codes) = group.split_at_mut(GROUP_BLOCKS);
        for ((e, qs), block) in scales.iter_mut().zip(codes.chunks_exact_mut(16)).zip(blocks.chunks_exact(BLOCK_BYTES))
        {
            *e = block[0];
            for (o, q) in qs.chunks_exact_mut(8).zip(block[1..].chunks_exact(8)) {
                let w = u64::from_le_bytes(q.try_into().expect("8 bytes"));
                o.copy_from_slice(&without_negative_zero(w).to_le_bytes());
            }
        }
        out.extend_from_slice(&group);
    }
}

/// Writes `gguf` (whole blocks in GGUF order) into `buffer` from byte 0 in the device
/// layout, 64 MiB of whole groups at a time (a group's GGUF and device bytes have the
/// same size, so each chunk lands where its GGUF bytes start): no host copy of a whole
/// part.
///
/// # Errors
/// HAL errors of the writes (a `buffer` smaller than [`device_bytes`] of the blocks).
pub(super) fn write(buffer: &Buffer, gguf: &[u8]) -> Result<()> {
    const CHUNK: usize = (64 << 20) / GROUP_BYTES * GROUP_BYTES;
    let mut dev = Vec::with_capacity(CHUNK.min(device_bytes(gguf.len() / BLOCK_BYTES)));
    for (i, chunk) in gguf.chunks(CHUNK).enumerate() {
        dev.clear();
        to_device_into(chunk, &mut dev);
        buffer.write((i * CHUNK) as u64, &dev)?;
    }
    Ok(())
}

/// `w`'s 16 nibbles with each 8 (negative zero) made 0.
fn without_negative_zero(w: u64) -> u64 {
    const ONES: u64 = 0x1111_1111_1111_1111;
    // Bit 0 of a nibble: any of its low 3 bits set; then the nibbles that are exactly 8.
    let low = (w | (w >> 1) | (w >> 2)) & ONES;
    let neg_zero = (w >> 3) & ONES & !low;
    w & !(neg_zero << 3)
}

/// The first `gguf.len() / 17` blocks of `device` (the device layout) into `gguf`, in
/// GGUF order.
pub(super) fn from_device(device: &[u8], gguf: &mut [u8]) {
    debug_assert!(device.len() >= device_bytes(gguf.len() / BLOCK_BYTES));
    for (b, block) in gguf.chunks_exact_mut(BLOCK_BYTES).enumerate() {
        let (g, j) = (b / GROUP_BLOCKS, b % GROUP_BLOCKS);
        block[0] = device[g * GROUP_BYTES + j];
        block[1..].copy_from_slice(&device[g * GROUP_BYTES + 16 + 16 * j..][..16]);
    }
}

/// Records the copy of `n` blocks from block `src0` of part `src` to block `dst0` of part
/// `dst`, both in the device layout (`mxfp4_copy_blocks.comp`; blocks change group, so
/// no byte copy does). What `dst` holds outside those blocks stays: the kernel rewrites
/// the scale words it shares with them, which is safe only because each dispatch binds
/// the whole `dst` read-write, so the stream puts a barrier between copies into it.
///
/// # Errors
/// [`OpsError::Shape`] when a range passes its buffer or 2^32 blocks; HAL errors.
pub(super) fn copy_blocks(s: &mut Stream, src: &Buffer, src0: u64, dst: &Buffer, dst0: u64, n: u64) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (src_end, dst_end) = (src0 + n, dst0 + n);
    if device_bytes(src_end as usize) as u64 > src.size()
        || device_bytes(dst_end as usize) as u64 > dst.size()
        || dst_end.div_ceil(4) > u64::from(u32::MAX)
        || src_end > u64::from(u32::MAX)
    {
        return Err(OpsError::Shape {
            op: "mxfp4_copy_blocks",
            reason: format!(
                "blocks {src0}..{src_end} of {} bytes to {dst0}..{dst_end} of {} bytes",
                src.size(),
                dst.size()
            ),
        });
    }
    let dev = s.device().clone();
    const WG: u32 = 64;
    let p = pipeline(&dev, "mxfp4_copy_blocks", WG)?;
    let quads = dst_end.div_ceil(4) - dst0 / 4;
    let pc = push_words(&[src0 as u32, dst0 as u32, n as u32, quads as u32]);
    let g = grid(&dev, "mxfp4_copy_blocks", quads.div_ceil(u64::from(WG)))?;
    s.dispatch(&p, &[src.into(), dst.into()], &pc, g)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of pseudo-random bytes with no code 8, like ggml's quantizer writes.
    fn blocks(n: usize) -> Vec<u8> {
        let mut s = 0x9E37_79B9u32;
        (0..17 * n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let v = (s >> 8) as u8;
                if i % 17 == 0 {
                    v
                } else {
                    // (no nibble 8: those become 0)
                    let lo = if v & 0x0F == 8 { 9 } else { v & 0x0F };
                    let hi = if v & 0xF0 == 0x80 { 0x90 } else { v & 0xF0 };
                    lo | hi
                }
            })
            .collect()
    }

    #[test]
    fn round_trips_whole_and_partial_groups() {
        for n in [1, 15, 16, 17, 90, 128, 1000] {
            let g = blocks(n);
            let d = to_device(&g);
            assert_eq!(d.len(), device_bytes(n));
            assert_eq!(d.len() % 16, 0);
            let mut back = vec![0u8; g.len()];
            from_device(&d, &mut back);
            assert_eq!(back, g, "{n} blocks");
        }
    }

    /// What [`write`] relies on: chunks of whole groups converted one by one, each at the
    /// GGUF offset it starts at, make the whole's device bytes.
    #[test]
    fn chunks_of_whole_groups_land_at_their_gguf_offsets() {
        let g = blocks(16 * 5 + 7);
        let whole = to_device(&g);
        let mut pieces = Vec::new();
        for (i, c) in g.chunks(2 * GROUP_BYTES).enumerate() {
            assert_eq!(pieces.len(), i * 2 * GROUP_BYTES);
            to_device_into(c, &mut pieces);
        }
        assert_eq!(pieces, whole);
    }

    #[test]
    fn places_scales_and_codes_by_group() {
        let g = blocks(40);
        let d = to_device(&g);
        // block 37: group 2, slot 5
        assert_eq!(d[2 * 272 + 5], g[37 * 17]);
        assert_eq!(&d[2 * 272 + 16 + 16 * 5..][..16], &g[37 * 17 + 1..][..16]);
        // the partial group's missing blocks are zero
        assert!(d[2 * 272 + 8..2 * 272 + 16].iter().all(|&b| b == 0));
        assert!(d[2 * 272 + 16 + 16 * 8..].iter().all(|&b| b == 0));
    }

    #[test]
    fn only_negative_zero_nibbles_change() {
        for n in 0..16u64 {
            for at in 0..16 {
                let w = 0x7F9A_3C5E_1B2D_4F60u64 & !(0xF << (4 * at)) | n << (4 * at);
                let want = if n == 8 { w & !(0xF << (4 * at)) } else { w };
                assert_eq!(without_negative_zero(w), want, "nibble {n} at {at}");
            }
        }
    }

    #[test]
    fn negative_zero_becomes_zero() {
        let mut g = blocks(1);
        g[1] = 0x88; // both nibbles negative zero
        g[2] = 0x8F; // low -12, high negative zero
        g[3] = 0xF8; // low negative zero, high -12
        let mut back = vec![0u8; g.len()];
        from_device(&to_device(&g), &mut back);
        assert_eq!(&back[1..4], &[0x00, 0x0F, 0xF0]);
        assert_eq!(&back[4..], &g[4..]);
    }
}
