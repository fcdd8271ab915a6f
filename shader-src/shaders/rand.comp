//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
// Random fill (vkml_ops::rand: candle's rand_uniform and rand_normal), counter-based:
// invocation i draws one Philox4x32-10 block (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011) for counter (i, call_lo, call_hi, 0) and key (seed_lo,
// seed_hi): a (seed, call) pair gives the same random words on every device and launch
// shape, and the same uniform values (exact arithmetic, `precise`); normal values go
// through the device's log / cos / sin, so they agree across devices to those functions'
// precision.
//
// Each block gives 4 outputs (2 for f64), y[i * PER + e]:
// - uniform (MODE 0): lo + (hi - lo) u with u = (word >> 8) 2^-24 in [0, 1) (f64: 53 bits
//   from two words); a result that rounds up to hi in the dtype is replaced by hi_below,
//   the largest value of the dtype under hi, so every value lies in [lo, hi);
// - normal (MODE 1): mean + std z with z from the Box-Muller transform of word pairs,
//   u1 = ((w >> 8) + 1) 2^-24 in (0, 1], u2 = (w >> 8) 2^-24: z = sqrt(-2 ln u1)
//   (cos | sin)(2 pi u2), in f32; the f64 variant with 53-bit u1, u2 from word pairs and
//   include/math64.glsl's log, cos and sin.
// Bindings: 0 = y. Push constants as P: a = lo or mean, b = hi - lo or std, hi_below; f32
// bits (in *_lo for the f64 variant, with the high words in *_hi).
// Specialization constants: 0 = workgroup size, 1 = MODE.
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(V_F16) || defined(V_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(V_F64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define VKML_INT64 1
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(constant_id = 1) const uint MODE = 0;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"
#include "philox.glsl"
#ifdef V_F64
#include "math64.glsl"
#endif

layout(std430, set = 0, binding = 0) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint n;
    uint seed_lo;
    uint seed_hi;
    uint call_lo;
    uint call_hi;
    uint a_lo;
    uint a_hi;
    uint b_lo;
    uint b_hi;
    uint hb_lo;
    uint hb_hi;
} p;

#ifdef V_F64
#define PER 2u
#define PARAM(lo, hi) packDouble2x32(uvec2(lo, hi))
#else
#define PER 4u
#define PARAM(lo, hi) uintBitsToFloat(lo)
#endif

void put(uint o, V_T v) {
    if (o < p.n) V_STORE(y, o, v);
}

void main() {
    uint i = vkml_global_index_1d();
    uint o = i * PER;
    if (o >= p.n) return;
    uvec4 w = philox(uvec4(i, p.call_lo, p.call_hi, 0u), uvec2(p.seed_lo, p.seed_hi));
    V_T a = PARAM(p.a_lo, p.a_hi);
    V_T b = PARAM(p.b_lo, p.b_hi);
    if (MODE == 0u) {
        V_T hb = PARAM(p.hb_lo, p.hb_hi);
#ifdef V_F64
        for (uint e = 0u; e < 2u; ++e) {
            uint64_t bits = (uint64_t(w[2u * e]) << 32 | uint64_t(w[2u * e + 1u])) >> 11;
            double u = double(bits) * (1.0lf / 9007199254740992.0lf);
            precise double v = a + b * u;
            put(o + e, v > hb ? hb : v);
        }
#else
        for (uint e = 0u; e < 4u; ++e) {
            float u = float(w[e] >> 8) * (1.0 / 16777216.0);
            precise float v = a + b * u;
            put(o + e, V_ROUND(v) > hb ? hb : v);
        }
#endif
        return;
    }
#ifdef V_F64
    double u1 = double(((uint64_t(w.x) << 32 | uint64_t(w.y)) >> 11) + 1ul) * (1.0lf / 9007199254740992.0lf);
    double u2 = double((uint64_t(w.z) << 32 | uint64_t(w.w)) >> 11) * (1.0lf / 9007199254740992.0lf);
    double r = sqrt(-2.0lf * log64(u1));
    double th = 6.283185307179586lf * u2;
    put(o, a + b * (r * cos64(th)));
    put(o + 1u, a + b * (r * sin64(th)));
#else
    for (uint e = 0u; e < 4u; e += 2u) {
        float u1 = float((w[e] >> 8) + 1u) * (1.0 / 16777216.0);
        float u2 = float(w[e + 1u] >> 8) * (1.0 / 16777216.0);
        float r = sqrt(-2.0 * log(u1));
        float th = 6.28318530717958647692 * u2;
        put(o + e, a + b * (r * cos(th)));
        put(o + e + 1u, a + b * (r * sin(th)));
    }
#endif
}
