//! variant rms_f32 RMS=1
//! variant rms_f32_sg RMS=1 SUBGROUP_REDUCE=1
//! variant rms_f16 RMS=1 F16=1
//! variant rms_f16_sg RMS=1 F16=1 SUBGROUP_REDUCE=1
//! variant layer_f32 LAYER=1
//! variant layer_f32_sg LAYER=1 SUBGROUP_REDUCE=1
//! variant layer_f16 LAYER=1 F16=1
//! variant layer_f16_sg LAYER=1 F16=1 SUBGROUP_REDUCE=1
//! variant add_rms_f32 ADD_RMS=1
//! variant add_rms_f32_sg ADD_RMS=1 SUBGROUP_REDUCE=1
//! variant add_rms_f16 ADD_RMS=1 F16=1
//! variant add_rms_f16_sg ADD_RMS=1 F16=1 SUBGROUP_REDUCE=1
//! variant rms_q8_1_f32 RMS=1 Q8_1_OUT=1
//! variant rms_q8_1_f32_sg RMS=1 Q8_1_OUT=1 SUBGROUP_REDUCE=1
//! variant rms_f16_out_f32 RMS=1 F16_OUT=1
//! variant rms_f16_out_f32_sg RMS=1 F16_OUT=1 SUBGROUP_REDUCE=1
// Row normalisation over the last dim (n) of x [rows, n], contiguous; x, y (and r, h)
// of type ACT (f32, or f16 with F16; arithmetic in f32), w and b f32 [n]:
//   rms:     y = x / sqrt(mean(x^2) + eps) * w                  (candle_nn::ops::rms_norm)
//   layer:   y = (x - mean) / sqrt(var + eps) * w + b, var biased (candle_nn::ops::layer_norm)
//   add_rms: h = x + r (stored, rounded to ACT), y = rms(h) * w (the decode-step fusion of
//            the residual add with the next norm)
//   rms_q8_1: rms, each row's y (f32, as rms computes it) quantized to Q8_1 as it is made
//            (include/q8_1.glsl, as quantize_q8_1.comp on the stored y), written as
//            [rows, n / 32] blocks of 9 words to binding 2; n a multiple of 32 (the
//            decode-step fusion of the norm with the next mat-vec's x quantization)
//   rms_f16_out: rms of f32 x written as f16 pairs (packHalf2x16, as convert_f16.comp
//            rounds; n even): the prompt mat-mat's f16 x without a conversion pass
// Bindings: 0 = x, 1 = w (read only when has_w), 2 = y, 3 = b (layer, read when has_b)
// or r (add_rms), 4 = h (add_rms).
// Push constants: n, rows, eps, has_w, has_b. One workgroup per row (2-D grid).
// Reductions: reduce.glsl, subgroup path with SUBGROUP_REDUCE.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef F16
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
#include "reduce.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { ACT x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };
#ifdef Q8_1_OUT
layout(std430, set = 0, binding = 2) writeonly buffer Y { uint qw[]; };
#define Q8_1_NO_X
#include "q8_1.glsl"
#elif defined(F16_OUT)
layout(std430, set = 0, binding = 2) writeonly buffer Y { uint yh[]; };
#else
layout(std430, set = 0, binding = 2) writeonly buffer Y { ACT y[]; };
#endif
#ifdef LAYER
layout(std430, set = 0, binding = 3) readonly buffer B { float bias[]; };
#endif
#ifdef ADD_RMS
layout(std430, set = 0, binding = 3) readonly buffer R { ACT r[]; };
layout(std430, set = 0, binding = 4) buffer H { ACT h[]; };
#endif
layout(push_constant) uniform P { uint n; uint rows; float eps; uint has_w; uint has_b; } p;

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (row >= p.rows) return; // uniform across the workgroup
    uint base = row * p.n;
    uint t = gl_LocalInvocationID.x;
#if defined(RMS) || defined(ADD_RMS)
    float s = 0.0;
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
#ifdef ADD_RMS
        // The stored residual stream is what the next layer sees: normalise its rounded value.
        float v = float(ACT(float(x[base + i]) + float(r[base + i])));
        h[base + i] = ACT(v);
#else
        float v = float(x[base + i]);
#endif
        s += v * v;
    }
    float scale = 1.0 / sqrt(wg_sum(s) / float(p.n) + p.eps);
#ifdef Q8_1_OUT
    uint nb = p.n / 32u;
    for (uint blk = t; blk < nb; blk += gl_WorkGroupSize.x) {
        float v[32];
        for (uint j = 0; j < 32u; j++) {
            uint i = 32u * blk + j;
            float xv = float(x[base + i]) * scale;
            v[j] = p.has_w != 0u ? xv * w[i] : xv;
        }
        uint qs[8];
        uint o = (row * nb + blk) * 9u;
        qw[o] = q8_1_pack(v, qs);
        for (uint k = 0; k < 8u; k++) qw[o + 1u + k] = qs[k];
    }
#elif defined(F16_OUT)
    for (uint i2 = t; i2 < p.n / 2u; i2 += gl_WorkGroupSize.x) {
        uint i = 2u * i2;
        vec2 v = vec2(float(x[base + i]), float(x[base + i + 1u])) * scale;
        if (p.has_w != 0u) v *= vec2(w[i], w[i + 1u]);
        yh[base / 2u + i2] = packHalf2x16(v);
    }
#else
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
        // add_rms reads back h[i], which this same invocation wrote above.
#ifdef ADD_RMS
        float v = float(h[base + i]) * scale;
#else
        float v = float(x[base + i]) * scale;
#endif
        y[base + i] = ACT(p.has_w != 0u ? v * w[i] : v);
    }
#endif
#else
    float s = 0.0;
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) s += float(x[base + i]);
    float mean = wg_sum(s) / float(p.n);
    float s2 = 0.0;
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) { float d = float(x[base + i]) - mean; s2 += d * d; }
    float scale = 1.0 / sqrt(wg_sum(s2) / float(p.n) + p.eps);
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
        float v = (float(x[base + i]) - mean) * scale;
        if (p.has_w != 0u) v *= w[i];
        if (p.has_b != 0u) v += bias[i];
        y[base + i] = ACT(v);
    }
#endif
}
