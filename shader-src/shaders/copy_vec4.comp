// Bandwidth baseline: b[i] = a[i] for i < n (16-byte elements), 2-D launch.
// Bindings: 0 = a (readonly uvec4[n]), 1 = b (writeonly uvec4[n]). Push constants: n.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, set = 0, binding = 1) writeonly buffer B { uvec4 b[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = vkml_global_index_1d();
    if (i < p.n) b[i] = a[i];
}
