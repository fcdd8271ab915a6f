//! variant q2_k QTYPE=10
//! variant q3_k QTYPE=11
//! variant q4_k QTYPE=12
//! variant q5_k QTYPE=13
//! variant q6_k QTYPE=14
//! variant q8_k QTYPE=15
// Block-wise fused mat-vec for the K-quants (256-element super-blocks, ggml-common.h
// block_q*_K; field layouts in quant.glsl). Launch, bindings, push and specialization
// constants as include/mul_mat_vec_block.glsl.
// 8 lanes per super-block, each decoding a 32-element slice from 32-bit loads (every quant
// byte read once, by one lane) with vec4 dot products:
//   Q4_K, Q5_K: slice s = (c = s / 2, h = s % 2): the 16 bytes qs[32c + 16h ..] give, from
//     their low nibbles, elements 64c + 16h .. +16 (sub-block 2c) and, from their high
//     nibbles, 64c + 32 + 16h .. +16 (sub-block 2c + 1); two scale/min pairs per slice.
//   Q2_K, Q3_K, Q6_K: slice s = (n = s / 4, lq = s % 4): the 8 bytes at l = 8lq .. 8lq + 8 of
//     half n's quant (and high-bit) arrays hold the four fields g = 0..3: elements
//     128n + 32g + 8lq .. +8, one scale each.
//   Q8_K: slice s = elements 32s .. 32s + 32.
// The sub-block scale multiplies the slice part's dot product where the format has no min
// (Q3_K, Q6_K, Q8_K); with a min (Q2_K, Q4_K, Q5_K) each weight is formed as q * dl - ml
// first, as the Q4_1 comment in mul_mat_vec_q32.comp explains.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint NB = 1;
layout(constant_id = 2) const uint NR = 1;
#include "quant.glsl"
#define SPB 8
#define XV 8
#include "mul_mat_vec_block.glsl"

#if QTYPE == 12 || QTYPE == 13
uint x_at(uint s, uint j) { return 16u * (s >> 1) + 4u * (s & 1u) + 8u * (j >> 2) + (j & 3u); }
#elif QTYPE == 15
uint x_at(uint s, uint j) { return 8u * s + j; }
#else
// xv[2g + w]: elements 128n + 32g + 8lq + 4w .. +4.
uint x_at(uint s, uint j) { return 32u * (s >> 2) + 8u * (j >> 1) + 2u * (s & 3u) + (j & 1u); }
#endif

#if QTYPE == 10
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint n = s >> 2, lq = s & 3u;
    vec2 dm = unpackHalf2x16(qw[(blk + 80u) >> 2]); // d, dmin
    uint q[2];
    LOAD_ALIGNED(q, 2u, blk + 16u + 32u * n + 8u * lq);
    uint sw[2]; // scales[8n .. 8n + 8]; field g's scale is scales[8n + 2g + lq / 2]
    LOAD_ALIGNED(sw, 2u, blk + 8u * n);
    float sum = 0.0;
    [[unroll]] for (uint g = 0; g < 4u; g++) {
        uint sc = (sw[g >> 1] >> (8u * (2u * (g & 1u) + (lq >> 1)))) & 0xFFu;
        precise float dl = dm.x * float(sc & 0xFu);
        precise float ml = dm.y * float(sc >> 4);
        vec4 q0 = u8x4((q[0] >> (2u * g)) & 0x03030303u);
        vec4 q1 = u8x4((q[1] >> (2u * g)) & 0x03030303u);
        sum += dot(q0 * dl - ml, xv[2u * g]) + dot(q1 * dl - ml, xv[2u * g + 1u]);
    }
    return sum;
}
#elif QTYPE == 11
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint n = s >> 2, lq = s & 3u;
    float d = q_f16(blk + 108u);
    uint q[2], hm[2], sw[3];
    LOAD_WORDS(q, 2u, blk + 32u + 32u * n + 8u * lq);
    LOAD_WORDS(hm, 2u, blk + 8u * lq);
    LOAD_WORDS(sw, 3u, blk + 96u); // the 12 scale bytes
    float sum = 0.0;
    [[unroll]] for (uint g = 0; g < 4u; g++) {
        // Scale index 8n + 2g + lq / 2: low nibble (n) of byte b of word g / 2, high bits
        // (2 (2n + g / 2)) of byte b of word 2, b = 2 (g % 2) + lq / 2 (quant.glsl's dq).
        uint b = 2u * (g & 1u) + (lq >> 1);
        uint lo = (sw[g >> 1] >> (8u * b + 4u * n)) & 0xFu;
        uint hi = (sw[2] >> (8u * b + 4u * n + 2u * (g >> 1))) & 3u;
        float sc = float(int(lo | (hi << 4)) - 32);
        // q = low 2 bits + 4 * hmask bit - 4.
        uint sh = 4u * n + g;
        vec4 q0 = u8x4(((q[0] >> (2u * g)) & 0x03030303u) | (((hm[0] >> sh) & 0x01010101u) << 2)) - 4.0;
        vec4 q1 = u8x4(((q[1] >> (2u * g)) & 0x03030303u) | (((hm[1] >> sh) & 0x01010101u) << 2)) - 4.0;
        sum += sc * (dot(q0, xv[2u * g]) + dot(q1, xv[2u * g + 1u]));
    }
    return d * sum;
}
#elif QTYPE == 12 || QTYPE == 13
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint c = s >> 1, h = s & 1u;
    uint w = blk >> 2;
    vec2 dm = unpackHalf2x16(qw[w]); // d, dmin
    // get_scale_min_k4 for sub-blocks 2c and 2c + 1: bytes (2c) % 4 and +1 of the three
    // scale words a (scales[0..4]), m (scales[4..8]), e (scales[8..12]).
    uint sh = 16u * (c & 1u);
    uint a = qw[w + 1u] >> sh, m = qw[w + 2u] >> sh, e = qw[w + 3u] >> sh;
    bool first = c < 2u;
    uint sc0 = first ? a & 63u : (e & 0xFu) | ((a >> 2) & 0x30u);
    uint mn0 = first ? m & 63u : ((e >> 4) & 0xFu) | ((m >> 2) & 0x30u);
    uint sc1 = first ? (a >> 8) & 63u : ((e >> 8) & 0xFu) | ((a >> 10) & 0x30u);
    uint mn1 = first ? (m >> 8) & 63u : ((e >> 12) & 0xFu) | ((m >> 10) & 0x30u);
    precise float d0 = dm.x * float(sc0);
    precise float m0 = dm.y * float(mn0);
    precise float d1 = dm.x * float(sc1);
    precise float m1 = dm.y * float(mn1);
    uint q[4];
    LOAD_ALIGNED(q, 4u, blk + QS_AT + 32u * c + 16u * h);
