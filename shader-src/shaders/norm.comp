//! variant rms RMS=1
//! variant layer LAYER=1
// Row normalisation over the last dim (n) of x [rows, n], f32, contiguous:
//   rms:   y = x / sqrt(mean(x^2) + eps) * w                    (candle_nn::ops::rms_norm)
//   layer: y = (x - mean) / sqrt(var + eps) * w + b, var biased (candle_nn::ops::layer_norm)
// Bindings: 0 = x, 1 = w [n] (read only when has_w), 2 = b [n] (layer, when has_b), 3 = y.
// Push constants: n, rows, eps, has_w, has_b. One workgroup per row (2-D grid).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "reduce.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { float bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; uint rows; float eps; uint has_w; uint has_b; } p;

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (row >= p.rows) return; // uniform across the workgroup
    uint base = row * p.n;
    uint t = gl_LocalInvocationID.x;
#ifdef RMS
    float s = 0.0;
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) s += x[base + i] * x[base + i];
    float scale = 1.0 / sqrt(wg_sum(s) / float(p.n) + p.eps);
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
        float v = x[base + i] * scale;
        y[base + i] = p.has_w != 0u ? v * w[i] : v;
    }
#else
    float s = 0.0;
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) s += x[base + i];
    float mean = wg_sum(s) / float(p.n);
    float s2 = 0.0;
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) { float d = x[base + i] - mean; s2 += d * d; }
    float scale = 1.0 / sqrt(wg_sum(s2) / float(p.n) + p.eps);
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
        float v = (x[base + i] - mean) * scale;
        if (p.has_w != 0u) v *= w[i];
        if (p.has_b != 0u) v += bias[i];
        y[base + i] = v;
    }
#endif
}
