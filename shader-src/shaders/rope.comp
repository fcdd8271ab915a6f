//! variant neox_f32
//! variant interleaved_f32 INTERLEAVED=1
//! variant neox_f16 F16=1
//! variant interleaved_f16 INTERLEAVED=1 F16=1
// Rotary position embedding on x [bh, t, d], or token-major [t, bh, d] when tok_div = bh
// (contiguous; x, y of type ACT: f32, or f16
// with F16, arithmetic in f32), rotating the first `rot` dims of each vector (rot even,
// <= d) and copying the rest:
//   neox (candle_nn::rotary_emb::rope): pairs (i, i + rot/2);
//   interleaved (rope_i): pairs (2i, 2i + 1);
//   (a, b) -> (a cos - b sin, a sin + b cos), cos/sin f32 [positions, rot/2] at row
//   pos_offset + t.
// Bindings: 0 = x, 1 = cos, 2 = sin, 3 = y. Push constants: d, t, rows (bh * t), rot,
// pos_offset, tok_div (1 for [bh, t, d]; bh for [t, bh, d]): row r is at step (r / tok_div) % t.
// Grid: x over d/2 pairs-or-passthrough slots, y (and z) over rows.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { ACT x[]; };
layout(std430, set = 0, binding = 1) readonly buffer C { float cs[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float sn[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { ACT y[]; };
layout(push_constant) uniform P { uint d; uint t; uint rows; uint rot; uint pos_offset; uint tok_div; } p;

void main() {
    uint j = gl_GlobalInvocationID.x; // 0 .. d/2
    uint row = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
    if (j >= p.d / 2u || row >= p.rows) return;
    uint base = row * p.d;
    uint half_rot = p.rot / 2u;
    if (j < half_rot) {
        uint pos = p.pos_offset + (row / p.tok_div) % p.t;
        float c = cs[pos * half_rot + j];
        float s = sn[pos * half_rot + j];
#ifdef INTERLEAVED
        uint i0 = 2u * j, i1 = 2u * j + 1u;
#else
        uint i0 = j, i1 = j + half_rot;
#endif
        float a = float(x[base + i0]), b = float(x[base + i1]);
        y[base + i0] = ACT(a * c - b * s);
        y[base + i1] = ACT(a * s + b * c);
    } else {
        // Pass-through dims rot .. d, two per invocation.
        uint i = p.rot + 2u * (j - half_rot);
        y[base + i] = x[base + i];
        y[base + i + 1u] = x[base + i + 1u];
    }
}
