// Lab: a 256-row x 128-token tile with BK = 16 steps (Q4_0, Q8_0, Q4_K), so each x byte read
// from L2 serves twice the rows of mul_mat_cm.comp's 128-row tile. 8 subgroups of 64 x 64
// (4 x 4 accumulators), each decoding 32 rows; shared rows of 16 halves padded to 48 bytes
// (A 2 x 256, B 2 x 128: 36 KiB) plus the per-subgroup scratch. A block's bytes are read
// once per two steps (low then high half of its weights; Q4_K: each step's header and
// quant words). X2: x read two steps per load (64-byte runs per token). Interface: mul_mat_cm.comp's
// (same bindings and push constants); grid x = ceil(rows / 256), y = ceil(n_tok / 128),
// z = ceil(k / k_chunk) with k_chunk a multiple of 32. Run: `cm_lab FILE@256x128`.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = 256) in;
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
#elif QTYPE == 12
// Q4_K: per step the 4 header words and the 4 quant words of the step's 16 weights.
#define RWN 8
#define RWP 9u
#define PER_STEP 1
#else
#error "mm_t256: Q4_0, Q8_0 and Q4_K only"
#endif
#define RW uint(RWN)
shared uvec4 sm[SCR + 64u * RWP];

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
#ifdef PER_STEP
    uint blk = p.w_offset + r * p.row_bytes + (k0 >> 8) * QBYTES;
    uint a = w < 4u ? (blk >> 2) + w : ((blk + 16u + ((k0 >> 6) & 3u) * 32u + ((k0 >> 4) & 1u) * 16u) >> 2) + (w - 4u);
#else
    uint a = ((p.w_offset + r * p.row_bytes + (k0 >> 5) * QBYTES) >> 2) + w;
#endif
    return qw[min(a, nwords)];
}

vec4 nib_lo(uint u) { uint v = u & 0x0F0F0F0Fu; return vec4(v & 0xFFu, (v >> 8) & 0xFFu, (v >> 16) & 0xFFu, v >> 24); }

#ifdef PER_STEP
// Q4_K: the step at column k0 (16 weights) from q into shared row o.
void decode_step(uint o, uint q[RW], uint k0) {
    uint t = (k0 >> 5) & 7u;
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
    [[unroll]] for (uint c2 = 0; c2 < 2u; c2++) {
        precise vec4 va = d1 * nib_lo(q[4u + 2u * c2] >> sh) - m1;
        precise vec4 vb = d1 * nib_lo(q[5u + 2u * c2] >> sh) - m1;
        sm[o + c2] = pack8(f16vec4(va), f16vec4(vb));
    }
}
#endif

#ifndef PER_STEP
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
#endif

void main() {
    nwords = qw.length() - 1u;
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    uint t = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint wr = sg & 3u, wn = sg >> 2;
    uint r = min(r0 + t, p.rows - 1u);
    uint rowb = p.w_offset + r * p.row_bytes;
#ifndef X2
    // x: invocation t copies 16-byte chunk t % 2 of token t / 2 each step.
    uint xc = t & 1u, xt = t >> 1;
    uint xrow = min(n0 + xt, p.n_tok - 1u) * (p.k >> 3) + xc;
#else
    // x, two steps per load: invocation t reads 16-byte chunk t % 4 of a block's 64 bytes
    // of tokens t / 4 and t / 4 + 64 (chunks 0-1: the even step, 2-3: the odd one).
    uint xc = t & 3u, xt = t >> 2;
    bool xodd = xc >= 2u;
    uint xrow0 = min(n0 + xt, p.n_tok - 1u) * (p.k >> 3) + xc;
    uint xrow1 = min(n0 + xt + 64u, p.n_tok - 1u) * (p.k >> 3) + xc;
#endif
    uint srow[RW], sw[RW];
    [[unroll]] for (uint s = 0; s < RW; s++) {
        uint f = 32u * s + lane;
        srow[s] = min(r0 + 32u * sg + f / RW, p.rows - 1u);
        sw[s] = f % RW;
    }
    uint scr = SCR * 4u + sg * 32u * RWP;

    MAT_C acc[4][4];
    [[unroll]] for (uint i = 0; i < 4u; i++) [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint nblocks = (ke - kb) >> 5;
    uint blast = ke - 32u;   // the last block's first column
    uint klast = ke - 16u;   // the last step's first column
#define KB(m_) min(kb + 32u * (m_), blast)
#define KS(s_) min(kb + 16u * (s_), klast)

    uint raw[RW], q[RW];
#ifndef X2
    uvec4 xr;
#else
    uvec4 xa[2];
#define LOAD_XA(kblk_) { xa[0] = x8[xrow0 + ((kblk_) >> 3)]; xa[1] = x8[xrow1 + ((kblk_) >> 3)]; }
#define STORE_XA(b_) { sm[SB + (b_) * BN * LDSV + xt * LDSV + (xc & 1u)] = xa[0]; \
    sm[SB + (b_) * BN * LDSV + (xt + 64u) * LDSV + (xc & 1u)] = xa[1]; }
#endif
#define LOAD_RAW(k0_) [[unroll]] for (uint s_ = 0; s_ < RW; s_++) raw[s_] = raw_word(srow[s_], sw[s_], (k0_));
#define STAGE_RAW() [[unroll]] for (uint s_ = 0; s_ < RW; s_++) { \
    uint f = scr + (32u * s_ + lane) / RW * RWP + (32u * s_ + lane) % RW; sm[f >> 2][f & 3u] = raw[s_]; }
