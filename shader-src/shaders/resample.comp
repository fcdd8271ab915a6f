//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
// 2-D resampling (vkml_ops::spatial::upsample2d: candle's upsample_nearest1d / 2d and
// upsample_bilinear2d), one invocation per output element, x read through its strides.
//
//   x: [batch, c, in_h, in_w]   y (packed): [batch, c, out_h, out_w]
//
// The source rows and columns come from a table the host computes with candle's own f64
// formulas (so nearest is exact, and bilinear uses candle's indices and weights): entry
// e = 4 words (i0, i1, weight bits lo, weight bits hi), out_h row entries then out_w
// column entries. The weight is f32 bits in lo (f64 bits in lo / hi for the f64 variant).
// - nearest (MODE 0): y = x[row.i0, col.i0];
// - bilinear (MODE 1, float dtypes):
//     top = x[r0, c0] (1 - wc) + x[r0, c1] wc,  bottom = x[r1, c0] (1 - wc) + x[r1, c1] wc,
//     y = top (1 - wr) + bottom wr, in V_T (f32 for f32 / f16 / bf16; candle computes in
//     f64), rounded once to the dtype.
// Bindings: 0 = x, 1 = table (u32), 2 = y. Push constants as P.
// Specialization constants: 0 = workgroup size, 1 = MODE.
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
layout(constant_id = 1) const uint MODE = 0;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { V_ST x[]; };
layout(std430, set = 0, binding = 1) readonly buffer T { uint tab[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint n;      // batch * c * out_h * out_w
    uint c;
    uint out_h;
    uint out_w;
    uint x_off;
    uint x_str[4];
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
    uint base = p.x_off + b * p.x_str[0] + ch * p.x_str[1];
    uint re = 4u * i;
    uint ce = 4u * (p.out_h + j);
    uint r0 = base + tab[re] * p.x_str[2];
    uint c0 = tab[ce] * p.x_str[3];
    if (MODE == 0u) {
        V_STORE(y, idx, V_LOAD(x, r0 + c0));
        return;
    }
#ifdef V_FLOAT
    uint r1 = base + tab[re + 1u] * p.x_str[2];
    uint c1 = tab[ce + 1u] * p.x_str[3];
#ifdef V_F64
    double wr = packDouble2x32(uvec2(tab[re + 2u], tab[re + 3u]));
    double wc = packDouble2x32(uvec2(tab[ce + 2u], tab[ce + 3u]));
#else
    float wr = uintBitsToFloat(tab[re + 2u]);
    float wc = uintBitsToFloat(tab[ce + 2u]);
#endif
    V_T one = V_T(1);
    V_T top = V_LOAD(x, r0 + c0) * (one - wc) + V_LOAD(x, r0 + c1) * wc;
    V_T bottom = V_LOAD(x, r1 + c0) * (one - wc) + V_LOAD(x, r1 + c1) * wc;
    V_STORE(y, idx, top * (one - wr) + bottom * wr);
#endif
}
