//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
// Strided select (vkml_ops::elementwise::where_cond, candle's where_cond): for i < n,
// y[i] = cond[..] != 0 ? t[..] : f[..], each operand indexed as in binary.comp. The
// condition is read as 32-bit words whatever its dtype (u8, u32 or i64, specialization
// constant 2), so one kernel per value dtype serves every condition dtype; its binding
// spans whole words.
// Bindings: 0 = cond (words), 1 = t, 2 = f, 3 = y (the variant's dtype).
// Push constants: n, rank (1..=6), c_off, t_off, f_off, shape[6], c_str[6], t_str[6],
// f_str[6] (elements of each operand's dtype).
// Specialization constants: 0 = workgroup size, 2 = condition dtype: 0 u8, 1 u32, 2 i64.
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
layout(constant_id = 2) const uint COND_DT = 0;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer C { uint cw[]; };
layout(std430, set = 0, binding = 1) readonly buffer T { V_ST xt[]; };
layout(std430, set = 0, binding = 2) readonly buffer F { V_ST xf[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint c_off;
    uint t_off;
    uint f_off;
    uint shape[VKML_MAX_RANK];
    uint c_str[VKML_MAX_RANK];
    uint t_str[VKML_MAX_RANK];
    uint f_str[VKML_MAX_RANK];
} p;

bool cond_at(uint i) {
    if (COND_DT == 0u) return ((cw[i >> 2] >> ((i & 3u) * 8u)) & 0xffu) != 0u;
    if (COND_DT == 1u) return cw[i] != 0u;
    return (cw[2u * i] | cw[2u * i + 1u]) != 0u;
}

void main() {
    uint i = vkml_global_index_1d();
    if (i >= p.n) return;
    uint r = i;
    uint ic = p.c_off;
    uint it = p.t_off;
    uint jf = p.f_off;
    for (uint d = p.rank - 1u; d > 0u; --d) {
        uint q = r / p.shape[d];
        uint c = r - q * p.shape[d];
        ic += c * p.c_str[d];
        it += c * p.t_str[d];
        jf += c * p.f_str[d];
        r = q;
    }
    ic += r * p.c_str[0];
    it += r * p.t_str[0];
    jf += r * p.f_str[0];
    // Copies the bits (no conversion): NaN payloads and -0 are kept.
    y[i] = cond_at(ic) ? xt[it] : xf[jf];
}
