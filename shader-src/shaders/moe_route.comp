//! variant softmax SOFTMAX=1
//! variant sigmoid SIGMOID=1
//! variant softmax_weight SOFTMAX_WEIGHT=1
//! variant softmax_sg SOFTMAX=1 SUBGROUP_REDUCE=1
//! variant sigmoid_sg SIGMOID=1 SUBGROUP_REDUCE=1
//! variant softmax_weight_sg SOFTMAX_WEIGHT=1 SUBGROUP_REDUCE=1
// Mixture-of-experts routing, one workgroup per token (llama.cpp's build_moe_ffn, its
// gating functions LLAMA_EXPERT_GATING_FUNC_TYPE_*): from the router's logits l [n] (plus
// the router's bias where has_logit_bias: gpt-oss's ffn_gate_inp.bias),
//   probs = softmax(l) (SOFTMAX), sigmoid(l) (SIGMOID), or l itself (SOFTMAX_WEIGHT);
//   the k experts of largest probs + bias (bias: the selection bias exp_probs_b, when given;
//   ties to the lower index), in decreasing order;
//   their weights probs[id] (SOFTMAX_WEIGHT: the softmax of those k logits), divided by
//   their sum clamped to at least 2^-14 where norm_w, times w_scale where it is not 0.
// The softmax's max and sum are workgroup reductions (include/reduce.glsl: subgroup
// arithmetic in the *_sg variants, a shared-memory tree otherwise).
// Bindings: 0 = logits f32 [t, n], 1 = bias f32 [n] (logits stand in without one), 2 = ids
// u32 [t, k], 3 = weights f32 [t, k], 4 = the router's bias f32 [n] (logits stand in).
// Push constants: n (at most MAX_EXPERTS), k (at most MAX_USED), has_bias, norm_w, w_scale
// (f32 bits; 0: none), has_logit_bias. Grid: x (then y) over tokens.
// Workgroup: 256 invocations.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : enable
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in; // always 256 (WG)
#define WG 256u
#define MAX_EXPERTS 1024u
#define MAX_USED 64u
#define REDUCE_MAX 256
#include "reduce.glsl"
layout(std430, set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float bias[]; };
layout(std430, set = 0, binding = 2) writeonly buffer I { uint ids[]; };
layout(std430, set = 0, binding = 3) writeonly buffer W { float weights[]; };
layout(std430, set = 0, binding = 4) readonly buffer LB { float logit_bias[]; };
layout(push_constant) uniform P { uint n; uint k; uint has_bias; uint norm_w; float w_scale; uint has_logit_bias; } p;

shared float probs[MAX_EXPERTS];
shared float sel[MAX_EXPERTS];
shared float chosen[MAX_USED];

// Whether (v, i) ranks before (w, j): larger value, then lower index (NaN last).
bool before(float v, uint i, float w, uint j) {
    if (isnan(w)) return !isnan(v) || i < j;
    if (isnan(v)) return false;
    return v > w || (v == w && i < j);
}

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint t = gl_LocalInvocationID.x;
    uint base = row * p.n;
    float m = -1.0 / 0.0;
    for (uint e = t; e < p.n; e += WG) {
        float l = logits[base + e];
        if (p.has_logit_bias != 0u) l += logit_bias[e];
        probs[e] = l;
        m = max(m, l);
    }
#if defined(SOFTMAX)
    m = wg_max(m);
    float s = 0.0;
    for (uint e = t; e < p.n; e += WG) {
        float v = exp(probs[e] - m);
        probs[e] = v;
        s += v;
    }
    s = wg_sum(s);
    for (uint e = t; e < p.n; e += WG) probs[e] = probs[e] / s;
#elif defined(SIGMOID)
    for (uint e = t; e < p.n; e += WG) probs[e] = 1.0 / (1.0 + exp(-probs[e]));
#endif
    for (uint e = t; e < p.n; e += WG) sel[e] = p.has_bias != 0u ? probs[e] + bias[e] : probs[e];
    barrier();
    // The k largest in one pass: each expert's rank is the number of experts ranking
    // before it (a total order); the experts of rank < k write their slot. The count runs
    // over all n (independent loads, no early exit). (k rounds of a workgroup arg-max took
    // 18 us for 8 of 128 on the H100.)
    for (uint e = t; e < p.n; e += WG) {
        float v = sel[e];
        uint r = 0u;
        for (uint f = 0u; f < p.n; f++) r += before(sel[f], f, v, e) ? 1u : 0u;
        if (r < p.k) {
            ids[row * p.k + r] = e;
            chosen[r] = probs[e];
        }
    }
    barrier();
    if (t == 0u) {
        float w[MAX_USED];
        for (uint j = 0u; j < p.k; j++) w[j] = chosen[j];
#if defined(SOFTMAX_WEIGHT)
        float wm = w[0];
        for (uint j = 1u; j < p.k; j++) wm = max(wm, w[j]);
        float ws = 0.0;
        for (uint j = 0u; j < p.k; j++) {
            w[j] = exp(w[j] - wm);
            ws += w[j];
        }
        for (uint j = 0u; j < p.k; j++) w[j] = w[j] / ws;
#endif
        if (p.norm_w != 0u) {
            float sum = 0.0;
            for (uint j = 0u; j < p.k; j++) sum += w[j];
            sum = max(sum, 6.103515625e-5);
            for (uint j = 0u; j < p.k; j++) w[j] = w[j] / sum;
        }
        for (uint j = 0u; j < p.k; j++) weights[row * p.k + j] = p.w_scale != 0.0 ? w[j] * p.w_scale : w[j];
    }
}
