//! variant q4_0 QTYPE=2
//! variant q8_0 QTYPE=8
//! variant q4_k QTYPE=12
//! target vulkan1.3
// Quantized mat-mat for prompts on workgroup-scope cooperative matrices
// (VK_NV_cooperative_matrix2: tensor addressing, block loads with a decode callback;
// f16 x f16 with f32 accumulation):
//   C[n, r] (+)= sum_c X[n, c] * W[r, c]   for n < n_tok, r < rows.
// The interface is mul_mat_cm.comp's (same bindings, push constants and 128 x 128 grid), so
// the op runs either kernel the same way:
// X f16 [n_tok, k] row-major; W raw GGUF blocks (row r at w_offset + r * row_bytes, with
// w_offset and row_bytes multiples of the block's bytes); C f32 [n_tok, rows]. k must be a
// multiple of 32 (and of the block size).
//
// One workgroup (256 invocations, subgroups of 32) computes a BM x BN = 128 weight rows x
// 128 tokens tile as one workgroup-scope accumulator. Each BK = 32 step loads the weight
// tile with coopMatLoadTensorNV through the block layout (setTensorLayoutBlockSizeNV(1, QK)):
// the driver finds each element's block and calls decode() with a buffer reference to it,
// and the X tile through a transposing tensor view. Steps are unrolled 8 at a time so the
// driver can keep loads of later steps in flight. Tiles wholly inside the matrices use
// unclamped layouts; edge tiles use clamp-to-zero layouts (stores outside are dropped).
// Each weight is the f16 rounding of its exact value, as in mul_mat_cm.comp: Q4_0 and
// Q8_0 multiply the small integer by the f16 scale in f16 (an exact product, rounded once);
// Q4_K computes d * sc * q - dmin * m in f32 (ggml's order, no fused multiply-add) and
// rounds once. Results equal sum(f16(w) * x) accumulated in f32 (summation order aside).
//
// Split-K: workgroup z sums k in [z * k_chunk, min(k, (z + 1) * k_chunk)) and writes its
// partial product to C + z * n_tok * ldc (k_chunk a multiple of 256); the op adds the
// partials. Push constants: w_offset, row_bytes, k, rows, n_tok, accumulate (1: add to C),
// k_chunk, ldc (C's row stride, as mul_mat_cm.comp). Grid: x = ceil(rows / 128), y = ceil(n_tok / 128), z = ceil(k / k_chunk).
// Block layouts: ggml-common.h (block_q4_0, block_q8_0, block_q4_K).
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require
layout(local_size_x = 256) in;

#if QTYPE == 2
#define QK 32u
#define QBYTES 18u
struct Block { float16_t d; uint16_t qs[8]; };
#define BLOCK_ALIGN 2
#elif QTYPE == 8
#define QK 32u
#define QBYTES 34u
struct Block { float16_t d; int16_t qs[16]; };
#define BLOCK_ALIGN 2
#elif QTYPE == 12
#define QK 256u
#define QBYTES 144u
struct Block { f16vec2 dm; uint scales[3]; uint qs[32]; };
#define BLOCK_ALIGN 4
#else
#error "mul_mat_cm2: no decode for this QTYPE"
#endif

