// Lab variant of mul_mat_cm.comp (same bindings, push constants, grid, results): the main
// loop is one basic block per step, so that the compiler can interleave the decode and
// shared-memory stores of step s + 1 with the multiplies of step s:
//   - no exits or conditional loads inside the loop: loads of step s + 2 are clamped to the
//     last step (a repeated load is harmless), rows and tokens past the matrix are clamped
//     to the last one (their products land in outputs that are never stored);
//   - Q4_K's scale selection is branch-free.
// WARPS = 8: 256 invocations, subgroups of 32 x 64 (2 x 4 accumulators), as mul_mat_cm.
// WARPS = 4: 128 invocations, subgroups of 64 x 64 (4 x 4 accumulators): a third fewer
// fragment loads per multiply, and at <= 256 registers two workgroups per SM.
// MMA_ONLY: the loop's loads and stores left out (wrong results; the multiplies' ceiling).
// Record of the 2026-11-24 (third session) experiments in benches/RESULTS.md; the 8- and
// MMA_ONLY variants were this file with `#define WARPS 8` / `#define MMA_ONLY 1` after
// #version. Run: `cm_lab benches/lab/mul_mat_cm_pipe.comp`.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#ifndef WARPS
#define WARPS 4
#endif
#define THREADS (WARPS * 32u)
layout(local_size_x = THREADS) in;
layout(constant_id = 0) const bool ROW_RASTER = false;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { uvec4 x8[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; } p;

#define BM 128u
#define BN 128u
#define BK 32u
#define LDS 10u
shared f16vec4 sa[2u * BM * LDS];
shared f16vec4 sb[2u * BN * LDS];
shared float stage[WARPS * 256u];

#if WARPS == 4
#define AM 4u   // accumulator rows (of 16) per subgroup
#define SG_ROWS 64u
#define HALVES 2u  // half-steps (16 weights) each invocation decodes
#else
#define AM 2u
#define SG_ROWS 32u
#define HALVES 1u
#endif
#define AN 4u
#define NX (BN * 4u / THREADS) // uvec4 of x per invocation per step

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

#if QTYPE == 2
#define NWORDS 2u
#elif QTYPE == 8 || QTYPE == 12
#define NWORDS 4u
#elif QTYPE == 1
#define NWORDS 8u
#else
#define NWORDS 1u
#endif
struct WRaw {
    uint q[NWORDS];
    vec2 s;
};

// Weights of row r (< rows), elements 16 h .. 16 h + 15 of the step at column k0.
WRaw load_w(uint r, uint h, uint k0) {
    WRaw w;
    w.s = vec2(0.0);
    uint row = p.w_offset + r * p.row_bytes;
#if QTYPE == 1
    uint at = (row + 2u * (k0 + 16u * h)) >> 2;
    [[unroll]] for (uint i = 0; i < 8u; i++) w.q[i] = qw[at + i];
#elif QTYPE == 2
    uint blk = row + (k0 >> 5) * QBYTES;
    w.s.x = q_f16(blk);
    LOAD_WORDS(w.q, 2u, blk + 2u + 8u * h);
#elif QTYPE == 8
    uint blk = row + (k0 >> 5) * QBYTES;
    w.s.x = q_f16(blk);
    LOAD_WORDS(w.q, 4u, blk + 2u + 16u * h);
#elif QTYPE == 12
    uint blk = row + (k0 >> 8) * QBYTES;
    uint t = (k0 >> 5) & 7u; // uniform over the workgroup
    uint b4 = blk >> 2;
    uint hd = qw[b4];
    uvec3 sw = uvec3(qw[b4 + 1u], qw[b4 + 2u], qw[b4 + 3u]); // scales[12]
    uint tl = t & 3u;
    uint s_t = (sw[tl >> 2] >> (8u * tl)) & 0xFFu;               // scales[t & 3]
    uint s_t4 = (sw[1u] >> (8u * tl)) & 0xFFu;                   // scales[4 + (t & 3)]
    uint s_t8 = (sw[2u] >> (8u * tl)) & 0xFFu;                   // scales[8 + (t & 3)]
    uint sc = t < 4u ? (s_t & 63u) : ((s_t8 & 0xFu) | ((s_t >> 6) << 4));
    uint m = t < 4u ? (s_t4 & 63u) : ((s_t8 >> 4) | ((s_t4 >> 6) << 4));
    vec2 dm = unpackHalf2x16(hd);
    precise float d1 = dm.x * float(sc);
    precise float m1 = dm.y * float(m);
    w.s = vec2(d1, m1);
    uint at = (blk + 16u + (t >> 1) * 32u + 16u * h) >> 2;
    [[unroll]] for (uint i = 0; i < 4u; i++) w.q[i] = (qw[at + i] >> ((t & 1u) * 4u)) & 0x0F0F0F0Fu;
#endif
    return w;
}

// Shared A row o (f16vec4 units, the row's start), half h, weights of column k0.
void store_w(uint o, uint r, uint h, uint k0, WRaw w) {
#if QTYPE == 1
    [[unroll]] for (uint i = 0; i < 4u; i++) sa[o + 4u * h + i] = f16vec4(unpackFloat2x16(w.q[2u * i]), unpackFloat2x16(w.q[2u * i + 1u]));
#elif QTYPE == 2
    float16_t d = float16_t(w.s.x);
    [[unroll]] for (uint i = 0; i < 2u; i++) {
        precise f16vec4 lo = bytes4(w.q[i], 0x000F000Fu, 1032.0hf) * d;
        precise f16vec4 hi = bytes4(w.q[i] >> 4, 0x000F000Fu, 1032.0hf) * d;
        sa[o + 2u * h + i] = lo;
        sa[o + 4u + 2u * h + i] = hi;
    }
#elif QTYPE == 8
    float16_t d = float16_t(w.s.x);
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        precise f16vec4 v = bytes4(w.q[i] ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        sa[o + 4u * h + i] = v;
    }
#elif QTYPE == 12
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        precise vec4 v = w.s.x * nib_lo(w.q[i]) - w.s.y;
        sa[o + 4u * h + i] = f16vec4(v);
    }
#else
    uint row = p.w_offset + r * p.row_bytes;
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        vec4 v;
        [[unroll]] for (uint e = 0; e < 4u; e++) {
            uint col = k0 + 16u * h + 4u * i + e;
            v[e] = dq(row + (col / QK) * QBYTES, col % QK);
        }
        sa[o + 4u * h + i] = f16vec4(v);
    }
