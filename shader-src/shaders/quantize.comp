//! variant q4_0 Q4_0=1
//! variant q4_1 Q4_1=1
//! variant q5_0 Q5_0=1
//! variant q5_1 Q5_1=1
//! variant q8_0 Q8_0=1
//! variant q8_1 Q8_1=1
//! variant mxfp4 MXFP4=1
//! variant nvfp4 NVFP4=1
//! variant tq1_0 TQ1_0=1
//! variant tq2_0 TQ2_0=1
//! variant q1_0 Q1_0=1
//! variant q2_0 Q2_0=1
// f32 values to GGML blocks quantized block by block with one scale (or exponent) per block
// or sub-block and no search (ggml's quantize_row_*_ref, as vkml-quant's CPU quantizers
// compute them, vkml-quant src/quantize/):
// - Q4_0 and Q5_0 scale by the signed value of largest magnitude (d = max / -8, / -16),
//   Q4_1 and Q5_1 by the range (d = (max - min) / 15, / 31, m = min), Q8_0 and Q8_1 by the
//   largest magnitude (d = amax / 127; Q8_1 also s = sum(q) d); the quants x / d truncated
//   after adding 8.5, 16.5 or 0.5 (saturating, NaN to 0), or rounded half away from zero
//   (Q8). Vulkan does not round division correctly: the divisions by -8 and -16 are exact
//   products here, the others and the reciprocal are the device's, so where it rounds them
//   otherwise a value on a rounding boundary may land one quant step away from the CPU's
//   (lavapipe divides exactly).
// - MXFP4 (32 values): the shared exponent e = floor(log2(amax)) - 2 + 127 (saturated to a
//   byte), floor(log2) as the CPU's libm log2f rounds it: the exponent of amax, plus one
//   where log2 rounds up to the next integer (amax within T ulps below a power of two, T
//   from the exponent: the correctly rounded log2, which glibc's log2f gives for every such
//   amax); each value the nearest (first on ties) of the 16 E2M1 levels times
//   2^(e - 128), |level d - x|.
// - NVFP4 (64 values, 4 sub-blocks of 16): per sub-block the UE4M3 scale of amax / 6
//   (ggml_fp32_to_ue4m3), then the nearest E2M1 level times the scale as stored.
// - TQ1_0, TQ2_0 (256 values), Q2_0 (64): d = amax, the values x (1 / d) rounded half away
//   from zero plus 1 (ternary digits; Q2_0 clamped to 0..3), TQ1_0 packed 5 (4) base-3
//   digits a byte scaled to 256 / 243 rounded up, TQ2_0 and Q2_0 2 bits each.
// - Q1_0 (128 values): d = sum |x| / 128 (an exact product by 2^-7), a bit per value x >= 0.
// d and m stored as f16 rounded to nearest even. The new types' divisions (1 / d, amax / 6)
// are rounded correctly in integer arithmetic (div_rn, as quantize_k.comp) and their other
// steps are exact or `precise` in the CPU's order, so their bytes are the CPU's but where
// inputs or intermediates are subnormal on a device that flushes them to zero (MXFP4 blocks
// whose largest magnitude is below 2^-123, whose level scale 2^(e - 128) is subnormal;
// TQ1_0, TQ2_0 and Q2_0 blocks whose largest magnitude is subnormal, below 1.2e-38, or at
// least 2^126, whose 1 / amax is subnormal (their f16 scale is infinite anyway); Q1_0's
// bit of a negative subnormal value). NVFP4's bytes are the CPU's even there.
// Each invocation writes INV_BLOCKS consecutive blocks of a part (whole 32-bit words: two
// blocks of these types, four of MXFP4's 17 bytes, are a multiple of 4 bytes), blocks packed
// from byte 0; MXFP4's four are a quad of vkml's device layout (a scale word and 16 words
// of codes; ops/src/quant/mxfp4_layout.rs).
// Bindings: 0 = x (f32), 1 = y (the part's blocks, as words). Push constants: x_off (element
// of x where the part's first block starts), n_blocks (blocks in the part), n_words (words
// of y). Grid: x (then y) over groups of INV_BLOCKS blocks.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "strided.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint x_off; uint n_blocks; uint n_words; } p;

