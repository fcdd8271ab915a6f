//! variant f32 QTYPE=0
//! variant f16 QTYPE=1
//! variant bf16 QTYPE=30
//! variant q4_0 QTYPE=2
//! variant q4_1 QTYPE=3
//! variant q5_0 QTYPE=6
//! variant q5_1 QTYPE=7
//! variant q8_0 QTYPE=8
//! variant f32_sg QTYPE=0 SUBGROUP=1
//! variant f16_sg QTYPE=1 SUBGROUP=1
//! variant bf16_sg QTYPE=30 SUBGROUP=1
//! variant q4_0_sg QTYPE=2 SUBGROUP=1
//! variant q4_1_sg QTYPE=3 SUBGROUP=1
//! variant q5_0_sg QTYPE=6 SUBGROUP=1
//! variant q5_1_sg QTYPE=7 SUBGROUP=1
//! variant q8_0_sg QTYPE=8 SUBGROUP=1
// Vectorised fused mat-vec: as mul_mat_vec.comp, but each invocation takes 4
// consecutive elements per step (dq4: one or two 32-bit weight loads, one vec4 x load),
// so a subgroup of 32 reads 128 contiguous elements per step. Needs k % 4 == 0.
// Bindings: 0 = W (raw blocks, row r at w_offset + r * row_bytes), 1 = x (vec4[batch * k / 4]),
//           2 = y (f32[batch * rows]); epilogues (residual add, gated products) per
//           include/mat_vec_out.glsl. Push constants: w_offset, row_bytes, k, rows, batch,
//           y_stride.
// One workgroup per row; workgroup size = specialization constant 0 (power of two ≤ 128;
// the SUBGROUP variants up to 1024, at most 128 subgroups).
// The SUBGROUP variants have the RMS-norm prologue of include/mat_vec_norm.glsl for one
// batch row (specialization constant 11; binding 3 = the norm weight, p.eps): each
// workgroup normalises x itself, so ops runs it only for matrices of few rows (a
// mixture-of-experts router).
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#endif
layout(local_size_x_id = 0, local_size_x = 128) in;
#include "quant.glsl"
#include "quant_vec4.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { vec4 x4[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint batch; uint y_stride; float eps; } p;
#include "mat_vec_out.glsl"
#ifdef SUBGROUP
#define NB 1u
#define MV_X4(i) x4[i]
#include "mat_vec_norm.glsl"
#define X4(b_, c4_) (MV_NORM ? mv_x4(0u, c4_) : x4[(b_) * k4 + (c4_)])
#else
#define X4(b_, c4_) x4[(b_) * k4 + (c4_)]
#endif

#define MAX_BATCH 8
shared float partial[MAX_BATCH * 128];

// Row wr's dot products with every batch column into res (valid in invocation 0).
void row_dot(uint wr, out float res[MAX_BATCH]) {
    uint tid = gl_LocalInvocationID.x;
    uint nb = min(p.batch, MAX_BATCH);
    uint k4 = p.k / 4u;
    float acc[MAX_BATCH];
    for (uint b = 0; b < MAX_BATCH; b++) acc[b] = 0.0;
    uint row = p.w_offset + wr * p.row_bytes;
    float ss = 0.0; // (the one-pass norm's sum of squares, batch 1)
    for (uint c4 = tid; c4 < k4; c4 += gl_WorkGroupSize.x) {
        uint c = c4 * 4u;
        vec4 w = dq4(row + (c / QK) * QBYTES, c % QK);
#ifdef SUBGROUP
        if (MV_NORM && MV_NORM_ONE_PASS) {
            vec4 v = x4[c4];
            ss += dot(v, v);
        }
#endif
        for (uint b = 0; b < nb; b++) acc[b] += dot(w, X4(b, c4));
    }
#ifdef SUBGROUP
    for (uint b = 0; b < nb; b++) acc[b] = subgroupAdd(acc[b]);
    bool one_pass = MV_NORM && MV_NORM_ONE_PASS;
    if (one_pass) ss = subgroupAdd(ss);
    if (gl_SubgroupInvocationID == 0) {
        for (uint b = 0; b < nb; b++) partial[b * 128 + gl_SubgroupID] = acc[b];
        if (one_pass) partial[(MAX_BATCH - 1u) * 128 + gl_SubgroupID] = ss;
    }
    barrier();
    // The first subgroup sums the subgroups' partials (each lane those of subgroups lane,
    // lane + subgroup size, ..); its invocation 0 holds the results.
    if (gl_SubgroupID == 0) {
        uint lane = gl_SubgroupInvocationID;
        float sc = 1.0;
        if (one_pass) {
            float t = 0.0;
            for (uint g = lane; g < gl_NumSubgroups; g += gl_SubgroupSize) t += partial[(MAX_BATCH - 1u) * 128 + g];
            sc = mv_norm_scale_of(subgroupAdd(t));
        }
        for (uint b = 0; b < nb; b++) {
            float s = 0.0;
            for (uint g = lane; g < gl_NumSubgroups; g += gl_SubgroupSize) s += partial[b * 128 + g];
            s = subgroupAdd(s);
            res[b] = one_pass ? s * sc : s;
        }
    }
#else
    for (uint b = 0; b < nb; b++) partial[b * 128 + tid] = acc[b];
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            for (uint b = 0; b < nb; b++) partial[b * 128 + tid] += partial[b * 128 + tid + s];
        }
        barrier();
    }
    if (tid == 0) {
        for (uint b = 0; b < nb; b++) res[b] = partial[b * 128];
    }
#endif
    barrier(); // partial is reused by the next call
}

void main() {
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (r >= p.rows) return; // uniform across the workgroup
#ifdef SUBGROUP
    if (MV_NORM) mv_norm_scales(); // (batch 1)
#endif
    uint nb = min(p.batch, MAX_BATCH);
    float g[MAX_BATCH];
    row_dot(r, g);
    if (MV_GLU) {
        float u[MAX_BATCH];
        row_dot(r + p.rows, u);
        if (gl_LocalInvocationID.x == 0) {
            for (uint b = 0; b < nb; b++) mv_store_glu(b, r, g[b], u[b]);
        }
    } else if (gl_LocalInvocationID.x == 0) {
        for (uint b = 0; b < nb; b++) mv_store(b, r, g[b]);
    }
}
