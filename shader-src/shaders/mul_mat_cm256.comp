//! variant q8_0 QTYPE=8
//! target vulkan1.3
// Quantized mat-mat for prompts on tensor cores with a 256-row tile (Q8_0):
//   C[n, r] (+)= sum_c X[n, c] * W[r, c]   for n < n_tok, r < rows,
// the interface of mul_mat_cm.comp (bindings 0 = W raw GGUF blocks, 1 = X f16 [n_tok, k]
// as uvec4, 2 = C f32 [n_tok, rows]; push constants w_offset, row_bytes, k, rows, n_tok,
// accumulate, k_chunk, ldc; specialization constant 0 = ROW_RASTER; split-K partials at
// C + z n_tok ldc) with the tile 256 rows x 128 tokens: every x byte read from L2
// serves twice the rows of mul_mat_cm.comp's 128-row tile, and on the H100 x was the bulk
// of the L2 traffic that bounded that kernel (benches/RESULTS.md).
//
// One workgroup of 256 invocations = 8 subgroups of 32, each multiplying a 64 x 64 part
// (4 x 4 f32 accumulators of 16x16x16 f16 products). To fit double-buffered 256 + 128
// rows in NVIDIA's 48 KiB of shared memory a step is BK = 16 columns: shared rows of 16
// halves padded to 48 bytes (an odd number of 16-byte units: the 8 rows of a fragment
// load's phase fall in distinct banks), A 2 x 256 rows, B 2 x 128 rows (36 KiB), plus
// each subgroup's scratch. A block (32 columns) spans two steps: its bytes are read once,
// coalesced by the subgroup (RW = 9 words per row: consecutive invocations on
// consecutive words), passed to their rows through the scratch (odd row stride RWP),
// kept in registers, and each invocation decodes its row's low 16 weights in the first
// step and the high 16 in the second. x: each invocation copies one 16-byte chunk (half a
// token row of the step) per step. The loop body covers one block (two steps, one barrier
// each); the loads of block m + 2 and x of step s + 2 are in flight while step s
// multiplies; loads past the end are clamped to the last block (harmless re-reads); edge
// rows and tokens are clamped (their products land in outputs that are never stored).
// Weights are the f16 rounding of their exact values, as in mul_mat_cm.comp (the packed
// q * d product is exact before one rounding); results equal
// sum(f16(w) * x) accumulated in f32, to the bit the same as mul_mat_cm.comp's without
// split-K.
// Specialization constants 4, 5 and 17, binding 12: the gated-product epilogue of
// include/mul_mat_glu.glsl (each tile's rows 0-127 gate, 128-255 up; GLU_STORE of
// include/mul_mat_cm.glsl).
// Specialization constants 6-11, bindings 3-6 and push constant pos0: the rotary
// embedding and KV-cache append of include/mul_mat_rope.glsl (ROPE_STORE); spec constants
// 14-16 and bindings 9-11 its bias and head norms.
// Specialization constant 13, bindings 7 and 8 and push constant x_slots: grouped by
// expert (include/mul_mat_ids.glsl).
// Grid: x = ceil(rows / 256), y = ceil(n_tok / 128), z = ceil(k / k_chunk) (k_chunk a
// multiple of 32). Requires subgroup size 32 and k % 32 == 0. Block layout: ggml-common.h
// (block_q8_0). On the H100 a Q4_0 variant ran no faster than mul_mat_cm.comp's
// warp-specialized one (benches/RESULTS.md), so only Q8_0 is built.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const bool ROW_RASTER = false;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { uvec4 x8[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 2) buffer C16 { uint c16[]; }; // MM_GLU_F16's view of C
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; uint pos0; uint x_slots; } p;

#define BM 256u
#define BN 128u
#define LDSV 3u
#define SA 0u
#define SB (2u * BM * LDSV)
#define SCR (SB + 2u * BN * LDSV)
#if QTYPE == 8
#define RWN 9
#define RWP 9u
#else
#error "mul_mat_cm256: Q8_0 only"
#endif
#define RW uint(RWN)
shared uvec4 sm[SCR + 64u * RWP]; // SCR uvec4 + 8 subgroups x 32 rows x RWP words

#define MM_WRN 4u // row groups of subgroups (mm_staged)
#include "mul_mat_ids.glsl"
#include "mul_mat_cm.glsl"
#include "mul_mat_glu.glsl"
#include "mul_mat_rope.glsl"

uint nwords;

uint raw_word(uint r, uint w, uint k0) {
    uint a = ((mm_w_offset + r * p.row_bytes + (k0 >> 5) * QBYTES) >> 2) + w;
    return qw[min(a, nwords)];
}