#if defined(Q4_0)
#define BLOCK_BYTES 18u
#elif defined(Q4_1)
#define BLOCK_BYTES 20u
#elif defined(Q5_0)
#define BLOCK_BYTES 22u
#elif defined(Q5_1)
#define BLOCK_BYTES 24u
#elif defined(Q8_0)
#define BLOCK_BYTES 34u
#elif defined(Q8_1)
#define BLOCK_BYTES 36u
#elif defined(MXFP4)
#define BLOCK_BYTES 17u
#elif defined(NVFP4)
#define BLOCK_BYTES 36u
#elif defined(TQ1_0)
#define BLOCK_BYTES 54u
#elif defined(TQ2_0)
#define BLOCK_BYTES 66u
#else // Q1_0, Q2_0
#define BLOCK_BYTES 18u
#endif
// Blocks per invocation: a whole number of 32-bit words. BLOCK_AT(k): where block k of
// the invocation starts in w (quantize_block's `at`); MXFP4's is its slot k of a quad.
#if defined(MXFP4)
#define INV_BLOCKS 4u
#define BLOCK_AT(k) (k)
#else
#define INV_BLOCKS 2u
#define BLOCK_AT(k) ((k) * BLOCK_BYTES)
#endif
#define INV_WORDS (INV_BLOCKS * BLOCK_BYTES / 4u)

uint w[INV_WORDS];

void put8(uint at, uint v) {
    w[at >> 2] |= (v & 0xFFu) << ((at & 3u) * 8u);
}

void put16(uint at, uint v) {
    put8(at, v);
    put8(at + 1u, v >> 8);
}

uint f16_of(float v) {
    return vkml_f32_bits_to_f16_bits(floatBitsToUint(v));
}

// Rust's `v as i8` / `as u8`: truncation toward zero, saturating, NaN to 0.
int trunc_sat(float v, float lo, float hi) {
    return isnan(v) ? 0 : int(clamp(v, lo, hi));
}

#if defined(Q4_0) || defined(Q4_1) || defined(Q5_0) || defined(Q5_1) || defined(Q8_0) || defined(Q8_1)
void quantize_block(uint b, uint at) {
    uint x0 = p.x_off + b * 32u;
    float v[32];
    for (uint j = 0u; j < 32u; j++) v[j] = x[x0 + j];
#if defined(Q4_0) || defined(Q5_0)
    // The first value of largest magnitude, with its sign.
    float amax = 0.0, vmax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        if (amax < abs(v[j])) {
            amax = abs(v[j]);
            vmax = v[j];
        }
    }
#if defined(Q4_0)
    precise float d = vmax * -0.125; // = vmax / -8, exactly
    const float OFF = 8.5, TOP = 15.0;
#else
    precise float d = vmax * -0.0625; // = vmax / -16, exactly
    const float OFF = 16.5, TOP = 31.0;
#endif
    precise float id = d != 0.0 ? 1.0 / d : 0.0;
    put16(at, f16_of(d));
    uint qh = 0u;
    for (uint j = 0u; j < 16u; j++) {
        precise float a = v[j] * id + OFF;
        precise float c = v[16u + j] * id + OFF;
        uint q0 = uint(min(trunc_sat(a, -128.0, 127.0), int(TOP)));
        uint q1 = uint(min(trunc_sat(c, -128.0, 127.0), int(TOP)));
#if defined(Q4_0)
        put8(at + 2u + j, q0 | (q1 << 4));
#else
        put8(at + 6u + j, (q0 & 15u) | ((q1 & 15u) << 4));
        qh |= ((q0 >> 4) & 1u) << j;
        qh |= ((q1 >> 4) & 1u) << (j + 16u);
#endif
    }
#if defined(Q5_0)
    put16(at + 2u, qh);
    put16(at + 4u, qh >> 16);
#endif
#elif defined(Q4_1) || defined(Q5_1)
    float vmin = 3.4028234663852886e38, vmx = -3.4028234663852886e38;
    for (uint j = 0u; j < 32u; j++) {
        if (v[j] < vmin) vmin = v[j];
        if (v[j] > vmx) vmx = v[j];
    }
#if defined(Q4_1)
    precise float d = (vmx - vmin) / 15.0;
#else
    precise float d = (vmx - vmin) / 31.0;
