// Quantized mat-mat for prompts on tensor cores with coalesced block loads
// (VK_KHR_cooperative_matrix, f16 x f16 with f32 accumulation, 16x16x16 subgroup matrices):
//   C[n, r] (+)= sum_c X[n, c] * W[r, c]   for n < n_tok, r < rows,
// for Q4_0, Q8_0 and Q4_K. Same bindings, push constants, grid and results as
// mul_mat_cm.comp; what differs is how the tiles reach shared memory.
//
// mul_mat_cm.comp has each invocation fetch the blocks it decodes: a subgroup's load then
// touches 16 rows, 16 cache lines per instruction, and the L1's per-line cost, not the
// bytes, bounds the kernel. Here a step's weight bytes (BK = 64 columns of 128 rows: 36 B
// per row for Q4_0, 68 for Q8_0, 16 + 32 for Q4_K) are read as 32-bit words with
// consecutive invocations on consecutive words (a subgroup instruction covers 3-4 rows),
// stored raw to shared memory, and decoded from there into the f16 tile; X rows (128 B
// per token per step) are read as 16-byte vectors, 8 invocations per token. The raw words
// of step i + 1 and X of step i are in flight while step i - 1 multiplies.
//
// Each weight is the f16 rounding of its exact value, as mul_mat_cm.comp's (Q4_0 and Q8_0
// products (q - 8) * d and q * d are exact in f16 before their one rounding; Q4_K as
// f16((d * sc) * q - dmin * m) in f32), so both kernels give the same sums.
// Bindings: 0 = W, 1 = X (uvec4: 8 halves), 2 = C. Push constants: w_offset, row_bytes, k,
// rows, n_tok, accumulate, k_chunk (a multiple of 256). Needs row_bytes and w_offset even
// (every block size here is), k % 32 == 0. Grid: x = ceil(rows / 128), y = ceil(n_tok /
// 128), z = ceil(k / k_chunk). Subgroups of 32.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#ifndef WARPS
#define WARPS 8
#endif
#define THREADS (WARPS * 32u)
layout(local_size_x = THREADS) in;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { uvec4 x8[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; } p;

#define BM 128u
#define BN 128u
#define BK 64u
// A tile row: BK halves = 8 uvec4, plus one of padding (144-byte rows: the 8 rows a
// 16-byte shared access phase touches fall in distinct banks).
#define LDS 9u
// Raw bytes of one row for one step, in words.
#if QTYPE == 2
#define RAW_WORDS 9u   // two 18-byte blocks
#elif QTYPE == 8
#define RAW_WORDS 17u  // two 34-byte blocks
#elif QTYPE == 12
#define RAW_WORDS 12u  // the 16-byte header (d, dmin, scales) + the 32 qs bytes of a quarter
#endif
#define RAW_TOTAL (BM * RAW_WORDS)
#define RAW_PER_T ((RAW_TOTAL + THREADS - 1u) / THREADS)
#define X_PER_T (BN * 8u / THREADS)

// One buffer of uvec4 for everything: sa (decoded W) | sb (X) | raw words. After the
// loop sa serves as the staging area for edge tiles.
#define SA 0u
#define SB (BM * LDS)
#define SRAW (SB + BN * LDS)
shared uvec4 sm[SRAW + (RAW_TOTAL + 3u) / 4u];

uint raw_get(uint i) { return sm[SRAW + (i >> 2)][i & 3u]; }
void raw_set(uint i, uint v) { sm[SRAW + (i >> 2)][i & 3u] = v; }

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

// Bytes 0/2 and 1/3 of u (each masked to `mask`) as f16 in element order, minus `offset`
// (1024 + byte via the exponent trick, so the difference is the exact small integer).
f16vec4 bytes4(uint u, uint mask, float16_t offset) {
    uint e02 = (u & mask) | 0x64006400u;
    uint e13 = ((u >> 8) & mask) | 0x64006400u;
    f16vec2 a = unpackFloat2x16((e02 & 0xFFFFu) | (e13 << 16));
    f16vec2 b = unpackFloat2x16((e02 >> 16) | (e13 & 0xFFFF0000u));
    precise f16vec4 q = f16vec4(a, b) - offset;
    return q;
}
uvec2 pack4(f16vec4 v) { return uvec2(packFloat2x16(v.xy), packFloat2x16(v.zw)); }

// Word `w` (of RAW_WORDS) of row r's raw bytes for the step at column k0; 0 past the
// rows or past `valid` columns.
uint fetch_raw(uint r, uint w, uint k0, uint valid) {
#ifdef NO_W
    return 0x3C003C00u ^ w;
#endif
    if (r >= p.rows) return 0u;
    uint row = p.w_offset + r * p.row_bytes;
#if QTYPE == 12
    uint at = row + (k0 >> 8) * QBYTES + (w < 4u ? 4u * w : 16u + ((k0 >> 6) & 3u) * 32u + 4u * (w - 4u));
#else
    if (w * 4u >= (valid / QK) * QBYTES) return 0u;
    uint at = row + (k0 / QK) * QBYTES + 4u * w;
#endif
    // Rows of an odd number of 16-bit units (Q4_0/Q8_0 with k / 32 odd) leave `at` 2 bytes
    // off a word; the branch is uniform.
    return (p.row_bytes & 3u) == 0u && (p.w_offset & 3u) == 0u ? qw[at >> 2] : q_u32(at);
}

// X vector (token n, 8 halves (i % 8)) of the step at k0, 0 past the tokens or `valid`.
uvec4 ldx(uint n, uint i, uint k0, uint valid) {
#ifdef NO_X
    return uvec4(0x3C003C00u ^ i);
#else
    return n < p.n_tok && (i & 7u) * 8u < valid ? x8[n * (p.k >> 3) + (k0 >> 3) + (i & 7u)] : uvec4(0u);
#endif
}

// Raw word i of row (i / 4) from shared, 2 bytes further: (words i, i + 1) >> 16.
uint raw_mid(uint i) { return (raw_get(i) >> 16) | (raw_get(i + 1u) << 16); }

// Decodes unit u (row u / 2, 32 columns (u % 2) of the step) from the raw words into sa.
void decode(uint u, uint quarter) {
    uint lr = u >> 1, b = u & 1u;
    uint base = lr * RAW_WORDS;
    uint o = SA + lr * LDS + 4u * b;
#if QTYPE == 2
    // Block b at byte 18 b: d then 16 bytes of nibbles.
    uint q[4];
    float16_t d;
    if (b == 0u) {
        d = unpackFloat2x16(raw_get(base)).x;
        [[unroll]] for (uint i = 0; i < 4u; i++) q[i] = raw_mid(base + i);
    } else {
        d = unpackFloat2x16(raw_get(base + 4u)).y;
        [[unroll]] for (uint i = 0; i < 4u; i++) q[i] = raw_get(base + 5u + i);
    }
    // Elements 0..15 are the low nibbles of bytes 0..15, 16..31 the high nibbles.
    [[unroll]] for (uint i = 0; i < 2u; i++) {
        precise f16vec4 l0 = bytes4(q[2u * i], 0x000F000Fu, 1032.0hf) * d;
        precise f16vec4 l1 = bytes4(q[2u * i + 1u], 0x000F000Fu, 1032.0hf) * d;
        precise f16vec4 h0 = bytes4(q[2u * i] >> 4, 0x000F000Fu, 1032.0hf) * d;
        precise f16vec4 h1 = bytes4(q[2u * i + 1u] >> 4, 0x000F000Fu, 1032.0hf) * d;
        sm[o + i] = uvec4(pack4(l0), pack4(l1));
        sm[o + 2u + i] = uvec4(pack4(h0), pack4(h1));
    }
#elif QTYPE == 8
    // Block b at byte 34 b: d then 32 signed bytes.
    uint q[8];
    float16_t d;
    if (b == 0u) {
        d = unpackFloat2x16(raw_get(base)).x;
        [[unroll]] for (uint i = 0; i < 8u; i++) q[i] = raw_mid(base + i);
    } else {
        d = unpackFloat2x16(raw_get(base + 8u)).y;
        [[unroll]] for (uint i = 0; i < 8u; i++) q[i] = raw_get(base + 9u + i);
    }
    // q + 128 as an unsigned byte: 1024 + 128 + q - 1152 = q.
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        precise f16vec4 v0 = bytes4(q[2u * i] ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        precise f16vec4 v1 = bytes4(q[2u * i + 1u] ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        sm[o + i] = uvec4(pack4(v0), pack4(v1));
    }
#elif QTYPE == 12
    // Sub-block t = 2 * quarter + b: the low (b = 0) or high nibbles of the quarter's 32
    // bytes; its 6-bit scale and min as get_scale_min_k4 (ggml-quants.c), with
    // scales[0..3] in word 1, [4..7] in word 2, [8..11] in word 3 of the header.
    uint t = 2u * quarter + b;
    uint hw0 = raw_get(base), hs0 = raw_get(base + 1u), hs1 = raw_get(base + 2u), hs2 = raw_get(base + 3u);
    uint sc, m;
    if (t < 4u) {
        sc = (hs0 >> (8u * t)) & 63u;
        m = (hs1 >> (8u * t)) & 63u;
    } else {
        uint sh = 8u * (t - 4u);
        uint s8 = (hs2 >> sh) & 0xFFu;
        sc = (s8 & 0xFu) | ((((hs0 >> sh) >> 6) & 3u) << 4);
        m = (s8 >> 4) | ((((hs1 >> sh) >> 6) & 3u) << 4);
    }
    vec2 dm = unpackHalf2x16(hw0);
    precise float d1 = dm.x * float(sc);
    precise float m1 = dm.y * float(m);
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        uvec2 w2[2];
        [[unroll]] for (uint hh = 0; hh < 2u; hh++) {
            uint v = (raw_get(base + 4u + 2u * i + hh) >> (4u * b)) & 0x0F0F0F0Fu;
            precise vec4 f = d1 * vec4(v & 0xFFu, (v >> 8) & 0xFFu, (v >> 16) & 0xFFu, v >> 24) - m1;
            w2[hh] = pack4(f16vec4(f));
        }
        sm[o + i] = uvec4(w2[0], w2[1]);
    }
#endif
}

#define MMA_STEP() { \
    [[unroll]] for (uint kk = 0; kk < BK / 8u; kk += 2u) { \
        MAT_A a[WM / 16u]; \
        MAT_B bm[WN / 16u]; \
        [[unroll]] for (uint i = 0; i < WM / 16u; i++) \
            coopMatLoad(a[i], sm, SA + (wr * WM + 16u * i) * LDS + kk, LDS, gl_CooperativeMatrixLayoutRowMajor); \
        [[unroll]] for (uint j = 0; j < WN / 16u; j++) \
            coopMatLoad(bm[j], sm, SB + (wn * WN + 16u * j) * LDS + kk, LDS, gl_CooperativeMatrixLayoutColumnMajor); \
        [[unroll]] for (uint i = 0; i < WM / 16u; i++) \
            [[unroll]] for (uint j = 0; j < WN / 16u; j++) acc[i][j] = coopMatMulAdd(a[i], bm[j], acc[i][j]); \
    } }

