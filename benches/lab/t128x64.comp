// Quantized mat-mat for prompts on tensor cores (VK_KHR_cooperative_matrix, f16 x f16 with
// f32 accumulation, 16x16x16 subgroup matrices):
//   C[n, r] (+)= sum_c X[n, c] * W[r, c]   for n < n_tok, r < rows.
// X f16 [n_tok, k] row-major (the op converts f32 activations first); W raw GGUF blocks
// (row r at w_offset + r * row_bytes); C f32 [n_tok, rows]. k must be a multiple of 32
// (and of the block size).
//
// One workgroup of 256 invocations = 8 subgroups of 32 computes a BM x BN = 128 rows x 128
// tokens tile. Per BK = 32 step the weight tile is decoded from its blocks into shared
// memory as f16 (each invocation decodes 16 elements of one row: Q4_0 and Q8_0 in packed
// f16 arithmetic, two elements per instruction, Q4_K in f32, every other type element by
// element through dq()), the X tile is copied beside it, and each subgroup multiplies its
// 32 x 64 part with 2 x 4 accumulators. Shared memory is double-buffered (one barrier per
// step) and the blocks of the next two steps are in flight in registers during a step's
// multiplies, so global latency and decoding overlap tensor-core work.
// Each weight is the f16 rounding of its exact value (as f16(dq()) would give: the packed
// Q4_0/Q8_0 products (q - 8) * d and q * d are exact before their one rounding); results
// equal sum(f16(w) * x) accumulated in f32.
//
// Split-K: workgroup z sums k in [z * k_chunk, min(k, (z + 1) * k_chunk)) and writes its
// partial product to C + z * n_tok * rows (k_chunk a multiple of 256); the op adds the
// partials afterwards (`reduce_partials.comp`). Without a split (one z), C is the output.
// Bindings: 0 = W, 1 = X (uvec4: 8 halves), 2 = C. Push constants: w_offset, row_bytes, k, rows,
// n_tok, accumulate (1: add to C, folding a residual add into the product), k_chunk.
// Grid: x = ceil(rows / 128), y = ceil(n_tok / 128), z = ceil(k / k_chunk). Requires
// subgroup size 32. Specialization constant 0, ROW_RASTER: when true, workgroup (x, y)
// takes the tile of linear index x + y * gx in row-tile-major order (the token tiles of
// one row tile are consecutive), so those workgroups run together and read that weight
// tile from memory once, the others from L2 (on the H100: Q4_0 +25 %, Q4_K +14 %, Q8_0
// -4 to -8 %; benches/RESULTS.md).
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
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; } p;

#define BM 128u
#define BN 64u
#define BK 32u
// f16vec4 per shared row: BK / 4 = 8 plus 2 of padding (80-byte rows spread the banks).
#define LDS 10u
// Two buffers each (48 KiB in all with the staging tiles: the portable maximum).
shared f16vec4 sa[2u * BM * LDS];
shared f16vec4 sb[2u * BN * LDS];
shared float stage[8u * 256u]; // one 16 x 16 f32 tile per subgroup, for edge stores

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

vec4 nib_lo(uint u) { uint v = u & 0x0F0F0F0Fu; return vec4(v & 0xFFu, (v >> 8) & 0xFFu, (v >> 16) & 0xFFu, v >> 24); }

// Two bytes (0/2 and 1/3 of u, each masked to its low `mask` bits) as f16 pairs in
// element order: 1024 + byte via the exponent trick (0x6400 = 1024.0), so that
// (pair - 1024 - offset) is the exact small integer.
f16vec4 bytes4(uint u, uint mask, float16_t offset) {
    uint e02 = (u & mask) | 0x64006400u;        // bytes 0 and 2
    uint e13 = ((u >> 8) & mask) | 0x64006400u; // bytes 1 and 3
    f16vec2 a = unpackFloat2x16((e02 & 0xFFFFu) | (e13 << 16));
    f16vec2 b = unpackFloat2x16((e02 >> 16) | (e13 & 0xFFFF0000u));
    precise f16vec4 q = f16vec4(a, b) - offset;
    return q;
}