#endif
    precise float id = d != 0.0 ? 1.0 / d : 0.0;
    put16(at, f16_of(d));
    put16(at + 2u, f16_of(vmin));
    uint qh = 0u;
    for (uint j = 0u; j < 16u; j++) {
        precise float a = (v[j] - vmin) * id + 0.5;
        precise float c = (v[16u + j] - vmin) * id + 0.5;
#if defined(Q4_1)
        uint q0 = uint(min(trunc_sat(a, -128.0, 127.0), 15));
        uint q1 = uint(min(trunc_sat(c, -128.0, 127.0), 15));
        put8(at + 4u + j, q0 | (q1 << 4));
#else
        uint q0 = uint(trunc_sat(a, 0.0, 255.0));
        uint q1 = uint(trunc_sat(c, 0.0, 255.0));
        put8(at + 8u + j, (q0 & 15u) | ((q1 & 15u) << 4));
        qh |= ((q0 >> 4) & 1u) << j;
        qh |= ((q1 >> 4) & 1u) << (j + 16u);
#endif
    }
#if defined(Q5_1)
    put16(at + 4u, qh);
    put16(at + 6u, qh >> 16);
#endif
#else
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(v[j]));
    precise float d = amax / 127.0;
    precise float id = d != 0.0 ? 1.0 / d : 0.0;
    put16(at, f16_of(d));
    int sum = 0;
#if defined(Q8_0)
    const uint QS = 2u;
#else
    const uint QS = 4u;
#endif
    for (uint j = 0u; j < 32u; j++) {
        precise float a = v[j] * id;
        // f32::round: half away from zero (a - trunc(a) is exact), then `as i8`.
        float r = trunc(a);
        if (abs(a - r) >= 0.5) r += sign(a);
        int q = trunc_sat(r, -128.0, 127.0);
        sum += q;
        put8(at + QS + j, uint(q));
    }
#if defined(Q8_1)
    precise float s = float(sum) * d;
    put16(at + 2u, f16_of(s));
#endif
#endif
}
#else // MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0, Q2_0

#if defined(MXFP4) || defined(NVFP4)
// ggml's kvalues_mxfp4 (vkml-quant's KVALUES_FP4): the E2M1 levels, doubled.
const int KVALUES_FP4[16] = int[](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
#endif

// a / b rounded to nearest even as IEEE 754 (Vulkan lets division be 2.5 ulp off): the
// quotient of the significands in integers (quantize_k.comp's). Zeros, infinities, NaN,
// subnormal operands and subnormal or overflowing quotients take the device's division.
float div_rn(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    uint ea = (ua >> 23) & 0xFFu, eb = (ub >> 23) & 0xFFu;
    precise float dev = a / b;
    if (ea == 0u || ea == 255u || eb == 0u || eb == 255u) return dev;
    uint ma = (ua & 0x7FFFFFu) | 0x800000u, mb = (ub & 0x7FFFFFu) | 0x800000u;
    int e = int(ea) - int(eb);
    if (ma < mb) {
        ma <<= 1;
        e -= 1;
    }
    // q = floor(ma 2^24 / mb) in [2^24, 2^25) (24 quotient bits and a guard bit), r != 0
    // the sticky bit. From the device's quotient of the significands (exact floats; within
    // 2.5 ulp, so q lands 2 to 13 below floor(ma 2^24 / mb)), the remainder of q in exact
    // integer arithmetic, then q raised by up to 15; a remainder out of that range (a device
    // further off) takes the long division, bit by bit.
    precise float qf = float(ma) / float(mb);
    precise float qs = qf * 16777216.0;
    uint q = uint(qs) - 8u;
    uint phi, plo;
    umulExtended(q, mb, phi, plo);
    uint nlo = ma << 24;
    uint r = nlo - plo;
    bool near = (ma >> 8) - phi - (nlo < plo ? 1u : 0u) == 0u && r < (mb << 4);
    [[unroll]] for (int k = 3; k >= 0; k--) {
        bool up = r >= (mb << k);
        r = up ? r - (mb << k) : r;
        q = up ? q + (1u << k) : q;
    }
    q = near ? q : 0u;
    r = near ? r : ma;
    for (int i = near ? 0 : 25; i > 0; i--) {
        uint bit = r >= mb ? 1u : 0u;
        q = (q << 1) | bit;
        r = (r - bit * mb) << 1;
    }
    uint m = q >> 1;
    if ((q & 1u) != 0u && (r != 0u || (m & 1u) != 0u)) m++;
    if (m == 0x1000000u) {
        m = 0x800000u;
        e++;
    }
    int be = e + 127;
    if (be <= 0 || be >= 255) return dev;
    return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(be) << 23) | (m & 0x7FFFFFu));
}

