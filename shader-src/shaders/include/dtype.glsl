// Candle's dtypes in storage buffers (host side: vkml_ops::Dtype), and conversions between
// them on the bits, with the results of candle-core's CPU backend (Rust `as` casts and
// the `half` crate), whatever the device's own conversion rounding and denormal modes.
//
// Include after strided.glsl (the f16 helpers). The including shader enables the storage
// extensions its types need before any declaration:
//   GL_EXT_shader_16bit_storage                      f16, bf16 (uint16_t)
//   GL_EXT_shader_8bit_storage                       u8 (uint8_t)
//   GL_EXT_shader_explicit_arithmetic_types_int64    i64, f64 (and VKML_INT64 defined)
//
// Value macros (arithmetic kernels compiled for one dtype): define one of V_F32, V_F16,
// V_BF16, V_F64, V_U8, V_U32, V_I64. Then
//   V_ST            the element type in the buffer
//   V_T             the type computed in: float (f32, f16, bf16), double, uint (u8, u32),
//                   int64_t
//   V_LOAD(b, i)    element i of buffer array b, as V_T (exact)
//   V_STORE(b, i, v) stores v: f16 / bf16 rounded as half::f16::from_f32 /
//                   half::bf16::from_f32, u8 truncated to the low 8 bits (Rust's wrapping
//                   u8 arithmetic)
//   V_ROUND(v)      v rounded to the dtype and widened back (exact for f32, f64 and the
//                   integers; one rounding to nearest even for f16 / bf16)
//   V_FLOAT / V_INT defined for float / integer dtypes.
#ifndef VKML_DTYPE_GLSL
#define VKML_DTYPE_GLSL

// ---- 32-bit conversions ------------------------------------------------------------

// half::bf16::from_f32: NaN keeps its top bits and is made quiet; otherwise round to
// nearest even on the 16 dropped bits.
uint vkml_f32_bits_to_bf16_bits(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (x >> 16) | 0x40u;
    }
    uint r = x >> 16;
    if ((x & 0x8000u) != 0u && (x & 0x17fffu) != 0u) {
        r += 1u;
    }
    return r & 0xffffu;
}

// half::bf16::to_f32: exact, a NaN made quiet.
uint vkml_bf16_bits_to_f32_bits(uint h) {
    return ((h & 0x7fffu) > 0x7f80u ? (h | 0x40u) : h) << 16;
}

// `v as f32` for a u32: round to nearest even.
uint vkml_u32_to_f32_bits(uint v) {
    if (v == 0u) return 0u;
    int p = findMSB(v);
    if (p <= 23) {
        return (uint(p + 127) << 23) + ((v << uint(23 - p)) - 0x800000u);
    }
    uint shift = uint(p - 23);
    uint mant = v >> shift;
    uint rest = v & ((1u << shift) - 1u);
    uint halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (mant & 1u) != 0u)) {
        mant += 1u; // a carry into bit 24 bumps the exponent: still correct
    }
    return (uint(p + 127) << 23) + (mant - 0x800000u);
}

// `x as u8` / `x as u32` for f32 bits x: toward zero, saturating at 0 and `maxv`, NaN 0.
uint vkml_f32_bits_to_uint_sat(uint x, uint maxv) {
    uint e = (x >> 23) & 0xffu;
    if ((x & 0x7fffffffu) > 0x7f800000u || (x >> 31) != 0u || e < 127u) {
        return 0u; // NaN, negative (-1 < x < 0 truncates to 0 too), or below 1
    }
    uint ex = e - 127u;
    if (ex >= 32u) return maxv;
    uint sig = (x & 0x7fffffu) | 0x800000u;
    uint v = ex >= 23u ? sig << (ex - 23u) : sig >> (23u - ex);
    return min(v, maxv);
}

// ---- 64-bit conversions (devices with shaderInt64) ---------------------------------
#ifdef VKML_INT64

int vkml_msb64(uint64_t v) {
    uint hi = uint(v >> 32);
    return hi != 0u ? 32 + findMSB(hi) : findMSB(uint(v));
}

// `v as f32` for a u64 magnitude: round to nearest even (bits without the sign).
uint vkml_u64_to_f32_bits(uint64_t v) {
    if (v == 0ul) return 0u;
    int p = vkml_msb64(v);
    if (p <= 31) return vkml_u32_to_f32_bits(uint(v));
    uint shift = uint(p - 23);
    uint64_t mant = v >> shift;
    uint64_t rest = v & ((uint64_t(1) << shift) - 1ul);
    uint64_t halfway = uint64_t(1) << (shift - 1u);
    if (rest > halfway || (rest == halfway && (mant & 1ul) != 0ul)) {
        mant += 1ul;
    }
    return (uint(p + 127) << 23) + (uint(mant) - 0x800000u);
}

