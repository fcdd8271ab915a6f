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
//! variant silu_f32_bias SILU=1 EXPERT_BIAS=1
//! variant gelu_f32_bias GELU=1 EXPERT_BIAS=1
//! variant gelu_erf_f32_bias GELU_ERF=1 EXPERT_BIAS=1
//! variant swiglu_oai_f32_bias SWIGLU_OAI=1 EXPERT_BIAS=1
// Gated activations, element-wise over n (gate, up, y of type ACT: f32, or f16 with F16;
// arithmetic in f32): y = act(gate) * up with
//   silu: g / (1 + exp(-g));  gelu: tanh approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)));
//   gelu_erf: 0.5 g (1 + erf(g / sqrt(2))). (candle's silu / gelu / gelu_erf.)
// swiglu_oai: gpt-oss's clamped form of gate and up together (include/activation.glsl).
// *_f32_to_f16 (OUT_F16): f32 gate and up, y f16 packed two to a word by packHalf2x16 (as
// convert_f16.comp writes it: the bits of the f32 y then convert_f16), each invocation two
// consecutive outputs (n and half_row even): the f16 x of a tensor-core mat-mat in one pass.
// *_bias (EXPERT_BIAS, the stacked form only): each row's expert bias first (gpt-oss's gate
// and up biases; add_id.comp then this, in one pass): row r's gate column c gets
// b[ids[r] * 2 half_row + c], its up column b[ids[r] * 2 half_row + half_row + c]
// (bindings 3 = ids u32 [rows], 4 = b f32 [n_expert, 2 half_row]; push constant n_expert;
// a row whose id is n_expert or more takes no bias).
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
#ifdef EXPERT_BIAS
layout(std430, set = 0, binding = 3) readonly buffer Ids { uint ids[]; };
layout(std430, set = 0, binding = 4) readonly buffer B { float b[]; };
layout(push_constant) uniform P { uint n; uint half_row; uint n_expert; } p;
#else
layout(push_constant) uniform P { uint n; uint half_row; } p;
#endif

// act(gate) * up of output i.
float gated(uint i) {
    uint gi = i;
    uint ui = i;
    if (p.half_row > 0u) {
        uint r = i / p.half_row;
        gi = i + r * p.half_row;
        ui = gi + p.half_row;
    }
    float x = float(g[gi]), up = float(u[ui]);
#ifdef EXPERT_BIAS
    uint r = i / p.half_row, e = ids[r];
    if (e < p.n_expert) {
        uint at = e * 2u * p.half_row + i % p.half_row;
        x += b[at];
        up += b[at + p.half_row];
    }
#endif
#if defined(SWIGLU_OAI)
    return glu_swiglu_oai(x, up);
#else
#if defined(SILU)
    float a = act_silu(x);
#elif defined(GELU)
    float a = act_gelu(x);
#else
    float a = act_gelu_erf(x);
#endif
    return a * up;
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
