//! variant iq4_nl QTYPE=20
//! variant iq4_xs QTYPE=23
//! variant mxfp4 QTYPE=39
//! variant nvfp4 QTYPE=40
//! variant tq1_0 QTYPE=34
//! variant tq2_0 QTYPE=35
//! variant q1_0 QTYPE=41
//! variant q2_0 QTYPE=42
//! variant iq2_xxs QTYPE=16
//! variant iq2_xs QTYPE=17
//! variant iq2_s QTYPE=22
//! variant iq3_xxs QTYPE=18
//! variant iq3_s QTYPE=21
// Block-wise fused mat-vec for the code-book, FP4 and ternary/binary formats (ggml-common.h
// block layouts; described in quant.glsl). Launch, bindings, push and specialization
// constants as include/mul_mat_vec_block.glsl.
// Slices (one lane each, 32 elements but for TQ1_0, 32-bit loads, vec4 dot products):
//   IQ4_NL, MXFP4 (32-element blocks): the whole block.
//   IQ4_XS: sub-block s (8 lanes per super-block).
//   NVFP4 (64 elements): half s, i.e. sub-blocks 2s and 2s + 1 (2 lanes per block).
//   TQ1_0: 6 lanes per block; slice s reads qs[8s .. 8s + 8], 5 base-3 digits per byte:
//     elements 32n + 8s .. +8 (s < 4) or 160 + 16n + 8(s - 4) .. +8 (s = 4, 5) for digit n;
//     slices 4 and 5 also take digits 2(s - 4) and 2(s - 4) + 1 of qh[0..4] (elements
//     240 + 4m .. +4 for digit m), so XV is 12 (slices 0..3 load two x vec4s they ignore).
//   TQ2_0: s = (n = s / 4, lq = s % 4): the 8 bytes qs[32n + 8lq ..] hold fields g = 0..3,
//     elements 128n + 32g + 8lq .. +8 (8 lanes per block).
//   Q1_0 (128 elements): elements 32s .. 32s + 32 (4 lanes per block).
//   Q2_0 (64 elements): elements 32s .. 32s + 32 (2 lanes per block).
//   Grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): sub-block s, its four groups
//     of 8 elements each one grid entry (two for IQ3_*) (8 lanes per block). IQ1_S and
//     IQ1_M stay on mul_mat_vec.comp: lavapipe takes many minutes to compile an unrolled
//     kernel indexing their 2048-entry grid as a constant array.
// Code-book values (kvalues_iq4nl, NVFP4's kvalues_mxfp4) are copied to shared memory by each
// workgroup; the packed grids are read from iq_tables.glsl's constant arrays, a grid entry
// (one 32-bit read) decoded to vec4s at once (its 2- or 3-bit codes mapped arithmetically
// to the grid values), and ksigns_iq2xs[i] is computed as i with an even-parity bit 7.
// Every format's scale multiplies the dot product of its code values with x.
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
#elif QTYPE == 34
#define SPB 6
#else
#define SPB 8
#endif
#if QTYPE == 34
#define XV 12
#else
#define XV 8
#endif
#if QTYPE == 20 || QTYPE == 23 || QTYPE == 40
#define SHARED_INIT
#define KV_TABLE
#elif QTYPE == 16 || QTYPE == 17 || QTYPE == 18 || QTYPE == 21 || QTYPE == 22
#define GRID_TABLE
#endif
#include "mul_mat_vec_block.glsl"

#if QTYPE == 34
uint x_at(uint s, uint j) {
    if (j >= 10u) return 60u + 2u * (s & 1u) + (j - 10u); // qh digits (used by slices 4, 5)
    return s < 4u ? 8u * (j >> 1) + 2u * s + (j & 1u) : 40u + 4u * (j >> 1) + 2u * (s - 4u) + (j & 1u);
}
#elif QTYPE == 35
// xv[2g + w]: elements 128n + 32g + 8lq + 4w .. +4.
uint x_at(uint s, uint j) { return 32u * (s >> 2) + 8u * (j >> 1) + 2u * (s & 3u) + (j & 1u); }
#else
uint x_at(uint s, uint j) { return 8u * s + j; }
#endif

