//! variant silu_f32 SILU=1
//! variant gelu_f32 GELU=1
//! variant gelu_erf_f32 GELU_ERF=1
//! variant silu_f16 SILU=1 F16=1
//! variant gelu_f16 GELU=1 F16=1
//! variant gelu_erf_f16 GELU_ERF=1 F16=1
// Gated activations, element-wise over n (gate, up, y of type ACT: f32, or f16 with F16;
// arithmetic in f32): y = act(gate) * up with
//   silu: g / (1 + exp(-g));  gelu: tanh approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)));
//   gelu_erf: 0.5 g (1 + erf(g / sqrt(2))). (candle's silu / gelu / gelu_erf.)
// Bindings: 0 = gate, 1 = up, 2 = y. Push constants: n.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer G { ACT g[]; };
layout(std430, set = 0, binding = 1) readonly buffer U { ACT u[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { ACT y[]; };
layout(push_constant) uniform P { uint n; } p;

// erf with |error| < 1.2e-7 (W. J. Cody's rational Chebyshev form as tabulated in
// Numerical Recipes, erfc via exp(-z^2 - 1.26551223 + t * (...))).
float erf_approx(float x) {
    float z = abs(x);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
        t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
        t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0.0 ? 1.0 - r : r - 1.0;
}

void main() {
    uint i = vkml_global_index_1d();
    if (i >= p.n) return;
    float x = float(g[i]);
#if defined(SILU)
    float a = x / (1.0 + exp(-x));
#elif defined(GELU)
    float inner = clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -15.0, 15.0);
    float a = 0.5 * x * (1.0 + tanh(inner));
#else
    float a = 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476));
#endif
    y[i] = ACT(a * float(u[i]));
}
