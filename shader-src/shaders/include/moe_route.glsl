// Mixture-of-experts routing of one token by one workgroup (llama.cpp's build_moe_ffn, its
// gating functions LLAMA_EXPERT_GATING_FUNC_TYPE_*), shared by moe_route.comp (a dispatch
// of its own) and the expert-indexed gate|up mat-vecs (include/mat_vec_moe.glsl: each
// workgroup routes its token itself, no routing dispatch before it). From the logits l [n]
// (route_logit(e): the router's bias already added where the model has one):
//   probs = softmax(l) (ROUTE_SOFTMAX), sigmoid(l) (ROUTE_SIGMOID), or l itself
//   (ROUTE_SOFTMAX_WEIGHT);
//   the k experts of largest probs + bias (route_sel_bias(e): the selection bias
//   exp_probs_b where the model has one; ties to the lower index, NaN last), in
//   decreasing order;
//   their weights probs[id] (ROUTE_SOFTMAX_WEIGHT: the softmax of those k logits), divided
//   by their sum clamped to at least 2^-14 where norm_w, times w_scale where it is not 0.
// route_token leaves the ids in route_ids[0 .. k) and the weights in route_w[0 .. k).
// The includer includes reduce.glsl first (the softmax's max and sum are its workgroup
// reductions), defines ROUTE_N (a constant expression at least n: the shared arrays'
// length) and declares
//   float route_logit(uint e);      float route_sel_bias(uint e);
#ifndef VKML_MOE_ROUTE_GLSL
#define VKML_MOE_ROUTE_GLSL
#include "order_key.glsl"
#define ROUTE_SOFTMAX 1u
#define ROUTE_SIGMOID 2u
#define ROUTE_SOFTMAX_WEIGHT 3u
// Most experts per token (ops' moe::MAX_USED).
#define ROUTE_MAX_K 64u

shared float route_probs[ROUTE_N];
shared float route_sel[ROUTE_N];
shared uint route_ids[ROUTE_MAX_K];
shared float route_w[ROUTE_MAX_K];

float route_logit(uint e);
float route_sel_bias(uint e);

// Whether (v, i) ranks before (w, j): larger value, then lower index (NaN last).
bool route_before(float v, uint i, float w, uint j) {
    if (isnan(w)) return !isnan(v) || i < j;
    if (isnan(v)) return false;
    return v > w || (v == w && i < j);
}

// The chosen experts' weights in route_w[0 .. k) (their probs on entry): the softmax over
// the k for ROUTE_SOFTMAX_WEIGHT, normalised, scaled. One invocation.
void route_weights(uint gating, uint k, bool norm_w, float w_scale) {
    if (gating == ROUTE_SOFTMAX_WEIGHT) {
        float wm = route_w[0];
        for (uint j = 1u; j < k; j++) wm = max(wm, route_w[j]);
        float ws = 0.0;
        for (uint j = 0u; j < k; j++) {
            route_w[j] = exp(route_w[j] - wm);
            ws += route_w[j];
        }
        for (uint j = 0u; j < k; j++) route_w[j] = route_w[j] / ws;
    }
    if (norm_w) {
        float sum = 0.0;
        for (uint j = 0u; j < k; j++) sum += route_w[j];
        sum = max(sum, 6.103515625e-5);
        for (uint j = 0u; j < k; j++) route_w[j] = route_w[j] / sum;
    }
    if (w_scale != 0.0) {
        for (uint j = 0u; j < k; j++) route_w[j] = route_w[j] * w_scale;
    }
}

// The gating of the logits into route_probs, each invocation taking experts first, first +
// step, ..: the softmax's max and sum reduced over the workgroup (wg_max, wg_sum: every
// invocation calls it from uniform control flow) or, with sg (ROUTE_SUBGROUP), over one
// subgroup (subgroupMax, subgroupAdd: the whole subgroup calls it).
void route_gate(uint gating, uint n, uint first, uint step, bool sg) {
    float m = -1.0 / 0.0;
    for (uint e = first; e < n; e += step) {
        float l = route_logit(e);
        route_probs[e] = l;
        m = max(m, l);
    }
    if (gating == ROUTE_SOFTMAX) {
#ifdef ROUTE_SUBGROUP
        m = sg ? subgroupMax(m) : wg_max(m);
#else
        m = wg_max(m);
#endif
        float s = 0.0;
        for (uint e = first; e < n; e += step) {
            float v = exp(route_probs[e] - m);
            route_probs[e] = v;
            s += v;
        }
#ifdef ROUTE_SUBGROUP
        s = sg ? subgroupAdd(s) : wg_sum(s);
#else
        s = wg_sum(s);
#endif
        for (uint e = first; e < n; e += step) route_probs[e] = route_probs[e] / s;
    } else if (gating == ROUTE_SIGMOID) {
        for (uint e = first; e < n; e += step) route_probs[e] = 1.0 / (1.0 + exp(-route_probs[e]));
    }
}