#ifdef KV_TABLE
shared float kv_sh[16];
void init_shared() {
    for (uint i = gl_LocalInvocationIndex; i < 16u; i += gl_WorkGroupSize.x) {
#if QTYPE == 20 || QTYPE == 23
        kv_sh[i] = float(KVALUES_IQ4NL[i]);
#else
        kv_sh[i] = float(KVALUES_FP4[i]); // (NVFP4's E2M1 codes)
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

#ifdef GRID_TABLE
#if QTYPE == 16
#define GRID_P IQ2XXS_GRID_P
#elif QTYPE == 17
#define GRID_P IQ2XS_GRID_P
#elif QTYPE == 22
#define GRID_P IQ2S_GRID_P
#elif QTYPE == 18
#define GRID_P IQ3XXS_GRID_P
#else
#define GRID_P IQ3S_GRID_P
#endif
// The packed grid in iq_tables.glsl: two entries per word, 16 bits (8 x 2-bit codes) or
// 12 bits (4 x 3-bit codes). Read from the constant table, not a shared-memory copy: that
// copy needs a workgroup barrier, with which lavapipe (LLVM coroutines) takes many minutes
// to compile these unrolled kernels.
uint grid_word(uint i) { return GRID_P[i >> 3][(i >> 1) & 3u]; }
#if QTYPE == 18 || QTYPE == 21
uint grid_entry(uint i) { return grid_word(i) >> (12u * (i & 1u)); }
// Codes 0..3 of entry e: IQ3XXS [4, 12, .., 52, 62], IQ3S [1, 3, .., 15].
vec4 grid4(uint e) {
    uvec4 c = (uvec4(e) >> uvec4(0u, 3u, 6u, 9u)) & 7u;
#if QTYPE == 18
    return vec4(4u + 8u * c + ((c + 1u) >> 3) * 2u);
#else
    return vec4(2u * c + 1u);
#endif
}
#else
uint grid_entry(uint i) { return grid_word(i) >> (16u * (i & 1u)); }
// Codes 0..3 of entry e (shift e by 8 for codes 4..7): IQ2 grids [8, 25, 43].
vec4 grid4(uint e) {
    uvec4 c = (uvec4(e) >> uvec4(0u, 2u, 4u, 6u)) & 3u;
    return vec4(8u + 17u * c + (c >> 1));
}
#endif
// ksigns_iq2xs[i]: i with bit 7 set where i has an odd number of bits.
uint ksigns(uint i) { return i | ((uint(bitCount(i)) & 1u) << 7); }
// +-1 from sign bits 0..3 of b.
vec4 sgn4(uint b) { return vec4(1.0) - 2.0 * vec4((uvec4(b) >> uvec4(0u, 1u, 2u, 3u)) & 1u); }
// Dot product of group l's 8 signed grid values (entry e, sign bits sg) with xv[2l], xv[2l + 1].
float group_dot(uint e, uint sg, vec4 x0, vec4 x1) { return dot(grid4(e) * sgn4(sg), x0) + dot(grid4(e >> 8) * sgn4(sg >> 4), x1); }
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
// E2M1 codes as f16: the sign (code bit 3) at bit 15, the exponent and mantissa (code bits
// 0..2) at bits 9..11; the f16 of a code is its E2M1 value times 2^-14, exactly (code 1,
// E2M1's subnormal 0.5, is f16's subnormal 2^-15). No table: the shared-memory lookups of
// a code book shared the L1's data path with the x loads (H100: 38 % of copy bandwidth).
// FP4_PAIR(q, P): the codes at bits P..P+3 and P+16..P+19 of q as an f16 pair, by two
// shifts and masks straight from the loaded word (no masking into bytes first).
#define FP4_PAIR(q, P) unpackHalf2x16((((q) << (12u - (P))) & 0x80008000u) | (((q) << (9u - (P))) & 0x0E000E00u))
#define FP4_PAIR12(q) unpackHalf2x16(((q) & 0x80008000u) | (((q) >> 3) & 0x0E000E00u))
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint e = mxfp4_e(blk);
    uint q[4];
    MXFP4_LOAD_QS(q, blk);
    float sum = 0.0;
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        // Nibble 2j of q[i] is element 4i + j, nibble 2j + 1 element 4i + 16 + j: the pairs
        // at bits 0 and 8 are elements 4i + (0, 2) and (1, 3), at 4 and 12 the high half's.
        vec2 a = FP4_PAIR(q[i], 0u), b = FP4_PAIR(q[i], 8u), c = FP4_PAIR(q[i], 4u), d = FP4_PAIR12(q[i]);
        sum += dot(vec4(a.x, b.x, a.y, b.y), xv[i]) + dot(vec4(c.x, d.x, c.y, d.y), xv[4u + i]);
    }
    // ggml: 2^(e - 128) times kvalues_mxfp4 (twice E2M1), i.e. 2^(e - 113) times these f16
    // values. Powers of two scale exactly, so the sum and product round as ggml's do.
    if (e <= 240u) return uintBitsToFloat((e + 14u) << 23) * sum;
    return uintBitsToFloat((e - 1u) << 23) * (sum * 32768.0);
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
#elif QTYPE == 34
// Digit (the power p = 3^n) of the four bytes of u, minus one.
vec4 trit4(uint u, uint p) {
    uvec4 b = (uvec4(u) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu;
    return vec4((((b * p) & 0xFFu) * 3u) >> 8) - 1.0;
}
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[2];
    LOAD_WORDS(q, 2u, blk + 8u * s);
    float sum = 0.0;
    uint p = 1u;
    [[unroll]] for (uint n = 0; n < 5u; n++) {
        sum += dot(trit4(q[0], p), xv[2u * n]) + dot(trit4(q[1], p), xv[2u * n + 1u]);
        p *= 3u;
    }
    if (s >= 4u) {
        uint h = q_u32(blk + 48u);
        uint p0 = s == 4u ? 1u : 9u;
        sum += dot(trit4(h, p0), xv[10]) + dot(trit4(h, 3u * p0), xv[11]);
    }
    return q_f16(blk + 52u) * sum;
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
#elif QTYPE == 16
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[2]; // 4 grid indices, aux = 4 x 7-bit sign indices | scale << 28
    LOAD_SPAN(q, 2u, blk + 2u + 8u * s);
    precise float db = q_f16(blk) * (0.5 + float(q[1] >> 28)) * 0.25;
    float sum = 0.0;
    [[unroll]] for (uint l = 0; l < 4u; l++) {
        sum += group_dot(grid_entry((q[0] >> (8u * l)) & 0xFFu), ksigns((q[1] >> (7u * l)) & 127u), xv[2u * l], xv[2u * l + 1u]);
    }
    return db * sum;
}
#elif QTYPE == 17
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[2]; // u16 qs[4s + l] = 9-bit grid index | 7-bit sign index << 9
    LOAD_WORDS(q, 2u, blk + 2u + 8u * s);
    uint sc = q_u8(blk + 66u + s);
    float d = q_f16(blk);
    precise float db0 = d * (0.5 + float(sc & 0xFu)) * 0.25;
    precise float db1 = d * (0.5 + float(sc >> 4)) * 0.25;
    float sum[2] = float[](0.0, 0.0);
    [[unroll]] for (uint l = 0; l < 4u; l++) {
        uint v = q[l >> 1] >> (16u * (l & 1u));
        sum[l >> 1] += group_dot(grid_entry(v & 511u), ksigns((v >> 9) & 127u), xv[2u * l], xv[2u * l + 1u]);
    }
    return db0 * sum[0] + db1 * sum[1];
}
#elif QTYPE == 22
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[1], sg[1]; // grid index low bytes qs[4s + l], sign bytes qs[32 + 4s + l]
    LOAD_WORDS(q, 1u, blk + 2u + 4u * s);
    LOAD_WORDS(sg, 1u, blk + 34u + 4u * s);
    uint qh = q_u8(blk + 66u + s);
    uint sc = q_u8(blk + 74u + s);
    float d = q_f16(blk);
    precise float db0 = d * (0.5 + float(sc & 0xFu)) * 0.25;
    precise float db1 = d * (0.5 + float(sc >> 4)) * 0.25;
    float sum[2] = float[](0.0, 0.0);
    [[unroll]] for (uint l = 0; l < 4u; l++) {
        uint idx = ((q[0] >> (8u * l)) & 0xFFu) | ((qh << (8u - 2u * l)) & 0x300u);
        sum[l >> 1] += group_dot(grid_entry(idx), (sg[0] >> (8u * l)) & 0xFFu, xv[2u * l], xv[2u * l + 1u]);
    }
    return db0 * sum[0] + db1 * sum[1];
}
#elif QTYPE == 18
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[2]; // group l: grid indices qs[8s + 2l] (elements 0..4), qs[8s + 2l + 1] (4..8)
    LOAD_WORDS(q, 2u, blk + 2u + 8u * s);
    uint aux = q_u32(blk + 66u + 4u * s);
    precise float db = q_f16(blk) * (0.5 + float(aux >> 28)) * 0.5;
    float sum = 0.0;
    [[unroll]] for (uint l = 0; l < 4u; l++) {
        uint v = q[l >> 1] >> (16u * (l & 1u));
        uint sg = ksigns((aux >> (7u * l)) & 127u);
        sum += dot(grid4(grid_entry(v & 0xFFu)) * sgn4(sg), xv[2u * l]) +
               dot(grid4(grid_entry((v >> 8) & 0xFFu)) * sgn4(sg >> 4), xv[2u * l + 1u]);
    }
    return db * sum;
}
#elif QTYPE == 21
float slice_dot(uint blk, uint s, vec4 xv[XV]) {
    uint q[2]; // grid index h = 2l + e / 4: qs[8s + h] | bit h of qh[s] << 8
    LOAD_WORDS(q, 2u, blk + 2u + 8u * s);
    uint qh = q_u8(blk + 66u + s);
    uint sg = q_u32(blk + 74u + 4u * s);
    uint sc = (q_u8(blk + 106u + (s >> 1)) >> (4u * (s & 1u))) & 0xFu;
    precise float db = q_f16(blk) * float(int(1u + 2u * sc));
    float sum = 0.0;
    [[unroll]] for (uint l = 0; l < 4u; l++) {
        uint v = q[l >> 1] >> (16u * (l & 1u));
        uint i0 = (v & 0xFFu) | ((qh << (8u - 2u * l)) & 256u);
        uint i1 = ((v >> 8) & 0xFFu) | ((qh << (7u - 2u * l)) & 256u);
        uint b = sg >> (8u * l);
        sum += dot(grid4(grid_entry(i0)) * sgn4(b), xv[2u * l]) + dot(grid4(grid_entry(i1)) * sgn4(b >> 4), xv[2u * l + 1u]);
    }
    return db * sum;
}
#endif
