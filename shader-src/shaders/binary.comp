//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
// Strided binary ops (vkml_ops::elementwise::binary): for i < n,
// y[i] = f(a[a_off + sum_d idx_d(i) * a_str[d]], b[b_off + sum_d idx_d(i) * b_str[d]]),
// idx(i) the row-major multi-index of i over shape[0..rank], y contiguous; a stride of 0
// broadcasts. Computed in V_T (dtype.glsl: f32 for f16 and bf16, rounded once on store);
// integers wrap (u8 modulo 2^8), and an integer division by 0 gives 0 (Rust panics).
// Bindings: 0 = a, 1 = b, 2 = y (the variant's dtype).
// Push constants: n, rank (1..=6), a_off, b_off, shape[6], a_str[6], b_str[6] (elements).
// Specialization constants: 0 = workgroup size, 1 = op: 0 add, 1 sub, 2 mul, 3 div,
// 4 maximum, 5 minimum (candle's BinaryOpT; ops/src/elementwise.rs `BinaryOp::code`).
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

layout(std430, set = 0, binding = 0) readonly buffer A { V_ST xa[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { V_ST xb[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint a_off;
    uint b_off;
    uint shape[VKML_MAX_RANK];
    uint a_str[VKML_MAX_RANK];
    uint b_str[VKML_MAX_RANK];
} p;

V_T apply(V_T u, V_T v) {
    if (OP == 0u) return u + v;
    if (OP == 1u) return u - v;
    if (OP == 2u) return u * v;
#ifdef V_INT
    if (OP == 3u) {
        if (v == V_T(0)) return V_T(0);
#ifdef V_I64
        if (v == -1l) return -u; // MIN / -1 wraps to MIN instead of overflowing
#endif
        return u / v;
    }
#else
    if (OP == 3u) return u / v;
#endif
    // candle: maximum = if u < v { v } else { u }; minimum = if u > v { v } else { u }:
    // a NaN u is returned. The NaN test is on the bits: NVIDIA's compiler turns the
    // float select into fmax/fmin (which drop the NaN) and may fold isnan away.
    if (V_ISNAN(u)) return u;
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
    V_STORE(y, i, apply(V_LOAD(xa, ia), V_LOAD(xb, ib)));
}
