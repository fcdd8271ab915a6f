//! variant f32
//! variant f32_sg SUBGROUP_REDUCE=1
//! variant f16 F16=1
//! variant f16_sg F16=1 SUBGROUP_REDUCE=1
// Flash attention (streaming softmax, never materialising the score matrix) for
// prefill and decode, over an f16 KV cache, with grouped-query heads and causal masking:
//   out[t, h, :] = softmax_j(scale * q[t, h, :] . K[kvh, j, :]) V[kvh, j, :],
//   kvh = h / (n_heads / n_kv_heads), j < kv_len, and j <= q_pos0 + t when causal;
//   with a sliding window (push constant window > 0) also j > q_pos0 + t - window; scores
//   soft-capped where softcap > 0 (attn_cap). Key j lives in cache slot j % ctx (attn_slot):
//   a sliding-window layer's cache may be a ring of fewer slots than positions.
// Layouts: q, out [t_q, n_heads, d] (token-major) of type ACT (f32, or f16 with F16;
// arithmetic in f32); K, V f16 [n_kv_heads, ctx, d] read as packed words (no 16-bit
// storage feature needed for them); d even, <= 256.
// Split over the KV length (decode): workgroup z = split s handles keys
// [s * split_len, (s + 1) * split_len); with n_splits > 1 it writes its unnormalised
// output to po (f32) at [s, t, h, :] and its running max and sum to ml[s, t, h, 0..2], and
// flash_attn_combine.comp merges the splits into out.
// Bindings: 0 = q, 1 = K, 2 = V, 3 = out (n_splits == 1), 4 = po and 5 = ml (n_splits > 1),
// 6 = sinks (include/flash_attn_io.glsl).
// Grid: x = heads, y = query tokens, z = splits. Workgroup: specialization constant 0 (64).
// Reductions: reduce.glsl, subgroup path with SUBGROUP_REDUCE.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x_id = 0, local_size_x = 64) in;
#define REDUCE_MAX 256
#include "common.glsl"
#include "reduce.glsl"
layout(std430, set = 0, binding = 0) readonly buffer Q { ACT q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { uint vw[]; };
#define ATTN_SINKS_BINDING 6
#include "flash_attn_io.glsl"

#define MAX_D 256
#define MAX_DT 8 // output dims per invocation: MAX_D / smallest workgroup (32)
shared float qs[MAX_D];
shared float ps[256];

float kv_at(uint word_base, uint i, bool is_v) {
    uint w = is_v ? vw[word_base + (i >> 1)] : kw[word_base + (i >> 1)];
    vec2 h = unpackHalf2x16(w);
    return (i & 1u) == 0u ? h.x : h.y;
}

void main() {
    attn_begin();
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, split = gl_WorkGroupID.z;
    uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint kvh = h / (p.n_heads / p.n_kv_heads);
    uint qbase = (t * p.n_heads + h) * p.d;
    for (uint i = tid; i < p.d; i += wg) qs[i] = float(q[qbase + i]);
    barrier();

    uint end = run.kv_len;
    if (p.causal != 0u) end = min(end, run.q_pos0 + t + 1u);
    // Splits cover the keys the first query sees onward (all of them without a window).
    uint start = attn_first_key(0u) + split * run.split_len;
    end = min(end, start + run.split_len);
    start = max(start, attn_first_key(t));

    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    float m_run = NEG_INF, l_run = 0.0;
    float acc[MAX_DT];
    for (uint k = 0; k < MAX_DT; k++) acc[k] = 0.0;
    uint head_words = (kvh * p.ctx) * (p.d / 2u);

    for (uint j0 = start; j0 < end; j0 += wg) {
        uint j = j0 + tid;
        float s = NEG_INF;
        if (j < end) {
            uint kb = head_words + attn_slot(j) * (p.d / 2u);
            float dotv = 0.0;
            for (uint i = 0; i < p.d; i += 2u) {
                vec2 kk = unpackHalf2x16(kw[kb + (i >> 1)]);
                dotv += qs[i] * kk.x + qs[i + 1u] * kk.y;
            }
            s = attn_cap(dotv * p.scale);
        }
        float m_new = max(m_run, wg_max(s));
        float pj = (j < end) ? exp(s - m_new) : 0.0;
        float corr = isinf(m_run) ? 0.0 : exp(m_run - m_new);
        l_run = l_run * corr + wg_sum(pj);
        ps[tid] = pj;
        barrier();
        uint n = min(wg, end - j0);
        for (uint k = 0; k < MAX_DT; k++) {
            uint dd = tid + k * wg;
            if (dd >= p.d) break;
            float a = acc[k] * corr;
            for (uint jj = 0; jj < n; jj++) {
                a += ps[jj] * kv_at(head_words + attn_slot(j0 + jj) * (p.d / 2u), dd, true);
            }
            acc[k] = a;
        }
        m_run = m_new;
        barrier();
    }

    for (uint k = 0; k < MAX_DT; k++) {
        uint dd = tid + k * wg;
        if (dd >= p.d) break;
        attn_store(split, t, h, dd, acc[k], m_run, l_run, dd == 0u);
    }
}
