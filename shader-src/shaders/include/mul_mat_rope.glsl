// The rotary-embedding and KV-cache epilogue of the quantized mat-mats (mul_mat_q.comp,
// mul_mat_cm.comp, mul_mat_cm256.comp) for a stacked Q|K|V projection (rows: ROPE_HEADS
// query heads, then ROPE_KV_HEADS key heads, then as many value heads, ROPE_D each): what
// rope_kv.comp does with the product, in the product's store. Query heads rotated into C
// (f32 [n_tok, ROPE_HEADS * ROPE_D]), key heads rotated into the f16 key cache, value heads
// copied into the f16 value cache; token n at position p.pos0 + n, cache slot
// (p.pos0 + n) % ROPE_CTX (kv_append.comp's layout [n_kv_heads, ctx, d], packed f16).
// Rotation as rope.comp (include/rope_pair.glsl): the first ROPE_ROT dims of a head, neox
// or interleaved pairs, cos / sin f32 [positions, ROPE_ROT / 2] at row p.pos0 + n; the
// same f32 arithmetic on the same accumulators, so the bits of the product then rope_kv.
// Each output pair (elements e, e + 1 of a head, e even) is one call of mm_rope_store; a
// head's rows lie in one tile (BM % ROPE_D == 0, checked by the op), which the kernel has
// staged so that mm_staged(lr, tl) returns row lr of the tile for staged token tl.
// Specialization constants 6, MM_ROPE: 0 = no epilogue, 1 = neox, 2 = interleaved; 7-11:
// heads, KV heads, head dim (even), rotated dims (even, <= the head dim), cache slots.
// Bindings 3, 4 = cos, sin; 5, 6 = the key and value caches (bound but unused without the
// epilogue). Include after the push constants `p` (with pos0) and C's `c`.
// The prologue before the rotation, in llama.cpp's order (Qwen2's QKV bias, Qwen3's q/k
// norms), spec constant 14 ROPE_PROLOGUE (bits: 1 = the stacked Q|K|V bias at binding 9
// added to every row; 2 = each query head RMS-normalised with weight binding 10 and eps
// spec 15; 4 = each key head with binding 11 and eps spec 16): 1 / sqrt(mean(x²) + eps) of
// the biased head as flash_attn_gqa.comp's decode prologue computes it, then (x * scale) *
// w. With a norm the kernel stages, barriers, runs mm_rope_head_norms (each staged head's
// scale into mm_norm_put, BM / ROPE_D heads a token, unit = head + (BM / ROPE_D) * tl;
// over one subgroup per unit where the kernel defines MM_ROPE_NORM_SG, else one
// invocation), barriers, then stores; the kernel defines mm_norm_put / mm_norm_get on
// shared memory the staging leaves free.
#ifndef VKML_MUL_MAT_ROPE_GLSL
#define VKML_MUL_MAT_ROPE_GLSL
#include "rope_pair.glsl"
layout(constant_id = 6) const uint MM_ROPE = 0u;
layout(constant_id = 7) const uint ROPE_HEADS = 1u;
layout(constant_id = 8) const uint ROPE_KV_HEADS = 1u;
layout(constant_id = 9) const uint ROPE_D = 2u;
layout(constant_id = 10) const uint ROPE_ROT = 2u;
layout(constant_id = 11) const uint ROPE_CTX = 1u;
// (restrict: the tables and caches are distinct buffers, so their loads may move past the
// stores of other pairs)
layout(std430, set = 0, binding = 3) restrict readonly buffer RopeCos { float rope_cos[]; };
layout(std430, set = 0, binding = 4) restrict readonly buffer RopeSin { float rope_sin[]; };
layout(std430, set = 0, binding = 5) restrict writeonly buffer KCache { uint k_cache[]; };
layout(std430, set = 0, binding = 6) restrict writeonly buffer VCache { uint v_cache[]; };
layout(constant_id = 14) const uint ROPE_PROLOGUE = 0u;
layout(constant_id = 15) const float ROPE_Q_EPS = 0.0;
layout(constant_id = 16) const float ROPE_K_EPS = 0.0;
layout(std430, set = 0, binding = 9) restrict readonly buffer RopeBias { float rope_bias[]; };
layout(std430, set = 0, binding = 10) restrict readonly buffer RopeQNorm { float rope_q_norm[]; };
layout(std430, set = 0, binding = 11) restrict readonly buffer RopeKNorm { float rope_k_norm[]; };
const bool ROPE_NORMS = (ROPE_PROLOGUE & 6u) != 0u;

// Row lr of the tile for staged token tl (the kernel's staging).
float mm_staged(uint lr, uint tl);
// The head-norm scale of unit u (the kernel's shared memory).
void mm_norm_put(uint u, float v);
float mm_norm_get(uint u);

