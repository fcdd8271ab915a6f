// The interface flash_attn.comp, flash_attn_gqa.comp and flash_attn_cm.comp share (include
// after common.glsl and the q, K, V bindings 0-2; main begins with attn_begin()): their push
// constants, the call's shape as it runs (run) and output binding
// 3 (ACT out [t_q, n_heads, d]); unless ATTN_NO_SPLITS, also the split outputs (binding 4,
// po: f32 [n_splits, t_q, n_heads, d]; binding 5, ml: f32 [n_splits, t_q, n_heads, 2])
// and attn_store, which writes one output element as flash_attn_combine.comp reads it.
// With OUT_F16 the output is f16 whatever ACT is (ATTN_OUT: an output element's type).
// Attention sinks (gpt-oss; p.has_sinks): one logit per query head, f32 [n_heads] at
// binding ATTN_SINKS_BINDING (which the kernel defines: its last binding), in the softmax's
// denominator and without a value (include/attn_sink.glsl), applied where a row's output
// is normalised.
#ifdef OUT_F16
#define ATTN_OUT float16_t
#else
#define ATTN_OUT ACT
#endif
layout(std430, set = 0, binding = 3) writeonly buffer O { ATTN_OUT o[]; };
layout(std430, set = 0, binding = ATTN_SINKS_BINDING) readonly buffer Sinks { float attn_sinks[]; };
#include "attn_sink.glsl"

layout(push_constant) uniform P {
    uint t_q; uint n_heads; uint n_kv_heads; uint d; uint kv_len; uint q_pos0; uint ctx;
    uint causal; uint n_splits; uint split_len; float scale; uint window; float softcap;
    uint has_sinks;
#ifdef ROPE_IN
    // flash_attn_gqa.comp's rope_* variants: rotated dims, element offsets of q, k, v;
    // the prologue: a QKV bias, the q and k norms' eps (negative: no norm).
    uint rot; uint q_off; uint k_off; uint v_off; uint has_bias; float q_eps; float k_eps;
    // A replayed step (from_step != 0): the query position is word 0 of the step buffer,
    // n_splits is the grid, and one split runs per split_positions keys seen.
    uint from_step; uint split_positions;
#endif
} p;

// The output factor of head h's row with running max m and sum l: attn_sink_scale of its
// sink where the call has them, else 1 / l (0 without a visible key).
float attn_out_scale(uint h, float m, float l) {
    return p.has_sinks != 0u ? attn_sink_scale(attn_sinks[h], m, l) : (l > 0.0 ? 1.0 / l : 0.0);
}

// The call's query position, keys and splits as the kernel runs them: the push constants'
// (attn_begin), or those a replayed decode step derives from its step buffer
// (flash_attn_gqa.comp's rope_* variants).
struct AttnRun {
    uint q_pos0;
    uint kv_len;
    uint n_splits;
    uint split_len;
};
AttnRun run;

void attn_begin() {
    run = AttnRun(p.q_pos0, p.kv_len, p.n_splits, p.split_len);
}

// A score q.k after the scale, soft-capped to (-softcap, softcap) where p.softcap > 0
// (Gemma 2's attention logit soft-capping: softcap * tanh(s / softcap)). The argument is
// clamped where tanh is 1 in f32, so that no driver's tanh overflows.
float attn_cap(float s) {
    return p.softcap > 0.0 ? p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0)) : s;
}

// The first key position query token t sees: with a sliding window of p.window
// positions (0: none), keys j with q_pos0 + t - window < j (llama.cpp's
// LLAMA_SWA_TYPE_STANDARD: a query sees `window` keys, itself included).
uint attn_first_key(uint t) {
    uint qp = run.q_pos0 + t;
    return (p.window != 0u && qp + 1u > p.window) ? qp + 1u - p.window : 0u;
}

// The cache slot of key position j: caches are rings over their p.ctx slots (position j
// in slot j % ctx), which for a cache of every position is j itself.
uint attn_slot(uint j) {
    return j % p.ctx;
}

#ifndef ATTN_NO_SPLITS
#ifdef ATTN_COMBINE_IN_PLACE
// The split outputs are read back by the last workgroup of a (token, KV head): coherent,
// so that its reads see the other workgroups' writes (ordered before their atomic count
// by memoryBarrierBuffer).
layout(std430, set = 0, binding = 4) coherent buffer PO { float po[]; };
layout(std430, set = 0, binding = 5) coherent buffer ML { float ml[]; };
#else
layout(std430, set = 0, binding = 4) writeonly buffer PO { float po[]; };
layout(std430, set = 0, binding = 5) writeonly buffer ML { float ml[]; };
#endif

// Element dd of query token t, head h, from split `split`'s unnormalised sum acc over its
// keys, running max m and sum l: out = acc / l (zeros where no key was visible) without a
// split, else acc into po and, where write_ml, (m, l) into ml.
void attn_store(uint split, uint t, uint h, uint dd, float acc, float m, float l, bool write_ml) {
    if (run.n_splits == 1u) {
        o[(t * p.n_heads + h) * p.d + dd] = ACT(acc * attn_out_scale(h, m, l));
    } else {
        uint pbase = (split * p.t_q + t) * p.n_heads + h;
        po[pbase * p.d + dd] = acc;
        if (write_ml) {
            ml[pbase * 2u] = m;
            ml[pbase * 2u + 1u] = l;
        }
    }
}
#endif
