// Sum of split-K partial products: y[i] = (accumulate ? y[i] : 0) + sum_z part[z * n + i]
// for i < n (f32; n a multiple of 4 is not required: the tail is handled per element).
// Bindings: 0 = part [splits * n], 1 = y [n]. Push constants: n, splits, accumulate.
// Workgroup: spec constant 0; one element per invocation, 2-D grid.
#version 450
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer Part { float part[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; uint splits; uint accumulate; } p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n) return;
    float s = p.accumulate != 0u ? y[i] : 0.0;
    for (uint z = 0; z < p.splits; z++) s += part[z * p.n + i];
    y[i] = s;
}
