//! variant q4_0 QTYPE=2
//! variant q8_0 QTYPE=8
//! target vulkan1.3
// Quantized mat-mat for prompts on int8 tensor cores (VK_KHR_cooperative_matrix,
// 16x16x32 s8 x s8 + s32 and 16x16x16 f16 x f16 + f32 subgroup matrices), Q4_0 and Q8_0
// weights times activations quantized to Q8_1:
//   C[n, r] (+)= sum over 32-blocks b of d_w[r, b] * d_x[n, b] * sum_i q_w[r, 32 b + i] * q_x[n, 32 b + i]
// for n < n_tok, r < rows: ggml's vec_dot_q4_0_q8_1 / vec_dot_q8_0_q8_1 for every pair
// (ggml-quants.c; Q4_0 quants are nibble - 8). X is Q8_1 blocks [n_tok, k / 32] (36
// bytes: f16 d, f16 s, 32 x i8; s is not needed for these types); W raw GGUF blocks (row r
// at w_offset + r * row_bytes); C f32 [n_tok, rows]. k must be a multiple of 32.
//
// One workgroup of 8 subgroups of 32 computes a 128 rows x 128 tokens tile, a step per
// block (BK = 32): the int8 quants of W and X go to shared memory as they are (Q4_0
// nibbles widened to signed bytes), their f16 scales beside them, double-buffered with
// one barrier per step and the next step's loads in registers during the multiplies. Per
// step each subgroup's 2 x 4 output tiles of 16 x 16 take one int8 product
// Q = W_q X_qᵀ (exact int32) and the block's scales as a second product
// S = D_w 1 D_xᵀ = 16 d_w[r] d_x[n] (f16 operands, exact in f32: both scale matrices
// are loaded with stride 0, so each repeats its 16 scales over all 16 columns / rows),
// then acc += S * f32(Q) component-wise (the same element layout for accumulators of one
// type), one rounding per block as ggml's sumi * d_w * d_x. The result is acc / 16 (exact).
//
// Split-K as mul_mat_cm.comp: workgroup z sums k in [z k_chunk, min(k, (z + 1) k_chunk))
// into C + z n_tok rows. Bindings: 0 = W, 1 = XQ (Q8_1 words), 2 = C. Push constants:
// w_offset, row_bytes, k, rows, n_tok, accumulate, k_chunk. Specialization constant 0
// (ROW_RASTER) as mul_mat_cm.comp. Grid: x = ceil(rows / 128), y = ceil(n_tok / 128),
// z = ceil(k / k_chunk). Subgroups of 32.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle_relative : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const bool ROW_RASTER = false;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer XQ { uint xq[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; } p;

#define BM 128u
#define BN 128u
// A tile row in words: 32 quants (8 words) + 4 of padding (48-byte rows: the 8 rows of a
// 16-byte shared access phase fall in distinct banks).
#define LDQ 12u
// Words per buffer: W quants | X quants | 128 f16 d_w | 128 f16 d_x.
#define QW_WORDS (BM * LDQ)
#define BUF_WORDS (2u * QW_WORDS + 128u)
shared uint sq[2u * BUF_WORDS];
shared float stage[8u * 256u]; // one 16 x 16 f32 tile per subgroup, for edge stores

#define MAT_QA coopmat<int8_t, gl_ScopeSubgroup, 16, 32, gl_MatrixUseA>
#define MAT_QB coopmat<int8_t, gl_ScopeSubgroup, 32, 16, gl_MatrixUseB>
#define MAT_QC coopmat<int32_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MAT_SA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_SB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

// This invocation's share of one step: half h of row r's block (16 quants as 4 words,
// for Q4_0 elements 8h..8h+7 and 16+8h..16+8h+7) and its scale (bits of an f16), and
// half h of token n's Q8_1 block.
struct Raw { uvec4 w; uint dw; uvec4 x; uint dx; };

Raw load_step(uint r, uint n, uint h, uint k0) {
    Raw s;
    s.w = uvec4(0u);
    s.dw = 0u;
    s.x = uvec4(0u);
    s.dx = 0u;
    if (r < p.rows) {
        uint blk = p.w_offset + r * p.row_bytes + (k0 >> 5) * QBYTES;
        s.dw = q_u16(blk);
#if QTYPE == 2
        uint q[2];
        LOAD_WORDS(q, 2u, blk + 2u + 8u * h);
        // nibble - 8 as a signed byte: (n ^ 8) is its 4-bit two's complement; extend bit 3.
        uvec2 lo = (uvec2(q[0], q[1]) & 0x0F0F0F0Fu) ^ 0x08080808u;
        uvec2 hi = ((uvec2(q[0], q[1]) >> 4) & 0x0F0F0F0Fu) ^ 0x08080808u;
        lo |= ((lo >> 3) & 0x01010101u) * 0xF0u;
        hi |= ((hi >> 3) & 0x01010101u) * 0xF0u;
        s.w = uvec4(lo, hi);
#else
        uint q[4];
        LOAD_WORDS(q, 4u, blk + 2u + 16u * h);
        s.w = uvec4(q[0], q[1], q[2], q[3]);
#endif
    }
    if (n < p.n_tok) {
        uint xb = (n * (p.k >> 5) + (k0 >> 5)) * 9u;
        s.dx = xq[xb] & 0xFFFFu;
        s.x = uvec4(xq[xb + 1u + 4u * h], xq[xb + 2u + 4u * h], xq[xb + 3u + 4u * h], xq[xb + 4u + 4u * h]);
    }
    return s;
}

