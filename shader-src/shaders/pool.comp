//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
// 2-D pooling without padding (vkml_ops::spatial::pool2d: candle's avg_pool2d and
// max_pool2d), one invocation per output element, x read through its strides.
//
//   x: [batch, c, h, w]   y (packed): [batch, c, out_h, out_w], out = (in - k) / s + 1
//
// Both follow candle-core 0.11's CPU loops element for element, so they are exact:
// - avg (OP 0, float dtypes): acc = 0; acc += x[u, v] over u, then v, rounded to the
//   dtype after every add (half's f16 / bf16 addition rounds each f32 sum once, as here);
//   then y = acc * scale, scale = 1 / (k_h k_w) rounded to the dtype.
// - max (OP 1): starts from the window's first element and takes a later one when it is
//   strictly larger (so NaN elements never win, and a NaN first element stays).
// Bindings: 0 = x, 1 = y. Push constants as P; scale is f32 bits, or f64 bits in
// scale_lo / scale_hi for the f64 variant.
// Specialization constants: 0 = workgroup size, 1 = OP (0 avg, 1 max).
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(V_F16) || defined(V_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(V_U8)
#extension GL_EXT_shader_8bit_storage : require
#endif
#if defined(V_F64) || defined(V_I64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define VKML_INT64 1
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(constant_id = 1) const uint OP = 0;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { V_ST x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint n;      // batch * c * out_h * out_w
    uint c;
    uint out_h;
    uint out_w;
    uint k_h;
    uint k_w;
    uint s_h;
    uint s_w;
    uint x_off;
    uint x_str[4];
    uint scale;
    uint scale_lo;
    uint scale_hi;
} p;

void main() {
    uint idx = vkml_global_index_1d();
    if (idx >= p.n) return;
    uint j = idx % p.out_w;
    uint t = idx / p.out_w;
    uint i = t % p.out_h;
    t /= p.out_h;
    uint ch = t % p.c;
    uint b = t / p.c;
    uint base = p.x_off + b * p.x_str[0] + ch * p.x_str[1] + i * p.s_h * p.x_str[2] + j * p.s_w * p.x_str[3];
    if (OP == 1u) {
        V_T best = V_LOAD(x, base);
        for (uint u = 0u; u < p.k_h; ++u) {
            for (uint v = 0u; v < p.k_w; ++v) {
                V_T e = V_LOAD(x, base + u * p.x_str[2] + v * p.x_str[3]);
                if (best < e) best = e;
            }
        }
        V_STORE(y, idx, best);
        return;
    }
#ifdef V_FLOAT
    V_T acc = V_T(0);
    for (uint u = 0u; u < p.k_h; ++u) {
        for (uint v = 0u; v < p.k_w; ++v) {
            acc = V_ROUND(acc + V_LOAD(x, base + u * p.x_str[2] + v * p.x_str[3]));
        }
    }
#ifdef V_F64
    double scale = packDouble2x32(uvec2(p.scale_lo, p.scale_hi));
#else
    float scale = uintBitsToFloat(p.scale);
#endif
    V_STORE(y, idx, acc * scale);
#endif
}
