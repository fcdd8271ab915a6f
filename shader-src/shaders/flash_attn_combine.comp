//! variant f32
//! variant f16 F16=1
// Merges the n_splits partial results of flash_attn.comp (include/flash_attn_merge.glsl).
// Bindings: 0 = partial o f32 [n_splits, t_q, n_heads, d], 1 = ml f32 [n_splits, t_q, n_heads, 2],
// 2 = out [t_q, n_heads, d] of type ACT (f32, or f16 with F16), 3 = the sinks f32 [n_heads]
// (include/attn_sink.glsl; read where has_sinks).
// Push: t_q, n_heads, d, n_splits, has_sinks. Grid: x over d, y = t_q * n_heads.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer PO { float po[]; };
layout(std430, set = 0, binding = 1) readonly buffer ML { float ml[]; };
layout(std430, set = 0, binding = 2) writeonly buffer O { ACT o[]; };
layout(std430, set = 0, binding = 3) readonly buffer Sinks { float attn_sinks[]; };
layout(push_constant) uniform P { uint t_q; uint n_heads; uint d; uint n_splits; uint has_sinks; } p;
#include "attn_sink.glsl"
#include "flash_attn_merge.glsl"

void main() {
    uint dd = gl_GlobalInvocationID.x, row = gl_GlobalInvocationID.y;
    if (dd >= p.d || row >= p.t_q * p.n_heads) return;
    o[row * p.d + dd] = ACT(attn_merge(row, dd));
}
