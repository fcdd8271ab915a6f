// Lab: a warp-specialized 256-row x 128-token tile (Q4_0, Q8_0). 8 multiplying subgroups
// of 64 x 64 (4 x 4 f32 accumulators each: two per SM scheduler, where mul_mat_cm.comp's
// warp-specialized kernel has one) and NP producing subgroups (default 4) that read the
// weights coalesced, decode them to f16 and copy x, one BK = 16 step ahead of the
// multipliers. Shared memory as mm_t256.comp (rows of 16 halves padded to 48 bytes,
// A 2 x 256, B 2 x 128: 36 KiB) plus a scratch of 256 x RWP words for the raw block words.
// Variants: NP (producing subgroups, 4 or 2) and NO_PREFETCH (producers keep nothing in
// registers across a barrier), each set by a #define line after #version.
// Interface: mul_mat_cm.comp's; grid x = ceil(rows / 256), y = ceil(n_tok / 128),
// z = ceil(k / k_chunk), k_chunk a multiple of 32. Run: `cm_lab FILE@256x128[x2]`.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#ifndef NP
#define NP 4
#endif
layout(local_size_x = 256 + 32 * NP) in;
layout(constant_id = 0) const bool ROW_RASTER = false;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { uvec4 x8[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; } p;

#define BM 256u
#define BN 128u
#define LDSV 3u
#define SA 0u
#define SB (2u * BM * LDSV)
#define SCR (SB + 2u * BN * LDSV)
#if QTYPE == 2
#define RWN 5
#define RWP 5u
#elif QTYPE == 8
#define RWN 9
#define RWP 9u
#else
#error "mm_ws256: Q4_0 and Q8_0 only"
#endif
#define RW uint(RWN)
#define BAND (BM / NP)       // rows per producing subgroup
#define RPL (BAND / 32u)     // rows per producing invocation
#define XPT (8u / NP)        // x uvec4 per producing invocation and step
shared uvec4 sm[SCR + (BM * RWP) / 4u];

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

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

uint raw_word(uint r, uint w, uint k0) {
    uint a = ((p.w_offset + r * p.row_bytes + (k0 >> 5) * QBYTES) >> 2) + w;
    return qw[min(a, nwords)];
}

// Weights 16 h .. 16 h + 15 of the block in q (at byte blk) into shared row o (2 uvec4).
void decode_half(uint o, uint q[RW], uint blk, uint h) {
    bool odd = (blk & 2u) != 0u;
    float16_t d = float16_t(unpackHalf2x16(odd ? q[0] >> 16 : q[0]).x);
#if QTYPE == 2
    uint sh = 4u * h;
    uint qs[4];
    [[unroll]] for (uint j = 0; j < 4u; j++) qs[j] = (odd ? q[j + 1u] : ((q[j] >> 16) | (q[j + 1u] << 16))) >> sh;
    precise f16vec4 v0 = bytes4(qs[0], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 v1 = bytes4(qs[1], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 v2 = bytes4(qs[2], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 v3 = bytes4(qs[3], 0x000F000Fu, 1032.0hf) * d;
    sm[o] = pack8(v0, v1);
    sm[o + 1u] = pack8(v2, v3);
#else
    uint qh[5];
    [[unroll]] for (uint j = 0; j < 5u; j++) qh[j] = h != 0u ? q[j + 4u] : q[j];
    [[unroll]] for (uint c2 = 0; c2 < 2u; c2++) {
        uint qa = odd ? qh[2u * c2 + 1u] : ((qh[2u * c2] >> 16) | (qh[2u * c2 + 1u] << 16));
        uint qb = odd ? qh[2u * c2 + 2u] : ((qh[2u * c2 + 1u] >> 16) | (qh[2u * c2 + 2u] << 16));
        precise f16vec4 va = bytes4(qa ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        precise f16vec4 vb = bytes4(qb ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        sm[o + c2] = pack8(va, vb);
    }
#endif
}

void main() {
    nwords = qw.length() - 1u;
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    bool multiply = sg < 8u;
    // Multipliers: row band wr, token band wn. Producers: subgroup ps owns rows
    // BAND ps .. BAND (ps + 1) - 1 of the tile (invocation lane: rows BAND ps + lane + 32 j).
    uint wr = sg & 3u, wn = (sg >> 2) & 1u;
    uint ps = multiply ? 0u : sg - 8u;
    uint pt = 32u * ps + lane;
    uint rowb[RPL];
    [[unroll]] for (uint j = 0; j < RPL; j++) rowb[j] = p.w_offset + min(r0 + BAND * ps + lane + 32u * j, p.rows - 1u) * p.row_bytes;
    // x: producing invocation pt copies 16-byte chunk pt % 2 of tokens pt / 2 + 16 NP i.
    uint xc = pt & 1u, xt = pt >> 1;
    uint xrow[XPT];
    [[unroll]] for (uint i = 0; i < XPT; i++) xrow[i] = min(n0 + xt + 16u * NP * i, p.n_tok - 1u) * (p.k >> 3) + xc;
    uint scr = SCR * 4u + ps * BAND * RWP;

    MAT_C acc[4][4];
    [[unroll]] for (uint i = 0; i < 4u; i++) [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint nblocks = (ke - kb) >> 5;
    uint blast = ke - 32u;
    uint klast = ke - 16u;
#define KB(m_) min(kb + 32u * (m_), blast)
#define KS(s_) min(kb + 16u * (s_), klast)

    uint raw[RPL * RW], q[RPL][RW];
    uvec4 xr[XPT];
    // Slot s of lane L: word (32 s + L) % RW of band row (32 s + L) / RW.
#define SROW(s_) min(r0 + BAND * ps + (32u * (s_) + lane) / RW, p.rows - 1u)
#define LOAD_RAW(k0_) [[unroll]] for (uint s_ = 0; s_ < RPL * RW; s_++) raw[s_] = raw_word(SROW(s_), (32u * s_ + lane) % RW, (k0_));
#define STAGE_RAW() [[unroll]] for (uint s_ = 0; s_ < RPL * RW; s_++) { \
    uint f = scr + (32u * s_ + lane) / RW * RWP + (32u * s_ + lane) % RW; sm[f >> 2][f & 3u] = raw[s_]; }
#define READ_Q() { subgroupMemoryBarrierShared(); subgroupBarrier(); \
    [[unroll]] for (uint j = 0; j < RPL; j++) [[unroll]] for (uint w = 0; w < RW; w++) { \
        uint f = scr + (lane + 32u * j) * RWP + w; q[j][w] = sm[f >> 2][f & 3u]; } }
#define DECODE(b_, m_, h_) [[unroll]] for (uint j = 0; j < RPL; j++) \
    decode_half(SA + (b_) * BM * LDSV + (BAND * ps + lane + 32u * j) * LDSV, q[j], rowb[j] + (KB(m_) >> 5) * QBYTES, (h_));
#define LOAD_X(k0_) [[unroll]] for (uint i = 0; i < XPT; i++) xr[i] = x8[xrow[i] + ((k0_) >> 3)];
#define STORE_X(b_, v_) [[unroll]] for (uint i = 0; i < XPT; i++) sm[SB + (b_) * BN * LDSV + (xt + 16u * NP * i) * LDSV + xc] = (v_)[i];
#define MULTIPLY(b_) { uint abase = SA + (b_) * BM * LDSV, bbase = SB + (b_) * BN * LDSV; \
    MAT_B bm[4]; \
    [[unroll]] for (uint j = 0; j < 4u; j++) \
        coopMatLoad(bm[j], sm, bbase + (wn * 64u + 16u * j) * LDSV, LDSV, gl_CooperativeMatrixLayoutColumnMajor); \
    [[unroll]] for (uint i = 0; i < 4u; i++) { \
        MAT_A a; \
        coopMatLoad(a, sm, abase + (wr * 64u + 16u * i) * LDSV, LDSV, gl_CooperativeMatrixLayoutRowMajor); \
        [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = coopMatMulAdd(a, bm[j], acc[i][j]); \
    } }

#ifdef NO_PREFETCH
    // No prefetch across barriers: each producing step loads, decodes and stores within
    // the multiply of the step before (only addresses and accumulators stay live).
#define PRODUCE(b_, s_) { uint ks_ = KS(s_); LOAD_RAW(ks_ & ~31u) LOAD_X(ks_) STAGE_RAW() READ_Q() \
    DECODE(b_, ((ks_ - kb) >> 5), ((ks_ >> 4) & 1u)) STORE_X(b_, xr) }
    if (!multiply) PRODUCE(0u, 0u)
    barrier();
    uint nsteps = (ke - kb) >> 4;
    for (uint s = 0; s < nsteps; s++) {
        uint cur = s & 1u;
        if (multiply) {
            MULTIPLY(cur)
        } else {
            PRODUCE(cur ^ 1u, s + 1u)
        }
        barrier();
    }
#else
    if (!multiply) {
        LOAD_RAW(KB(0u))
        STAGE_RAW()
        READ_Q()
        LOAD_RAW(KB(1u))
        DECODE(0u, 0u, 0u)
        LOAD_X(KS(0u))
        STORE_X(0u, xr)
        LOAD_X(KS(1u))
    }
    barrier();

    for (uint m = 0; m < nblocks; m++) {
        // Step 2m (buffer 0) multiplies; block m's high half and x of step 2m + 1 go to buffer 1.
        if (multiply) {
            MULTIPLY(0u)
        } else {
            uvec4 xs[XPT] = xr;
            LOAD_X(KS(2u * m + 2u))
            DECODE(1u, m, 1u)
            STORE_X(1u, xs)
        }
        barrier();
        // Step 2m + 1 (buffer 1) multiplies; block m + 1's low half goes to buffer 0 and
        // block m + 2's loads issue.
        if (multiply) {
            MULTIPLY(1u)
        } else {
            uvec4 xs[XPT] = xr;
            LOAD_X(KS(2u * m + 3u))
            STAGE_RAW()
            LOAD_RAW(KB(m + 2u))
            READ_Q()
            DECODE(0u, m + 1u, 0u)
            STORE_X(0u, xs)
        }
        barrier();
    }
#endif

    uint cbase = gl_WorkGroupID.z * p.n_tok * p.rows;
    if (multiply) [[unroll]] for (uint i = 0; i < 4u; i++) {
        [[unroll]] for (uint j = 0; j < 4u; j++) {
            uint tr = r0 + wr * 64u + 16u * i, tn = n0 + wn * 64u + 16u * j;
            if (tr >= p.rows || tn >= p.n_tok) continue;
            if (p.accumulate == 0u && tr + 16u <= p.rows && tn + 16u <= p.n_tok) {
                coopMatStore(acc[i][j], c, cbase + tn * p.rows + tr, p.rows, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                coopMatStore(acc[i][j], sm, sg * 64u, 4u, gl_CooperativeMatrixLayoutColumnMajor);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                for (uint e = lane; e < 256u; e += 32u) {
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
