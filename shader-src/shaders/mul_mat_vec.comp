//! variant f32 QTYPE=0
//! variant f16 QTYPE=1
//! variant bf16 QTYPE=30
//! variant q4_0 QTYPE=2
//! variant q4_1 QTYPE=3
//! variant q5_0 QTYPE=6
//! variant q5_1 QTYPE=7
//! variant q8_0 QTYPE=8
//! variant q8_1 QTYPE=9
//! variant q2_k QTYPE=10
//! variant q3_k QTYPE=11
//! variant q4_k QTYPE=12
//! variant q5_k QTYPE=13
//! variant q6_k QTYPE=14
//! variant q8_k QTYPE=15
//! variant iq4_nl QTYPE=20
//! variant iq4_xs QTYPE=23
//! variant mxfp4 QTYPE=39
//! variant nvfp4 QTYPE=40
//! variant tq1_0 QTYPE=34
//! variant tq2_0 QTYPE=35
//! variant q1_0 QTYPE=41
//! variant q2_0 QTYPE=42
//! variant iq2_xxs QTYPE=16
//! variant iq2_xs QTYPE=17
//! variant iq2_s QTYPE=22
//! variant iq3_xxs QTYPE=18
//! variant iq3_s QTYPE=21
//! variant iq1_s QTYPE=19
//! variant iq1_m QTYPE=29
//! variant q4_0_sg QTYPE=2 SUBGROUP=1
//! variant q4_1_sg QTYPE=3 SUBGROUP=1
//! variant q5_0_sg QTYPE=6 SUBGROUP=1
//! variant q5_1_sg QTYPE=7 SUBGROUP=1
//! variant q8_0_sg QTYPE=8 SUBGROUP=1
//! variant f32_sg QTYPE=0 SUBGROUP=1
//! variant f16_sg QTYPE=1 SUBGROUP=1
//! variant bf16_sg QTYPE=30 SUBGROUP=1
//! variant q8_1_sg QTYPE=9 SUBGROUP=1
//! variant q2_k_sg QTYPE=10 SUBGROUP=1
//! variant q3_k_sg QTYPE=11 SUBGROUP=1
//! variant q4_k_sg QTYPE=12 SUBGROUP=1
//! variant q5_k_sg QTYPE=13 SUBGROUP=1
//! variant q6_k_sg QTYPE=14 SUBGROUP=1
//! variant q8_k_sg QTYPE=15 SUBGROUP=1
//! variant iq4_nl_sg QTYPE=20 SUBGROUP=1
//! variant iq4_xs_sg QTYPE=23 SUBGROUP=1
//! variant mxfp4_sg QTYPE=39 SUBGROUP=1
//! variant nvfp4_sg QTYPE=40 SUBGROUP=1
//! variant tq1_0_sg QTYPE=34 SUBGROUP=1
//! variant tq2_0_sg QTYPE=35 SUBGROUP=1
//! variant q1_0_sg QTYPE=41 SUBGROUP=1
//! variant q2_0_sg QTYPE=42 SUBGROUP=1
//! variant iq2_xxs_sg QTYPE=16 SUBGROUP=1
//! variant iq2_xs_sg QTYPE=17 SUBGROUP=1
//! variant iq2_s_sg QTYPE=22 SUBGROUP=1
//! variant iq3_xxs_sg QTYPE=18 SUBGROUP=1
//! variant iq3_s_sg QTYPE=21 SUBGROUP=1
//! variant iq1_s_sg QTYPE=19 SUBGROUP=1
//! variant iq1_m_sg QTYPE=29 SUBGROUP=1
// Fused dequantize + mat-vec: y[b, r] = sum_c W[r, c] * x[b, c] for r < rows, b < batch,
// reading W's blocks directly (no dequantized copy).
// Bindings: 0 = W (raw blocks, row r at w_offset + r * row_bytes), 1 = x (f32[batch * k]),
//           2 = y (f32[batch * rows]); epilogues (residual add, gated products) per
//           include/mat_vec_out.glsl.
// Push constants: w_offset (bytes), row_bytes, k, rows, batch, y_stride (include/mat_vec_out.glsl).
// One workgroup per row; its invocations stride over the row's elements, each
// accumulating every batch column (up to MAX_BATCH = 8), then reduce: through subgroup
// adds (SUBGROUP variants, needs subgroup arithmetic) or shared memory.
// Workgroup size: specialization constant 0 (power of two).
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x_id = 0, local_size_x = 128) in;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint batch; uint y_stride; float eps; } p;
#include "mat_vec_out.glsl"

#define MAX_BATCH 8
shared float partial[MAX_BATCH * 128];

// Row wr's dot products with every batch column into res (valid in invocation 0).
void row_dot(uint wr, out float res[MAX_BATCH]) {
    uint tid = gl_LocalInvocationID.x;
    uint nb = min(p.batch, MAX_BATCH);
    float acc[MAX_BATCH];
    for (uint b = 0; b < MAX_BATCH; b++) acc[b] = 0.0;
    uint row = p.w_offset + wr * p.row_bytes;
    for (uint c = tid; c < p.k; c += gl_WorkGroupSize.x) {
        float w = dq(row + (c / QK) * QBYTES, c % QK);
        for (uint b = 0; b < nb; b++) acc[b] += w * x[b * p.k + c];
    }
#ifdef SUBGROUP
    for (uint b = 0; b < nb; b++) acc[b] = subgroupAdd(acc[b]);
    if (gl_SubgroupInvocationID == 0) {
        for (uint b = 0; b < nb; b++) partial[b * 128 + gl_SubgroupID] = acc[b];
    }
    barrier();
    if (tid == 0) {
        for (uint b = 0; b < nb; b++) {
            float s = 0.0;
            for (uint g = 0; g < gl_NumSubgroups; g++) s += partial[b * 128 + g];
            res[b] = s;
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
