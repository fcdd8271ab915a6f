// Epilogue 5 of the mat-vec kernels (include/mat_vec_out.glsl), the post-norm residual add
// of Gemma's sandwich norms folded into the projection that feeds it: each workgroup
// stores its rows of t = W x into y (binding 2, coherent), then counts itself on a
// device-scope atomic (binding 6, one uint, zero between dispatches); the last workgroup
// of the dispatch adds the RMS-normalised t to the residual stream,
//   res[b, r] += (t[b, r] * (1 / sqrt(mean_r(t[b, r]²) + eps))) * w[r]
// (binding 4 res f32 [NB, rows] with stride p.y_stride, binding 5 w f32 [rows], eps =
// p.eps), as norm.comp's rms variant then a binary add compute it, and sets the count back
// to zero. Every workgroup of the grid must call mv_post_norm_add from uniform control flow
// (none may return before it). Include after mat_vec_out.glsl and reduce.glsl.
#ifndef VKML_MAT_VEC_POST_NORM_GLSL
#define VKML_MAT_VEC_POST_NORM_GLSL
layout(std430, set = 0, binding = 4) buffer RES { float res[]; };
layout(std430, set = 0, binding = 5) readonly buffer PW { float post_w[]; };
layout(std430, set = 0, binding = 6) coherent buffer MVC { uint mv_cnt[]; };
shared uint mv_last;

void mv_post_norm_add() {
    uint tid = gl_LocalInvocationIndex, wg = gl_WorkGroupSize.x;
    // Publish this workgroup's rows of t, then count it.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        uint total = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
        mv_last = atomicAdd(mv_cnt[0], 1u) + 1u == total ? 1u : 0u;
    }
    barrier();
    if (mv_last == 0u) return;
    memoryBarrierBuffer();
    for (uint b = 0; b < NB; b++) {
        float ss = 0.0;
        for (uint i = tid; i < p.rows; i += wg) {
            float t = y[b * p.y_stride + i];
            ss += t * t;
        }
        float scale = 1.0 / sqrt(wg_sum(ss) / float(p.rows) + p.eps);
        for (uint i = tid; i < p.rows; i += wg) {
            uint at = b * p.y_stride + i;
            res[at] += (y[at] * scale) * post_w[i];
        }
    }
    if (tid == 0u) mv_cnt[0] = 0u;
}
#endif