#endif
}

struct Raw {
    WRaw w[HALVES];
    uvec4 x[NX];
};

void main() {
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    uint t = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
#if WARPS == 4
    uint wr = sg & 1u, wn = sg >> 1;
    uint lr = t, h0 = 0u;
#else
    uint wr = sg & 3u, wn = sg >> 2;
    uint lr = t >> 1, h0 = t & 1u;
#endif
    uint r = min(r0 + lr, p.rows - 1u);
    // x: invocation t reads 16-byte chunk t % 4 of tokens t / 4 + (THREADS / 4) i.
    uint xc = t & 3u, xt = t >> 2;
    uint xrow[NX];
    [[unroll]] for (uint i = 0; i < NX; i++) xrow[i] = min(n0 + xt + (THREADS / 4u) * i, p.n_tok - 1u) * (p.k >> 3) + xc;

    MAT_C acc[AM][AN];
    [[unroll]] for (uint i = 0; i < AM; i++) [[unroll]] for (uint j = 0; j < AN; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint nsteps = (ke - kb) / BK;
    uint klast = ke - BK;

    Raw raw;
    // Step 0 into buffer 0.
    [[unroll]] for (uint hh = 0; hh < HALVES; hh++) raw.w[hh] = load_w(r, h0 + hh, kb);
    [[unroll]] for (uint i = 0; i < NX; i++) raw.x[i] = x8[xrow[i] + (kb >> 3)];
    [[unroll]] for (uint hh = 0; hh < HALVES; hh++) store_w(lr * LDS, r, h0 + hh, kb, raw.w[hh]);
    [[unroll]] for (uint i = 0; i < NX; i++) {
        uint o = (xt + (THREADS / 4u) * i) * LDS + 2u * xc;
        sb[o] = f16vec4(unpackFloat2x16(raw.x[i].x), unpackFloat2x16(raw.x[i].y));
        sb[o + 1u] = f16vec4(unpackFloat2x16(raw.x[i].z), unpackFloat2x16(raw.x[i].w));
    }
    // Step 1 in registers.
    uint k1 = min(kb + BK, klast);
    [[unroll]] for (uint hh = 0; hh < HALVES; hh++) raw.w[hh] = load_w(r, h0 + hh, k1);
    [[unroll]] for (uint i = 0; i < NX; i++) raw.x[i] = x8[xrow[i] + (k1 >> 3)];
    barrier();

    for (uint s = 0; s < nsteps; s++) {
        uint cur = s & 1u, nxt = cur ^ 1u;
        uint kn = min(kb + (s + 1u) * BK, klast); // step s + 1, held in raw
#ifndef MMA_ONLY
        // Step s + 1 into the other buffer (last read before the previous barrier).
        [[unroll]] for (uint hh = 0; hh < HALVES; hh++) store_w(nxt * BM * LDS + lr * LDS, r, h0 + hh, kn, raw.w[hh]);
        [[unroll]] for (uint i = 0; i < NX; i++) {
            uint o = nxt * BN * LDS + (xt + (THREADS / 4u) * i) * LDS + 2u * xc;
            sb[o] = f16vec4(unpackFloat2x16(raw.x[i].x), unpackFloat2x16(raw.x[i].y));
            sb[o + 1u] = f16vec4(unpackFloat2x16(raw.x[i].z), unpackFloat2x16(raw.x[i].w));
        }
        // Loads of step s + 2.
        uint k2 = min(kb + (s + 2u) * BK, klast);
        [[unroll]] for (uint hh = 0; hh < HALVES; hh++) raw.w[hh] = load_w(r, h0 + hh, k2);
        [[unroll]] for (uint i = 0; i < NX; i++) raw.x[i] = x8[xrow[i] + (k2 >> 3)];
#endif
        // Multiplies of step s.
        uint abase = cur * BM * LDS, bbase = cur * BN * LDS;
        [[unroll]] for (uint kk = 0; kk < BK / 4u; kk += 4u) {
            MAT_B b[AN];
            [[unroll]] for (uint j = 0; j < AN; j++)
                coopMatLoad(b[j], sb, bbase + (wn * 64u + 16u * j) * LDS + kk, LDS, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0; i < AM; i++) {
                MAT_A a;
                coopMatLoad(a, sa, abase + (wr * SG_ROWS + 16u * i) * LDS + kk, LDS, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint j = 0; j < AN; j++) acc[i][j] = coopMatMulAdd(a, b[j], acc[i][j]);
            }
        }
        barrier();
    }

    uint lane = gl_SubgroupInvocationID;
    uint cbase = gl_WorkGroupID.z * p.n_tok * p.rows;
    [[unroll]] for (uint i = 0; i < AM; i++) {
        [[unroll]] for (uint j = 0; j < AN; j++) {
            uint tr = r0 + wr * SG_ROWS + 16u * i, tn = n0 + wn * 64u + 16u * j;
            if (tr >= p.rows || tn >= p.n_tok) continue;
            if (p.accumulate == 0u && tr + 16u <= p.rows && tn + 16u <= p.n_tok) {
                coopMatStore(acc[i][j], c, cbase + tn * p.rows + tr, p.rows, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                coopMatStore(acc[i][j], stage, sg * 256u, 16u, gl_CooperativeMatrixLayoutColumnMajor);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
                    uint er = tr + (e & 15u), en = tn + (e >> 4);
                    if (er < p.rows && en < p.n_tok) {
                        float v = stage[sg * 256u + e];
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
