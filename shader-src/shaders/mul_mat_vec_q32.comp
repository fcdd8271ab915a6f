//! variant q4_0 QTYPE=2
//! variant q4_1 QTYPE=3
//! variant q5_0 QTYPE=6
//! variant q5_1 QTYPE=7
//! variant q8_0 QTYPE=8
// Block-wise fused mat-vec for the 32-element GGML block types: each lane decodes whole
// blocks (one slice per block: aligned 32-bit loads joined by funnel shifts, the scale
// factored out of the block's dot product). Launch, bindings, push and specialization
// constants, epilogue: include/mul_mat_vec_block.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint NB = 1;
layout(constant_id = 2) const uint NR = 1;
#include "quant.glsl"
#define SPB 1
#define XV 8
#include "mul_mat_vec_block.glsl"

vec4 nib_lo(uint u) { uint v = u & 0x0F0F0F0Fu; return vec4(v & 0xFFu, (v >> 8) & 0xFFu, (v >> 16) & 0xFFu, v >> 24); }
vec4 nib_hi(uint u) { return nib_lo(u >> 4); }
// Bits i..i+3 of h as the 0/16 fifth bit of four elements.
vec4 bit5(uint h, uint i) { return vec4((h >> i) & 1u, (h >> (i + 1u)) & 1u, (h >> (i + 2u)) & 1u, (h >> (i + 3u)) & 1u) * 16.0; }

// The block at byte blk dotted with its 32 x values.
float block_dot(uint blk, vec4 xv[8]) {
#if QTYPE == 8
    uint q[8];
    LOAD_WORDS(q, 8u, blk + 2u);
    float s = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; i++) s += dot(i8x4(q[i]), xv[i]);
    return q_f16(blk) * s;
#else
#if QTYPE == 2 || QTYPE == 6
    const uint qs_at = QTYPE == 2 ? 2u : 6u;
#else
    const uint qs_at = QTYPE == 3 ? 4u : 8u;
#endif
    uint q[4];
    LOAD_WORDS(q, 4u, blk + qs_at);
    float d = q_f16(blk);
#if QTYPE == 3 || QTYPE == 7
    float m = q_f16(blk + 2u);
#endif
#if QTYPE == 6
    uint h = q_u32(blk + 2u);
#elif QTYPE == 7
    uint h = q_u32(blk + 4u);
#endif
    float s = 0.0;
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        vec4 ql = nib_lo(q[i]);
        vec4 qh = nib_hi(q[i]);
#if QTYPE == 6 || QTYPE == 7
        ql += bit5(h, 4u * i);
        qh += bit5(h, 16u + 4u * i);
#endif
#if QTYPE == 2
        ql -= 8.0; qh -= 8.0;
#elif QTYPE == 6
        ql -= 16.0; qh -= 16.0;
#endif
#if QTYPE == 3 || QTYPE == 7
        // q * d + m per weight: factoring m out as m * sum(x) cancels badly
        // when a block holds outliers.
        s += dot(ql * d + m, xv[i]) + dot(qh * d + m, xv[4u + i]);
#else
        s += dot(ql, xv[i]) + dot(qh, xv[4u + i]);
#endif
    }
#if QTYPE == 3 || QTYPE == 7
    return s;
#else
    return d * s; // a common scale factors out without cancellation
#endif
#endif
}

uint x_at(uint s, uint j) { return j; }
float slice_dot(uint blk, uint s, vec4 xv[XV]) { return block_dot(blk, xv); }