void main() {
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    uint t = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint wr = sg & 3u, wn = sg >> 2; // this subgroup: rows 32 wr .. +32, tokens 64 wn .. +64
    uint lr = t >> 1, h = t & 1u;    // this invocation's tile row / token and half block
    uint r = r0 + lr, n = n0 + lr;

    MAT_C acc[2][4];
    [[unroll]] for (uint i = 0; i < 2u; i++) [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    // Stores one step's share into buffer B: the quants at their k positions (Q4_0 half h
    // holds elements 8h..8h+7 and 16+8h..16+8h+7, Q8_0 half h elements 16h..16h+15), and
    // the scales, two rows / tokens per word: the invocation of the even row (h = 0: d_w,
    // h = 1: d_x) writes the word with its neighbour's scale, two lanes down.
#if QTYPE == 2
#define WPOS(I) ((I) < 2u ? 2u * h + (I) : 2u + 2u * h + (I))
#else
#define WPOS(I) (4u * h + (I))
#endif
#define STORE_STEP(B, S) { \
        uint base_ = (B) * BUF_WORDS; \
        uint o_ = base_ + lr * LDQ; \
        sq[o_ + WPOS(0u)] = S.w.x; sq[o_ + WPOS(1u)] = S.w.y; sq[o_ + WPOS(2u)] = S.w.z; sq[o_ + WPOS(3u)] = S.w.w; \
        uint ox_ = base_ + QW_WORDS + lr * LDQ + 4u * h; \
        sq[ox_] = S.x.x; sq[ox_ + 1u] = S.x.y; sq[ox_ + 2u] = S.x.z; sq[ox_ + 3u] = S.x.w; \
        uint mine_ = h == 0u ? S.dw : S.dx; \
        uint pair_ = subgroupShuffleDown(mine_, 2u); \
        if ((lr & 1u) == 0u) sq[base_ + 2u * QW_WORDS + 64u * h + (lr >> 1)] = mine_ | (pair_ << 16); }

    // The products of the step in buffer B.
#define MMA_STEP(B) { \
        uint base_ = (B) * BUF_WORDS; \
        MAT_QA qa[2]; \
        MAT_QB qb[4]; \
        MAT_SA da[2]; \
        MAT_SB db[4]; \
        [[unroll]] for (uint i = 0; i < 2u; i++) { \
            coopMatLoad(qa[i], sq, base_ + (wr * 32u + 16u * i) * LDQ, LDQ, gl_CooperativeMatrixLayoutRowMajor); \
            coopMatLoad(da[i], sq, base_ + 2u * QW_WORDS + (wr * 32u + 16u * i) / 2u, 0u, gl_CooperativeMatrixLayoutColumnMajor); \
        } \
        [[unroll]] for (uint j = 0; j < 4u; j++) { \
            coopMatLoad(qb[j], sq, base_ + QW_WORDS + (wn * 64u + 16u * j) * LDQ, LDQ, gl_CooperativeMatrixLayoutColumnMajor); \
            coopMatLoad(db[j], sq, base_ + 2u * QW_WORDS + 64u + (wn * 64u + 16u * j) / 2u, 0u, gl_CooperativeMatrixLayoutRowMajor); \
        } \
        [[unroll]] for (uint i = 0; i < 2u; i++) { \
            [[unroll]] for (uint j = 0; j < 4u; j++) { \
                MAT_QC q_ = coopMatMulAdd(qa[i], qb[j], MAT_QC(0)); \
                MAT_C s_ = coopMatMulAdd(da[i], db[j], MAT_C(0.0)); \
                acc[i][j] += s_ * MAT_C(q_); \
            } \
        } }

    // Two register sets keep two steps of loads in flight: s0 holds even steps, s1 odd.
    Raw s0 = load_step(r, n, h, kb);
    Raw s1 = s0;
    if (kb + 32u < ke) s1 = load_step(r, n, h, kb + 32u);
    STORE_STEP(0u, s0)
    barrier();
    for (uint k0 = kb; ; k0 += 64u) { // exits are uniform
        if (k0 + 64u < ke) s0 = load_step(r, n, h, k0 + 64u);
        MMA_STEP(0u)
        if (k0 + 32u >= ke) break;
        STORE_STEP(1u, s1) // buffer 1 was last read before the previous barrier
        barrier();
        if (k0 + 96u < ke) s1 = load_step(r, n, h, k0 + 96u);
        MMA_STEP(1u)
        if (k0 + 64u >= ke) break;
        STORE_STEP(0u, s0)
        barrier();
    }

    uint lane = gl_SubgroupInvocationID;
    uint cbase = gl_WorkGroupID.z * p.n_tok * p.rows;
    [[unroll]] for (uint i = 0; i < 2u; i++) {
        [[unroll]] for (uint j = 0; j < 4u; j++) {
            MAT_C v16 = acc[i][j] * 0.0625; // exact: the scales carried 16 d_w d_x
            uint tr = r0 + wr * 32u + 16u * i, tn = n0 + wn * 64u + 16u * j;
            if (tr >= p.rows || tn >= p.n_tok) continue; // uniform across the subgroup
            if (p.accumulate == 0u && tr + 16u <= p.rows && tn + 16u <= p.n_tok) {
                coopMatStore(v16, c, cbase + tn * p.rows + tr, p.rows, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                // Element (row e % 16, token e / 16) at stage[sg * 256 + e].
                coopMatStore(v16, stage, sg * 256u, 16u, gl_CooperativeMatrixLayoutColumnMajor);
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
