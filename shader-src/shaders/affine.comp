//! variant f32 TYPE=float
//! variant f16 TYPE=float16_t F16=1
// y[i] = x[i] * mul + add for i < n, computed in f32 and stored as TYPE.
// Bindings: 0 = x (readonly, n elements of TYPE), 1 = y (writeonly, n elements of TYPE).
// Push constants: n (u32), mul (f32), add (f32).
// Workgroup size: specialization constant 0 (default 64).
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { TYPE x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { TYPE y[]; };
layout(push_constant) uniform Params { uint n; float mul; float add; } p;

void main() {
    uint i = vkml_global_index_1d();
    if (i < p.n) {
        y[i] = TYPE(float(x[i]) * p.mul + p.add);
    }
}