// Rust's `f32::round() as i32`: half away from zero (a - trunc(a) is exact), then
// truncation saturating to i32, NaN to 0.
int round_i32(float a) {
    float r = trunc(a);
    if (abs(a - r) >= 0.5) r += sign(a);
    if (isnan(r)) return 0;
    if (r >= 2147483648.0) return 0x7FFFFFFF;
    if (r <= -2147483648.0) return int(0x80000000u);
    return int(r);
}

#if defined(MXFP4) || defined(NVFP4)
// best_index_fp4: the first of the 16 E2M1 levels (KVALUES_FP4, doubled) times e nearest to
// v (the products are exact: levels of 3 significant bits times a power of two or a UE4M3
// scale).
uint best_index_fp4(float v, float e) {
    precise float p0 = float(KVALUES_FP4[0]) * e;
    precise float best_err = abs(p0 - v);
    uint best = 0u;
    [[unroll]] for (uint i = 1u; i < 16u; i++) {
        precise float pi = float(KVALUES_FP4[i]) * e;
        precise float err = abs(pi - v);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}
#endif

#if defined(MXFP4)
// floor(log2(amax)) - 2 + 127 saturated to a byte (the CPU's `as u8`), floor(log2) as
// log2f rounds it: log2(m 2^ex) = ex + log2(m) rounds up to n = ex + 1 when m is within
// T ulps (of 2^-23) below 2, T = floor(ln 2 * 2^k) with 2^k half the spacing of floats at
// n, over 2^-24 (k = floor(log2 |n|), one less for n a positive power of two; none at n = 0).
uint mxfp4_e(float amax) {
    if (!(amax > 0.0)) return 0u;
    uint bits = floatBitsToUint(amax);
    uint be = bits >> 23;
    if (be == 255u) return 255u; // inf
    if (be == 0u) return 0u;     // subnormal: floor(log2) <= -127, e saturates to 0
    int ex = int(be) - 127;
    uint j = 0x1000000u - ((bits & 0x7FFFFFu) | 0x800000u);
    int n = ex + 1;
    const uint T[8] = uint[](0u, 1u, 2u, 5u, 11u, 22u, 44u, 88u);
    int k = n == 0 ? -1 : (n > 0 && (n & (n - 1)) == 0) ? findLSB(n) - 1 : findMSB(abs(n));
    int fl = (k >= 0 && j <= T[k]) ? n : ex;
    return uint(clamp(fl + 125, 0, 255));
}

// 32 values: the shared exponent e, the values' level indices (qs, value j the low nibble
// of byte j % 16, the high nibble from j = 16). In w, as the invocation's quad of blocks
// sits in vkml's device layout (ops/src/quant/mxfp4_layout.rs): slot k's e at byte k, its
// qs at bytes 4 + 16 k .. 20 + 16 k.
void quantize_block(uint b, uint k) {
    uint x0 = p.x_off + b * 32u;
    float v[32];
    for (uint j = 0u; j < 32u; j++) v[j] = x[x0 + j];
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        if (amax < abs(v[j])) amax = abs(v[j]);
    }
    uint e = mxfp4_e(amax);
    // ggml_e8m0_to_fp32_half: 2^(e - 128), subnormal for e < 2.
    float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
    put8(k, e);
    for (uint j = 0u; j < 16u; j++) put8(4u + 16u * k + j, best_index_fp4(v[j], d) | (best_index_fp4(v[16u + j], d) << 4));
}
#endif

#if defined(NVFP4)
// ggml_fp32_to_ue4m3: a positive float to unsigned E4M3 (bias 7), round half up on the
// mantissa's fourth bit, at most 448 (0x7E); subnormal codes below 2^-6.
uint f32_to_ue4m3(float v) {
    if (!(v > 0.0)) return 0u;
    if (v > 448.0) v = 448.0;
    uint bits = floatBitsToUint(v);
    int e = int((bits >> 23) & 0xFFu) - 127 + 7;
    if (e <= 0) {
        precise float t = v * 512.0 + 0.5;
        int man = min(int(t), 7);
        return man < 1 ? 0u : uint(man);
    }
    if (e >= 15) return 0x7Eu;
    int m = int((bits >> 20) & 7u) + int((bits >> 19) & 1u);
    if (m > 7) {
        m = 0;
        e++;
        if (e >= 15) return 0x7Eu;
    }
    return uint((e << 3) | m);
}

