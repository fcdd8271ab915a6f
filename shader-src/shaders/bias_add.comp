//! variant f32
//! variant f16 F16=1
// Row-broadcast bias add in place (x of type ACT: f32, or f16 with F16; arithmetic in f32):
// x[r, c] += b[c] for r < rows, c < n (b f32 [n]), as candle's broadcast_add of a [n]
// bias over [rows, n] (the Q/K/V biases of qwen2).
// Bindings: 0 = x (read-write), 1 = b. Push constants: total (rows * n), n.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) buffer X { ACT x[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(push_constant) uniform P { uint total; uint n; } p;

void main() {
    uint i = vkml_global_index_1d();
    if (i >= p.total) return;
    x[i] = ACT(float(x[i]) + b[i % p.n]);
}
