//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
// Batched float matmul for few rows (vkml_ops::matmul's subgroup path: m up to MR rows
// per workgroup row, the shape of decode-time products such as one query against keys):
//   y[b, i, j] = sum_k a[b, i, k] * b[b, k, j],   y packed [batch, m, n]
// with any element strides, as matmul.comp. One subgroup per (b, j) and MR rows: its
// lanes stride over k (coalesced where a and b are contiguous along k, as for x W^T),
// each keeping MR partial sums in f32, combined with subgroupAdd and stored by one lane
// (rounded once to the dtype).
// Bindings: 0 = a, 1 = b, 2 = y. Grid: (gx, ceil(m / MR), gz) with gx gz workgroups of at
// least ceil(batch n / (workgroup size / largest subgroup size)) in all: workgroup (x, z)
// takes columns from (x + z gx) gl_NumSubgroups.
// Push constants: m, n, k, a_off, a_bs, a_rs, a_cs, b_off, b_bs, b_rs, b_cs, batch.
// Specialization constants: 0 = workgroup size (a multiple of the subgroup size), 1 =
// MR (rows per subgroup, at most 8).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#if defined(V_F16) || defined(V_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint MR = 4;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer A { V_ST xa[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { V_ST xb[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint m;
    uint n;
    uint k;
    uint a_off;
    uint a_bs;
    uint a_rs;
    uint a_cs;
    uint b_off;
    uint b_bs;
    uint b_rs;
    uint b_cs;
    uint batch;
} p;

void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    uint col = wg * gl_NumSubgroups + gl_SubgroupID; // b * n + j
    if (col >= p.batch * p.n) return; // whole subgroups leave together
    uint j = col % p.n;
    uint bi = col / p.n;
    uint row0 = gl_WorkGroupID.y * MR;
    uint a_base = p.a_off + bi * p.a_bs + row0 * p.a_rs;
    uint b_base = p.b_off + bi * p.b_bs + j * p.b_cs;
    uint rows = min(MR, p.m - row0);
    float acc[8];
    [[unroll]] for (uint r = 0u; r < 8u; ++r) acc[r] = 0.0;
    for (uint kk = gl_SubgroupInvocationID; kk < p.k; kk += gl_SubgroupSize) {
        float bv = V_LOAD(xb, b_base + kk * p.b_rs);
        [[unroll]] for (uint r = 0u; r < MR; ++r) {
            if (r < rows) acc[r] += V_LOAD(xa, a_base + r * p.a_rs + kk * p.a_cs) * bv;
        }
    }
    uint y_base = bi * p.m * p.n + row0 * p.n + j;
    [[unroll]] for (uint r = 0u; r < MR; ++r) {
        float s = subgroupAdd(acc[r]);
        if (r < rows && subgroupElect()) V_STORE(y, y_base + r * p.n, s);
    }
}
