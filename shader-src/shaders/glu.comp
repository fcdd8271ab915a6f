//! variant silu_f32 SILU=1
//! variant gelu_f32 GELU=1
//! variant gelu_erf_f32 GELU_ERF=1
//! variant silu_f16 SILU=1 F16=1
//! variant gelu_f16 GELU=1 F16=1
//! variant gelu_erf_f16 GELU_ERF=1 F16=1
//! variant silu_f32_to_f16 SILU=1 OUT_F16=1
//! variant gelu_f32_to_f16 GELU=1 OUT_F16=1
//! variant gelu_erf_f32_to_f16 GELU_ERF=1 OUT_F16=1
//! variant swiglu_oai_f32 SWIGLU_OAI=1
//! variant swiglu_oai_f16 SWIGLU_OAI=1 F16=1
//! variant swiglu_oai_f32_to_f16 SWIGLU_OAI=1 OUT_F16=1
// Gated activations, element-wise over n (gate, up, y of type ACT: f32, or f16 with F16;
// arithmetic in f32): y = act(gate) * up with
//   silu: g / (1 + exp(-g));  gelu: tanh approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)));
//   gelu_erf: 0.5 g (1 + erf(g / sqrt(2))). (candle's silu / gelu / gelu_erf.)
// swiglu_oai: gpt-oss's clamped form of gate and up together (include/activation.glsl).
// *_f32_to_f16 (OUT_F16): f32 gate and up, y f16 packed two to a word by packHalf2x16 (as
// convert_f16.comp writes it: the bits of the f32 y then convert_f16), each invocation two
// consecutive outputs (n and half_row even): the f16 x of a tensor-core mat-mat in one pass.
// Bindings: 0 = gate, 1 = up, 2 = y. Push constants: n, half_row. With half_row = 0, element i
// of gate and up; else gate and up are one buffer of rows of 2 half_row (a product with a
// stacked [gate; up] matrix): element i is row i / half_row, gate column i % half_row, up column
// half_row + i % half_row.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
#include "activation.glsl"
layout(std430, set = 0, binding = 0) readonly buffer G { ACT g[]; };
layout(std430, set = 0, binding = 1) readonly buffer U { ACT u[]; };
#ifdef OUT_F16
layout(std430, set = 0, binding = 2) writeonly buffer Y { uint yw[]; };
#else
layout(std430, set = 0, binding = 2) writeonly buffer Y { ACT y[]; };
#endif
layout(push_constant) uniform P { uint n; uint half_row; } p;

// act(gate) * up of output i.
float gated(uint i) {
    uint gi = i;
    uint ui = i;
    if (p.half_row > 0u) {
        uint r = i / p.half_row;
        gi = i + r * p.half_row;
        ui = gi + p.half_row;
    }
    float x = float(g[gi]);
#if defined(SWIGLU_OAI)
    return glu_swiglu_oai(x, float(u[ui]));
#else
#if defined(SILU)
    float a = act_silu(x);
#elif defined(GELU)
    float a = act_gelu(x);
#else
    float a = act_gelu_erf(x);
#endif
    return a * float(u[ui]);
#endif
}

void main() {
    uint i = vkml_global_index_1d();
#ifdef OUT_F16
    if (2u * i >= p.n) return;
    yw[i] = packHalf2x16(vec2(gated(2u * i), gated(2u * i + 1u)));
#else
    if (i >= p.n) return;
    y[i] = ACT(gated(i));
#endif
}