// Weights 16 h .. 16 h + 15 of the block in q (at byte blk) into shared row o (2 uvec4).
void decode_half(uint o, uint q[RW], uint blk, uint h) {
    bool odd = (blk & 2u) != 0u;
    float16_t d = float16_t(unpackHalf2x16(odd ? q[0] >> 16 : q[0]).x);
    uint qh[5];
    [[unroll]] for (uint j = 0; j < 5u; j++) qh[j] = h != 0u ? q[j + 4u] : q[j];
    [[unroll]] for (uint c2 = 0; c2 < 2u; c2++) {
        uint qa = odd ? qh[2u * c2 + 1u] : ((qh[2u * c2] >> 16) | (qh[2u * c2 + 1u] << 16));
        uint qb = odd ? qh[2u * c2 + 2u] : ((qh[2u * c2 + 1u] >> 16) | (qh[2u * c2 + 2u] << 16));
        precise f16vec4 va = bytes4(qa ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        precise f16vec4 vb = bytes4(qb ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        sm[o + c2] = pack8(va, vb);
    }
}

void main() {
    nwords = qw.length() - 1u;
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    if (!mm_ids_begin(n0)) return;
    uint t = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint wr = sg & 3u, wn = sg >> 2;
    uint r = mm_tile_row(r0, t);
    uint rowb = mm_w_offset + r * p.row_bytes;
    // x: invocation t copies 16-byte chunk t % 2 of token t / 2 each step.
    uint xc = t & 1u, xt = t >> 1;
    uint xrow = mm_x_row(min(n0 + xt, mm_n_tok - 1u)) * (p.k >> 3) + xc;
    uint srow[RW], sw[RW];
    [[unroll]] for (uint s = 0; s < RW; s++) {
        uint f = 32u * s + lane;
        srow[s] = mm_tile_row(r0, 32u * sg + f / RW);
        sw[s] = f % RW;
    }
    uint scr = SCR * 4u + sg * 32u * RWP;

    MAT_C acc[4][4];
    [[unroll]] for (uint i = 0; i < 4u; i++) [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = mm_split_z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint nblocks = (ke - kb) >> 5;
    uint blast = ke - 32u;   // the last block's first column
    uint klast = ke - 16u;   // the last step's first column
#define KB(m_) min(kb + 32u * (m_), blast)
#define KS(s_) min(kb + 16u * (s_), klast)

    uint raw[RW], q[RW];
    uvec4 xr;
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

    LOAD_RAW(KB(0u))
    STAGE_RAW()
    READ_Q()
    LOAD_RAW(KB(1u))
    decode_half(SA + t * LDSV, q, rowb + (KB(0u) >> 5) * QBYTES, 0u);
    LOAD_X(KS(0u))
    STORE_X(0u, xr)
    LOAD_X(KS(1u))
    barrier();

    for (uint m = 0; m < nblocks; m++) {
        // Step 2m (buffer 0) multiplies; step 2m + 1 (block m's high half) goes to buffer 1.
        {
            uvec4 xs = xr;
            LOAD_X(KS(2u * m + 2u))
            decode_half(SA + BM * LDSV + t * LDSV, q, rowb + (KB(m) >> 5) * QBYTES, 1u);
            STORE_X(1u, xs)
            MULTIPLY(0u)
            barrier();
        }
        // Step 2m + 1 (buffer 1) multiplies; step 2m + 2 (block m + 1's low half) goes to
        // buffer 0; block m + 2's loads issue.
        {
            uvec4 xs = xr;
            LOAD_X(KS(2u * m + 3u))
            STAGE_RAW()
            LOAD_RAW(KB(m + 2u))
            READ_Q()
            decode_half(SA + t * LDSV, q, rowb + (KB(m + 1u) >> 5) * QBYTES, 0u);
            STORE_X(0u, xs)
            MULTIPLY(1u)
            barrier();
        }
    }

    if (MM_GLU != 0u) {
        GLU_STORE(8u, 4u, true, sg)
        return;
    }
    if (MM_ROPE != 0u) {
        ROPE_STORE(8u, true, sg)
        return;
    }
    uint cbase = mm_split_z * p.n_tok * p.ldc;
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        [[unroll]] for (uint j = 0; j < 4u; j++) {
            uint tr = r0 + wr * 64u + 16u * i, tn = n0 + wn * 64u + 16u * j;
            if (tr >= p.rows || tn >= mm_n_tok) continue;
            STORE_TILE(acc[i][j], tr, tn)
        }
    }
}