// Subgroup tile: WM rows x WN tokens (8 subgroups: 32 x 64; 4 subgroups: 64 x 64).
#if WARPS == 8
#define WM 32u
#define WN 64u
#define WROWS 4u
#else
#define WM 64u
#define WN 64u
#define WROWS 2u
#endif

void main() {
#ifdef SWZ
    // Consecutive workgroups share a row tile (its token tiles one after another), so a
    // weight tile is fetched from memory once while the others read it from L2.
    uint lin_ = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
    uint r0 = (lin_ / gl_NumWorkGroups.y) * BM, n0 = (lin_ % gl_NumWorkGroups.y) * BN;
#else
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
#endif
    uint t = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint wr = sg % WROWS, wn = sg / WROWS;

    MAT_C acc[WM / 16u][WN / 16u];
    [[unroll]] for (uint i = 0; i < WM / 16u; i++) [[unroll]] for (uint j = 0; j < WN / 16u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint rawv[RAW_PER_T];
    uvec4 xv[X_PER_T];
    // Raw words of the step at k0 into registers.
#define LOAD_RAW(k0) { uint valid_ = min(BK, ke - (k0)); \
    [[unroll]] for (uint j_ = 0; j_ < RAW_PER_T; j_++) { uint i_ = t + j_ * THREADS; \
        rawv[j_] = i_ < RAW_TOTAL ? fetch_raw(r0 + i_ / RAW_WORDS, i_ % RAW_WORDS, (k0), valid_) : 0u; } }
#define STORE_RAW() { [[unroll]] for (uint j_ = 0; j_ < RAW_PER_T; j_++) { uint i_ = t + j_ * THREADS; \
        if (i_ < RAW_TOTAL) raw_set(i_, rawv[j_]); } }
    // X of the step at k0: invocation i covers token i / 8, 8 halves (i % 8).
