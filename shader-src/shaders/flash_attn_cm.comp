//! variant f32_d64 HD=64
//! variant f32_d96 HD=96
//! variant f32_d128 HD=128
//! variant f16_d64 F16=1 HD=64
//! variant f16_d96 F16=1 HD=96
//! variant f16_d128 F16=1 HD=128
//! variant f32_d64_f16_out OUT_F16=1 HD=64
//! variant f32_d96_f16_out OUT_F16=1 HD=96
//! variant f32_d128_f16_out OUT_F16=1 HD=128
//! target vulkan1.3
// Flash attention for prefill on tensor cores (VK_KHR_cooperative_matrix, 16x16x16 f16 x
// f16 + f32 subgroup matrices), over the f16 KV cache, with grouped-query heads and
// causal masking; the same function as flash_attn.comp without a KV split:
//   out[t, h, :] = softmax_j(scale * q[t, h, :] . K[kvh, j, :]) V[kvh, j, :],
//   kvh = h / (n_heads / n_kv_heads), j < kv_len, and j <= q_pos0 + t when causal;
//   with a sliding window (push constant window > 0) also j > q_pos0 + t - window; scores
//   soft-capped where softcap > 0 (attn_cap). Key j lives in cache slot j % ctx (attn_slot):
//   a sliding-window layer's cache may be a ring of fewer slots than positions.
// The algorithm is FlashAttention-2's (Dao, 2023): per block of 64 query rows, an online
// softmax over blocks of 32 keys, the output rescaled by exp(m_old - m_new) per block and
// divided by the row sum at the end.
// Layouts as flash_attn.comp: q, out [t_q, n_heads, HD] of type ACT (f32, or f16 with F16),
// K, V f16 [n_kv_heads, ctx, HD]. With OUT_F16 (q f32), out is f16: the packed f16 x the
// output projection's tensor-core mat-mat reads, each element the f16 rounding of the f32
// output (the bits of the f32 kernel, then convert_f16). HD (the head dimension) is 64, 96 (Phi-3) or 128.
// Rounding: q is rounded to f16 (the tensor cores' operand), S = q K^T is accumulated in
// f32 and scaled, the softmax runs in f32, and its weights P are rounded to f16 for the
// product P V (accumulated in f32); the row sums use the f32 weights.
//
// One workgroup of 128 invocations (4 subgroups of 32) takes 64 query rows of one head,
// 16 per subgroup. Per step all 128 invocations copy the block's K and V rows (zeros past
// the visible keys) into shared memory; each subgroup multiplies its Q (held as HD / 16
// A-matrices) by K^T into a 16 x 32 f32 score tile, stores it to its shared area, and its
// lanes (two per row, 16 scores each) update the row's max and sum, write P in f16 and
// the rescale factor; O (HD / 16 accumulator tiles) is scaled by the factors (an
// accumulator loaded from shared memory with stride 0: every column repeats the 16 row
// factors) and gains P V. Finally O is divided by the row sums the same way and stored
// through shared memory to the rows t < t_q.
// Bindings: 0 = q, 1 = K, 2 = V, 3 = out, 4 = sinks (include/flash_attn_io.glsl). Push
// constants as flash_attn.comp (n_splits must be 1; split_len unused). Grid: x = heads, y = ceil(t_q / 64). Requires subgroups of 32.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#if defined(F16) || defined(OUT_F16)
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 128) in;
#include "common.glsl"
#ifdef F16
layout(std430, set = 0, binding = 0) readonly buffer Q { uvec4 q8[]; }; // 8 halves
#else
layout(std430, set = 0, binding = 0) readonly buffer Q { vec4 q4[]; };
#endif
layout(std430, set = 0, binding = 1) readonly buffer K { uvec4 kc[]; }; // 8 halves
layout(std430, set = 0, binding = 2) readonly buffer V { uvec4 vc[]; };
#define ATTN_NO_SPLITS
#define ATTN_SINKS_BINDING 4
#include "flash_attn_io.glsl"

