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