#define READ_Q() { subgroupMemoryBarrierShared(); subgroupBarrier(); \
    [[unroll]] for (uint w = 0; w < RW; w++) { uint f = scr + lane * RWP + w; q[w] = sm[f >> 2][f & 3u]; } }
#define LOAD_X(k0_) xr = x8[xrow + ((k0_) >> 3)];
#define STORE_X(b_, v_) sm[SB + (b_) * BN * LDSV + xt * LDSV + xc] = (v_);
#define MULTIPLY(b_) { uint abase = SA + (b_) * BM * LDSV, bbase = SB + (b_) * BN * LDSV; \
    MAT_B bm[4]; \
    [[unroll]] for (uint j = 0; j < 4u; j++) \
        coopMatLoad(bm[j], sm, bbase + (wn * 64u + 16u * j) * LDSV, LDSV, gl_CooperativeMatrixLayoutColumnMajor); \
    [[unroll]] for (uint i = 0; i < 4u; i++) { \
        MAT_A a; \
        coopMatLoad(a, sm, abase + (wr * 64u + 16u * i) * LDSV, LDSV, gl_CooperativeMatrixLayoutRowMajor); \
        [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = coopMatMulAdd(a, bm[j], acc[i][j]); \
    } }

#ifdef PER_STEP
    // raw holds the step to stage next; every step is staged and read back.
#define PRODUCE(b_, s_) { STAGE_RAW() LOAD_RAW(KS((s_) + 2u)) READ_Q() decode_step(SA + (b_) * BM * LDSV + t * LDSV, q, KS((s_) + 1u)); }
    LOAD_RAW(KS(0u))
    STAGE_RAW()
    READ_Q()
    LOAD_RAW(KS(1u))
    decode_step(SA + t * LDSV, q, KS(0u));
#else
    LOAD_RAW(KB(0u))
    STAGE_RAW()
    READ_Q()
    LOAD_RAW(KB(1u))
    decode_half(SA + t * LDSV, q, rowb + (KB(0u) >> 5) * QBYTES, 0u);
#endif
#ifndef X2
    LOAD_X(KS(0u))
    STORE_X(0u, xr)
    LOAD_X(KS(1u))
#else
    LOAD_XA(KB(0u))
    if (!xodd) {
        STORE_XA(0u)
        LOAD_XA(KB(1u))
    }
#endif
    barrier();

    for (uint m = 0; m < nblocks; m++) {
        // Step 2m (buffer 0) multiplies; step 2m + 1 (block m's high half) goes to buffer 1.
        {
#ifndef X2
            uvec4 xs = xr;
            LOAD_X(KS(2u * m + 2u))
#endif
#ifdef PER_STEP
            PRODUCE(1u, 2u * m)
#else
            decode_half(SA + BM * LDSV + t * LDSV, q, rowb + (KB(m) >> 5) * QBYTES, 1u);
#endif
#ifndef X2
            STORE_X(1u, xs)
#else
            if (xodd) {
                STORE_XA(1u)
                LOAD_XA(KB(m + 1u))
            }
#endif
            MULTIPLY(0u)
            barrier();
        }
        // Step 2m + 1 (buffer 1) multiplies; step 2m + 2 (block m + 1's low half) goes to
        // buffer 0; block m + 2's loads issue.
        {
#ifndef X2
            uvec4 xs = xr;
            LOAD_X(KS(2u * m + 3u))
#endif
#ifdef PER_STEP
            PRODUCE(0u, 2u * m + 1u)
#else
            STAGE_RAW()
            LOAD_RAW(KB(m + 2u))
            READ_Q()
            decode_half(SA + t * LDSV, q, rowb + (KB(m + 1u) >> 5) * QBYTES, 0u);
#endif
#ifndef X2
            STORE_X(0u, xs)
#else
            if (!xodd) {
                STORE_XA(0u)
                LOAD_XA(KB(m + 2u))
            }
#endif
            MULTIPLY(1u)
            barrier();
        }
    }

    uint cbase = gl_WorkGroupID.z * p.n_tok * p.rows;
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        [[unroll]] for (uint j = 0; j < 4u; j++) {
            uint tr = r0 + wr * 64u + 16u * i, tn = n0 + wn * 64u + 16u * j;
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