#define BR 64u
#define BC 32u
#define HV (HD / 8u)      // uvec4 per row of HD halves
#define LDK (HV + 1u)     // padded shared row of K, V and Q (uvec4)
#define LDS 9u            // a score row: 32 f32 (8 uvec4) + 1
#define LDP 5u            // a P row: 32 halves (4 uvec4) + 1
#define OK_ 0u                       // K block, BC rows (also Q staging with V: BR rows)
#define OV_ (BC * LDK)               // V block
#define OS_ (2u * BC * LDK)          // 4 x 16 score rows
#define OP_ (OS_ + 64u * LDS)        // 4 x 16 P rows
#define OC_ (OP_ + 64u * LDP)        // 4 x 16 row factors (4 uvec4 per subgroup)
#define SMEM (OC_ + 16u)
shared uvec4 sm[SMEM];

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define NT (HD / 16u)

// Query row r of this block (token t0 + r), uvec4 c (halves 8c..8c+7) as f16, zeros past t_q.
uvec4 q_chunk(uint t0, uint h, uint r, uint c) {
    uint t = t0 + r;
    if (t >= p.t_q) return uvec4(0u);
    uint e = (t * p.n_heads + h) * HD + 8u * c; // element index, a multiple of 8
#ifdef F16
    return q8[e >> 3];
#else
    vec4 a = q4[e >> 2], b = q4[(e >> 2) + 1u];
    return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
#endif
}

