//! AVX2 forms of the block dot products a CPU mat-vec spends its time in (Q4_0, Q4_1 and
//! Q8_0 rows with Q8_1 activations), in the order of ggml's AVX2 kernels
//! (`ggml-cpu/arch/x86/quants.c`): each block's integer products stay in eight 32-bit
//! lanes, which are converted to f32 and accumulated, scaled by the block's `d · d_y`,
//! in eight f32 lanes summed once per row. The integer sums are exact; the result differs
//! from [`crate::dot`]'s reference (one float sum per block, in block order) by the
//! rounding of the float sums only. The integer products follow ggml's:
//! `maddubs` of unsigned by signed bytes into 16-bit pairs (which cannot saturate here:
//! |15 · 127 · 2| and |128 · 127 · 2| fit), then `madd` with ones into 32-bit lanes.

use std::arch::x86_64::*;

use crate::blocks::BlockQ8_1;
use crate::dot::h2f;
use crate::types::GgmlType;

/// Whether [`rows_q8_1`] handles `ty`.
pub(crate) fn handles(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0)
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

/// The sum of the eight f32 lanes of `v`.
#[target_feature(enable = "avx2")]
fn hsum_f32(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// The 32-bit lanes of `maddubs(x, y)` summed in pairs: eight partial sums of Σ x·y over
/// 32 byte pairs, `x` unsigned (< 128 · 2 per pair), `y` signed, as f32 (exact: each is
/// at most 4 · 255 · 128 in magnitude).
#[target_feature(enable = "avx2")]
fn lanes_u8_i8(x: __m256i, y: __m256i) -> __m256 {
    let pairs = _mm256_maddubs_epi16(x, y);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// As [`lanes_u8_i8`] for signed `x` (ggml's sign trick: |x| times y with x's sign).
#[target_feature(enable = "avx2")]
fn lanes_i8_i8(x: __m256i, y: __m256i) -> __m256 {
    lanes_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// The dot products of the rows `x` (each `x.len() / out.len()` bytes of `ty`) with the
/// Q8_1 activations `y` (what [`crate::vec_dot_q8_1`] computes, up to the order of the
/// float sums); `None` for a type not handled here. The caller has checked the lengths
/// (whole blocks, one `y` block per block of a row).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn rows_q8_1(ty: GgmlType, x: &[u8], y: &[BlockQ8_1], out: &mut [f32]) -> Option<()> {
    let ys: Vec<(__m256i, f32, f32)> =
        y.iter().map(|b| (load32(bytemuck::bytes_of(&b.qs), 0), h2f(b.d), h2f(b.s))).collect();
    match ty {
        GgmlType::Q4_0 => rows::<18>(x, &ys, out, |b, yq, _, _| {
            lanes_i8_i8(_mm256_sub_epi8(nibbles32(b, 2), _mm256_set1_epi8(8)), yq)
        }),
        GgmlType::Q4_1 => rows::<20>(x, &ys, out, |b, yq, ys, mins| {
            *mins += f16_at(b, 2) * ys;
            lanes_u8_i8(nibbles32(b, 4), yq)
        }),
        GgmlType::Q8_0 => rows::<34>(x, &ys, out, |b, yq, _, _| lanes_i8_i8(load32(b, 2), yq)),
        _ => return None,
    }
    Some(())
}

/// [`rows_q8_1`] for blocks of `BB` bytes whose first two are the f16 scale `d`:
/// `block(bytes, y_qs, y_s, mins)` gives a block's eight lanes of integer products (and
/// adds a per-block constant term to `mins`). `BB` is a constant so that every offset
/// into a block is checked at compile time, and `block` inlines into the loop.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn rows<const BB: usize>(
    x: &[u8],
    ys: &[(__m256i, f32, f32)],
    out: &mut [f32],
    block: impl Fn(&[u8; BB], __m256i, f32, &mut f32) -> __m256,
) {
    let row_bytes = x.len() / out.len();
    for (row, o) in x.chunks_exact(row_bytes).zip(out.iter_mut()) {
        let mut acc = _mm256_setzero_ps();
        let mut mins = 0f32;
        for (b, &(yq, yd, ys)) in row.chunks_exact(BB).zip(ys) {
            let b: &[u8; BB] = b.try_into().expect("chunks of BB bytes");
            let lanes = block(b, yq, ys, &mut mins);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b, 0) * yd), lanes, acc);
        }
        *o = hsum_f32(acc) + mins;
    }
}

#[cfg(test)]
mod tests {
    use crate::types::GgmlType;

    /// The AVX2 rows give the reference's sums up to the rounding of the float sums (a
    /// few ulps of the sum of the terms' magnitudes), for weights from the quantizer and
    /// for blocks of random bytes (extreme codes, -128 included), where the CPU has AVX2.
    #[test]
    fn avx2_rows_equal_the_reference_up_to_float_rounding() {
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
            let bb = ty.type_size();
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
                    let row = &bytes[r * bytes.len() / rows..(r + 1) * bytes.len() / rows];
                    let want = crate::vec_dot_q8_1(ty, row, &y).unwrap();
                    // Σ |terms| of the float sums: d q y = (w - m) y per element, so
                    // Σ |w y| + Σ |m| |y| bounds them (m: Q4_1's block minimum, else 0).
                    let wd = crate::dequantize_to_vec(ty, row).unwrap();
                    let yd = crate::dequantize_to_vec(GgmlType::Q8_1, bytemuck::cast_slice(&y)).unwrap();
                    let mins: Vec<f32> = row
                        .chunks_exact(bb)
                        .map(|b| if ty == GgmlType::Q4_1 { super::f16_at(b, 2).abs() } else { 0.0 })
                        .collect();
                    let magnitude: f32 =
                        wd.iter().zip(&yd).enumerate().map(|(i, (a, b))| (a * b).abs() + mins[i / 32] * b.abs()).sum();
                    let tol = 16.0 * f32::EPSILON * magnitude;
                    assert!((g - want).abs() <= tol, "{ty:?} row {r}: {g} vs {want} (tolerance {tol})");
                }
            }
        }
    }
}