#define LOAD_X(k0) { uint valid_ = min(BK, ke - (k0)); \
    [[unroll]] for (uint j_ = 0; j_ < X_PER_T; j_++) { uint i_ = t + j_ * THREADS; uint n_ = n0 + (i_ >> 3); \
        xv[j_] = ldx(n_, i_, (k0), valid_); } }
#define STORE_X() { [[unroll]] for (uint j_ = 0; j_ < X_PER_T; j_++) { uint i_ = t + j_ * THREADS; \
        sm[SB + (i_ >> 3) * LDS + (i_ & 7u)] = xv[j_]; } }

#ifdef X2
    uvec4 xw[X_PER_T];
#define LOAD_X1(k0) { uvec4 sv_[X_PER_T] = xv; LOAD_X(k0) xw = xv; xv = sv_; }
#endif
    LOAD_RAW(kb)
    LOAD_X(kb)
    STORE_RAW()
    if (kb + BK < ke) {
        LOAD_RAW(kb + BK)
#ifdef X2
        LOAD_X1(kb + BK)
#endif
    }
    // One step: decode the stored raw words and store X (registers XV) into the tiles,
    // then start the loads ahead and multiply.
#ifdef NO_MMA
#define DO_MMA()
#else
#define DO_MMA() MMA_STEP()
#endif
#define STEP(K0, XV, LOADX) { \
        barrier(); \
        uint valid = min(BK, ke - (K0)); \
        [[unroll]] for (uint j = 0; j < 2u * BM / THREADS; j++) { \
            uint u = t + j * THREADS; \
            if ((u & 1u) * 32u < valid) { decode(u, ((K0) >> 6) & 3u); } \
            else { uint o = SA + (u >> 1) * LDS + 4u * (u & 1u); \
                [[unroll]] for (uint i = 0; i < 4u; i++) sm[o + i] = uvec4(0u); } \
        } \
        [[unroll]] for (uint j_ = 0; j_ < X_PER_T; j_++) { uint i_ = t + j_ * THREADS; \
            sm[SB + (i_ >> 3) * LDS + (i_ & 7u)] = XV[j_]; } \
        barrier(); \
        if ((K0) + BK < ke) { \
            STORE_RAW() \
            LOADX \
            if ((K0) + 2u * BK < ke) LOAD_RAW((K0) + 2u * BK) \
        } \
        DO_MMA() }