// Raw data of this invocation's 16 weights for one step, loaded ahead of use.
#if QTYPE == 2
#define NWORDS 2u
#elif QTYPE == 8 || QTYPE == 12
#define NWORDS 4u
#elif QTYPE == 1
#define NWORDS 8u
#else
#define NWORDS 0u
#endif
struct WRaw {
    uint q[NWORDS > 0u ? NWORDS : 1u];
    vec2 s; // scales: Q4_0/Q8_0 d; Q4_K d * sc, dmin * m
};

// Invocation t decodes weights of tile row t / 2, elements 16 (t % 2) .. + 16 of the step
// (Q4_0: low nibbles 8h..8h+7 and high nibbles 16+8h..16+8h+7 of its block).
WRaw load_w(uint r, uint h, uint k0) {
    WRaw w;
    w.s = vec2(0.0);
    [[unroll]] for (uint i = 0; i < max(NWORDS, 1u); i++) w.q[i] = 0u;
    if (r >= p.rows) return w;
    uint row = p.w_offset + r * p.row_bytes;
#if QTYPE == 1
    // Rows of 2k bytes stay word-aligned (k % 32 == 0, w_offset % 4 == 0).
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
    uint t = (k0 >> 5) & 7u;
    uint sc, m;
    if (t < 4u) {
        sc = q_u8(blk + 4u + t) & 63u;
        m = q_u8(blk + 8u + t) & 63u;
    } else {
        sc = (q_u8(blk + 8u + t) & 0xFu) | ((q_u8(blk + t) >> 6) << 4);
        m = (q_u8(blk + 8u + t) >> 4) | ((q_u8(blk + 4u + t) >> 6) << 4);
    }
    precise float d1 = q_f16(blk) * float(sc);
    precise float m1 = q_f16(blk + 2u) * float(m);
    w.s = vec2(d1, m1);
    // 144-byte blocks keep qs word-aligned (w_offset is a multiple of 4).
    uint at = (blk + 16u + (t >> 1) * 32u + 16u * h) >> 2;
    [[unroll]] for (uint i = 0; i < 4u; i++) w.q[i] = (qw[at + i] >> ((t & 1u) * 4u)) & 0x0F0F0F0Fu;
#endif
    return w;
}

void store_w(uint o, uint r, uint h, uint k0, WRaw w) {
#if QTYPE == 1
    [[unroll]] for (uint i = 0; i < 4u; i++) sa[o + 4u * h + i] = f16vec4(unpackFloat2x16(w.q[2u * i]), unpackFloat2x16(w.q[2u * i + 1u]));
#elif QTYPE == 2
    float16_t d = float16_t(w.s.x); // exact: d is an f16
    [[unroll]] for (uint i = 0; i < 2u; i++) {
        precise f16vec4 lo = bytes4(w.q[i], 0x000F000Fu, 1032.0hf) * d;
        precise f16vec4 hi = bytes4(w.q[i] >> 4, 0x000F000Fu, 1032.0hf) * d;
        sa[o + 2u * h + i] = lo;
        sa[o + 4u + 2u * h + i] = hi;
    }
#elif QTYPE == 8
    float16_t d = float16_t(w.s.x);
    // q + 128 as an unsigned byte: 1024 + 128 + q - 1152 = q.
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
    // Any other type: element by element through the shared decoder.
    if (r >= p.rows) {
        [[unroll]] for (uint i = 0; i < 4u; i++) sa[o + 4u * h + i] = f16vec4(0.0);
        return;
    }
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

struct XRaw { uvec4 v[2]; };

XRaw load_x(uint n, uint h, uint k0) {
    XRaw x;
    if (gl_LocalInvocationID.x >= 2u * BN) { x.v[0] = uvec4(0u); x.v[1] = uvec4(0u); return x; }
    [[unroll]] for (uint i = 0; i < 2u; i++) x.v[i] = n < p.n_tok ? x8[n * (p.k >> 3) + (k0 >> 3) + 2u * h + i] : uvec4(0u);
    return x;
}

void store_x(uint o, XRaw x) {
    if (gl_LocalInvocationID.x >= 2u * BN) return;
    [[unroll]] for (uint i = 0; i < 2u; i++) {
        sb[o + 2u * i] = f16vec4(unpackFloat2x16(x.v[i].x), unpackFloat2x16(x.v[i].y));
        sb[o + 2u * i + 1u] = f16vec4(unpackFloat2x16(x.v[i].z), unpackFloat2x16(x.v[i].w));
    }
}

// The multiplies of one step from shared buffer BUF into acc.
#define MMA_STEP(BUF) { \
    uint abase_ = (BUF) * BM * LDS, bbase_ = (BUF) * BN * LDS; \
    [[unroll]] for (uint kk = 0; kk < BK / 4u; kk += 4u) { \
        MAT_A a[2]; \
        MAT_B b[2]; \
        [[unroll]] for (uint i = 0; i < 2u; i++) \
            coopMatLoad(a[i], sa, abase_ + (wr * 32u + 16u * i) * LDS + kk, LDS, gl_CooperativeMatrixLayoutRowMajor); \
        [[unroll]] for (uint j = 0; j < 2u; j++) \
            coopMatLoad(b[j], sb, bbase_ + (wn * 32u + 16u * j) * LDS + kk, LDS, gl_CooperativeMatrixLayoutColumnMajor); \
        [[unroll]] for (uint i = 0; i < 2u; i++) \
            [[unroll]] for (uint j = 0; j < 2u; j++) acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]); \
    } }

