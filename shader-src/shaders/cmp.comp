//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
// Strided comparisons (vkml_ops::elementwise::cmp, candle's CmpOp): for i < n,
// y[i] = a[..] OP b[..] ? 1 : 0 as u8, with a and b indexed as in binary.comp. A NaN
// operand compares unequal to everything (only `ne` holds), as in Rust.
// Bindings: 0 = a, 1 = b (the variant's dtype), 2 = y (u8).
// Push constants: as binary.comp. Specialization constants: 0 = workgroup size, 1 = op:
// 0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge (ops/src/elementwise.rs `CmpOp::code`).
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(V_F16) || defined(V_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#extension GL_EXT_shader_8bit_storage : require
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
layout(std430, set = 0, binding = 2) writeonly buffer Y { uint8_t y[]; };
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint a_off;
    uint b_off;
    uint shape[VKML_MAX_RANK];
    uint a_str[VKML_MAX_RANK];
    uint b_str[VKML_MAX_RANK];
} p;

bool compare(V_T u, V_T v) {
    if (V_ISNAN(u) || V_ISNAN(v)) return OP == 1u;
    if (OP == 0u) return u == v;
    if (OP == 1u) return u != v;
    if (OP == 2u) return u < v;
    if (OP == 3u) return u <= v;
    if (OP == 4u) return u > v;
    return u >= v;
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
    y[i] = uint8_t(compare(V_LOAD(xa, ia), V_LOAD(xb, ib)) ? 1u : 0u);
}