// ggml_ue4m3_to_fp32 (times 0.5): every step exact.
float ue4m3_to_f32(uint u) {
    if (u == 0u || u == 0x7Fu) return 0.0;
    uint e = (u >> 3) & 0xFu;
    float man = float(u & 7u);
    precise float raw = e == 0u ? man * uintBitsToFloat(118u << 23)                        // 2^-9
                                : (1.0 + man * 0.125) * uintBitsToFloat((e + 120u) << 23); // 2^(e-7)
    precise float d = raw * 0.5;
    return d;
}

// 64 values in 4 sub-blocks of 16: their UE4M3 scales (bytes 0 .. 4), the level indices
// (value j of sub-block s the low nibble of byte 4 + 8 s + j % 8, the high from j = 8).
void quantize_block(uint b, uint at) {
    uint x0 = p.x_off + b * 64u;
    for (uint s = 0u; s < 4u; s++) {
        float v[16];
        for (uint j = 0u; j < 16u; j++) v[j] = x[x0 + 16u * s + j];
        float amax = 0.0;
        for (uint j = 0u; j < 16u; j++) {
            if (amax < abs(v[j])) amax = abs(v[j]);
        }
        precise float sc = div_rn(amax, 6.0);
        uint ue = f32_to_ue4m3(sc);
        put8(at + s, ue);
        float d = ue4m3_to_f32(ue);
        for (uint j = 0u; j < 8u; j++) put8(at + 4u + 8u * s + j, best_index_fp4(v[j], d) | (best_index_fp4(v[8u + j], d) << 4));
    }
}
#endif

#if defined(TQ1_0) || defined(TQ2_0) || defined(Q2_0)
// The block's largest magnitude d and 1 / d (0 for d = 0).
void amax_inv(uint x0, uint n, out float d, out float id) {
    float amax = 0.0;
    for (uint j = 0u; j < n; j++) amax = max(amax, abs(x[x0 + j]));
    d = amax;
    id = amax > 0.0 ? div_rn(1.0, amax) : 0.0;
}

// round(v / d) + 1 as the CPU computes it: `((v * id).round() as i32).wrapping_add(1)`.
int digit(float v, float id) {
    precise float a = v * id;
    return round_i32(a) + 1;
}
#endif

#if defined(TQ1_0)
// 5 (qh: 4, then times 3) base-3 digits, first digit most significant, as a byte (wrapping)
// scaled to 256 / 243 rounded up (`(q as u16 * 256).div_ceil(243) as u8`).
uint tq1_pack(uint q) {
    return ((q * 256u + 242u) / 243u) & 0xFFu;
}

// 256 values: qs[0 .. 32] digits of x[m + 32 n] (n = 0 .. 5), qs[32 .. 48] of
// x[160 + m + 16 n], qh[0 .. 4] (bytes 48 .. 52) of x[240 + m + 4 n] (n = 0 .. 4), d (f16,
// bytes 52 .. 54).
void quantize_block(uint b, uint at) {
    uint x0 = p.x_off + b * 256u;
    float d, id;
    amax_inv(x0, 256u, d, id);
    for (uint m = 0u; m < 32u; m++) {
        uint q = 0u;
        for (uint n = 0u; n < 5u; n++) q = (q * 3u + uint(digit(x[x0 + m + 32u * n], id))) & 0xFFu;
        put8(at + m, tq1_pack(q));
    }
    for (uint m = 0u; m < 16u; m++) {
        uint q = 0u;
        for (uint n = 0u; n < 5u; n++) q = (q * 3u + uint(digit(x[x0 + 160u + m + 16u * n], id))) & 0xFFu;
        put8(at + 32u + m, tq1_pack(q));
    }
    for (uint m = 0u; m < 4u; m++) {
        uint q = 0u;
        for (uint n = 0u; n < 4u; n++) q = (q * 3u + uint(digit(x[x0 + 240u + m + 4u * n], id))) & 0xFFu;
        put8(at + 48u + m, tq1_pack((q * 3u) & 0xFFu));
    }
    put16(at + 52u, f16_of(d));
}
#endif