// `v as f64` for a u64 magnitude: round to nearest even.
uint64_t vkml_u64_to_f64_bits(uint64_t v) {
    if (v == 0ul) return 0ul;
    int p = vkml_msb64(v);
    uint64_t hidden = uint64_t(1) << 52;
    if (p <= 52) {
        return (uint64_t(p + 1023) << 52) + ((v << uint(52 - p)) - hidden);
    }
    uint shift = uint(p - 52);
    uint64_t mant = v >> shift;
    uint64_t rest = v & ((uint64_t(1) << shift) - 1ul);
    uint64_t halfway = uint64_t(1) << (shift - 1u);
    if (rest > halfway || (rest == halfway && (mant & 1ul) != 0ul)) {
        mant += 1ul;
    }
    return (uint64_t(p + 1023) << 52) + (mant - hidden);
}

uint vkml_i64_to_f32_bits(int64_t v) {
    uint64_t mag = v < 0l ? uint64_t(-(v + 1l)) + 1ul : uint64_t(v);
    return (v < 0l ? 0x80000000u : 0u) | vkml_u64_to_f32_bits(mag);
}

uint64_t vkml_i64_to_f64_bits(int64_t v) {
    uint64_t mag = v < 0l ? uint64_t(-(v + 1l)) + 1ul : uint64_t(v);
    return (v < 0l ? (uint64_t(1) << 63) : 0ul) | vkml_u64_to_f64_bits(mag);
}

// `x as f64` for f32 bits: exact (a NaN made quiet, its payload kept).
uint64_t vkml_f32_bits_to_f64_bits(uint x) {
    uint64_t s = uint64_t(x >> 31) << 63;
    uint e = (x >> 23) & 0xffu;
    uint m = x & 0x7fffffu;
    if (e == 0xffu) {
        return s | (uint64_t(0x7ffu) << 52) | (m != 0u ? (uint64_t(1) << 51) | (uint64_t(m) << 29) : 0ul);
    }
    if (e == 0u) {
        if (m == 0u) return s;
        int p = findMSB(m); // value m * 2^-149, leading one at bit p
        return s | (uint64_t(p - 149 + 1023) << 52) | ((uint64_t(m) << uint(52 - p)) & 0xffffffffffffful);
    }
    return s | (uint64_t(e - 127u + 1023u) << 52) | (uint64_t(m) << 29);
}

// `x as f32` for f64 bits: round to nearest even, overflow to infinity, gradual
// underflow; a NaN made quiet with its top payload bits.
uint vkml_f64_bits_to_f32_bits(uint64_t x) {
    uint s = uint(x >> 32) & 0x80000000u;
    uint e = uint(x >> 52) & 0x7ffu;
    uint64_t m = x & 0xffffffffffffful;
    if (e == 0x7ffu) {
        return s | 0x7f800000u | (m != 0ul ? (0x400000u | uint(m >> 29)) : 0u);
    }
    int fe = int(e) - 896; // f32 biased exponent: e - 1023 + 127
    if (fe >= 255) return s | 0x7f800000u;
    uint64_t mant;
    uint shift;
    uint base;
    if (fe <= 0) {
        // Subnormal in f32: in units of 2^-149 the value is (m | hidden) >> (30 - fe).
        if (fe < -23 || e == 0u) return s;
        mant = m | (uint64_t(1) << 52);
        shift = uint(30 - fe);
        base = s;
    } else {
        mant = m;
        shift = 29u;
        base = s | (uint(fe) << 23);
    }
    uint64_t r = mant >> shift;
    uint64_t rest = mant & ((uint64_t(1) << shift) - 1ul);
    uint64_t halfway = uint64_t(1) << (shift - 1u);
    if (rest > halfway || (rest == halfway && (r & 1ul) != 0ul)) {
        r += 1ul;
    }
    return base + uint(r);
}

// half::bf16::from_f64: the `half` crate's rounding on the top 32 bits of the f64 (its
// low 32 bits are dropped first, so it is not always the nearest bf16).
uint vkml_f64_bits_to_bf16_bits(uint64_t val) {
    uint x = uint(val >> 32);
    uint sign = x & 0x80000000u;
    uint ex = x & 0x7ff00000u;
    uint man = x & 0xfffffu;
    if (ex == 0x7ff00000u) {
        uint nan_bit = (man == 0u && uint(val) == 0u) ? 0u : 0x40u;
        return (sign >> 16) | 0x7f80u | nan_bit | (man >> 13);
    }
    uint hs = sign >> 16;
    int he = int(ex >> 20) - 1023 + 127;
    if (he >= 0xff) return hs | 0x7f80u;
    if (he <= 0) {
        if (7 - he > 21) return hs;
        uint mm = man | 0x100000u;
        uint hm = mm >> uint(14 - he);
        uint rb = 1u << uint(13 - he);
        if ((mm & rb) != 0u && (mm & (3u * rb - 1u)) != 0u) hm += 1u;
        return hs | hm;
    }
    uint r = hs | (uint(he) << 7) | (man >> 13);
    if ((man & 0x1000u) != 0u && (man & 0x2fffu) != 0u) r += 1u;
    return r;
}

