// Shared by mul_mat_cm.comp and mul_mat_cm256.comp (include after the shader's bindings,
// push constants `p`, shared array `sm` of uvec4 and, where the kernel runs grouped by
// expert, include/mul_mat_ids.glsl): the subgroup matrix types, the packed f16 decode of
// bytes and the store of one 16 x 16 accumulator tile.

// The run's tokens and C rows: include/mul_mat_ids.glsl's where the kernel includes it
// (grouped by expert), else p.n_tok and token n's own row.
#ifdef VKML_MUL_MAT_IDS_GLSL
#define MM_GROUPED MM_IDS
#define MM_RUN_TOKENS mm_n_tok
#define MM_C_ROW(n_) mm_out_row(n_)
#else
#define MM_GROUPED false
#define MM_RUN_TOKENS p.n_tok
#define MM_C_ROW(n_) (n_)
#endif

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

// The 4 bytes of u masked by mask (0x000F000F: low nibbles, 0x00FF00FF: whole bytes) as f16
// minus offset: each masked byte b becomes the f16 1024 + b (0x6400 | b, exact), so
// offset 1024 + 8 gives Q4_0's b - 8 and 1024 + 128 (on bytes XOR 0x80) Q8_0's signed b.
f16vec4 bytes4(uint u, uint mask, float16_t offset) {
    uint e02 = (u & mask) | 0x64006400u;
    uint e13 = ((u >> 8) & mask) | 0x64006400u;
    f16vec2 a = unpackFloat2x16((e02 & 0xFFFFu) | (e13 << 16));
    f16vec2 b = unpackFloat2x16((e02 >> 16) | (e13 & 0xFFFF0000u));
    precise f16vec4 q = f16vec4(a, b) - offset;
    return q;
}

// Eight halves as one 16-byte shared store.
uvec4 pack8(f16vec4 a, f16vec4 b) {
    return uvec4(packFloat2x16(a.xy), packFloat2x16(a.zw), packFloat2x16(b.xy), packFloat2x16(b.zw));
}

// STORE_TILE(t, tr, tn): accumulator tile t (rows tr.., tokens tn..) into C at cbase (C
// is [n_tok, ldc]: column-major tiles; ldc = rows unless the op runs one part of a matrix
// split over several bindings); a whole tile without the residual add stores
// directly, an edge tile or an add goes through this subgroup's 64 uvec4 of sm at
// sg * 64 (free once the main loop's last barrier has passed). Uses cbase, sg, lane.
#define STORE_TILE(t_, tr_, tn_) { \
    if (!MM_GROUPED && p.accumulate == 0u && (tr_) + 16u <= p.rows && (tn_) + 16u <= MM_RUN_TOKENS) { \
        coopMatStore(t_, c, cbase + (tn_) * p.ldc + (tr_), p.ldc, gl_CooperativeMatrixLayoutColumnMajor); \
    } else { \
        coopMatStore(t_, sm, sg * 64u, 4u, gl_CooperativeMatrixLayoutColumnMajor); \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
        for (uint e = lane; e < 256u; e += gl_SubgroupSize) { \
            uint er = (tr_) + (e & 15u), en = (tn_) + (e >> 4); \
            if (er < p.rows && en < MM_RUN_TOKENS) { \
                float v = uintBitsToFloat(sm[sg * 64u + (e >> 2)][e & 3u]); \
                uint at = cbase + MM_C_ROW(en) * p.ldc + er; \
                c[at] = p.accumulate != 0u ? c[at] + v : v; \
            } \
        } \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
    } }

// The epilogues below stage the accumulators through shared memory in passes of
// MM_EPI_TILES (specialization constant 12: 1 or 2) 16-row or 16-token strips per
// subgroup, 256 * MM_EPI_TILES uvec4 per subgroup slot (mul_mat_cm256.comp's 8 subgroups
// have room for 1 only).
layout(constant_id = 12) const uint MM_EPI_TILES = 1u;

