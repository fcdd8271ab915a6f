// y[i] = x[i] * params.mul + params.add for i < n, with mul and add read from a buffer:
// a recorded command buffer can be replayed after the host rewrites that buffer.
// Bindings: 0 = x (readonly f32[n]), 1 = y (writeonly f32[n]), 2 = params (readonly {f32 mul, f32 add}).
// Push constants: n (u32). Workgroup size: specialization constant 0 (default 64).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer P { float mul; float add; } params;
layout(push_constant) uniform Params { uint n; } p;

void main() {
    uint i = vkml_global_index_1d();
    if (i < p.n) {
        y[i] = x[i] * params.mul + params.add;
    }
}
