// y = f16(x), round to nearest even, 4 elements per invocation: x f32 [4 n4], y packed f16
// [4 n4] (two per 32-bit word; packHalf2x16, so no 16-bit storage feature is needed).
// Bindings: 0 = x (vec4), 1 = y (uvec2). Push constants: n4. Workgroup: spec constant 0.
#version 450
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { vec4 x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uvec2 y[]; };
layout(push_constant) uniform P { uint n4; } p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n4) return;
    vec4 v = x[i];
    y[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
}