void main() {
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    uint t = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint wr = sg & 3u, wn = sg >> 2; // this subgroup: rows 32 wr .. +32, tokens 32 wn .. +32
    uint lr = t >> 1, h = t & 1u;    // this invocation's tile row / token and half-step
    uint r = r0 + lr, n = n0 + lr;

    MAT_C acc[2][2];
    [[unroll]] for (uint i = 0; i < 2u; i++) [[unroll]] for (uint j = 0; j < 2u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    // Two register sets keep the loads of two steps in flight: set 0 holds even steps,
    // set 1 odd steps; shared buffer b holds the step being multiplied.
    WRaw w0 = load_w(r, h, kb);
    XRaw x0 = load_x(n, h, kb);
    WRaw w1 = w0;
    XRaw x1 = x0;
    if (kb + BK < ke) {
        w1 = load_w(r, h, kb + BK);
        x1 = load_x(n, h, kb + BK);
    }
    store_w(lr * LDS, r, h, kb, w0);
    store_x(lr * LDS + 4u * h, x0);
    barrier();
    for (uint k0 = kb; ; k0 += 2u * BK) { // exits are uniform
        // Even step k0: buffer 0 holds it, set 1 holds k0 + BK.
        if (k0 + 2u * BK < ke) {
            w0 = load_w(r, h, k0 + 2u * BK);
            x0 = load_x(n, h, k0 + 2u * BK);
        }
        MMA_STEP(0u)
        if (k0 + BK >= ke) break;
        // Buffer 1 was last read before the previous barrier.
        store_w(BM * LDS + lr * LDS, r, h, k0 + BK, w1);
        store_x(BN * LDS + lr * LDS + 4u * h, x1);
        barrier();
        // Odd step k0 + BK: buffer 1 holds it, set 0 holds k0 + 2 BK.
        if (k0 + 3u * BK < ke) {
            w1 = load_w(r, h, k0 + 3u * BK);
            x1 = load_x(n, h, k0 + 3u * BK);
        }
        MMA_STEP(1u)
        if (k0 + 2u * BK >= ke) break;
        store_w(lr * LDS, r, h, k0 + 2u * BK, w0);
        store_x(lr * LDS + 4u * h, x0);
        barrier();
    }

    uint lane = gl_SubgroupInvocationID;
    uint cbase = gl_WorkGroupID.z * p.n_tok * p.rows;
    [[unroll]] for (uint i = 0; i < 2u; i++) {
        [[unroll]] for (uint j = 0; j < 2u; j++) {
            uint tr = r0 + wr * 32u + 16u * i, tn = n0 + wn * 32u + 16u * j;
            if (tr >= p.rows || tn >= p.n_tok) continue; // uniform across the subgroup
            if (p.accumulate == 0u && tr + 16u <= p.rows && tn + 16u <= p.n_tok) {
                coopMatStore(acc[i][j], c, cbase + tn * p.rows + tr, p.rows, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                // Element (row e % 16, token e / 16) at stage[sg * 256 + e].
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
