//! AVX2 forms of the block dot products a CPU mat-vec spends its time in (Q4_0, Q4_1 and
//! Q8_0 rows with Q8_1 activations), giving the same bits as [`crate::dot`]'s reference:
//! each block's integer sum is exact in both (a horizontal sum of the SIMD lanes), and
//! the float arithmetic per block and across blocks is the reference's, in its order.
//! The integer products follow ggml's AVX2 kernels (`ggml-cpu/arch/x86/quants.c`):
//! `maddubs` of unsigned by signed bytes into 16-bit pairs (which cannot saturate here:
//! |15 · 127 · 2| and |128 · 127 · 2| fit), then `madd` with ones into 32-bit lanes.

use std::arch::x86_64::*;

use crate::blocks::BlockQ8_1;
use crate::dot::h2f;
use crate::types::GgmlType;

/// Row bytes per block of the types handled here.
fn block_bytes(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q4_0 => Some(18),
        GgmlType::Q4_1 => Some(20),
        GgmlType::Q8_0 => Some(34),
        _ => None,
    }
}

/// Whether [`rows_q8_1`] handles `ty`.
pub(crate) fn handles(ty: GgmlType) -> bool {
    block_bytes(ty).is_some()
}

/// The sum of the eight 32-bit lanes of `v` (exact: integer adds).
#[target_feature(enable = "avx2")]
fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// Σ x·y over 32 byte pairs, `x` unsigned (< 128 · 2 per pair), `y` signed.
#[target_feature(enable = "avx2")]
fn dot_u8_i8(x: __m256i, y: __m256i) -> i32 {
    let pairs = _mm256_maddubs_epi16(x, y);
    hsum_i32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// Σ x·y over 32 signed byte pairs (ggml's sign trick: |x| times y with x's sign).
#[target_feature(enable = "avx2")]
fn dot_i8_i8(x: __m256i, y: __m256i) -> i32 {
    dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// 32 bytes at `p[at..at + 32]`.
#[target_feature(enable = "avx2")]
fn load32(p: &[u8], at: usize) -> __m256i {
    let s = &p[at..at + 32];
    // SAFETY: `s` is 32 readable bytes (the slice above is bounds-checked); the load has
    // no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// 16 bytes of nibbles at `p[at..at + 16]` as 32 bytes: the low nibbles first, then the
/// high ones (the element order of Q4_0 / Q4_1 blocks).
#[target_feature(enable = "avx2")]
fn nibbles32(p: &[u8], at: usize) -> __m256i {
    let s = &p[at..at + 16];
    // SAFETY: `s` is 16 readable bytes (bounds-checked above); no alignment requirement.
    let v = unsafe { _mm_loadu_si128(s.as_ptr().cast()) };
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

fn f16_at(p: &[u8], at: usize) -> f32 {
    h2f(half::f16::from_bits(u16::from_le_bytes([p[at], p[at + 1]])))
}

/// The dot products of the rows `x` (each `x.len() / out.len()` bytes of `ty`) with the
/// Q8_1 activations `y`, as [`crate::vec_dot_q8_1`] computes each; `None` for a type not
/// handled here. The caller has checked the lengths (whole blocks, one `y` block per
/// block of a row).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn rows_q8_1(ty: GgmlType, x: &[u8], y: &[BlockQ8_1], out: &mut [f32]) -> Option<()> {
    let bb = block_bytes(ty)?;
    let row_bytes = x.len() / out.len();
    let ys: Vec<(__m256i, f32, f32)> =
        y.iter().map(|b| (load32(bytemuck::bytes_of(&b.qs), 0), h2f(b.d), h2f(b.s))).collect();
    for (row, o) in x.chunks_exact(row_bytes).zip(out.iter_mut()) {
        let mut sumf = 0f32;
        for (blk, &(yq, yd, ys)) in row.chunks_exact(bb).zip(&ys) {
            let d = f16_at(blk, 0);
            match ty {
                GgmlType::Q4_0 => {
                    let q = _mm256_sub_epi8(nibbles32(blk, 2), _mm256_set1_epi8(8));
                    sumf += dot_i8_i8(q, yq) as f32 * d * yd;
                }
                GgmlType::Q4_1 => {
                    let m = f16_at(blk, 2);
                    sumf += (d * yd) * dot_u8_i8(nibbles32(blk, 4), yq) as f32 + m * ys;
                }
                _ => {
                    sumf += dot_i8_i8(load32(blk, 2), yq) as f32 * (d * yd);
                }
            }
        }
        *o = sumf;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use crate::types::GgmlType;

    /// The AVX2 rows give the reference's bits, for weights from the quantizer and for
    /// blocks of random bytes (extreme codes, -128 included), where the CPU has AVX2.
    #[test]
    fn avx2_rows_equal_the_reference_bit_for_bit() {
        if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")) {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let (rows, k) = (37, 256);
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let x: Vec<f32> = (0..k).map(|_| (next() >> 40) as f32 / (1u64 << 22) as f32 - 2.0).collect();
        let y = crate::quantize_q8_1(&x).unwrap();
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
            let w: Vec<f32> = (0..rows * k).map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect();
            let quantized = crate::quantize(ty, &w).unwrap();
            // Random bytes with finite scales (f16 0x3C00 = 1.0 in every scale slot).
            let mut random: Vec<u8> = (0..quantized.len()).map(|_| next() as u8).collect();
            let bb = super::block_bytes(ty).unwrap();
            for blk in random.chunks_exact_mut(bb) {
                blk[0..2].copy_from_slice(&0x3C00u16.to_le_bytes());
                if ty == GgmlType::Q4_1 {
                    blk[2..4].copy_from_slice(&0xBC00u16.to_le_bytes());
                }
            }
            for bytes in [quantized, random] {
                let mut got = vec![0f32; rows];
                // SAFETY: AVX2 and FMA are present (checked at the top).
                unsafe { super::rows_q8_1(ty, &bytes, &y, &mut got) }.unwrap();
                for (r, g) in got.iter().enumerate() {
                    let want =
                        crate::vec_dot_q8_1(ty, &bytes[r * bytes.len() / rows..(r + 1) * bytes.len() / rows], &y)
                            .unwrap();
                    assert_eq!(g.to_bits(), want.to_bits(), "{ty:?} row {r}: {g} vs {want}");
                }
            }
        }
    }
}