// GLU_STORE(nsg, wrn, mult, msg): the gated-product epilogue (include/mul_mat_glu.glsl's
// MM_GLU) of a tile multiplied by nsg subgroups of 64 x 64 (acc[4][4] of 16 x 16), subgroup
// msg at rows wr * 64, tokens wn * 64 of the tile (msg = wn * wrn + wr; mult: whether this
// invocation's subgroup multiplies). The gate subgroups (wr < wrn / 2) pair with the up
// subgroup wr + wrn / 2 of the same wn. In 4 / MM_EPI_TILES passes, each multiplying
// subgroup stores its next MM_EPI_TILES 16-row strips (4 tiles each) at
// sm[msg * 256 * MM_EPI_TILES], then the whole workgroup writes act(gate) * up of the
// strips: f32 [n_tok, h], or with MM_GLU_F16 packed f16 pairs. Uses r0, n0, p, sm, c, c16;
// needs nsg * 256 * MM_EPI_TILES uvec4 of sm, free once the main loop's last barrier has
// passed.
#define GLU_STORE(nsg_, wrn_, mult_, msg_) { \
    uint h = p.rows >> 1, h0 = r0 >> 1; \
    uint srows = 16u * MM_EPI_TILES; /* rows of a pass per subgroup */ \
    uint per = MM_GLU_F16 ? srows * 32u : srows * 64u; /* words or outputs of one gate subgroup's pass */ \
    [[unroll]] for (uint ip = 0; ip < 4u / MM_EPI_TILES; ip++) { \
        barrier(); \
        if (mult_) [[unroll]] for (uint it = 0; it < MM_EPI_TILES; it++) [[unroll]] for (uint j = 0; j < 4u; j++) \
            coopMatStore(acc[ip * MM_EPI_TILES + it][j], sm, ((msg_) * MM_EPI_TILES + it) * 256u + j * 64u, 4u, \
                gl_CooperativeMatrixLayoutColumnMajor); \
        barrier(); \
        for (uint e = gl_LocalInvocationID.x; e < (nsg_) / 2u * per; e += gl_WorkGroupSize.x) { \
            uint g = e / per, f = e % per; \
            uint sg_g = (g / ((wrn_) / 2u)) * (wrn_) + g % ((wrn_) / 2u); \
            uint rr = MM_GLU_F16 ? 2u * (f % (srows / 2u)) : f % srows; \
            uint tt = MM_GLU_F16 ? f / (srows / 2u) : f / srows; \
            uint row = h0 + (sg_g % (wrn_)) * 64u + ip * srows + rr, n = n0 + (sg_g / (wrn_)) * 64u + tt; \
            if (row >= h || n >= MM_RUN_TOKENS) continue; \
            uint fg = ((sg_g * MM_EPI_TILES + (rr >> 4)) * 256u + (tt >> 4) * 64u) * 4u + (tt & 15u) * 16u + (rr & 15u); \
            uint fu = fg + (wrn_) / 2u * MM_EPI_TILES * 1024u; \
            float v0 = mm_glu(uintBitsToFloat(sm[fg >> 2][fg & 3u]), uintBitsToFloat(sm[fu >> 2][fu & 3u]), row); \
            if (MM_GLU_F16) { \
                fg++; \
                fu++; \
                float v1 = mm_glu(uintBitsToFloat(sm[fg >> 2][fg & 3u]), uintBitsToFloat(sm[fu >> 2][fu & 3u]), row + 1u); \
                c16[(MM_C_ROW(n) * h + row) >> 1] = packHalf2x16(vec2(v0, v1)); \
            } else { \
                c[MM_C_ROW(n) * h + row] = v0; \
            } \
        } \
    } }

// The rotary-embedding epilogue's staging (include/mul_mat_rope.glsl) for the kernels of
// subgroups of 64 x 64 at rows wr * 64 and tokens wn * 64 of the tile (subgroup slot
// wn * MM_WRN + wr, MM_WRN defined by the kernel): ROPE_STORE's pass jp holds each
// subgroup's tokens 16 MM_EPI_TILES jp .. (MM_EPI_TILES strips of 16 tokens, 4 tiles of 16
// rows each) at sm[(slot * MM_EPI_TILES + strip) * 256 + i * 64]; staged token tl is token
// wn * 64 + 16 MM_EPI_TILES jp + tl % (16 MM_EPI_TILES) of the tile,
// wn = tl / (16 MM_EPI_TILES).
#ifdef MM_WRN
float mm_staged(uint lr, uint tl) {
    uint tw = 16u * MM_EPI_TILES, tt = tl % tw;
    uint slot = (tl / tw) * MM_WRN + (lr >> 6);
    uint f = ((slot * MM_EPI_TILES + (tt >> 4)) * 256u + ((lr & 63u) >> 4) * 64u) * 4u + (tt & 15u) * 16u + (lr & 15u);
    return uintBitsToFloat(sm[f >> 2][f & 3u]);
}

// The head-norm scales of the rotary epilogue's prologue (mm_rope_head_norms): float u
// from the end of sm, which the staging (its first nsg * 256 * MM_EPI_TILES uvec4) leaves
// free for the (BM / ROPE_D) * toks units the op allows (ops' rope_norm_units).
#define MM_ROPE_NORM_SG
void mm_norm_put(uint u, float v) {
    uint f = uint(sm.length()) * 4u - 1u - u;
    sm[f >> 2][f & 3u] = floatBitsToUint(v);
}
float mm_norm_get(uint u) {
    uint f = uint(sm.length()) * 4u - 1u - u;
    return uintBitsToFloat(sm[f >> 2][f & 3u]);
}
#endif

// ROPE_STORE(nsg, mult, msg): the rotary-embedding epilogue (MM_ROPE) of a tile multiplied
// by nsg subgroups (as GLU_STORE): in 4 / MM_EPI_TILES passes, each multiplying subgroup
// stores its next MM_EPI_TILES 16-token strips, then the workgroup writes every output
// pair of those tokens (mm_rope_store), after the head norms where the prologue has them.
// Uses r0, n0, p, sm, acc; needs nsg * 256 * MM_EPI_TILES uvec4 of sm.
#define ROPE_STORE(nsg_, mult_, msg_) { \
    uint tw = 16u * MM_EPI_TILES; \
    uint toks = (nsg_) / MM_WRN * tw; \
    [[unroll]] for (uint jp = 0; jp < 4u / MM_EPI_TILES; jp++) { \
        barrier(); \
        if (mult_) [[unroll]] for (uint jt = 0; jt < MM_EPI_TILES; jt++) [[unroll]] for (uint i = 0; i < 4u; i++) \
            coopMatStore(acc[i][jp * MM_EPI_TILES + jt], sm, ((msg_) * MM_EPI_TILES + jt) * 256u + i * 64u, 4u, \
                gl_CooperativeMatrixLayoutColumnMajor); \
        barrier(); \
        if (ROPE_NORMS) { \
            mm_rope_head_norms(r0, toks); \
            barrier(); \
        } \
        for (uint e = gl_LocalInvocationID.x; e < BM / 2u * toks; e += gl_WorkGroupSize.x) { \
            uint lr = 2u * (e % (BM / 2u)), tl = e / (BM / 2u); \
            uint n = n0 + (tl / tw) * 64u + jp * tw + tl % tw; \
            if (r0 + lr < p.rows && n < p.n_tok) mm_rope_store(r0, lr, tl, n); \
        } \
    } }
