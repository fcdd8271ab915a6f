//! variant f32
//! variant f16 F16=1
//! variant combine_f32 ATTN_COMBINE_IN_PLACE=1
//! variant combine_f16 F16=1 ATTN_COMBINE_IN_PLACE=1
//! variant rope_neox_f32 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1
//! variant rope_interleaved_f32 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1 INTERLEAVED=1
//! variant rope_neox_f32_wide256 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1 MAX_SG=16u MAX_GD=256u
//! variant rope_interleaved_f32_wide256 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1 INTERLEAVED=1 MAX_SG=16u MAX_GD=256u
//! variant rope_neox_f32_wide512 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1 MAX_SG=16u MAX_GD=512u
//! variant rope_interleaved_f32_wide512 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1 INTERLEAVED=1 MAX_SG=16u MAX_GD=512u
//! variant rope_neox_f32_wide1024 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1 MAX_SG=8u MAX_GD=1024u
//! variant rope_interleaved_f32_wide1024 ATTN_COMBINE_IN_PLACE=1 ROPE_IN=1 INTERLEAVED=1 MAX_SG=8u MAX_GD=1024u
// Flash attention with the query heads of one KV head together (grouped-query attention):
// the same function, layouts, bindings, push constants and split outputs as
// flash_attn.comp, but one workgroup per (head group, query token, split) takes GQ query
// heads of one KV head, so each K and V row is read once for GQ heads instead of once per
// head; the decode step's attention. GQ divides G = n_heads / n_kv_heads: the G heads of a
// KV head are hg = G / GQ workgroups x (workgroup x takes heads x GQ .. x GQ + GQ of KV
// head x / hg), each reading that KV head's keys and values (ops' tuning::DecodeAttnConfig::
// heads_per_workgroup: fewer heads per workgroup shorten its per-key reductions, its
// prologue and its merges; the reads repeat out of L2).
// Work: subgroup s takes keys start + s, start + s + (subgroups), ...; its lanes split a
// row's d / 2 f16 pairs (consecutive lanes, consecutive words: one coalesced load per
// pair group), each key's G dot products are subgroupAdd-reduced, and each subgroup keeps
// an online softmax (running max m, sum l, unnormalised output) per head. At the end the
// subgroups' states are merged through shared memory (each scaled by exp(m_s - m)), and
// written as flash_attn.comp writes them: out = acc / l, or with n_splits > 1 the
// unnormalised output to po and (m, l) to ml for flash_attn_combine.comp.
// combine_*: with n_splits > 1, the splits merge in the same dispatch: each workgroup,
// having written its split, counts itself on a device-scope atomic (binding 6, cnt: one
// uint per (query token, head group), zero before the dispatch: t_q n_heads / GQ of them);
// the last of the n_splits workgroups of a (token, head group) merges them
// (include/flash_attn_merge.glsl) and resets its count to zero for the next dispatch.
// rope_*: the decode step's prologue in the same dispatch (rope_kv.comp's work, bit for
// bit): one query token (t_q = 1) at position q_pos0 = kv_len - 1; binding 0 holds the
// unrotated f32 query heads (head h at element q_off + h d, e.g. the stacked Q|K|V rows of
// one mat-vec), binding 9 the new key heads (at k_off), binding 10 the new value heads (at
// v_off); cos/sin f32 [positions, rot / 2] (bindings 7, 8) rotate the first `rot` dims of
// each query and key head as include/rope_pair.glsl pairs them. Each workgroup rotates
// its G query heads as it loads them, and the new key and value rows of its KV head into
// shared memory as f16 (what the cache would hold); the split holding position q_pos0
// reads them from there and writes them into the caches (bindings 1, 2, read-write), in
// slot q_pos0 % ctx, which no other workgroup of the dispatch reads (of a KV head's hg
// workgroups of that split, the first writes; each reads its own shared copy). The merge
// of the splits is the combine_* one. Before the rotation, where asked (Qwen2's QKV biases,
// Qwen3's and Gemma 3's q/k norms, as llama.cpp applies them): the stacked Q|K|V bias
// (binding 11, f32 [(n_heads + 2 n_kv_heads) d], p.has_bias) is added to the query, key
// and value heads, and each query head (key head) is RMS-normalised with weight binding
// 12 (13), f32 [d], where p.q_eps (p.k_eps) is not negative: (x * (1 / sqrt(mean(x²) +
// eps))) * w, the sum of squares reduced over one subgroup. A replayed decode step
// (p.from_step != 0) reads its position from binding 14 (u32, word 0) instead of q_pos0
// and kv_len; its grid has p.n_splits splits, of which those the position's keys need run
// (one per p.split_positions keys seen, as ops' tuning::attn_splits chooses them) and merge.
// The *_wide{256,512} variants are the rope_* ones with up to 16 subgroups per workgroup
// (MAX_SG) for groups of at most 256 or 512 query values (MAX_GD): more keys of a split
// in flight at once, fewer splits to merge (ops' tuning::DECODE_ATTN_WIDE); *_wide1024
// the same with 8 subgroups for groups of up to 1024 (Qwen3-30B-A3B's 8 heads of 128 per
// KV head), whose merge buffer 16 subgroups would take past 48 KiB of shared memory.
// Sinks (p.has_sinks, include/flash_attn_io.glsl) at binding 6, 7 (combine_*) or 15 (rope_*).
// Specialization constants: 0 = workgroup size (at most MAX_SG subgroups), 1 = GQ (query
// heads per workgroup, a divisor of G, at most 8), 2 = NPL (pairs per lane per head: at
// least ceil(d / 2 / subgroup size)). GQ * d <= MAX_GD. Needs subgroup arithmetic.
// Grid: x = n_heads / GQ, y = query tokens, z = splits.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint GQ = 4;
layout(constant_id = 2) const uint NPL = 2;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer Q { ACT q[]; };
#ifdef ROPE_IN
layout(std430, set = 0, binding = 1) buffer K { uint kw[]; };
layout(std430, set = 0, binding = 2) buffer V { uint vw[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { uint vw[]; };
#endif
// The sinks' binding (include/flash_attn_io.glsl): after each variant's last.
#if defined(ROPE_IN)
#define ATTN_SINKS_BINDING 15
#elif defined(ATTN_COMBINE_IN_PLACE)
#define ATTN_SINKS_BINDING 7
#else
#define ATTN_SINKS_BINDING 6
#endif
#include "flash_attn_io.glsl"
#ifdef ROPE_IN
#include "rope_pair.glsl"
layout(std430, set = 0, binding = 7) readonly buffer C { float cs[]; };
layout(std430, set = 0, binding = 8) readonly buffer S { float sn[]; };
layout(std430, set = 0, binding = 9) readonly buffer KN { float k_new[]; };
layout(std430, set = 0, binding = 10) readonly buffer VN { float v_new[]; };
layout(std430, set = 0, binding = 11) readonly buffer QB { float qkv_bias[]; };
layout(std430, set = 0, binding = 12) readonly buffer QW { float q_norm_w[]; };
layout(std430, set = 0, binding = 13) readonly buffer KW { float k_norm_w[]; };
layout(std430, set = 0, binding = 14) readonly buffer STEP { uint step_pos[]; };
// The new key and value rows of this workgroup's KV head, packed f16 pairs.
shared uint kn_sh[128];
shared uint vn_sh[128];
// The G query heads' and the key head's RMS-norm scales.
shared float head_scale[9];

// Element e of the head at `base` of q (from_q) or k_new as the prologue makes it before
// the rotation: the bias added (p.has_bias), then normalised (p.q_eps / p.k_eps >= 0)
// with the head's scale: (x * scale) * w, as norm.comp's rms variant.
float pre_rope(bool from_q, uint base, uint bias_at, uint e, float scale) {
    float a = from_q ? q[base + e] : k_new[base + e];
    if (p.has_bias != 0u) a += qkv_bias[bias_at + e];
    if ((from_q ? p.q_eps : p.k_eps) >= 0.0) a = a * scale * (from_q ? q_norm_w[e] : k_norm_w[e]);
    return a;
}

// Element e of the head at `base`, as pre_rope makes it, rotated at position q_pos0.
float rope_in(bool from_q, uint base, uint bias_at, uint e, float scale) {
    float a = pre_rope(from_q, base, bias_at, e, scale);
    if (e >= p.rot) return a;
    uint j, partner;
    bool first;
    rope_pair(e, p.rot, j, first, partner);
    float b = pre_rope(from_q, base, bias_at, partner, scale);
    uint row = run.q_pos0 * (p.rot / 2u) + j;
    return rope_apply(a, b, first, cs[row], sn[row]);
}
#endif
#ifdef ATTN_COMBINE_IN_PLACE
layout(std430, set = 0, binding = 6) coherent buffer CNT { uint cnt[]; };
#include "flash_attn_merge.glsl"
shared uint is_last;
#endif

// (ops/src/attention/flash.rs mirrors these two as GQA_MAX_GD and GQA_MAX_SG.)
#ifndef MAX_SG
#define MAX_GD 1024u
#define MAX_SG 4u
#endif // else a *_wide variant's
shared float qs[MAX_GD];
shared float mrg[MAX_SG * MAX_GD];
shared float mls[MAX_SG * 16u];

void main() {
    attn_begin();
    // Workgroup x takes query heads x GQ .. x GQ + GQ of KV head x / hg (hg workgroups per
    // KV head: GQ may be a divisor of the KV head's group).
    uint hg = p.n_heads / (p.n_kv_heads * GQ);
    uint kvh = gl_WorkGroupID.x / hg, t = gl_WorkGroupID.y, split = gl_WorkGroupID.z;
    uint h0 = gl_WorkGroupID.x * GQ;
    uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint sg = gl_SubgroupID, nsg = gl_NumSubgroups, lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    uint hw = p.d / 2u;
#ifdef ROPE_IN
    if (p.from_step != 0u) {
        // A replayed step: its position from the step buffer, and the splits its keys
        // need (ops' tuning::attn_splits: one per split_positions keys seen, at most the
        // grid's); the grid's other splits have nothing to do.
        run.q_pos0 = step_pos[0];
        run.kv_len = run.q_pos0 + 1u;
        uint seen = run.kv_len - attn_first_key(0u);
        run.n_splits = clamp((seen + p.split_positions - 1u) / p.split_positions, 1u, p.n_splits);
        run.split_len = max((seen + run.n_splits - 1u) / run.n_splits, 1u);
        if (split >= run.n_splits) return;
    }
#endif
    // The G heads' queries of token t are contiguous: [t, n_heads, d] rows h0 .. h0 + G.
#ifdef ROPE_IN
    // One query token. The RMS-norm scales of its G query heads and of the key head
    // (heads GQ), one subgroup per head: 1 / sqrt(mean(x²) + eps) of the biased rows.
    uint kb = p.k_off + kvh * p.d, vb = p.v_off + kvh * p.d;
    uint qbias = h0 * p.d, kbias = (p.n_heads + kvh) * p.d, vbias = (p.n_heads + p.n_kv_heads + kvh) * p.d;
    if (p.q_eps >= 0.0 || p.k_eps >= 0.0) {
        for (uint hh = sg; hh <= GQ; hh += nsg) {
            bool is_q = hh < GQ;
            float eps = is_q ? p.q_eps : p.k_eps;
            if (eps < 0.0) continue; // uniform across the subgroup
            float ss = 0.0;
            for (uint e = lane; e < p.d; e += sgs) {
                float a = is_q ? q[p.q_off + (h0 + hh) * p.d + e] : k_new[kb + e];
                if (p.has_bias != 0u) a += qkv_bias[(is_q ? qbias + hh * p.d : kbias) + e];
                ss += a * a;
            }
            ss = subgroupAdd(ss);
            if (lane == 0u) head_scale[hh] = 1.0 / sqrt(ss / float(p.d) + eps);
        }
        barrier();
    }
    // Rotate the G query heads as they load, and make the new K / V rows.
    for (uint i = tid; i < GQ * p.d; i += wg) {
        uint g = i / p.d;
        qs[i] = rope_in(true, p.q_off + (h0 + g) * p.d, qbias + g * p.d, i % p.d, head_scale[g]);
    }
    for (uint i = tid; i < hw; i += wg) {
        float ks = head_scale[GQ];
        kn_sh[i] = packHalf2x16(vec2(rope_in(false, kb, kbias, 2u * i, ks), rope_in(false, kb, kbias, 2u * i + 1u, ks)));
        vec2 vv2 = vec2(v_new[vb + 2u * i], v_new[vb + 2u * i + 1u]);
        if (p.has_bias != 0u) vv2 += vec2(qkv_bias[vbias + 2u * i], qkv_bias[vbias + 2u * i + 1u]);
        vn_sh[i] = packHalf2x16(vv2);
    }
#else
    uint qbase = (t * p.n_heads + h0) * p.d;
    for (uint i = tid; i < GQ * p.d; i += wg) qs[i] = float(q[qbase + i]);
#endif
    barrier();

    uint end = run.kv_len;
    if (p.causal != 0u) end = min(end, run.q_pos0 + t + 1u);
    // Splits cover the keys the first query sees onward (all of them without a window).
    uint start = attn_first_key(0u) + split * run.split_len;
    end = min(end, start + run.split_len);
    start = max(start, attn_first_key(t));

    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    float m[GQ], l[GQ];
    vec2 acc[GQ * NPL];
    [[unroll]] for (uint g = 0; g < GQ; g++) {
        m[g] = NEG_INF;
        l[g] = 0.0;
        [[unroll]] for (uint c = 0; c < NPL; c++) acc[g * NPL + c] = vec2(0.0);
    }
    uint head_words = kvh * p.ctx * hw;
#ifdef ROPE_IN
    // The split holding the new position stores its key and value rows in the caches.
    uint pos = run.q_pos0;
    if (pos >= start && pos < end && gl_WorkGroupID.x % hg == 0u) {
        for (uint i = tid; i < hw; i += wg) {
            kw[head_words + attn_slot(pos) * hw + i] = kn_sh[i];
            vw[head_words + attn_slot(pos) * hw + i] = vn_sh[i];
        }
    }
#endif
    for (uint j = start + sg; j < end; j += nsg) {
        uint kb = head_words + attn_slot(j) * hw;
        float part[GQ];
        [[unroll]] for (uint g = 0; g < GQ; g++) part[g] = 0.0;
        vec2 vv[NPL];
        [[unroll]] for (uint c = 0; c < NPL; c++) {
            uint pi = lane + c * sgs;
            vv[c] = vec2(0.0);
            if (pi < hw) {
#ifdef ROPE_IN
                bool fresh = j == pos; // this dispatch's key: from shared memory
                vec2 kk = unpackHalf2x16(fresh ? kn_sh[pi] : kw[kb + pi]);
                vv[c] = unpackHalf2x16(fresh ? vn_sh[pi] : vw[kb + pi]);
#else
                vec2 kk = unpackHalf2x16(kw[kb + pi]);
                vv[c] = unpackHalf2x16(vw[kb + pi]);
#endif
                [[unroll]] for (uint g = 0; g < GQ; g++)
                    part[g] += qs[g * p.d + 2u * pi] * kk.x + qs[g * p.d + 2u * pi + 1u] * kk.y;
            }
        }
        [[unroll]] for (uint g = 0; g < GQ; g++) {
            float s = attn_cap(subgroupAdd(part[g]) * p.scale);
            float mn = max(m[g], s);
            float corr = exp(m[g] - mn); // 0 while m is -inf
            float pj = exp(s - mn);
            l[g] = l[g] * corr + pj;
            m[g] = mn;
            [[unroll]] for (uint c = 0; c < NPL; c++) acc[g * NPL + c] = acc[g * NPL + c] * corr + pj * vv[c];
        }
    }

    // Merge the subgroups' states.
    [[unroll]] for (uint g = 0; g < GQ; g++) {
        if (lane == 0u) {
            mls[sg * 16u + 2u * g] = m[g];
            mls[sg * 16u + 2u * g + 1u] = l[g];
        }
        [[unroll]] for (uint c = 0; c < NPL; c++) {
            uint pi = lane + c * sgs;
            if (pi < hw) {
                mrg[sg * MAX_GD + g * p.d + 2u * pi] = acc[g * NPL + c].x;
                mrg[sg * MAX_GD + g * p.d + 2u * pi + 1u] = acc[g * NPL + c].y;
            }
        }
    }
    barrier();
    for (uint i = tid; i < GQ * p.d; i += wg) {
        uint g = i / p.d, dd = i % p.d;
        float mt = NEG_INF;
        for (uint s = 0; s < nsg; s++) mt = max(mt, mls[s * 16u + 2u * g]);
        float lt = 0.0, at = 0.0;
        for (uint s = 0; s < nsg; s++) {
            float ms = mls[s * 16u + 2u * g];
            float f = isinf(ms) ? 0.0 : exp(ms - mt); // a subgroup without keys adds nothing
            lt += f * mls[s * 16u + 2u * g + 1u];
            at += f * mrg[s * MAX_GD + i];
        }
        attn_store(split, t, h0 + g, dd, at, mt, lt, dd == 0u);
    }
#ifdef ATTN_COMBINE_IN_PLACE
    if (run.n_splits == 1u) return;
    // Publish this split's po / ml writes, then count it.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        uint done = atomicAdd(cnt[t * p.n_kv_heads * hg + gl_WorkGroupID.x], 1u);
        is_last = done + 1u == run.n_splits ? 1u : 0u;
    }
    barrier();
    if (is_last == 0u) return;
    memoryBarrierBuffer();
    // attn_merge's arithmetic in its order (include/flash_attn_merge.glsl: the same bits as
    // flash_attn_combine.comp), its global loads issued together rather than one after
    // another: every split's (m, l) of the G heads into shared memory at once (mrg, free
    // since this workgroup's own merge), each head's weights exp(m_s - M) and sum L once,
    // then each element's sum over the splits from eight loads in flight at a time.
    uint stride = p.t_q * p.n_heads, ns = run.n_splits; // ns <= 32 (ops: MAX_ATTN_SPLITS)
    uint wbase = 2u * GQ * ns; // mrg[wbase + g ns + s]: split s's weight for head g
    for (uint i = tid; i < GQ * ns; i += wg) {
        uint row = t * p.n_heads + h0 + i / ns;
        uint at = ((i % ns) * stride + row) * 2u;
        mrg[2u * i] = ml[at];
        mrg[2u * i + 1u] = ml[at + 1u];
    }
    barrier();
    if (tid < GQ) {
        float mx = NEG_INF;
        for (uint s = 0; s < ns; s++) mx = max(mx, mrg[2u * (tid * ns + s)]);
        float lsum = 0.0;
        for (uint s = 0; s < ns; s++) {
            float ms = mrg[2u * (tid * ns + s)];
            float w = -1.0; // a split with no visible key: skipped
            if (!isinf(mx) && !isinf(ms)) {
                w = exp(ms - mx);
                lsum += mrg[2u * (tid * ns + s) + 1u] * w;
            }
            mrg[wbase + tid * ns + s] = w;
        }
        // (With sinks, the row's output factor: include/attn_sink.glsl.)
        mls[tid] = p.has_sinks != 0u ? attn_sink_scale(attn_sinks[h0 + tid], mx, lsum) : lsum;
    }
    barrier();
    for (uint i = tid; i < GQ * p.d; i += wg) {
        uint g = i / p.d, dd = i % p.d;
        uint row = t * p.n_heads + h0 + g;
        float acc_s = 0.0;
        for (uint s0 = 0; s0 < ns; s0 += 8u) {
            float v[8];
            [[unroll]] for (uint u = 0; u < 8u; u++) v[u] = s0 + u < ns ? po[((s0 + u) * stride + row) * p.d + dd] : 0.0;
            [[unroll]] for (uint u = 0; u < 8u; u++) {
                float w = s0 + u < ns ? mrg[wbase + g * ns + s0 + u] : -1.0;
                if (w >= 0.0) acc_s += v[u] * w;
            }
        }
        float lsum = mls[g];
        o[row * p.d + dd] = ACT(p.has_sinks != 0u ? acc_s * lsum : (lsum > 0.0 ? acc_s / lsum : 0.0));
    }
    if (tid == 0u) cnt[t * p.n_kv_heads * hg + gl_WorkGroupID.x] = 0u;
#endif
}
