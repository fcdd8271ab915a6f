// Mixture-of-experts stages folded into the expert-indexed mat-vecs (MV_IDS) of a decode
// step, so that a MoE block is three dispatches: the router's mat-vec, gate|up with the
// routing, down with the weighted sums (llama.cpp's build_moe_ffn).
//   Routing (specialization constant 19, MV_ROUTE: the gating, ROUTE_* of
//     include/moe_route.glsl; 0 off): each workgroup routes its token (slot / MV_ROUTE_K)
//     from the router's logits itself (route_token_sg: its first subgroup ranks while
//     the others wait, or, on the integer-dot kernels, quantize x) and multiplies the
//     expert of its slot; the workgroups of grid x = y = 0 write their slot's id (binding
//     7 or 8, the ids) and weight (binding MV_MOE_B) for the down mat-vec. Constants 20 = experts (at most 1024: the shared arrays' length), 21 =
//     k, 22 = flags (bit 0 norm_w, bit 1 the router's bias at binding MV_MOE_B + 2; bit 3
//     with or without routing: one expert, whose ids are not read), 23 =
//     w_scale (f32; 0 none).
//   Expert biases (constant 24, MV_EXPERT_BIAS; binding MV_MOE_B + 3, f32): with the gated
//     products, each expert's gate and up biases ([n_expert, 2 rows]: gate rows then up
//     rows, gpt-oss's ffn_{gate,up}_exps.bias) join its products before the activation;
//     with the weighted sums, each expert's down bias ([n_expert, rows]) joins its output
//     before the weight.
//   A plain product's bias (constant 24 without MV_IDS; the store and add epilogues): y (+)= t + b[r], binding MV_MOE_B + 3 f32 [rows] (gpt-oss's
//     attn_output.bias with the residual add).
//   Weighted sums (constant 25, MV_SUM = k; 0 off): workgroup z = token n multiplies the
//     experts of its k slots n k + j (each x row its own slot's) and stores
//     sum_j w[n k + j] * (W_{ids[n k + j]} x_{n k + j} + b) into y row n, added to y where
//     the epilogue is 1, in order j = 0, 1, .. (as moe_weighted_sum.comp sums). Flag bit 2
//     (constant 22): each weight is the sigmoid of w (a shared expert's gate logit). Flag
//     bit 4: an addend f32 [tokens, rows] at binding MV_MOE_B + 2 (the router bias's, which
//     a sum never routes with) joins each row's sum after its k terms (Qwen2-MoE's shared
//     expert output, computed beside the routed gate|up): y (+)= (sum_j ...) + a[n, r].
// Bindings from MV_MOE_B (defined by the includer): + 0 = weights f32 [slots] (written by
// the routing, read by the sums), + 1 = logits f32 [tokens, experts], + 2 = the router's
// bias f32 [experts] (with the sums: their addend), + 3 = the expert biases; unused ones
// bound to stand-ins. Include after reduce.glsl (the routing's softmax reductions) and the
// ids' buffer (expert_ids[]).
#ifndef VKML_MAT_VEC_MOE_GLSL
#define VKML_MAT_VEC_MOE_GLSL
layout(constant_id = 19) const uint MV_ROUTE = 0u;
layout(constant_id = 20) const uint MV_ROUTE_N = 1u;
layout(constant_id = 21) const uint MV_ROUTE_K = 1u;
layout(constant_id = 22) const uint MV_ROUTE_FLAGS = 0u;
layout(constant_id = 23) const float MV_ROUTE_SCALE = 0.0;
layout(constant_id = 24) const bool MV_EXPERT_BIAS = false;
layout(constant_id = 25) const uint MV_SUM = 0u;
layout(std430, set = 0, binding = MV_MOE_B) buffer MVW { float mv_moe_w[]; };
layout(std430, set = 0, binding = MV_MOE_B + 1) readonly buffer MVL { float mv_logits[]; };
layout(std430, set = 0, binding = MV_MOE_B + 2) readonly buffer MVLB { float mv_logit_bias[]; };
layout(std430, set = 0, binding = MV_MOE_B + 3) readonly buffer MVEB { float mv_expert_bias[]; };

#define ROUTE_N MV_ROUTE_N
#define ROUTE_SUBGROUP 1
#include "moe_route.glsl"
uint mv_route_row;
float route_logit(uint e) {
    return mv_logits[mv_route_row * MV_ROUTE_N + e] + ((MV_ROUTE_FLAGS & 2u) != 0u ? mv_logit_bias[e] : 0.0);
}
float route_sel_bias(uint e) { return 0.0; }

// Routes the token of the workgroup's slot (MV_ROUTE): the first subgroup alone calls it;
// mv_routed_expert reads the result after a barrier.
void mv_route(uint slot) {
    mv_route_row = slot / MV_ROUTE_K;
    route_token_sg(MV_ROUTE, MV_ROUTE_N, MV_ROUTE_K, (MV_ROUTE_FLAGS & 1u) != 0u, MV_ROUTE_SCALE);
}

// The expert of the slot that mv_route chose (after the barrier that follows it); the
// workgroups of grid x = y = 0 write the slot's id and weight for the down mat-vec.
uint mv_routed_expert(uint slot) {
    uint j = slot % MV_ROUTE_K;
    if (gl_WorkGroupID.x == 0u && gl_WorkGroupID.y == 0u && gl_LocalInvocationIndex == 0u) {
        expert_ids[slot] = route_ids[j];
        mv_moe_w[slot] = route_w[j];
    }
    return route_ids[j];
}

// Slot `slot`'s expert from the ids; 0 for a matrix of one expert (flag bit 3 of constant
// 22: the ids are not read).
uint mv_expert_id(uint slot) { return (MV_ROUTE_FLAGS & 8u) != 0u ? 0u : expert_ids[slot]; }

// The expert of the workgroup's slot: routed here (MV_ROUTE, every invocation calling from
// uniform control flow; the other subgroups wait for the first) or read from the ids.
uint mv_slot_expert(uint slot) {
    if (MV_ROUTE == 0u) return mv_expert_id(slot);
    if (gl_SubgroupID == 0u) mv_route(slot);
    barrier();
    return mv_routed_expert(slot);
}

// Gate and up products of row r of expert e (of `rows` gate rows) with its biases.
vec2 mv_glu_bias(uint e, uint r, uint rows, float g, float u) {
    if (!MV_EXPERT_BIAS) return vec2(g, u);
    return vec2(g + mv_expert_bias[e * 2u * rows + r], u + mv_expert_bias[e * 2u * rows + rows + r]);
}

// A plain product's row r with its bias.
float mv_row_bias(uint r, float t) { return MV_EXPERT_BIAS && !MV_IDS ? t + mv_expert_bias[r] : t; }

// Token n's weighted sum tot of row r with its addend where flag bit 4 asks for one (of
// `rows` per token).
float mv_sum_addend(uint n, uint r, uint rows, float tot) {
    return (MV_ROUTE_FLAGS & 16u) != 0u ? tot + mv_logit_bias[n * rows + r] : tot;
}

// One term of the weighted sums: slot's weight times (its product t of row r of expert e,
// plus the expert's bias).
float mv_sum_term(uint slot, uint e, uint r, uint rows, float t) {
    float v = MV_EXPERT_BIAS ? t + mv_expert_bias[e * rows + r] : t;
    float w = mv_moe_w[slot];
    return ((MV_ROUTE_FLAGS & 4u) != 0u ? 1.0 / (1.0 + exp(-w)) : w) * v;
}
#endif
