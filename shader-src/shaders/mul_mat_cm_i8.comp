//! variant q4_0 QTYPE=2
//! variant q8_0 QTYPE=8
//! target vulkan1.3
// Quantized mat-mat for prompts on int8 tensor cores (VK_KHR_cooperative_matrix,
// 16x16x32 s8 x s8 + s32 and 16x16x16 f16 x f16 + f32 subgroup matrices), Q4_0 and Q8_0
// weights times activations quantized to Q8_1:
//   C[n, r] (+)= sum over 32-blocks b of d_w[r, b] * d_x[n, b] * sum_i q_w[r, 32 b + i] * q_x[n, 32 b + i]
// for n < n_tok, r < rows: ggml's vec_dot_q4_0_q8_1 / vec_dot_q8_0_q8_1 for every pair
// (ggml-quants.c; Q4_0 quants are nibble - 8). X is Q8_1 in the tiled layout of
// quantize_q8_1_tiles.comp (per 128-token tile and k-block: 4 KiB of quants, then at byte
// n_pad * k the 256 bytes of f16 scales; n_pad = 128 * gl_NumWorkGroups.y); W raw GGUF
// blocks (row r at w_offset + r * row_bytes); C f32 [n_tok, rows]. k must be a multiple
// of 32.
//
// One workgroup of 256 invocations computes a 128 rows x 128 tokens tile, one step per
// block (BK = 32), warp-specialized as mul_mat_cm.comp: subgroups 4-7 load and unpack
// step s + 1 into shared memory (each step's int8 quants as 48-byte rows, Q4_0 nibbles
// widened to signed bytes, and the step's 128 + 128 f16 scales) and issue the loads of
// step s + 2, while subgroups 0-3 multiply step s, each a 64 x 64 part as 4 x 4 output
// tiles; double-buffered, one barrier per step. The weights are read coalesced
// (consecutive invocations on consecutive words, RW words per row, staged through a
// per-subgroup scratch with odd row stride as in mul_mat_cm.comp), x as the two
// contiguous runs of its tiled layout.
// Per step and output tile: Q = W_q X_qᵀ (exact int32) and the block's scales as a
// second product S = D_w 1 D_xᵀ = 16 d_w[r] d_x[n] (f16 operands, exact in f32: both
// scale matrices are loaded with stride 0, so each repeats its 16 scales over all 16
// columns / rows), then acc += S * f32(Q) component-wise (accumulators of one type share
// their element layout): one rounding per block as ggml's sumi * d_w * d_x. The result
// is acc / 16 (exact).
//
// Split-K as mul_mat_cm.comp: workgroup z sums k in [z k_chunk, min(k, (z + 1) k_chunk))
// into C + z n_tok ldc. Bindings: 0 = W, 1 = XQ (uvec4), 2 = C. Push constants:
// w_offset, row_bytes, k, rows, n_tok, accumulate, k_chunk, ldc. Specialization constant 0
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
layout(std430, set = 0, binding = 1) readonly buffer XQ { uvec4 xq[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; } p;

#define BM 128u
#define BN 128u
#define BK 32u
// A shared quant row: 32 i8 (2 uvec4) + 1 uvec4 of padding (48-byte rows: the 8 rows of
// a 16-byte access phase fall in distinct banks).
#define LDQ 3u
// One buffer, in uvec4: W quants | X quants | 128 f16 d_w | 128 f16 d_x.
#define OWQ 0u
#define OXQ (BM * LDQ)
#define ODW (OXQ + BN * LDQ)
#define ODX (ODW + BM / 8u)
#define BUFV (ODX + BN / 8u)
#define SCR (2u * BUFV)
#if QTYPE == 2
#define RWN 5
#define RWP 5u
#else
#define RWN 9
#define RWP 9u
#endif
#define RW uint(RWN)
shared uvec4 sm[SCR + 32u * RWP];

#include "mul_mat_cm.glsl"

#define MAT_QA coopmat<int8_t, gl_ScopeSubgroup, 16, 32, gl_MatrixUseA>
#define MAT_QB coopmat<int8_t, gl_ScopeSubgroup, 32, 16, gl_MatrixUseB>
#define MAT_QC coopmat<int32_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

uint nwords;

// Word w of row r's block for the step at column k0 (the block's bytes start in word 0).
uint raw_word(uint r, uint w, uint k0) {
    uint a = ((p.w_offset + r * p.row_bytes + (k0 >> 5) * QBYTES) >> 2) + w;
    return qw[min(a, nwords)];
}

// Q4_0 nibbles n as signed bytes n - 8: (n ^ 8) is the 4-bit two's complement; extend
// bit 3.
uint s4(uint v) {
    v = (v & 0x0F0F0F0Fu) ^ 0x08080808u;
    return v | (((v >> 3) & 0x01010101u) * 0xF0u);
}

// This invocation's row, words q of its block at byte blk, as 32 signed bytes in order
// (lo: elements 0-15, hi: 16-31) and the f16 bits of d.
void unpack_row(uint q[RW], uint blk, out uvec4 lo, out uvec4 hi, out uint d) {
    bool odd = (blk & 2u) != 0u;
    d = odd ? q[0] >> 16 : q[0] & 0xFFFFu;
#if QTYPE == 2
    uint qs[4];
    [[unroll]] for (uint j = 0; j < 4u; j++) qs[j] = odd ? q[j + 1u] : ((q[j] >> 16) | (q[j + 1u] << 16));
    lo = uvec4(s4(qs[0]), s4(qs[1]), s4(qs[2]), s4(qs[3]));
    hi = uvec4(s4(qs[0] >> 4), s4(qs[1] >> 4), s4(qs[2] >> 4), s4(qs[3] >> 4));
#else
    uint qs[8];
    [[unroll]] for (uint j = 0; j < 8u; j++) qs[j] = odd ? q[j + 1u] : ((q[j] >> 16) | (q[j + 1u] << 16));
    lo = uvec4(qs[0], qs[1], qs[2], qs[3]);
    hi = uvec4(qs[4], qs[5], qs[6], qs[7]);
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
    uint lane = gl_SubgroupInvocationID;
    bool produce = gl_SubgroupID >= 4u;
    bool multiply = !produce;
    uint sg = gl_SubgroupID & 3u; // the role's subgroup index
    uint t = 32u * sg + lane;     // producers: this invocation's tile row / token pair
    uint wr = sg & 1u, wn = sg >> 1;
    uint rowb = p.w_offset + min(r0 + t, p.rows - 1u) * p.row_bytes;
    // Coalesced weight loads: slot s of lane L holds word (32 s + L) % RW of row
    // r0 + 32 sg + (32 s + L) / RW.
    uint srow[RW], sw[RW];
    [[unroll]] for (uint s = 0; s < RW; s++) {
        uint f = 32u * s + lane;
        srow[s] = min(r0 + 32u * sg + f / RW, p.rows - 1u);
        sw[s] = f % RW;
    }
    uint scr = SCR * 4u + sg * 32u * RWP; // this subgroup's scratch, in words
    // x: the step's 256 uvec4 of quants (invocation t: t and 128 + t, token pairs) and 16
    // of scales (t < 16), from tile block (n0 / 128) * nb + k0 / 32.
    uint nb = p.k >> 5;
    uint xt0 = (n0 >> 7) * nb;
    uint xdbase = (gl_NumWorkGroups.y * BN * p.k) >> 4;

    MAT_C acc[4][4];
    [[unroll]] for (uint i = 0; i < 4u; i++) [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint nsteps = (ke - kb) / BK;
    uint klast = ke - BK;

    uint raw[RW];
    uvec4 xr[3];
    // LOAD_STEP(k0): the step's loads into registers (raw, xr); STAGE_RAW: raw into the
    // scratch; FINISH_W(b, k0): this invocation's row from the scratch, unpacked into buffer
    // b; STORE_X(b, xv): x into buffer b.
#define LOAD_STEP(k0_) { \
    [[unroll]] for (uint s_ = 0; s_ < RW; s_++) raw[s_] = raw_word(srow[s_], sw[s_], (k0_)); \
    uint tb_ = xt0 + ((k0_) >> 5); \
    xr[0] = xq[tb_ * 256u + t]; xr[1] = xq[tb_ * 256u + 128u + t]; \
    if (t < 16u) xr[2] = xq[xdbase + tb_ * 16u + t]; }
#define STAGE_RAW() [[unroll]] for (uint s_ = 0; s_ < RW; s_++) { \
    uint f = scr + (32u * s_ + lane) / RW * RWP + (32u * s_ + lane) % RW; sm[f >> 2][f & 3u] = raw[s_]; }
#define FINISH_W(b_, k0_) { subgroupMemoryBarrierShared(); subgroupBarrier(); \
    uint q_[RW]; \
    [[unroll]] for (uint w = 0; w < RW; w++) { uint f = scr + lane * RWP + w; q_[w] = sm[f >> 2][f & 3u]; } \
    uvec4 lo_, hi_; uint d_; \
    unpack_row(q_, rowb + ((k0_) >> 5) * QBYTES, lo_, hi_, d_); \
    uint o_ = (b_) * BUFV + OWQ + t * LDQ; \
    sm[o_] = lo_; sm[o_ + 1u] = hi_; \
    uint pair_ = subgroupShuffleDown(d_, 1u); \
    if ((lane & 1u) == 0u) sm[(b_) * BUFV + ODW + (t >> 3)][(t >> 1) & 3u] = d_ | (pair_ << 16); }