#if defined(TQ2_0)
// 256 values: qs[0 .. 64] with the 2 bits (round(x / d) + 1) & 3 of x[4 j + m + 32 n] at bit
// 2 n of qs[j + m] (j = 0, 32; m < 32; n < 4), d (f16, bytes 64 .. 66).
void quantize_block(uint b, uint at) {
    uint x0 = p.x_off + b * 256u;
    float d, id;
    amax_inv(x0, 256u, d, id);
    for (uint j = 0u; j < 64u; j += 32u) {
        for (uint m = 0u; m < 32u; m++) {
            uint q = 0u;
            for (uint n = 0u; n < 4u; n++) q += (uint(digit(x[x0 + 4u * j + m + 32u * n], id)) & 3u) << (2u * n);
            put8(at + j + m, q);
        }
    }
    put16(at + 64u, f16_of(d));
}
#endif

#if defined(Q2_0)
// 64 values: d (f16, bytes 0 .. 2), then 2 bits clamp(round(x / d) + 1, 0, 3) per value,
// value j at bit 2 (j % 4) of byte 2 + j / 4.
void quantize_block(uint b, uint at) {
    uint x0 = p.x_off + b * 64u;
    float amax = 0.0;
    for (uint j = 0u; j < 64u; j++) {
        float a = abs(x[x0 + j]);
        if (a > amax) amax = a;
    }
    float id = amax > 0.0 ? div_rn(1.0, amax) : 0.0;
    put16(at, f16_of(amax));
    for (uint g = 0u; g < 4u; g++) {
        // Values 16 g .. 16 g + 16: bytes 2 + 4 g .. 6 + 4 g.
        uint bits = 0u;
        for (uint j = 0u; j < 16u; j++) bits |= uint(clamp(digit(x[x0 + 16u * g + j], id), 0, 3)) << (2u * j);
        put16(at + 2u + 4u * g, bits);
        put16(at + 4u + 4u * g, bits >> 16);
    }
}
#endif

#if defined(Q1_0)
// 128 values: d = sum |x| / 128 (f16, bytes 0 .. 2), then a bit per value, 1 for x >= 0,
// value j at bit j % 8 of byte 2 + j / 8.
void quantize_block(uint b, uint at) {
    uint x0 = p.x_off + b * 128u;
    precise float sum_abs = 0.0;
    for (uint j = 0u; j < 128u; j++) sum_abs += abs(x[x0 + j]);
    precise float d = sum_abs * 0.0078125; // = sum_abs / 128, exactly
    put16(at, f16_of(d));
    for (uint g = 0u; g < 4u; g++) {
        // Values 32 g .. 32 g + 32: bytes 2 + 4 g .. 6 + 4 g.
        uint bits = 0u;
        for (uint j = 0u; j < 32u; j++) bits |= (x[x0 + 32u * g + j] >= 0.0 ? 1u : 0u) << j;
        put16(at + 2u + 4u * g, bits);
        put16(at + 4u + 4u * g, bits >> 16);
    }
}
#endif
#endif

void main() {
    uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint b0 = INV_BLOCKS * g;
    if (b0 >= p.n_blocks) return;
    for (uint i = 0u; i < INV_WORDS; i++) w[i] = 0u;
    for (uint k = 0u; k < INV_BLOCKS; k++) {
        if (b0 + k < p.n_blocks) quantize_block(b0 + k, BLOCK_AT(k));
    }
#if defined(MXFP4)
    // Quad g & 3 of group g / 4 (68 words): its scale word, then its 16 words of qs.
    uint grp = 68u * (g >> 2), quad = g & 3u;
    if (grp + quad < p.n_words) y[grp + quad] = w[0];
    for (uint i = 0u; i < 16u; i++) {
        uint at = grp + 4u + 16u * quad + i;
        if (at < p.n_words) y[at] = w[1u + i];
    }
#else
    uint base = g * INV_WORDS;
    for (uint i = 0u; i < INV_WORDS; i++) {
        if (base + i < p.n_words) y[base + i] = w[i];
    }
#endif
}