#ifdef X2
    for (uint k0 = kb; k0 < ke; k0 += 2u * BK) {
        STEP(k0, xv, if (k0 + 2u * BK < ke) LOAD_X(k0 + 2u * BK))
        if (k0 + BK >= ke) break;
        STEP(k0 + BK, xw, if (k0 + 3u * BK < ke) LOAD_X1(k0 + 3u * BK))
    }
#else
    for (uint k0 = kb; k0 < ke; k0 += BK) {
        STEP(k0, xv, LOAD_X(k0 + BK))
    }
#endif

    barrier(); // sa becomes the staging area
    uint lane = gl_SubgroupInvocationID;
    uint cbase = gl_WorkGroupID.z * p.n_tok * p.rows;
    uint stage = SA + sg * 64u; // 256 floats per subgroup
    [[unroll]] for (uint i = 0; i < WM / 16u; i++) {
        [[unroll]] for (uint j = 0; j < WN / 16u; j++) {
            uint tr = r0 + wr * WM + 16u * i, tn = n0 + wn * WN + 16u * j;
            if (tr >= p.rows || tn >= p.n_tok) continue; // uniform across the subgroup
            if (p.accumulate == 0u && tr + 16u <= p.rows && tn + 16u <= p.n_tok) {
                coopMatStore(acc[i][j], c, cbase + tn * p.rows + tr, p.rows, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                // Element (row e % 16, token e / 16) at float e of the subgroup's stage.
                coopMatStore(acc[i][j], sm, stage, 4u, gl_CooperativeMatrixLayoutColumnMajor);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
                    uint er = tr + (e & 15u), en = tn + (e >> 4);
                    if (er < p.rows && en < p.n_tok) {
                        float v = uintBitsToFloat(sm[stage + (e >> 2)][e & 3u]);
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
