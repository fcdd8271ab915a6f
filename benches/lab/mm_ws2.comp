// Lab: warp-specialized mul_mat_cm (Q4_0 / Q8_0 / Q4_K only). 4 producer subgroups load
// and decode step s + 1 while NCONS (4: 64 x 64 each, 8: 64 x 32 each) consumer subgroups
// multiply step s; PFD 3 keeps two steps of global loads in flight (loop unrolled by two,
// alternating register sets); XT reads x as if tiled (wrong values, right access pattern);
// NO_MMA / NO_PROD / NO_GLOBAL are diagnostics. It declares only specialization constant 0,
// so it runs on its own grid: `cm_lab benches/lab/mm_ws2.comp@128x128` (defines added at
// the top of a copy). Figures: benches/RESULTS.md, 2026-11-24 (fourth session).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#ifndef NCONS
#define NCONS 4
#endif
#ifndef PFD
#define PFD 2
#endif
layout(local_size_x = 32 * (NCONS + 4)) in;
layout(constant_id = 0) const bool ROW_RASTER_SC = false;
#ifdef RASTER
#define ROW_RASTER RASTER
#else
#define ROW_RASTER ROW_RASTER_SC
#endif
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { uvec4 x8[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; } p;

#define BM 128u
#define BN 128u
#define BK 32u
#define LDSV 5u // uvec4 per shared row: 4 of data (32 halves) + 1 of padding
#define SA 0u
#define SB (2u * BM * LDSV)
#define SCR (SB + 2u * BN * LDSV)
#if QTYPE == 2
#define RWN 5
#define RWP 5u
#elif QTYPE == 8
#define RWN 9
#define RWP 9u
#elif QTYPE == 12
#define RWN 12
#define RWP 13u
#else
#define RWN 0
#define RWP 0u
#endif
#define RW uint(RWN)
shared uvec4 sm[SCR + 32u * RWP];

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

vec4 nib_lo(uint u) { uint v = u & 0x0F0F0F0Fu; return vec4(v & 0xFFu, (v >> 8) & 0xFFu, (v >> 16) & 0xFFu, v >> 24); }

f16vec4 bytes4(uint u, uint mask, float16_t offset) {
    uint e02 = (u & mask) | 0x64006400u;
    uint e13 = ((u >> 8) & mask) | 0x64006400u;
    f16vec2 a = unpackFloat2x16((e02 & 0xFFFFu) | (e13 << 16));
    f16vec2 b = unpackFloat2x16((e02 >> 16) | (e13 & 0xFFFF0000u));
    precise f16vec4 q = f16vec4(a, b) - offset;
    return q;
}

uvec4 pack8(f16vec4 a, f16vec4 b) {
    return uvec4(packFloat2x16(a.xy), packFloat2x16(a.zw), packFloat2x16(b.xy), packFloat2x16(b.zw));
}

uint nwords;

// Word w of row r's bytes for the step at column k0.
uint raw_word(uint r, uint w, uint k0) {
    uint row = p.w_offset + r * p.row_bytes;
#if QTYPE == 2 || QTYPE == 8
    uint a = ((row + (k0 >> 5) * QBYTES) >> 2) + w;
#elif QTYPE == 12
    uint blk = row + (k0 >> 8) * QBYTES;
    uint a = w < 4u ? (blk >> 2) + w : ((blk + 16u + ((k0 >> 6) & 3u) * 32u) >> 2) + (w - 4u);
#else
    uint a = 0u;
#endif
#ifdef NO_GLOBAL
    return a * 2654435761u;
#else
    return qw[min(a, nwords)];
#endif
}

// Decodes this invocation's row (words q, block at byte blk) into shared row o.
void decode_row(uint o, uint q[RW > 0u ? RW : 1u], uint blk, uint k0) {
#if QTYPE == 2
    bool odd = (blk & 2u) != 0u;
    float16_t d = float16_t(unpackHalf2x16(odd ? q[0] >> 16 : q[0]).x);
    uint qs[4];
    [[unroll]] for (uint j = 0; j < 4u; j++) qs[j] = odd ? q[j + 1u] : ((q[j] >> 16) | (q[j + 1u] << 16));
    precise f16vec4 l0 = bytes4(qs[0], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 l1 = bytes4(qs[1], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 l2 = bytes4(qs[2], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 l3 = bytes4(qs[3], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h0 = bytes4(qs[0] >> 4, 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h1 = bytes4(qs[1] >> 4, 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h2 = bytes4(qs[2] >> 4, 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h3 = bytes4(qs[3] >> 4, 0x000F000Fu, 1032.0hf) * d;
    sm[o] = pack8(l0, l1);
    sm[o + 1u] = pack8(l2, l3);
    sm[o + 2u] = pack8(h0, h1);
    sm[o + 3u] = pack8(h2, h3);
#elif QTYPE == 8
    bool odd = (blk & 2u) != 0u;
    float16_t d = float16_t(unpackHalf2x16(odd ? q[0] >> 16 : q[0]).x);
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        uint qa = odd ? q[2u * c2 + 1u] : ((q[2u * c2] >> 16) | (q[2u * c2 + 1u] << 16));
        uint qb = odd ? q[2u * c2 + 2u] : ((q[2u * c2 + 1u] >> 16) | (q[2u * c2 + 2u] << 16));
        precise f16vec4 va = bytes4(qa ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        precise f16vec4 vb = bytes4(qb ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        sm[o + c2] = pack8(va, vb);
    }
#elif QTYPE == 12
    uint t = (k0 >> 5) & 7u; // uniform over the workgroup
    uint tl = t & 3u;
    uint s_t = (q[1] >> (8u * tl)) & 0xFFu;
    uint s_t4 = (q[2] >> (8u * tl)) & 0xFFu;
    uint s_t8 = (q[3] >> (8u * tl)) & 0xFFu;
    uint sc = t < 4u ? (s_t & 63u) : ((s_t8 & 0xFu) | ((s_t >> 6) << 4));
    uint m = t < 4u ? (s_t4 & 63u) : ((s_t8 >> 4) | ((s_t4 >> 6) << 4));
    vec2 dm = unpackHalf2x16(q[0]);
    precise float d1 = dm.x * float(sc);
    precise float m1 = dm.y * float(m);
    uint sh = (t & 1u) * 4u;
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        precise vec4 va = d1 * nib_lo(q[4u + 2u * c2] >> sh) - m1;
        precise vec4 vb = d1 * nib_lo(q[5u + 2u * c2] >> sh) - m1;
        sm[o + c2] = pack8(f16vec4(va), f16vec4(vb));
    }
#endif
}

#if RWN == 0 && QTYPE != 1
// Any other type: element by element through the shared decoder.
void decode_generic(uint o, uint r, uint k0) {
    uint row = p.w_offset + r * p.row_bytes;
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        vec4 v[2];
        [[unroll]] for (uint e = 0; e < 8u; e++) {
            uint col = k0 + 8u * c2 + e;
            v[e >> 2][e & 3u] = dq(row + (col / QK) * QBYTES, col % QK);
        }
        sm[o + c2] = pack8(f16vec4(v[0]), f16vec4(v[1]));
    }
}
#endif


#if NCONS == 4
#define TN 4u
#else
#define TN 2u
#endif
void main() {
    nwords = qw.length() - 1u;
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    uint sgid = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    bool producer = sgid >= uint(NCONS);
    uint sg = producer ? sgid - uint(NCONS) : sgid;
    uint t = 32u * sg + lane; // producers: 0..127
    uint wr = sg & 1u, wn = sg >> 1; // consumers: 64 rows x 16 TN tokens
    uint r = min(r0 + t, p.rows - 1u);
    uint rowb = p.w_offset + r * p.row_bytes;
    uint xc = t & 3u, xt = t >> 2;
    uint xrow[4];
    [[unroll]] for (uint i = 0; i < 4u; i++) xrow[i] = min(n0 + xt + 32u * i, p.n_tok - 1u) * (p.k >> 3) + xc;
    uint srow[RW], sw[RW];
    [[unroll]] for (uint s = 0; s < RW; s++) {
        uint f = 32u * s + lane;
        srow[s] = min(r0 + 32u * sg + f / RW, p.rows - 1u);
        sw[s] = f % RW;
    }
    uint scr = SCR * 4u + sg * 32u * RWP;

    MAT_C acc[4][TN];
    [[unroll]] for (uint i = 0; i < 4u; i++) [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint nsteps = (ke - kb) / BK;
    uint klast = ke - BK;
#define KS(n_) min(kb + (n_) * BK, klast)

#if defined(NO_GLOBAL)
#define XLOAD(i_, k0_) uvec4(xrow[i_] + ((k0_) >> 3))
#elif defined(XT)
#define XLOAD(i_, k0_) x8[((gl_WorkGroupID.y * (p.k >> 5) + ((k0_) >> 5)) * 128u + xt + 32u * (i_)) * 4u + xc]
#else
#define XLOAD(i_, k0_) x8[xrow[i_] + ((k0_) >> 3)]
#endif
#define LOAD_INTO(R_, X_, k0_) { [[unroll]] for (uint s_ = 0; s_ < RW; s_++) R_[s_] = raw_word(srow[s_], sw[s_], (k0_)); \
    [[unroll]] for (uint i = 0; i < 4u; i++) X_[i] = XLOAD(i, k0_); }
#define STAGE(R_) [[unroll]] for (uint s_ = 0; s_ < RW; s_++) { \
    uint f = scr + (32u * s_ + lane) / RW * RWP + (32u * s_ + lane) % RW; sm[f >> 2][f & 3u] = R_[s_]; }
#define FINISH(b_, k0_, xv_) { subgroupMemoryBarrierShared(); subgroupBarrier(); \
    uint q_[RW]; \
    [[unroll]] for (uint w = 0; w < RW; w++) { uint f = scr + lane * RWP + w; q_[w] = sm[f >> 2][f & 3u]; } \
    decode_row(SA + (b_) * BM * LDSV + t * LDSV, q_, rowb + ((k0_) >> 5) * QBYTES, (k0_)); \
    [[unroll]] for (uint i = 0; i < 4u; i++) sm[SB + (b_) * BN * LDSV + (xt + 32u * i) * LDSV + xc] = xv_[i]; }
#define MMA(cur_) { uint abase = SA + (cur_) * BM * LDSV, bbase = SB + (cur_) * BN * LDSV; \
    [[unroll]] for (uint kk = 0; kk < 2u; kk++) { \
        MAT_B b[TN]; \
        [[unroll]] for (uint j = 0; j < TN; j++) \
            coopMatLoad(b[j], sm, bbase + (wn * 16u * TN + 16u * j) * LDSV + 2u * kk, LDSV, gl_CooperativeMatrixLayoutColumnMajor); \
        [[unroll]] for (uint i = 0; i < 4u; i++) { \
            MAT_A a; \
            coopMatLoad(a, sm, abase + (wr * 64u + 16u * i) * LDSV + 2u * kk, LDSV, gl_CooperativeMatrixLayoutRowMajor); \
            [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = coopMatMulAdd(a, b[j], acc[i][j]); \
        } } }
#ifdef NO_MMA
#undef MMA
#define MMA(cur_)
#endif
#ifdef NO_PROD
#define PROD false
#else
#define PROD producer
#endif
    // Register set R1/X1 holds the next step to stage; with PFD 3, R2/X2 the one after.
    uint R1[RW]; uvec4 X1[4];
#if PFD == 3
    uint R2[RW]; uvec4 X2[4];
#endif
    if (producer) {
        LOAD_INTO(R1, X1, KS(0u))
        STAGE(R1)
        uvec4 xs[4] = X1;
        LOAD_INTO(R1, X1, KS(1u))
#if PFD == 3
        LOAD_INTO(R2, X2, KS(2u))
#endif
        FINISH(0u, KS(0u), xs)
    }
    barrier();
    // BODY(s, R, X): stage step s + 1 from R / X into buffer (s + 1) & 1, refill R / X with
    // step s + PFD, multiply step s.
#define BODY(s_, R_, X_) { uint cur = (s_) & 1u; \
    if (PROD) { STAGE(R_) uvec4 xs[4] = X_; LOAD_INTO(R_, X_, KS((s_) + uint(PFD))) FINISH(cur ^ 1u, KS((s_) + 1u), xs) } \
    else if (!producer) MMA(cur) \
    barrier(); }
#if PFD == 3
    for (uint s = 0; s < nsteps; s += 2u) {
        BODY(s, R1, X1)
        if (s + 1u < nsteps) BODY(s + 1u, R2, X2)
    }
#else
    for (uint s = 0; s < nsteps; s++) BODY(s, R1, X1)
#endif

    uint cbase = gl_WorkGroupID.z * p.n_tok * p.rows;
    if (!producer) [[unroll]] for (uint i = 0; i < 4u; i++) {
        [[unroll]] for (uint j = 0; j < TN; j++) {
            uint tr = r0 + wr * 64u + 16u * i, tn = n0 + wn * 16u * TN + 16u * j;
            if (tr >= p.rows || tn >= p.n_tok) continue;
            if (p.accumulate == 0u && tr + 16u <= p.rows && tn + 16u <= p.n_tok) {
                coopMatStore(acc[i][j], c, cbase + tn * p.rows + tr, p.rows, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                coopMatStore(acc[i][j], sm, sg * 64u, 4u, gl_CooperativeMatrixLayoutColumnMajor);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
                    uint er = tr + (e & 15u), en = tn + (e >> 4);
                    if (er < p.rows && en < p.n_tok) {
                        float v = uintBitsToFloat(sm[sg * 64u + (e >> 2)][e & 3u]);
                        uint at = cbase + en * p.rows + er;
                        c[at] = p.accumulate != 0u ? c[at] + v : v;
                    }
                }
                subgroupMemoryBarrierShared();
                subgroupBarrier();
            }
        }
    }
}
