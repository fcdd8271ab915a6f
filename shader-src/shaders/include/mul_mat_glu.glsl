// The gated-product epilogue of the quantized mat-mats (mul_mat_q.comp, mul_mat_cm.comp,
// mul_mat_cm256.comp), for a weight that stacks the gate rows [0, h) over the up rows
// [h, 2 h) (QMatrix::concat_rows; p.rows = 2 h):
//   y[n, j] = act(sum_c X[n, c] * W[j, c]) * sum_c X[n, c] * W[h + j, c]   for j < h,
// the products of glu.comp (the same f32 activation of the same f32 accumulators), so the
// [n_tok, 2 h] products never reach memory. A workgroup's tile of BM rows takes gate rows
// [h0, h0 + BM / 2) in its first half and the up rows of the same j in its second
// (h0 = BM / 2 * tile index: mm_tile_row), so each output's two sums are in one workgroup.
// Specialization constant 4, MM_GLU: 0 = no epilogue (y = the products, the layout above
// unused), 1 = silu, 2 = gelu (tanh), 3 = gelu_erf (include/activation.glsl). Constant 5,
// MM_GLU_F16: y is f16 [n_tok, h] packed two to a 32-bit word by packHalf2x16 (the bits of
// glu.<act>_f32_to_f16: the x of a tensor-core mat-mat) instead of f32 [n_tok, h].
// Constant 17, MM_GLU_BIAS: gate and up biases join the products before the activation
// (gpt-oss's ffn_{gate,up}_exps.bias, as glu.comp's *_bias variants add them): binding 12,
// f32 [experts, 2 h], the expert's gate biases then its up biases; the expert is workgroup
// z grouped (include/mul_mat_ids.glsl's MM_IDS), else 0. Bound but unread without it.
// Include after the push constants `p` (p.rows is 2 h) and mul_mat_ids.glsl; the kernel
// defines BM.
#ifndef VKML_MUL_MAT_GLU_GLSL
#define VKML_MUL_MAT_GLU_GLSL
#include "activation.glsl"
layout(constant_id = 4) const uint MM_GLU = 0u;
layout(constant_id = 5) const bool MM_GLU_F16 = false;

layout(constant_id = 17) const bool MM_GLU_BIAS = false;
layout(std430, set = 0, binding = 12) readonly buffer MmGluBias { float mm_glu_bias[]; };

// The gated product of output column j (< h) from its gate and up sums.
float mm_glu(float g, float u, uint j) {
    if (MM_GLU_BIAS) {
        uint h = p.rows >> 1, at = (MM_IDS ? gl_WorkGroupID.z : 0u) * 2u * h + min(j, h - 1u);
        g += mm_glu_bias[at];
        u += mm_glu_bias[at + h];
    }
    if (MM_GLU == 4u) return glu_swiglu_oai(g, u);
    float a = MM_GLU == 1u ? act_silu(g) : (MM_GLU == 2u ? act_gelu(g) : act_gelu_erf(g));
    return a * u;
}

// The weight row that row i (< BM) of the tile starting at row r0 = BM * tile multiplies,
// clamped into the matrix (the products of a clamped row land in outputs never stored):
// r0 + i, or with MM_GLU gate row h0 + i of the first half, up row h + h0 + i - BM / 2 of
// the second (h0 = r0 / 2).
uint mm_tile_row(uint r0, uint i) {
    if (MM_GLU != 0u) {
        uint h = p.rows >> 1, half_bm = BM / 2u;
        uint j = min((r0 >> 1) + (i % half_bm), h - 1u);
        return i < half_bm ? j : h + j;
    }
    return min(r0 + i, p.rows - 1u);
}
#endif