#if QTYPE == 13
    uint qh[4]; // bit 2c (low nibbles) and 2c + 1 (high) of qh[16h ..] add 16
    LOAD_ALIGNED(qh, 4u, blk + 16u + 16u * h);
#endif
    float sum = 0.0;
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        uint lo = q[i] & 0x0F0F0F0Fu, hi = (q[i] >> 4) & 0x0F0F0F0Fu;
#if QTYPE == 13
        lo |= ((qh[i] >> (2u * c)) & 0x01010101u) << 4;
        hi |= ((qh[i] >> (2u * c + 1u)) & 0x01010101u) << 4;
#endif
        sum += dot(u8x4(lo) * d0 - m0, xv[i]) + dot(u8x4(hi) * d1 - m1, xv[4u + i]);
    }
    return sum;
}
#elif QTYPE == 14
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint n = s >> 2, lq = s & 3u;
    float d = q_f16(blk + 208u);
    uint a[2], b[2], h[2], sw[2];
    LOAD_WORDS(a, 2u, blk + 64u * n + 8u * lq);        // ql: fields 0 (low nibbles), 2 (high)
    LOAD_WORDS(b, 2u, blk + 64u * n + 32u + 8u * lq);  // ql: fields 1, 3
    LOAD_WORDS(h, 2u, blk + 128u + 32u * n + 8u * lq); // qh: 2 bits per field
    LOAD_WORDS(sw, 2u, blk + 192u + 8u * n);           // field g's scale: scales[8n + lq / 2 + 2g]
    float sum = 0.0;
    [[unroll]] for (uint g = 0; g < 4u; g++) {
        int sc = bitfieldExtract(int(sw[g >> 1]), int(8u * (2u * (g & 1u) + (lq >> 1))), 8);
        uint l0 = ((g & 1u) == 0u ? a[0] : b[0]) >> (4u * (g >> 1));
        uint l1 = ((g & 1u) == 0u ? a[1] : b[1]) >> (4u * (g >> 1));
        vec4 q0 = u8x4((l0 & 0x0F0F0F0Fu) | (((h[0] >> (2u * g)) & 0x03030303u) << 4)) - 32.0;
        vec4 q1 = u8x4((l1 & 0x0F0F0F0Fu) | (((h[1] >> (2u * g)) & 0x03030303u) << 4)) - 32.0;
        sum += float(sc) * (dot(q0, xv[2u * g]) + dot(q1, xv[2u * g + 1u]));
    }
    return d * sum;
}
#elif QTYPE == 15
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    float d = uintBitsToFloat(qw[blk >> 2]);
    uint q[8];
    LOAD_ALIGNED(q, 8u, blk + 4u + 32u * s);
    float sum = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; i++) sum += dot(i8x4(q[i]), xv[i]);
    return d * sum;
}
#endif