// Which norm head row gr is in: 1 = a query head's, 2 = a key head's, 0 = none.
uint mm_head_norm(uint gr) {
    uint qrows = ROPE_HEADS * ROPE_D, krows = ROPE_KV_HEADS * ROPE_D;
    if (gr < qrows) return (ROPE_PROLOGUE & 2u) != 0u ? 1u : 0u;
    if (gr < qrows + krows) return (ROPE_PROLOGUE & 4u) != 0u ? 2u : 0u;
    return 0u;
}

// Row lr of staged token tl with the bias added (tile at row r0).
float mm_biased(uint r0, uint lr, uint tl) {
    float v = mm_staged(lr, tl);
    if ((ROPE_PROLOGUE & 1u) != 0u) v += rope_bias[r0 + lr];
    return v;
}

// The norm scales of the toks staged tokens' heads in the tile at row r0.
void mm_rope_head_norms(uint r0, uint toks) {
    const uint heads = BM / ROPE_D;
#ifdef MM_ROPE_NORM_SG
    for (uint u = gl_SubgroupID; u < heads * toks; u += gl_NumSubgroups) {
        uint lr0 = (u % heads) * ROPE_D, tl = u / heads;
        uint which = mm_head_norm(r0 + lr0);
        if (which == 0u) continue; // uniform across the subgroup
        float ss = 0.0;
        for (uint e = gl_SubgroupInvocationID; e < ROPE_D; e += gl_SubgroupSize) {
            float a = mm_biased(r0, lr0 + e, tl);
            ss += a * a;
        }
        ss = subgroupAdd(ss);
        if (subgroupElect()) mm_norm_put(u, 1.0 / sqrt(ss / float(ROPE_D) + (which == 1u ? ROPE_Q_EPS : ROPE_K_EPS)));
    }
#else
    for (uint u = gl_LocalInvocationIndex; u < heads * toks; u += gl_WorkGroupSize.x) {
        uint lr0 = (u % heads) * ROPE_D, tl = u / heads;
        uint which = mm_head_norm(r0 + lr0);
        if (which == 0u) continue;
        float ss = 0.0;
        for (uint e = 0u; e < ROPE_D; e++) {
            float a = mm_biased(r0, lr0 + e, tl);
            ss += a * a;
        }
        mm_norm_put(u, 1.0 / sqrt(ss / float(ROPE_D) + (which == 1u ? ROPE_Q_EPS : ROPE_K_EPS)));
    }
#endif
}

// Row lr of staged token tl after the prologue: biased, then normalised where its head is.
float mm_pre_rope(uint r0, uint lr, uint tl) {
    float v = mm_biased(r0, lr, tl);
    uint gr = r0 + lr, which = ROPE_NORMS ? mm_head_norm(gr) : 0u;
    if (which != 0u) {
        float scale = mm_norm_get(lr / ROPE_D + (BM / ROPE_D) * tl);
        v = v * scale * (which == 1u ? rope_q_norm[gr % ROPE_D] : rope_k_norm[gr % ROPE_D]);
    }
    return v;
}

// Output pair (tile rows lr, lr + 1; lr even) of staged token tl, token n of the call,
// for the tile at row r0.
void mm_rope_store(uint r0, uint lr, uint tl, uint n) {
    uint gr = r0 + lr;
    uint qrows = ROPE_HEADS * ROPE_D, krows = ROPE_KV_HEADS * ROPE_D;
    uint e = gr % ROPE_D, pos = p.pos0 + n;
    bool rotate = gr < qrows + krows;
    // Every load first (the table rows, the pair and its partners), then the arithmetic.
    float o[2], b[2], cs[2], sn[2];
    bool first[2], rot[2];
    for (uint x = 0; x < 2u; x++) {
        uint ex = e + x, j, partner;
        rope_pair_style(MM_ROPE == 2u, ex, ROPE_ROT, j, first[x], partner);
        rot[x] = rotate && ex < ROPE_ROT;
        uint row = pos * (ROPE_ROT / 2u) + (rot[x] ? j : 0u);
        cs[x] = rope_cos[row];
        sn[x] = rope_sin[row];
        o[x] = mm_pre_rope(r0, lr + x, tl);
        b[x] = rot[x] ? mm_pre_rope(r0, lr - e + partner, tl) : 0.0;
    }
    for (uint x = 0; x < 2u; x++) {
        if (rot[x]) o[x] = rope_apply(o[x], b[x], first[x], cs[x], sn[x]);
    }
    if (gr < qrows) {
        c[n * qrows + gr] = o[0];
        c[n * qrows + gr + 1u] = o[1];
        return;
    }
    bool is_v = gr >= qrows + krows;
    uint kvh = (gr - qrows - (is_v ? krows : 0u)) / ROPE_D;
    uint at = ((kvh * ROPE_CTX + pos % ROPE_CTX) * ROPE_D + e) >> 1;
    uint word = packHalf2x16(vec2(o[0], o[1]));
    if (is_v) {
        v_cache[at] = word;
    } else {
        k_cache[at] = word;
    }
}
#endif
