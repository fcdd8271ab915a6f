// Shared by mul_mat_cm.comp and mul_mat_cm256.comp (include after the shader's bindings,
// push constants `p` and shared array `sm` of uvec4): the subgroup matrix types, the
// packed f16 decode of bytes and the store of one 16 x 16 accumulator tile.

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
    if (p.accumulate == 0u && (tr_) + 16u <= p.rows && (tn_) + 16u <= p.n_tok) { \
        coopMatStore(t_, c, cbase + (tn_) * p.ldc + (tr_), p.ldc, gl_CooperativeMatrixLayoutColumnMajor); \
    } else { \
        coopMatStore(t_, sm, sg * 64u, 4u, gl_CooperativeMatrixLayoutColumnMajor); \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
        for (uint e = lane; e < 256u; e += gl_SubgroupSize) { \
            uint er = (tr_) + (e & 15u), en = (tn_) + (e >> 4); \
            if (er < p.rows && en < p.n_tok) { \
                float v = uintBitsToFloat(sm[sg * 64u + (e >> 2)][e & 3u]); \
                uint at = cbase + en * p.ldc + er; \
                c[at] = p.accumulate != 0u ? c[at] + v : v; \
            } \
        } \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
    } }

// GLU_STORE(nsg, wrn, mult, msg): the gated-product epilogue (include/mul_mat_glu.glsl's
// MM_GLU) of a tile multiplied by nsg subgroups of 64 x 64 (acc[4][4] of 16 x 16), subgroup
// msg at rows wr * 64, tokens wn * 64 of the tile (msg = wn * wrn + wr; mult: whether this
// invocation's subgroup multiplies). The gate subgroups (wr < wrn / 2) pair with the up
// subgroup wr + wrn / 2 of the same wn. In 4 passes, each multiplying subgroup stores its
// 16-row strip i (4 tiles, 256 uvec4) at sm[msg * 256], then the whole workgroup writes
// act(gate) * up of the strips: f32 [n_tok, h], or with MM_GLU_F16 packed f16 pairs. Uses
// r0, n0, p, sm, c, c16; needs nsg * 256 uvec4 of sm, free once the main loop's last
// barrier has passed.
#define GLU_STORE(nsg_, wrn_, mult_, msg_) { \
    uint h = p.rows >> 1, h0 = r0 >> 1; \
    uint per = MM_GLU_F16 ? 512u : 1024u; /* words or outputs of one gate subgroup's strip */ \
    [[unroll]] for (uint i = 0; i < 4u; i++) { \
        barrier(); \
        if (mult_) [[unroll]] for (uint j = 0; j < 4u; j++) \
            coopMatStore(acc[i][j], sm, (msg_) * 256u + j * 64u, 4u, gl_CooperativeMatrixLayoutColumnMajor); \
        barrier(); \
        for (uint e = gl_LocalInvocationID.x; e < (nsg_) / 2u * per; e += gl_WorkGroupSize.x) { \
            uint g = e / per, f = e % per; \
            uint sg_g = (g / ((wrn_) / 2u)) * (wrn_) + g % ((wrn_) / 2u); \
            uint rr = MM_GLU_F16 ? 2u * (f & 7u) : (f & 15u), tt = MM_GLU_F16 ? f >> 3 : f >> 4; \
            uint row = h0 + (sg_g % (wrn_)) * 64u + 16u * i + rr, n = n0 + (sg_g / (wrn_)) * 64u + tt; \
            if (row >= h || n >= p.n_tok) continue; \
            uint fg = (sg_g * 256u + (tt >> 4) * 64u) * 4u + (tt & 15u) * 16u + rr; \
            uint fu = fg + (wrn_) / 2u * 1024u; \
            float v0 = mm_glu(uintBitsToFloat(sm[fg >> 2][fg & 3u]), uintBitsToFloat(sm[fu >> 2][fu & 3u])); \
            if (MM_GLU_F16) { \
                fg++; \
                fu++; \
                float v1 = mm_glu(uintBitsToFloat(sm[fg >> 2][fg & 3u]), uintBitsToFloat(sm[fu >> 2][fu & 3u])); \
                c16[(n * h + row) >> 1] = packHalf2x16(vec2(v0, v1)); \
            } else { \
                c[n * h + row] = v0; \
            } \
        } \
    } }
