// RMS-norm prologue of the block mat-vec kernels (include/mul_mat_vec_block.glsl: q32, k,
// iq), on with specialization constant 11, MV_NORM: x is used
// normalised as norm.comp's rms variant makes it, (x * (1 / sqrt(mean(x²) + eps))) * w,
// with w = binding 3 (f32 [k]) and eps = p.eps. Each workgroup computes the scales of its
// NB batch rows itself, reading the whole of each row of x: the norm folded into the
// product that consumes it (one dispatch instead of two; x is small beside the matrix).
// Include after the push constants (p.k, p.eps), NB, and a macro MV_X4(i): vec4 i of x
// (batch rows one after another). The workgroup size is at most 128 (the vec4 kernel's:
// at most 128 subgroups, the reduction's partials).
// One pass (specialization constant 12, MV_NORM_ONE_PASS): x is used as x * w and the
// product is scaled at the end, rms_norm(x) . W = s (x * w) . W with s = 1 / sqrt(mean(x²)
// + eps), the sum of squares taken without a workgroup reduction or barrier before the
// product (mv_norm_scales does nothing): the block kernels' subgroups each sum it over x
// in a loop of their own, the vec4 kernel in its product's loop. Another rounding than
// the two passes (s applied once, at the end).
#ifndef VKML_MAT_VEC_NORM_GLSL
#define VKML_MAT_VEC_NORM_GLSL
#define SUBGROUP_REDUCE 1
#define REDUCE_MAX 128
#include "reduce.glsl"
layout(constant_id = 11) const bool MV_NORM = false;
layout(constant_id = 12) const bool MV_NORM_ONE_PASS = false;
layout(std430, set = 0, binding = 3) readonly buffer NW { vec4 nw4[]; };
float mv_scale[NB];

// Sets mv_scale[b] for the batch rows b < NB. Every invocation of the workgroup calls it
// from uniform control flow (it holds barriers).
void mv_norm_scales() {
    if (MV_NORM_ONE_PASS) return;
    uint k4 = p.k / 4u;
    [[unroll]] for (uint b = 0; b < NB; b++) {
        float s = 0.0;
        for (uint i = gl_LocalInvocationID.x; i < k4; i += gl_WorkGroupSize.x) {
            vec4 v = MV_X4(b * k4 + i);
            s += dot(v, v);
        }
        mv_scale[b] = 1.0 / sqrt(wg_sum(s) / float(p.k) + p.eps);
    }
}

// vec4 i of batch row b of x, normalised where MV_NORM (times the weight only, in one pass).
vec4 mv_x4(uint b, uint i) {
    vec4 v = MV_X4(b * (p.k / 4u) + i);
    if (!MV_NORM) return v;
    return MV_NORM_ONE_PASS ? v * nw4[i] : v * mv_scale[b] * nw4[i];
}

// The one-pass norm's scale from the sum of squares ss of batch row b's x.
float mv_norm_scale_of(float ss) { return 1.0 / sqrt(ss / float(p.k) + p.eps); }
#endif