layout(std430, set = 0, binding = 0) readonly buffer W { Block wb[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float16_t xh[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; } p;

layout(buffer_reference, std430, buffer_reference_align = BLOCK_ALIGN) buffer BlockRef { Block b; };

// Element coordInBlock[1] of the block bl (the row coordinate is 0: blocks are 1 x QK).
float16_t decode(const in BlockRef bl, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    uint i = coordInBlock[1];
#if QTYPE == 2
    // Byte i % 16 of qs: low nibble for i < 16, high nibble for i >= 16.
    uint q = (uint(bl.b.qs[(i & 15u) >> 1]) >> (8u * (i & 1u) + 4u * (i >> 4))) & 15u;
    precise float16_t v = (float16_t(q) - 8.0hf) * bl.b.d;
    return v;
#elif QTYPE == 8
    int q = (int(bl.b.qs[i >> 1]) << (24u - 8u * (i & 1u))) >> 24;
    precise float16_t v = float16_t(q) * bl.b.d;
    return v;
#elif QTYPE == 12
    // Sub-block t = i / 32 has 6-bit scale and min (get_scale_min_k4); element i is in
    // byte 32 (i / 64) + i % 32 of qs, low nibble when (i / 32) is even.
    uint t = i >> 5;
    uint sc, m;
    if (t < 4u) {
        sc = (bl.b.scales[t >> 2] >> (8u * (t & 3u))) & 63u;
        m = (bl.b.scales[1] >> (8u * (t & 3u))) & 63u;
    } else {
        uint lo = (bl.b.scales[2] >> (8u * (t & 3u))) & 0xFFu;
        uint hi_sc = (bl.b.scales[0] >> (8u * (t & 3u) + 6u)) & 3u;
        uint hi_m = (bl.b.scales[1] >> (8u * (t & 3u) + 6u)) & 3u;
        sc = (lo & 0xFu) | (hi_sc << 4);
        m = (lo >> 4) | (hi_m << 4);
    }
    uint byte = 32u * (i >> 6) + (i & 31u);
    uint q = (bl.b.qs[byte >> 2] >> (8u * (byte & 3u) + 4u * (t & 1u))) & 15u;
    vec2 dm = vec2(bl.b.dm);
    precise float d1 = dm.x * float(sc);
    precise float m1 = dm.y * float(m);
    precise float v = d1 * float(q) - m1;
    return float16_t(v);
#endif
}

#define BM 128u
#define BN 128u
#define BK 32u
// Steps per unrolled group: 256 elements of k (a whole Q4_K block).
#define UNROLL 8u

#define MAT_A coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>

// One step at k0 with layouts LA (weights) and LB (activations).
#define STEP(LA, LB, k0) { \
    MAT_A a_; MAT_B b_; \
    coopMatLoadTensorNV(a_, wb, pos_a, sliceTensorLayoutNV(LA, r0, BM, (k0), BK), decode); \
    coopMatLoadTensorNV(b_, xh, 0u, sliceTensorLayoutNV(LB, n0, BN, (k0), BK), view_t); \
    acc = coopMatMulAdd(a_, b_, acc); }

void main() {
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint pos_a = p.w_offset / QBYTES;
    uint stride_a = p.row_bytes / QBYTES; // blocks per row
    uint pos_c = gl_WorkGroupID.z * p.n_tok * p.ldc;

    tensorViewNV<2, false, 1, 0> view_t = createTensorViewNV(2, false, 1, 0);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lc = setTensorLayoutDimensionNV(lc, p.n_tok, p.rows);
    lc = setTensorLayoutStrideNV(lc, p.ldc, 1);

    MAT_C acc = MAT_C(0.0);
    if (p.accumulate != 0u) coopMatLoadTensorNV(acc, c, pos_c, sliceTensorLayoutNV(lc, n0, BN, r0, BM), view_t);

    bool inside = r0 + BM <= p.rows && n0 + BN <= p.n_tok;
    uint k0 = kb;
    if (inside) {
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        la = setTensorLayoutBlockSizeNV(la, 1, QK);
        la = setTensorLayoutDimensionNV(la, p.rows, ke);
        la = setTensorLayoutStrideNV(la, stride_a, 1);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        lb = setTensorLayoutDimensionNV(lb, p.n_tok, ke);
        lb = setTensorLayoutStrideNV(lb, p.k, 1);
        for (; k0 + UNROLL * BK <= ke; k0 += UNROLL * BK) {
            [[unroll]] for (uint j = 0; j < UNROLL; j++) STEP(la, lb, k0 + j * BK)
        }
        for (; k0 < ke; k0 += BK) STEP(la, lb, k0)
    } else {
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        la = setTensorLayoutBlockSizeNV(la, 1, QK);
        la = setTensorLayoutDimensionNV(la, p.rows, ke);
        la = setTensorLayoutStrideNV(la, stride_a, 1);
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        lb = setTensorLayoutDimensionNV(lb, p.n_tok, ke);
        lb = setTensorLayoutStrideNV(lb, p.k, 1);
        for (; k0 < ke; k0 += BK) STEP(la, lb, k0)
    }
    coopMatStoreTensorNV(acc, c, pos_c, sliceTensorLayoutNV(lc, n0, BN, r0, BM), view_t);
}