void main() {
    attn_begin();
    uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BR;
    uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint kvh = h / (p.n_heads / p.n_kv_heads);
    uint last = min(t0 + BR, p.t_q); // rows past it are padding
    uint kv_end = run.kv_len;
    if (p.causal != 0u) kv_end = min(kv_end, run.q_pos0 + last);

    // Q into shared memory (rows of LDK uvec4 over the K and V blocks), then registers.
    for (uint i = tid; i < BR * HV; i += 128u) {
        uint r = i / HV, c = i % HV;
        sm[OK_ + r * LDK + c] = q_chunk(t0, h, r, c);
    }
    barrier();
    MAT_A qa[NT];
    [[unroll]] for (uint i = 0; i < NT; i++)
        coopMatLoad(qa[i], sm, OK_ + (16u * sg) * LDK + 2u * i, LDK, gl_CooperativeMatrixLayoutRowMajor);
    barrier();

    MAT_C acc[NT];
    [[unroll]] for (uint i = 0; i < NT; i++) acc[i] = MAT_C(0.0);
    // This lane's row of the subgroup's 16 and its half of the block's 32 keys.
    uint row = lane >> 1, half_ = lane & 1u;
    uint t = t0 + 16u * sg + row;
    uint row_end = run.kv_len;
    if (p.causal != 0u) row_end = min(row_end, run.q_pos0 + t + 1u);
    uint row_start = attn_first_key(t);
    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    float m_run = NEG_INF, l_run = 0.0;
    uint ss = OS_ + 16u * sg * LDS, ps = OP_ + 16u * sg * LDP, cs = OC_ + 4u * sg;
    uint head = kvh * p.ctx;

    // Blocks before the first row's window hold no key any row sees.
    for (uint j0 = (attn_first_key(t0) / BC) * BC; j0 < kv_end; j0 += BC) {
        for (uint i = tid; i < BC * HV; i += 128u) {
            uint r = i / HV, c = i % HV, j = j0 + r;
            bool in_ = j < kv_end;
            uint at = (head + attn_slot(j)) * HV + c;
            sm[OK_ + r * LDK + c] = in_ ? kc[at] : uvec4(0u);
            sm[OV_ + r * LDK + c] = in_ ? vc[at] : uvec4(0u);
        }
        barrier();
        // Scores: 16 rows x 32 keys, as two 16 x 16 tiles.
        [[unroll]] for (uint jt = 0; jt < 2u; jt++) {
            MAT_C s = MAT_C(0.0);
            [[unroll]] for (uint i = 0; i < NT; i++) {
                MAT_B kb;
                coopMatLoad(kb, sm, OK_ + (16u * jt) * LDK + 2u * i, LDK, gl_CooperativeMatrixLayoutColumnMajor);
                s = coopMatMulAdd(qa[i], kb, s);
            }
            coopMatStore(s, sm, ss + 4u * jt, LDS, gl_CooperativeMatrixLayoutRowMajor);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        // Online softmax over this lane's 16 scores; the row's other half is lane ^ 1.
        float x[16];
        float mx = NEG_INF;
        [[unroll]] for (uint c4 = 0; c4 < 4u; c4++) {
            vec4 v = uintBitsToFloat(sm[ss + row * LDS + 4u * half_ + c4]);
            [[unroll]] for (uint e = 0; e < 4u; e++) {
                uint j = j0 + 16u * half_ + 4u * c4 + e;
                float sv = (j < row_end && j >= row_start) ? attn_cap(v[e] * p.scale) : NEG_INF;
                x[4u * c4 + e] = sv;
                mx = max(mx, sv);
            }
        }
        mx = max(mx, subgroupShuffleXor(mx, 1u));
        float m_new = max(m_run, mx);
        // A row that has seen no key yet (its window starts in a later block) keeps
        // m_run = -inf, l_run = 0 and zero accumulators: corr and every weight are 0.
        float corr = isinf(m_run) ? 0.0 : exp(m_run - m_new);
        float sum = 0.0;
        uint pw[8];
        [[unroll]] for (uint e = 0; e < 16u; e += 2u) {
            float a = isinf(x[e]) ? 0.0 : exp(x[e] - m_new);
            float b = isinf(x[e + 1u]) ? 0.0 : exp(x[e + 1u] - m_new);
            sum += a + b;
            pw[e >> 1] = packHalf2x16(vec2(a, b));
        }
        sum += subgroupShuffleXor(sum, 1u);
        l_run = l_run * corr + sum;
        m_run = m_new;
        sm[ps + row * LDP + 2u * half_] = uvec4(pw[0], pw[1], pw[2], pw[3]);
        sm[ps + row * LDP + 2u * half_ + 1u] = uvec4(pw[4], pw[5], pw[6], pw[7]);
        if (half_ == 0u) sm[cs + (row >> 2)][row & 3u] = floatBitsToUint(corr);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        MAT_C cm;
        coopMatLoad(cm, sm, cs, 0u, gl_CooperativeMatrixLayoutColumnMajor);
        MAT_A pa[2];
        [[unroll]] for (uint kt = 0; kt < 2u; kt++)
            coopMatLoad(pa[kt], sm, ps + 2u * kt, LDP, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint i = 0; i < NT; i++) {
            acc[i] = acc[i] * cm;
            [[unroll]] for (uint kt = 0; kt < 2u; kt++) {
                MAT_B vb;
                coopMatLoad(vb, sm, OV_ + (16u * kt) * LDK + 2u * i, LDK, gl_CooperativeMatrixLayoutRowMajor);
                acc[i] = coopMatMulAdd(pa[kt], vb, acc[i]);
            }
        }
        barrier();
    }

    // out = O / l (zeros for a row without visible keys; with sinks, attn_out_scale's
    // factor), through the score area.
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    if (half_ == 0u) sm[cs + (row >> 2)][row & 3u] = floatBitsToUint(attn_out_scale(h, m_run, l_run));
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    MAT_C inv;
    coopMatLoad(inv, sm, cs, 0u, gl_CooperativeMatrixLayoutColumnMajor);
    [[unroll]] for (uint i = 0; i < NT; i++) {
        MAT_C r = acc[i] * inv;
        coopMatStore(r, sm, ss, 4u, gl_CooperativeMatrixLayoutRowMajor);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint e = lane; e < 256u; e += 32u) {
            uint rr = e >> 4, cc = e & 15u, tt = t0 + 16u * sg + rr;
            if (tt < p.t_q) o[(tt * p.n_heads + h) * HD + 16u * i + cc] = ATTN_OUT(uintBitsToFloat(sm[ss + (e >> 2)][e & 3u]));
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
    }
}
