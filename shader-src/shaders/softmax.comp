//! variant f32
//! variant f32_sg SUBGROUP_REDUCE=1
//! variant f16 F16=1
//! variant f16_sg F16=1 SUBGROUP_REDUCE=1
// Numerically stable softmax over the last dim of x [rows, n] (x, y of type ACT: f32, or
// f16 with F16; arithmetic in f32):
//   y = softmax(x * scale + mask), mask f32 [mask_rows, n] broadcast over rows
//   (row % mask_rows), absent when mask_rows == 0. A row whose inputs are all -inf gives
//   zeros (not NaN).
// Bindings: 0 = x, 1 = mask (read only when mask_rows > 0), 2 = y.
// Push constants: n, rows, scale, mask_rows. One workgroup per row (2-D grid).
// Reductions: reduce.glsl, subgroup path with SUBGROUP_REDUCE.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
#include "reduce.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { ACT x[]; };
layout(std430, set = 0, binding = 1) readonly buffer M { float mask[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { ACT y[]; };
layout(push_constant) uniform P { uint n; uint rows; float scale; uint mask_rows; } p;

float logit(uint row, uint i) {
    float v = float(x[row * p.n + i]) * p.scale;
    if (p.mask_rows != 0u) v += mask[(row % p.mask_rows) * p.n + i];
    return v;
}

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (row >= p.rows) return; // uniform across the workgroup
    uint t = gl_LocalInvocationID.x;
    float m = uintBitsToFloat(0xFF800000u); // -inf
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) m = max(m, logit(row, i));
    m = wg_max(m);
    float s = 0.0;
    if (!isinf(m)) {
        for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) s += exp(logit(row, i) - m);
    }
    s = wg_sum(s);
    float inv = s > 0.0 ? 1.0 / s : 0.0;
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
        y[row * p.n + i] = ACT(isinf(m) ? 0.0 : exp(logit(row, i) - m) * inv);
    }
}
