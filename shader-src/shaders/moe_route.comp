//! variant softmax SOFTMAX=1
//! variant sigmoid SIGMOID=1
//! variant softmax_weight SOFTMAX_WEIGHT=1
//! variant softmax_sg SOFTMAX=1 SUBGROUP_REDUCE=1
//! variant sigmoid_sg SIGMOID=1 SUBGROUP_REDUCE=1
//! variant softmax_weight_sg SOFTMAX_WEIGHT=1 SUBGROUP_REDUCE=1
// Mixture-of-experts routing, one workgroup per token: include/moe_route.glsl's
// route_token (llama.cpp's build_moe_ffn gating, top-k and weights) on the router's logits
// (plus the router's bias where has_logit_bias: gpt-oss's ffn_gate_inp.bias) with the
// selection bias where has_bias. The expert-indexed gate|up mat-vecs of a decode step run
// the same routing in their own workgroups (include/mat_vec_moe.glsl).
// The softmax's max and sum are workgroup reductions (include/reduce.glsl: subgroup
// arithmetic in the *_sg variants, a shared-memory tree otherwise).
// Bindings: 0 = logits f32 [t, n], 1 = bias f32 [n] (logits stand in without one), 2 = ids
// u32 [t, k], 3 = weights f32 [t, k], 4 = the router's bias f32 [n] (logits stand in).
// Push constants: n (at most MAX_EXPERTS), k (at most ROUTE_MAX_K), has_bias, norm_w, w_scale
// (f32 bits; 0: none), has_logit_bias. Grid: x (then y) over tokens.
// Workgroup: 256 invocations.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : enable
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in; // always 256 (WG)
#define MAX_EXPERTS 1024u
#define REDUCE_MAX 256
#include "reduce.glsl"
layout(std430, set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float bias[]; };
layout(std430, set = 0, binding = 2) writeonly buffer I { uint ids[]; };
layout(std430, set = 0, binding = 3) writeonly buffer W { float weights[]; };
layout(std430, set = 0, binding = 4) readonly buffer LB { float logit_bias[]; };
layout(push_constant) uniform P { uint n; uint k; uint has_bias; uint norm_w; float w_scale; uint has_logit_bias; } p;

#define ROUTE_N MAX_EXPERTS
#include "moe_route.glsl"
#if defined(SOFTMAX)
#define GATING ROUTE_SOFTMAX
#elif defined(SIGMOID)
#define GATING ROUTE_SIGMOID
#else
#define GATING ROUTE_SOFTMAX_WEIGHT
#endif

uint row;
float route_logit(uint e) { return logits[row * p.n + e] + (p.has_logit_bias != 0u ? logit_bias[e] : 0.0); }
float route_sel_bias(uint e) { return bias[e]; }

void main() {
    row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    route_token(GATING, p.n, p.k, p.has_bias != 0u, p.norm_w != 0u, p.w_scale);
    uint j = gl_LocalInvocationID.x;
    if (j < p.k) {
        ids[row * p.k + j] = route_ids[j];
        weights[row * p.k + j] = route_w[j];
    }
}
