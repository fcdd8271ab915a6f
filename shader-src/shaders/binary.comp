//! variant f32
//! variant f16 F16=1
// Strided binary ops (vkml_ops::elementwise::binary): for i < n,
// y[i] = f(a[a_off + sum_d idx_d(i) * a_str[d]], b[b_off + sum_d idx_d(i) * b_str[d]]),
// idx(i) the row-major multi-index of i over shape[0..rank], y contiguous; a stride of 0
// broadcasts. f32 arithmetic; the f16 variant loads and stores f16 bits (strided.glsl).
// Bindings: 0 = a, 1 = b, 2 = y (f32, or f16 in the f16 variant).
// Push constants: n, rank (1..=6), a_off, b_off, shape[6], a_str[6], b_str[6] (elements).
// Specialization constants: 0 = workgroup size, 1 = op: 0 add, 1 sub, 2 mul, 3 div,
// 4 maximum, 5 minimum (candle's BinaryOpT; ops/src/elementwise.rs `BinaryOp::code`).
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(constant_id = 1) const uint OP = 0;
#include "common.glsl"
#include "strided.glsl"

layout(std430, set = 0, binding = 0) readonly buffer A { ELEM xa[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { ELEM xb[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { ELEM y[]; };
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint a_off;
    uint b_off;
    uint shape[VKML_MAX_RANK];
    uint a_str[VKML_MAX_RANK];
    uint b_str[VKML_MAX_RANK];
} p;

float apply(float u, float v) {
    if (OP == 0u) return u + v;
    if (OP == 1u) return u - v;
    if (OP == 2u) return u * v;
    if (OP == 3u) return u / v;
    // candle: maximum = if u < v { v } else { u }; minimum = if u > v { v } else { u }:
    // a NaN u is returned. The NaN test is on the bits: NVIDIA's compiler turns the
    // float select into fmax/fmin (which drop the NaN) and may fold isnan away.
    bool u_nan = (floatBitsToUint(u) & 0x7fffffffu) > 0x7f800000u;
    if (u_nan) return u;
    if (OP == 4u) return u < v ? v : u;
    return u > v ? v : u;
}

void main() {
    uint i = vkml_global_index_1d();
    if (i >= p.n) return;
    uint r = i;
    uint ia = p.a_off;
    uint ib = p.b_off;
    for (uint d = p.rank - 1u; d > 0u; --d) {
        uint q = r / p.shape[d];
        uint c = r - q * p.shape[d];
        ia += c * p.a_str[d];
        ib += c * p.b_str[d];
        r = q;
    }
    ia += r * p.a_str[0];
    ib += r * p.b_str[0];
    STORE(y, i, apply(LOAD(xa, ia), LOAD(xb, ib)));
}
