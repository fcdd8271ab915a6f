// Output stage of the mat-vec kernels (y f32 [batch, rows], binding 2), chosen by
// specialization constant 10, EPILOGUE:
//   0  y[b, r] = t
//   1  y[b, r] += t                       (a residual add folded into the product)
//   2  y[b, r] = silu(gate) * up          gated products: the weight holds the gate rows
//   3  y[b, r] = gelu(gate) * up          [0, rows) then the up rows [rows, 2 rows)
//   4  y[b, r] = gelu_erf(gate) * up      (QMatrix::concat_rows), x read once for both
//   5  y[b, r] = t, then res += rms_norm(y) * w by the dispatch's last workgroup
//      (include/mat_vec_post_norm.glsl; kernels that define MV_POST_NORM)
//   6  y[b, r] = cap * tanh(t * inv)    soft-capped logits (Gemma 2's head), inv and cap
//      the f32 bits of specialization constants 14 and 15 (activation.glsl's softcap)
//   7  y[b, r] = swiglu_oai(gate, up)     gpt-oss's clamped gated product (activation.glsl)
// `rows` is the output row count (push constant p.rows) and y_stride the distance between
// the batch columns' rows in y (p.y_stride: rows, or the whole matrix's output rows where
// the op runs one part of a matrix split over several bindings); include after the push
// constants are declared.
#ifndef VKML_MAT_VEC_OUT_GLSL
#define VKML_MAT_VEC_OUT_GLSL
#include "activation.glsl"
layout(constant_id = 10) const uint EPILOGUE = 0;
const bool MV_GLU = (EPILOGUE >= 2u && EPILOGUE <= 4u) || EPILOGUE == 7u;
// Epilogue 5 (kernels defining MV_POST_NORM: include/mat_vec_post_norm.glsl): y[b, r] = t,
// then the last workgroup adds the normalised y to a residual.
const bool MV_POST = EPILOGUE == 5u;
layout(constant_id = 14) const float MV_CAP_INV = 0.0;
layout(constant_id = 15) const float MV_CAP = 0.0;
#ifdef MV_POST_NORM
layout(std430, set = 0, binding = 2) coherent buffer Y { float y[]; };
#else
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
#endif

void mv_store(uint b, uint r, float t) {
    uint at = b * p.y_stride + r;
    y[at] = EPILOGUE == 1u ? y[at] + t : (EPILOGUE == 6u ? softcap(t, MV_CAP_INV, MV_CAP) : t);
}

// The gated product act(g) * u of epilogues 2-4, gpt-oss's of 7.
float mv_glu(float g, float u) {
    if (EPILOGUE == 7u) return glu_swiglu_oai(g, u);
    float a = EPILOGUE == 2u ? act_silu(g) : (EPILOGUE == 3u ? act_gelu(g) : act_gelu_erf(g));
    return a * u;
}

void mv_store_glu(uint b, uint r, float g, float u) {
    y[b * p.y_stride + r] = mv_glu(g, u);
}
#endif
