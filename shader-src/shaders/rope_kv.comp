//! variant neox_f32
//! variant neox_f32_sg SUBGROUP_REDUCE=1
//! variant interleaved_f32 INTERLEAVED=1
//! variant interleaved_f32_sg INTERLEAVED=1 SUBGROUP_REDUCE=1
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
// Before the rotation, in llama.cpp's order (Qwen2's QKV bias, Qwen3's and Gemma 3's q/k
// norms, as flash_attn_gqa.comp's decode prologue): the stacked Q|K|V bias (binding 8, f32
// [(n_heads + 2 n_kv_heads) d], p.has_bias) added to every head, then each query head (key
// head) RMS-normalised with weight binding 9 (10), f32 [d], where p.q_eps (p.k_eps) >= 0:
// scale = 1 / sqrt(mean(x²) + eps) of the biased head, then (x * scale) * w. Each
// workgroup reduces its head row's sum of squares itself (include/reduce.glsl; `_sg`:
// subgroup arithmetic), so a head of more than 128 dims is summed by each of its
// workgroups.
// Bindings: 0 = q, 1 = k, 2 = v (f32), 3 = cos, 4 = sin, 5 = q_out f32 [t, n_heads, d],
// 6 = k cache, 7 = v cache, 8 = bias, 9 = query norm weight, 10 = key norm weight (bound,
// unread, where absent).
// Push: t_new, n_heads, n_kv_heads, d (even), rot (even, <= d), pos0, ctx, q_off,
// q_stride, k_off, k_stride, v_off, v_stride, has_bias, q_eps, k_eps (f32; < 0: no norm).
// Grid: x over d/2 element pairs, y over t_new * (n_heads + 2 n_kv_heads) head rows
// (token-major: a token's query heads, then its key heads, then its value heads).
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "rope_pair.glsl"
#include "reduce.glsl"
layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { float k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { float v[]; };
layout(std430, set = 0, binding = 3) readonly buffer C { float cs[]; };
layout(std430, set = 0, binding = 4) readonly buffer S { float sn[]; };
layout(std430, set = 0, binding = 5) writeonly buffer QO { float q_out[]; };
layout(std430, set = 0, binding = 6) writeonly buffer KC { uint kc[]; };
layout(std430, set = 0, binding = 7) writeonly buffer VC { uint vc[]; };
layout(std430, set = 0, binding = 8) readonly buffer QB { float qkv_bias[]; };
layout(std430, set = 0, binding = 9) readonly buffer QW { float q_norm_w[]; };
layout(std430, set = 0, binding = 10) readonly buffer KW { float k_norm_w[]; };
layout(push_constant) uniform P {
    uint t_new; uint n_heads; uint n_kv_heads; uint d; uint rot; uint pos0; uint ctx;
    uint q_off; uint q_stride; uint k_off; uint k_stride; uint v_off; uint v_stride;
    uint has_bias; float q_eps; float k_eps;
} p;

// Element e of the head starting at `base` of source src (0 = q, 1 = k, 2 = v) whose bias
// starts at bias_at, after the prologue (normalised with scale where `normed`).
float pre(uint src, uint base, uint bias_at, uint e, bool normed, float scale) {
    float a = src == 0u ? q[base + e] : src == 1u ? k[base + e] : v[base + e];
    if (p.has_bias != 0u) a += qkv_bias[bias_at + e];
    if (normed) a = a * scale * (src == 0u ? q_norm_w[e] : k_norm_w[e]);
    return a;
}

// Element e (< d) of the rotated head (as pre).
float rotated(uint src, uint base, uint bias_at, uint e, uint t, bool normed, float scale) {
    float a = pre(src, base, bias_at, e, normed, scale);
    if (e >= p.rot) return a;
    uint j, partner;
    bool first;
    rope_pair(e, p.rot, j, first, partner);
    uint row = (p.pos0 + t) * (p.rot / 2u) + j;
    return rope_apply(a, pre(src, base, bias_at, partner, normed, scale), first, cs[row], sn[row]);
}

void main() {
    uint w = gl_GlobalInvocationID.x; // pair index: elements 2w, 2w + 1
    uint row = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
    uint heads = p.n_heads + 2u * p.n_kv_heads;
    if (row >= p.t_new * heads) return; // uniform across the workgroup
    uint t = row / heads, h = row % heads;
    uint src, base, bias_at = h * p.d, kvh = 0u;
    if (h < p.n_heads) {
        src = 0u;
        base = p.q_off + t * p.q_stride + h * p.d;
    } else {
        kvh = h - p.n_heads;
        src = kvh < p.n_kv_heads ? 1u : 2u;
        if (src == 2u) kvh -= p.n_kv_heads;
        base = src == 1u ? p.k_off + t * p.k_stride + kvh * p.d : p.v_off + t * p.v_stride + kvh * p.d;
    }
    float eps = src == 0u ? p.q_eps : src == 1u ? p.k_eps : -1.0;
    bool normed = eps >= 0.0; // uniform across the workgroup
    float scale = 1.0;
    if (normed) {
        float ss = 0.0;
        for (uint i = gl_LocalInvocationID.x; i < p.d; i += gl_WorkGroupSize.x) {
            float a = pre(src, base, bias_at, i, false, 1.0);
            ss += a * a;
        }
        scale = 1.0 / sqrt(wg_sum(ss) / float(p.d) + eps);
    }
    if (w >= p.d / 2u) return;
    uint e = 2u * w;
    if (src == 0u) {
        uint o = (t * p.n_heads + h) * p.d + e;
        q_out[o] = rotated(0u, base, bias_at, e, t, normed, scale);
        q_out[o + 1u] = rotated(0u, base, bias_at, e + 1u, t, normed, scale);
        return;
    }
    uint dst = ((kvh * p.ctx + (p.pos0 + t) % p.ctx) * p.d) / 2u + w;
    if (src == 2u) {
        vc[dst] = packHalf2x16(vec2(pre(2u, base, bias_at, e, false, 1.0), pre(2u, base, bias_at, e + 1u, false, 1.0)));
    } else {
        kc[dst] = packHalf2x16(
            vec2(rotated(1u, base, bias_at, e, t, normed, scale), rotated(1u, base, bias_at, e + 1u, t, normed, scale)));
    }
}
