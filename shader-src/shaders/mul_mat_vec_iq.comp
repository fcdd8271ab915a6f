//! variant iq4_nl QTYPE=20
//! variant iq4_xs QTYPE=23
//! variant mxfp4 QTYPE=39
//! variant nvfp4 QTYPE=40
//! variant tq2_0 QTYPE=35
//! variant q1_0 QTYPE=41
//! variant q2_0 QTYPE=42
// Block-wise fused mat-vec for the code-book, FP4 and ternary/binary formats (ggml-common.h
// block layouts; described in quant.glsl). Launch, bindings, push and specialization
// constants as include/mul_mat_vec_block.glsl (the same as mul_mat_vec_q32.comp's).
// Slices (one lane each, 32 elements, 32-bit loads, vec4 dot products):
//   IQ4_NL, MXFP4 (32-element blocks): the whole block.
//   IQ4_XS: sub-block s (8 lanes per super-block).
//   NVFP4 (64 elements): half s, i.e. sub-blocks 2s and 2s + 1 (2 lanes per block).
//   TQ2_0: s = (n = s / 4, lq = s % 4): the 8 bytes qs[32n + 8lq ..] hold fields g = 0..3,
//     elements 128n + 32g + 8lq .. +8 (8 lanes per block).
//   Q1_0 (128 elements): elements 32s .. 32s + 32 (4 lanes per block).
//   Q2_0 (64 elements): elements 32s .. 32s + 32 (2 lanes per block).
// Code-book values (kvalues_iq4nl, kvalues_mxfp4) are read from shared memory; every
// format's scale multiplies the dot product of its code values with x.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint NB = 1;
layout(constant_id = 2) const uint NR = 1;
#include "quant.glsl"
#if QTYPE == 20 || QTYPE == 39
#define SPB 1
#elif QTYPE == 40 || QTYPE == 42
#define SPB 2
#elif QTYPE == 41
#define SPB 4
#else
#define SPB 8
#endif
#define XV 8
#if QTYPE == 20 || QTYPE == 23 || QTYPE == 39 || QTYPE == 40
#define SHARED_INIT
#endif
#include "mul_mat_vec_block.glsl"

#if QTYPE == 35
// xv[2g + w]: elements 128n + 32g + 8lq + 4w .. +4.
uint x_at(uint s, uint j) { return 32u * (s >> 2) + 8u * (j >> 1) + 2u * (s & 3u) + (j & 1u); }
#else
uint x_at(uint s, uint j) { return 8u * s + j; }
#endif

#ifdef SHARED_INIT
shared float kv_sh[16];
void init_shared() {
    for (uint i = gl_LocalInvocationIndex; i < 16u; i += gl_WorkGroupSize.x) {
#if QTYPE == 20 || QTYPE == 23
        kv_sh[i] = float(KVALUES_IQ4NL[i]);
#else
        kv_sh[i] = float(KVALUES_FP4[i]);
#endif
    }
}
// Code values of the four bytes of u (each < 16).
vec4 kv4(uint u) { return vec4(kv_sh[u & 0xFu], kv_sh[(u >> 8) & 0xFu], kv_sh[(u >> 16) & 0xFu], kv_sh[u >> 24]); }
// Dot product of 16 code values (low nibbles of q[0..4] then high nibbles) with xv[o .. o + 8].
float nib_dot(uint q[4], vec4 xv[XV]) {
    float sum = 0.0;
    [[unroll]] for (uint i = 0; i < 4u; i++) sum += dot(kv4(q[i] & 0x0F0F0F0Fu), xv[i]) + dot(kv4((q[i] >> 4) & 0x0F0F0F0Fu), xv[4u + i]);
    return sum;
}
#endif

#if QTYPE == 20
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[4];
    LOAD_SPAN(q, 4u, blk + 2u);
    return q_f16(blk) * nib_dot(q, xv);
}
#elif QTYPE == 23
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint w0 = qw[blk >> 2]; // d | scales_h << 16
    uint ls = ((qw[(blk >> 2) + 1u] >> (4u * s)) & 0xFu) | (((w0 >> (16u + 2u * s)) & 3u) << 4);
    precise float dl = unpackHalf2x16(w0).x * float(int(ls) - 32);
    uint q[4];
    LOAD_ALIGNED(q, 4u, blk + 8u + 16u * s);
    return dl * nib_dot(q, xv);
}
#elif QTYPE == 39
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint e = q_u8(blk);
    float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
    uint q[4];
    LOAD_SPAN(q, 4u, blk + 1u);
    return d * nib_dot(q, xv);
}
#elif QTYPE == 40
// ggml_ue4m3_to_fp32 times 0.5 (quant.glsl's dq).
float ue4m3_half(uint x) {
    if (x == 0u || x == 0x7Fu) return 0.0;
    uint e = (x >> 3) & 0xFu;
    float man = float(x & 7u);
    precise float raw = e == 0u ? man * uintBitsToFloat(118u << 23) : (1.0 + man * 0.125) * uintBitsToFloat((e + 120u) << 23);
    return raw * 0.5;
}
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint dw = qw[blk >> 2]; // the four sub-block scales
    uint q[4];              // qs[16s .. 16s + 16]: sub-block 2s + u in q[2u], q[2u + 1]
    LOAD_ALIGNED(q, 4u, blk + 4u + 16u * s);
    float sum = 0.0;
    [[unroll]] for (uint u = 0; u < 2u; u++) {
        float part = dot(kv4(q[2u * u] & 0x0F0F0F0Fu), xv[4u * u]) + dot(kv4(q[2u * u + 1u] & 0x0F0F0F0Fu), xv[4u * u + 1u]) +
                     dot(kv4((q[2u * u] >> 4) & 0x0F0F0F0Fu), xv[4u * u + 2u]) +
                     dot(kv4((q[2u * u + 1u] >> 4) & 0x0F0F0F0Fu), xv[4u * u + 3u]);
        sum += ue4m3_half((dw >> (8u * (2u * s + u))) & 0xFFu) * part;
    }
    return sum;
}
#elif QTYPE == 35
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint n = s >> 2, lq = s & 3u;
    uint q[2];
    LOAD_WORDS(q, 2u, blk + 32u * n + 8u * lq);
    float sum = 0.0;
    [[unroll]] for (uint g = 0; g < 4u; g++) {
        sum += dot(u8x4((q[0] >> (2u * g)) & 0x03030303u) - 1.0, xv[2u * g]) +
               dot(u8x4((q[1] >> (2u * g)) & 0x03030303u) - 1.0, xv[2u * g + 1u]);
    }
    return q_f16(blk + 64u) * sum;
}
#elif QTYPE == 41
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[1]; // bit 4i + e: element 32s + 4i + e
    LOAD_SPAN(q, 1u, blk + 2u + 4u * s);
    float sum = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; i++) {
        uint b = q[0] >> (4u * i);
        sum += dot(vec4(b & 1u, (b >> 1) & 1u, (b >> 2) & 1u, (b >> 3) & 1u) * 2.0 - 1.0, xv[i]);
    }
    return q_f16(blk) * sum;
}
#elif QTYPE == 42
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[2]; // byte i of the 8: elements 32s + 4i .. +4
    LOAD_SPAN(q, 2u, blk + 2u + 8u * s);
    float sum = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; i++) {
        uint b = q[i >> 2] >> (8u * (i & 3u));
        sum += dot(vec4(b & 3u, (b >> 2) & 3u, (b >> 4) & 3u, (b >> 6) & 3u) - 1.0, xv[i]);
    }
    return q_f16(blk) * sum;
}
#endif
