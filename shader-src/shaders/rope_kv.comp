//! variant neox_f32
//! variant interleaved_f32 INTERLEAVED=1
// The decode step's attention prologue in one dispatch: rotary embedding of the query
// heads into q_out, of the key heads into the f16 key cache, and the value heads copied
// into the f16 value cache (rope.comp then kv_append.comp's pair form, fused).
// Token t's heads start at element off + t * stride of their source (q, k, v may be views
// of the stacked Q|K|V rows of one mat-vec, or buffers of their own: [t, heads, d]).
// Rotation as rope.comp: the first `rot` dims of each head, neox pairs (i, i + rot/2) or
// interleaved (2i, 2i + 1), (a, b) -> (a cos - b sin, a sin + b cos) with cos/sin f32
// [positions, rot/2] at row pos0 + t; dims rot .. d pass through. Each invocation makes
// one pair of adjacent elements (one packed f16 word of a cache row), each element from
// its own rotation pair, so the cache is written in whole words for either style.
// Cache layout as kv_append.comp: [n_kv_heads, ctx, d] packed f16, position pos0 + t in
// slot (pos0 + t) % ctx.
// Bindings: 0 = q, 1 = k, 2 = v (f32), 3 = cos, 4 = sin, 5 = q_out f32 [t, n_heads, d],
// 6 = k cache, 7 = v cache.
// Push: t_new, n_heads, n_kv_heads, d (even), rot (even, <= d), pos0, ctx, q_off,
// q_stride, k_off, k_stride, v_off, v_stride.
// Grid: x over d/2 element pairs, y over t_new * (n_heads + 2 n_kv_heads) head rows
// (token-major: a token's query heads, then its key heads, then its value heads).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "rope_pair.glsl"
layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { float k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { float v[]; };
layout(std430, set = 0, binding = 3) readonly buffer C { float cs[]; };
layout(std430, set = 0, binding = 4) readonly buffer S { float sn[]; };
layout(std430, set = 0, binding = 5) writeonly buffer QO { float q_out[]; };
layout(std430, set = 0, binding = 6) writeonly buffer KC { uint kc[]; };
layout(std430, set = 0, binding = 7) writeonly buffer VC { uint vc[]; };
layout(push_constant) uniform P {
    uint t_new; uint n_heads; uint n_kv_heads; uint d; uint rot; uint pos0; uint ctx;
    uint q_off; uint q_stride; uint k_off; uint k_stride; uint v_off; uint v_stride;
} p;

// Element i of q (src 0) or k (src 1).
float src_at(uint src, uint i) { return src == 0u ? q[i] : k[i]; }

// Element e (< d) of the rotated head starting at `base` of source `src`, token t.
float rotated(uint src, uint base, uint e, uint t) {
    if (e >= p.rot) return src_at(src, base + e);
    uint j, partner;
    bool first;
    rope_pair(e, p.rot, j, first, partner);
    uint row = (p.pos0 + t) * (p.rot / 2u) + j;
    return rope_apply(src_at(src, base + e), src_at(src, base + partner), first, cs[row], sn[row]);
}

void main() {
    uint w = gl_GlobalInvocationID.x; // pair index: elements 2w, 2w + 1
    uint row = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
    uint heads = p.n_heads + 2u * p.n_kv_heads;
    if (w >= p.d / 2u || row >= p.t_new * heads) return;
    uint t = row / heads, h = row % heads;
    uint e = 2u * w;
    if (h < p.n_heads) {
        uint base = p.q_off + t * p.q_stride + h * p.d;
        uint o = (t * p.n_heads + h) * p.d + e;
        q_out[o] = rotated(0u, base, e, t);
        q_out[o + 1u] = rotated(0u, base, e + 1u, t);
        return;
    }
    uint kvh = h - p.n_heads;
    bool is_v = kvh >= p.n_kv_heads;
    if (is_v) kvh -= p.n_kv_heads;
    uint dst = ((kvh * p.ctx + (p.pos0 + t) % p.ctx) * p.d) / 2u + w;
    if (is_v) {
        uint base = p.v_off + t * p.v_stride + kvh * p.d;
        vc[dst] = packHalf2x16(vec2(v[base + e], v[base + e + 1u]));
    } else {
        uint base = p.k_off + t * p.k_stride + kvh * p.d;
        kc[dst] = packHalf2x16(vec2(rotated(1u, base, e, t), rotated(1u, base, e + 1u, t)));
    }
}