// `x as u8` / `as u32` / `as i64` for f64 bits: toward zero, saturating, NaN 0.
uint64_t vkml_f64_bits_to_mag(uint64_t x, out bool nan_or_small, out bool big, uint max_exp) {
    uint e = uint(x >> 52) & 0x7ffu;
    nan_or_small = (x & 0x7ffffffffffffffful) > 0x7ff0000000000000ul || e < 1023u;
    big = !nan_or_small && e - 1023u >= max_exp;
    if (nan_or_small || big) return 0ul;
    uint ex = e - 1023u;
    uint64_t sig = (x & 0xffffffffffffful) | (uint64_t(1) << 52);
    return ex >= 52u ? sig << (ex - 52u) : sig >> (52u - ex);
}

uint vkml_f64_bits_to_uint_sat(uint64_t x, uint maxv) {
    bool small, big;
    uint64_t mag = vkml_f64_bits_to_mag(x, small, big, 32u);
    if (small || (x >> 63) != 0ul) return 0u;
    if (big) return maxv;
    return uint(min(mag, uint64_t(maxv)));
}

int64_t vkml_f64_bits_to_i64_sat(uint64_t x) {
    bool small, big;
    uint64_t mag = vkml_f64_bits_to_mag(x, small, big, 63u);
    bool neg = (x >> 63) != 0ul;
    if (small) return 0l;
    if (big) return neg ? int64_t(0x8000000000000000ul) : int64_t(0x7ffffffffffffffful);
    return neg ? -int64_t(mag) : int64_t(mag);
}

int64_t vkml_f32_bits_to_i64_sat(uint x) {
    return vkml_f64_bits_to_i64_sat(vkml_f32_bits_to_f64_bits(x));
}

bool vkml_isnan_f64(double v) {
    uvec2 w = unpackDouble2x32(v);
    return (w.y & 0x7fffffffu) > 0x7ff00000u || ((w.y & 0x7fffffffu) == 0x7ff00000u && w.x != 0u);
}
#endif

bool vkml_isnan_f32(float v) {
    return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u;
}

// ---- value macros -------------------------------------------------------------------
#if defined(V_F32)
#define V_ST float
#define V_T float
#define V_LOAD(b, i) (b[i])
#define V_STORE(b, i, v) b[i] = (v)
#define V_FLOAT 1
#elif defined(V_F16)
#define V_ST uint16_t
#define V_T float
#define V_LOAD(b, i) uintBitsToFloat(vkml_f16_bits_to_f32_bits(uint(b[i])))
#define V_STORE(b, i, v) b[i] = uint16_t(vkml_f32_bits_to_f16_bits(floatBitsToUint(v)))
#define V_FLOAT 1
#elif defined(V_BF16)
#define V_ST uint16_t
#define V_T float
#define V_LOAD(b, i) uintBitsToFloat(vkml_bf16_bits_to_f32_bits(uint(b[i])))
#define V_STORE(b, i, v) b[i] = uint16_t(vkml_f32_bits_to_bf16_bits(floatBitsToUint(v)))
#define V_FLOAT 1
#elif defined(V_F64)
#define V_ST double
#define V_T double
#define V_LOAD(b, i) (b[i])
#define V_STORE(b, i, v) b[i] = (v)
#define V_FLOAT 1
#elif defined(V_U8)
#define V_ST uint8_t
#define V_T uint
#define V_LOAD(b, i) uint(b[i])
#define V_STORE(b, i, v) b[i] = uint8_t((v) & 0xffu)
#define V_INT 1
#elif defined(V_U32)
#define V_ST uint
#define V_T uint
#define V_LOAD(b, i) (b[i])
#define V_STORE(b, i, v) b[i] = (v)
#define V_INT 1
#elif defined(V_I64)
#define V_ST int64_t
#define V_T int64_t
#define V_LOAD(b, i) (b[i])
#define V_STORE(b, i, v) b[i] = (v)
#define V_INT 1
#endif

// NaN test of a V_T on the bits (NVIDIA's compiler may fold isnan away).
#if defined(V_F16)
#define V_ROUND(v) uintBitsToFloat(vkml_f16_bits_to_f32_bits(vkml_f32_bits_to_f16_bits(floatBitsToUint(v))))
#elif defined(V_BF16)
#define V_ROUND(v) uintBitsToFloat(vkml_bf16_bits_to_f32_bits(vkml_f32_bits_to_bf16_bits(floatBitsToUint(v))))
#else
#define V_ROUND(v) (v)
#endif

#if defined(V_F64)
#define V_ISNAN(v) vkml_isnan_f64(v)
#elif defined(V_FLOAT)
#define V_ISNAN(v) vkml_isnan_f32(v)
#else
#define V_ISNAN(v) false
#endif

#endif