// Routes one token: n experts, k of them chosen (gating one of ROUTE_*; has_sel_bias:
// route_sel_bias joins the ranking). Every invocation of the workgroup calls it from
// uniform control flow (it holds barriers); all see route_ids and route_w after it.
void route_token(uint gating, uint n, uint k, bool has_sel_bias, bool norm_w, float w_scale) {
    uint t = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    route_gate(gating, n, t, wg, false);
    for (uint e = t; e < n; e += wg) route_sel[e] = has_sel_bias ? route_probs[e] + route_sel_bias(e) : route_probs[e];
    barrier();
    // The k largest in one pass: each expert's rank is the number of experts ranking
    // before it (a total order); the experts of rank < k take their slot. The count runs
    // over all n (independent loads, no early exit). (k rounds of a workgroup arg-max took
    // 18 us for 8 of 128 on the H100.)
    for (uint e = t; e < n; e += wg) {
        float v = route_sel[e];
        uint r = 0u;
        for (uint f = 0u; f < n; f++) r += route_before(route_sel[f], f, v, e) ? 1u : 0u;
        if (r < k) {
            route_ids[r] = e;
            route_w[r] = route_probs[e];
        }
    }
    barrier();
    if (t == 0u) route_weights(gating, k, norm_w, w_scale);
    barrier();
}

#ifdef ROUTE_SUBGROUP
// route_token by the workgroup's first subgroup alone (the includer enables subgroup
// arithmetic and defines ROUTE_SUBGROUP; no selection bias): the softmax's max and sum are
// subgroup reductions, and the k experts are taken one by one, each the largest of those
// left (an order key per expert in route_key; NaN ranks last, a taken expert below it; ties
// to the lower index by a subgroup minimum over the indices holding the maximum). k rounds of
// two subgroup reductions: a few microseconds less than route_token's n^2 / workgroup
// comparisons behind barriers, which the expert mat-vec that routes its own token waits
// for; and faster than counting each expert's rank over broadcast keys, one pass of n
// reads (H200, qwen3moe-30b-a3b tg128 283.1 against 290.6 t/s; benches/RESULTS.md, issue
// 31, twenty-first session). Called by the first subgroup alone; the others may work
// meanwhile (the integer-dot mat-vec quantizes x) and all see route_ids and route_w after
// a barrier.
shared uint route_key[ROUTE_N];
// Most experts per lane of route_token_sg's selection in registers.
#define ROUTE_REG 8u
// The selection's order key of a probability: NaN 1, below every number (order keys of
// finite values and infinities are at least 2^23); 0 stands for a taken expert or none.
uint route_order_key(float p) { return isnan(p) ? 1u : order_key(p); }
void route_token_sg(uint gating, uint n, uint k, bool norm_w, float w_scale) {
    uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    route_gate(gating, n, lane, sgs, true);
    // (n > 32: a specialization constant where the mat-vecs route, so that routings of
    // fewer experts keep the rounds below without this path's registers)
    if (n > 32u && n <= ROUTE_REG * sgs && k <= sgs) {
        // Each lane's order keys (experts lane, lane + sgs, ..) sorted in registers, largest
        // first (of equal keys the lower expert first; 0: none); each round takes the
        // largest of the lanes' first keys (ties to the lower expert) and its lane drops it.
        // The same experts in the same order as the shared-memory rounds below, without a
        // shared-memory round trip per round. H200 tg128 (benches/RESULTS.md, twenty-fifth
        // session): qwen3moe-30b-a3b (128 experts, 8 used) 316.8 -> 321.4 t/s; gpt-oss-20b
        // (32, 4: one key per lane) 358.4 -> 356.8, hence the rounds below for 32 or fewer.
        uint key[ROUTE_REG], idx[ROUTE_REG];
        [[unroll]] for (uint i = 0u; i < ROUTE_REG; i++) {
            key[i] = 0u;
            idx[i] = 0xFFFFFFFFu;
        }
        [[unroll]] for (uint i = 0u; i < ROUTE_REG; i++) {
            uint e = lane + i * sgs;
            uint kv = e < n ? route_order_key(route_probs[e]) : 0u, ki = e;
            [[unroll]] for (uint q = 0u; q < ROUTE_REG; q++) {
                if (kv > key[q]) {
                    uint tk = key[q], ti = idx[q];
                    key[q] = kv;
                    idx[q] = ki;
                    kv = tk;
                    ki = ti;
                }
            }
        }
        uint mine = 0u;
        for (uint j = 0u; j < k; j++) {
            uint top = subgroupMax(key[0]);
            uint at = subgroupMin(key[0] == top ? idx[0] : 0xFFFFFFFFu);
            if (idx[0] == at) {
                [[unroll]] for (uint q = 0u; q + 1u < ROUTE_REG; q++) {
                    key[q] = key[q + 1u];
                    idx[q] = idx[q + 1u];
                }
                key[ROUTE_REG - 1u] = 0u;
                idx[ROUTE_REG - 1u] = 0xFFFFFFFFu;
            }
            if (lane == j) mine = at;
        }
        if (lane < k) {
            route_ids[lane] = mine;
            route_w[lane] = route_probs[mine];
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        if (lane == 0u) route_weights(gating, k, norm_w, w_scale);
        return;
    }
    for (uint e = lane; e < n; e += sgs) route_key[e] = route_order_key(route_probs[e]);
    for (uint j = 0u; j < k; j++) {
        uint bk = 0u, bi = 0xFFFFFFFFu;
        for (uint e = lane; e < n; e += sgs) {
            uint key = route_key[e];
            if (key > bk) {
                bk = key;
                bi = e;
            }
        }
        uint top = subgroupMax(bk);
        uint at = subgroupMin(bk == top ? bi : 0xFFFFFFFFu);
        if (at % sgs == lane) route_key[at] = 0u; // (each lane reads only its own experts' keys)
        if (lane == 0u) {
            route_ids[j] = at;
            route_w[j] = route_probs[at];
        }
    }
    if (lane == 0u) route_weights(gating, k, norm_w, w_scale);
}
#endif
#endif
