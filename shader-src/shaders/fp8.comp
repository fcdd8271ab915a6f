//! variant e4m3_to_f32 TO_F32=1
//! variant f32_to_e4m3 FROM_F32=1
// FP8 E4M3 (OCP "E4M3FN": 4 exponent bits of bias 7, 3 mantissa bits, no infinities, NaN
// = S.1111.111, largest 448) to and from f32, as candle's `F8E4M3` (crate float8 0.7, after
// CUDA's cuda_fp8.hpp) converts: to f32 exactly, the NaNs as f16's 0x7FFF widened
// (0x7FFFE000, sign dropped); from f32 rounding to nearest even, |x| <= 2^-10 to a signed
// zero, |x| > 464 (infinities included) saturating to +-448, NaN to 0x7F with its sign.
// The bytes are packed four to a 32-bit word, little-endian.
// Bindings: 0 = x, 1 = y (e4m3_to_f32: x words of bytes, y f32; f32_to_e4m3: x f32, y
// words of bytes). Push constant: n (elements). Grid: x (then y, past the device's x
// limit) over elements (to f32) or words (from f32).
#version 450
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; } p;

// This invocation's index over a grid that may wrap into y.
uint flat_id() {
    return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}

#ifdef TO_F32
uint e4m3_to_f32_bits(uint b) {
    uint sign = (b & 0x80u) << 24;
    uint e = (b >> 3) & 0xFu, m = b & 7u;
    if ((b & 0x7Fu) == 0x7Fu) return 0x7FFFE000u;
    if (e == 0u) {
        // Subnormal m 2^-9 (or a signed zero): exact in f32.
        return sign | floatBitsToUint(float(m) * (1.0 / 512.0));
    }
    return sign | ((e + 120u) << 23) | (m << 20);
}

void main() {
    uint i = flat_id();
    if (i >= p.n) return;
    uint b = (x[i >> 2] >> ((i & 3u) * 8u)) & 0xFFu;
    y[i] = e4m3_to_f32_bits(b);
}
#else
uint f32_bits_to_e4m3(uint bits) {
    uint sign = (bits >> 24) & 0x80u;
    uint absx = bits & 0x7FFFFFFFu;
    const uint HALF_ULP = 1u << 19; // half of an e4m3 mantissa step in f32's 23 bits
    int exp8 = int((bits >> 23) & 0xFFu) - 127 + 7;
    uint mantissa = (bits >> 20) & 7u;
    uint res;
    if (absx <= 0x3A800000u) {
        res = 0u; // |x| <= 2^-10: zero
    } else if (absx > 0x7F800000u) {
        res = 0x7Fu; // NaN
    } else if (absx > 0x43E80000u) {
        res = 0x7Eu; // > 464 (infinities too): saturate to 448
    } else if (absx >= 0x3C800000u) {
        // Normal (>= 2^-6): round to nearest even on the dropped bits.
        res = (uint(exp8) << 3) | mantissa;
        uint round = bits & ((HALF_ULP << 1) - 1u);
        if (round > HALF_ULP || (round == HALF_ULP && (mantissa & 1u) != 0u)) res += 1u;
    } else {
        // Subnormal: the implicit bit shifted in, rounded to nearest even.
        uint shift = uint(1 - exp8);
        uint mm = mantissa | 8u;
        res = mm >> shift;
        uint round = (bits | (1u << 23)) & ((HALF_ULP << (shift + 1u)) - 1u);
        uint half_ = HALF_ULP << shift;
        if (round > half_ || (round == half_ && (res & 1u) != 0u)) res += 1u;
    }
    return res | sign;
}

void main() {
    uint w = flat_id();
    uint i0 = w * 4u;
    if (i0 >= p.n) return;
    uint word = 0u;
    for (uint k = 0u; k < 4u; k++) {
        if (i0 + k < p.n) word |= f32_bits_to_e4m3(x[i0 + k]) << (8u * k);
    }
    y[w] = word;
}
#endif