#define STORE_X(b_, xv_) { \
    sm[(b_) * BUFV + OXQ + (t >> 1) * LDQ + (t & 1u)] = xv_[0]; \
    sm[(b_) * BUFV + OXQ + (64u + (t >> 1)) * LDQ + (t & 1u)] = xv_[1]; \
    if (t < 16u) sm[(b_) * BUFV + ODX + t] = xv_[2]; }
    // The loads of step s + 2 issue between the scratch stores and the subgroup barrier.
#define PRODUCE_STEP { STAGE_RAW() uvec4 xs[3] = xr; LOAD_STEP(k2) FINISH_W(nxt, kn) STORE_X(nxt, xs) }

    if (produce) {
        LOAD_STEP(kb)
        STAGE_RAW()
        FINISH_W(0u, kb)
        STORE_X(0u, xr)
        LOAD_STEP(min(kb + BK, klast))
    }
    barrier();

    for (uint s = 0; s < nsteps; s++) {
        uint cur = s & 1u, nxt = cur ^ 1u;
        uint kn = min(kb + (s + 1u) * BK, klast); // step s + 1, held in raw / xr
        uint k2 = min(kb + (s + 2u) * BK, klast);
        if (produce) {
            PRODUCE_STEP
        } else {
            uint base = cur * BUFV;
            MAT_QA qa[4];
            MAT_A da[4];
            [[unroll]] for (uint i = 0; i < 4u; i++) {
                coopMatLoad(qa[i], sm, base + OWQ + (wr * 64u + 16u * i) * LDQ, LDQ, gl_CooperativeMatrixLayoutRowMajor);
                coopMatLoad(da[i], sm, base + ODW + (wr * 64u + 16u * i) / 8u, 0u, gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint j = 0; j < 4u; j++) {
                MAT_QB qb;
                MAT_B db;
                coopMatLoad(qb, sm, base + OXQ + (wn * 64u + 16u * j) * LDQ, LDQ, gl_CooperativeMatrixLayoutColumnMajor);
                coopMatLoad(db, sm, base + ODX + (wn * 64u + 16u * j) / 8u, 0u, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint i = 0; i < 4u; i++) {
                    MAT_QC q_ = coopMatMulAdd(qa[i], qb, MAT_QC(0));
                    MAT_C s_ = coopMatMulAdd(da[i], db, MAT_C(0.0));
                    acc[i][j] += s_ * MAT_C(q_);
                }
            }
        }
        barrier();
    }

    // The first buffer's W quants become the staging area (64 uvec4 per subgroup).
    uint cbase = gl_WorkGroupID.z * p.n_tok * p.ldc;
    if (multiply) [[unroll]] for (uint i = 0; i < 4u; i++) {
        [[unroll]] for (uint j = 0; j < 4u; j++) {
            MAT_C v16 = acc[i][j] * 0.0625; // exact: the scales carried 16 d_w d_x
            uint tr = r0 + wr * 64u + 16u * i, tn = n0 + wn * 64u + 16u * j;
            if (tr >= p.rows || tn >= p.n_tok) continue;
            STORE_TILE(v16, tr, tn)
        }
    }
}
