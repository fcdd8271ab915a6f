// Helpers of the strided element-wise kernels (unary.comp, binary.comp, strided_copy.comp;
// host side: vkml_ops::elementwise).
//
// f16 <-> f32 conversions on the bits, in integer arithmetic: exact widening (subnormals
// and NaN payloads kept, NaN made quiet) and narrowing rounded to nearest, ties to even,
// with overflow to infinity and gradual underflow, whatever the device's own
// conversion rounding and denormal modes. They give the same bits as the `half` crate.
//
// Strided index space: the kernels get the op's shape (after the host merged dims) as
// `rank` sizes in push constants, dim rank-1 fastest (row-major), and for each operand
// its element offset and per-dim strides in elements.
#ifndef VKML_STRIDED_GLSL
#define VKML_STRIDED_GLSL

#define VKML_MAX_RANK 6

// f32 bits -> f16 bits (in the low 16 bits), round to nearest even.
uint vkml_f32_bits_to_f16_bits(uint x) {
    uint s = (x >> 16) & 0x8000u;
    uint e = (x >> 23) & 0xffu;
    uint m = x & 0x7fffffu;
    if (e == 0xffu) {
        // Infinity, or NaN: quiet, top mantissa bits kept.
        return s | 0x7c00u | (m != 0u ? (0x200u | (m >> 13)) : 0u);
    }
    int he = int(e) - 112; // f16 biased exponent: e - 127 + 15
    if (he >= 31) {
        return s | 0x7c00u; // overflow
    }
    uint mant;
    uint shift;
    uint base;
    if (he <= 0) {
        // f16 subnormal (or zero): the value is (m | hidden bit) * 2^(e - 150), in units of
        // 2^-24 that is the significand shifted right by 14 - he.
        if (he < -10) {
            return s; // below half the smallest subnormal (f32 subnormals included)
        }
        mant = m | 0x800000u;
        shift = uint(14 - he);
        base = s;
    } else {
        mant = m;
        shift = 13u;
        base = s | (uint(he) << 10);
    }
    uint r = mant >> shift;
    uint rest = mant & ((1u << shift) - 1u);
    uint halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (r & 1u) != 0u)) {
        r += 1u; // a carry out of the mantissa bumps the exponent (up to infinity): correct
    }
    return base + r;
}

// f16 bits (low 16 bits) -> f32 bits, exact.
uint vkml_f16_bits_to_f32_bits(uint h) {
    uint s = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 0x1fu) {
        return s | 0x7f800000u | (m != 0u ? (0x400000u | (m << 13)) : 0u);
    }
    if (e == 0u) {
        if (m == 0u) {
            return s;
        }
        // Subnormal m * 2^-24: normalise (leading one at bit p, 0 <= p <= 9).
        int p = findMSB(m);
        return s | (uint(p + 103) << 23) | ((m << uint(23 - p)) & 0x7fffffu);
    }
    return s | ((e + 112u) << 23) | (m << 13);
}

float vkml_f16_bits_to_f32(uint h) { return uintBitsToFloat(vkml_f16_bits_to_f32_bits(h)); }
uint vkml_f32_to_f16_bits(float f) { return vkml_f32_bits_to_f16_bits(floatBitsToUint(f)); }


#endif
