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

// Row lr of the tile for staged token tl (the kernel's staging).
float mm_staged(uint lr, uint tl);

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
        o[x] = mm_staged(lr + x, tl);
        b[x] = rot[x] ? mm_staged(lr - e + partner, tl) : 0.0;
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
