// GGML block decoding for vkml kernels.
//
// The weight buffer is bound as `uint qw[]` (raw GGUF block bytes, little-endian; or in up
// to four parts, QW_PARTS below) and read through QW(word) by byte/16-bit loaders, so no 8/16-bit storage feature is needed. Every
// GGML block size in bytes is even, so 16-bit fields are 2-byte aligned and never straddle
// a 32-bit word; MXFP4's 17-byte blocks are regrouped on upload (mxfp4_e, mxfp4_qs below).
//
// Select the format with QTYPE = its GGUF id (ggml.h `enum ggml_type`):
//   0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 9 Q8_1, 10 Q2_K, 11 Q3_K,
//   12 Q4_K, 13 Q5_K, 14 Q6_K, 15 Q8_K, 16 IQ2_XXS, 17 IQ2_XS, 18 IQ3_XXS, 19 IQ1_S,
//   20 IQ4_NL, 21 IQ3_S, 22 IQ2_S, 23 IQ4_XS, 29 IQ1_M, 30 BF16, 34 TQ1_0, 35 TQ2_0,
//   39 MXFP4, 40 NVFP4, 41 Q1_0, 42 Q2_0.
// Each defines QK (elements per block), QBYTES (bytes per block) and
//   float dq(uint blk, uint j)   element j of the block that starts at byte blk,
// with the arithmetic of ggml-quants.c `dequantize_row_*` (products rounded once, no
// fused multiply-add: `precise`), so results equal vkml-quant's CPU dequantization
// (quant/src/dequant.rs). Code books and grids come from iq_tables.glsl (generated).
//
// Layouts (ggml-common.h; the larger formats are described at their definitions):
//   Q4_0 { f16 d; u8 qs[16]; }           x = (nibble - 8) * d; low nibbles are j < 16
//   Q4_1 { f16 d, m; u8 qs[16]; }        x = nibble * d + m
//   Q5_0 { f16 d; u8 qh[4]; u8 qs[16]; } x = ((nibble | bit5 << 4) - 16) * d
//   Q5_1 { f16 d, m; u8 qh[4]; u8 qs[16]; } x = (nibble | bit5 << 4) * d + m
//   Q8_0 { f16 d; i8 qs[32]; }           x = q * d
#ifndef VKML_QUANT_GLSL
#define VKML_QUANT_GLSL

#ifndef QW_BINDING
#define QW_BINDING 0
#endif
#ifdef QW_PARTS
// A matrix in up to four bindings (parts of rows split by the device's storage-buffer
// range): binding QW_BINDING and QW_PARTS, QW_PARTS + 1, QW_PARTS + 2. Reads come from
// part q_part, which the kernel sets before reading a row.
layout(std430, set = 0, binding = QW_BINDING) readonly buffer QW0 { uint qw0[]; };
layout(std430, set = 0, binding = QW_PARTS) readonly buffer QW1 { uint qw1[]; };
layout(std430, set = 0, binding = QW_PARTS + 1) readonly buffer QW2 { uint qw2[]; };
layout(std430, set = 0, binding = QW_PARTS + 2) readonly buffer QW3 { uint qw3[]; };
uint q_part = 0u;
uint QW(uint i) {
    switch (q_part) {
    case 0u: return qw0[i];
    case 1u: return qw1[i];
    case 2u: return qw2[i];
    default: return qw3[i];
    }
}
#else
layout(std430, set = 0, binding = QW_BINDING) readonly buffer QW { uint qw[]; };
#define QW(i) qw[i]
#endif

uint q_u8(uint b) { return (QW(b >> 2) >> ((b & 3u) * 8u)) & 0xFFu; }
uint q_u16(uint b) { return (QW(b >> 2) >> ((b & 2u) * 8u)) & 0xFFFFu; }
// 32 bits from a 2-byte-aligned offset.
uint q_u32(uint b) { return q_u16(b) | (q_u16(b + 2u) << 16); }
float q_f16(uint b) { return unpackHalf2x16(q_u16(b)).x; }
float q_bf16(uint b) { return uintBitsToFloat(q_u16(b) << 16); }
// An E8M0 scale byte as ggml_e8m0_to_fp32_half: 2^(e - 128) (MXFP4's doubled code values
// make up the half), subnormal for e < 2.
float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23)); }
// 32 bits starting at a byte offset, from the aligned words lo and hi around it
// (s = 8 * (offset % 4)).
uint funnel(uint lo, uint hi, uint s) { return (lo >> s) | ((hi << 1) << (31u - s)); }
// N consecutive words of bytes starting at `at` (any byte offset) into q[0..N), from the
// aligned words that hold those bytes only (never the word after the last byte, which may
// lie past the end of the buffer). Needs GL_EXT_control_flow_attributes where expanded.
#define LOAD_WORDS(q, N, at) { uint a_ = (at); uint w_ = a_ >> 2; uint s_ = (a_ & 3u) * 8u; \
    uint last_ = (a_ + 4u * (N) - 1u) >> 2; uint prev_ = QW(w_); \
    [[unroll]] for (uint i_ = 0; i_ < N; i_++) { uint next_ = QW(min(w_ + i_ + 1u, last_)); q[i_] = funnel(prev_, next_, s_); prev_ = next_; } }

#if QTYPE == 0
#define QK 1
#define QBYTES 4
float dq(uint blk, uint j) { return uintBitsToFloat(QW(blk >> 2)); }
#elif QTYPE == 1
#define QK 1
#define QBYTES 2
float dq(uint blk, uint j) { return q_f16(blk); }
#elif QTYPE == 30
#define QK 1
#define QBYTES 2
float dq(uint blk, uint j) { return q_bf16(blk); }
#elif QTYPE == 2
#define QK 32
#define QBYTES 18
float dq(uint blk, uint j) {
    uint q = (q_u8(blk + 2u + (j & 15u)) >> ((j >> 4) * 4u)) & 0xFu;
    precise float v = float(int(q) - 8) * q_f16(blk);
    return v;
}
#elif QTYPE == 3
#define QK 32
#define QBYTES 20
float dq(uint blk, uint j) {
    uint q = (q_u8(blk + 4u + (j & 15u)) >> ((j >> 4) * 4u)) & 0xFu;
    precise float v = float(q) * q_f16(blk) + q_f16(blk + 2u);
    return v;
}
#elif QTYPE == 6
#define QK 32
#define QBYTES 22
float dq(uint blk, uint j) {
    uint qh = q_u32(blk + 2u);
    uint q = ((q_u8(blk + 6u + (j & 15u)) >> ((j >> 4) * 4u)) & 0xFu) | (((qh >> j) & 1u) << 4);
    precise float v = float(int(q) - 16) * q_f16(blk);
    return v;
}
#elif QTYPE == 7
#define QK 32
#define QBYTES 24
float dq(uint blk, uint j) {
    uint qh = q_u32(blk + 4u);
    uint q = ((q_u8(blk + 8u + (j & 15u)) >> ((j >> 4) * 4u)) & 0xFu) | (((qh >> j) & 1u) << 4);
    precise float v = float(q) * q_f16(blk) + q_f16(blk + 2u);
    return v;
}
#elif QTYPE == 8
#define QK 32
#define QBYTES 34
float dq(uint blk, uint j) {
    int q = int(q_u8(blk + 2u + j) << 24) >> 24;
    precise float v = float(q) * q_f16(blk);
    return v;
}
// ---- K-quants: super-blocks of QK_K = 256 (ggml-common.h block_q*_K, ggml-quants.c
// dequantize_row_q*_K). dq() recomputes the sub-block scale on every call (correctness
// first; a kernel that decodes a whole sub-block could hoist it).
#elif QTYPE == 10
// Q2_K { u8 scales[16]; u8 qs[64]; f16 d, dmin; } 84 bytes. Element o: half n = o / 128,
// r = o % 128, 2-bit field (r / 32) of qs[32n + r % 32]; scales[8n + r / 16] holds the
// 4-bit scale (low) and min (high): x = (d * sc) * q - (dmin * m).
#define QK 256
#define QBYTES 84
float dq(uint blk, uint j) {
    uint r = j & 127u;
    uint sc = q_u8(blk + (j >> 7) * 8u + (r >> 4));
    uint q = (q_u8(blk + 16u + (j >> 7) * 32u + (r & 31u)) >> ((r >> 5) * 2u)) & 3u;
    precise float dl = q_f16(blk + 80u) * float(sc & 0xFu);
    precise float ml = q_f16(blk + 82u) * float(sc >> 4);
    precise float v = dl * float(q) - ml;
    return v;
}
#elif QTYPE == 11
// Q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; } 110 bytes. Element o: n = o / 128,
// r = o % 128, s = r / 32: low 2 bits = field s of qs[32n + r % 32], high bit = bit
// (4n + s) of hmask[r % 32] (clear means -4); 16 six-bit scales (bias 32) packed as
// low nibbles in scales[0..8] and 2-bit tops in scales[8..12]:
// x = (d * (sc - 32)) * (q - (hbit ? 0 : 4)).
#define QK 256
#define QBYTES 110
float dq(uint blk, uint j) {
    uint r = j & 127u, s = r >> 5, l = r & 31u;
    uint is = (j >> 7) * 8u + (r >> 4);              // scale index 0..16
    uint k = is >> 2, b = is & 3u;                   // aux word k, byte b (q3k_scales)
    uint lo = (q_u8(blk + 96u + b + 4u * (k & 1u)) >> (4u * (k >> 1))) & 0xFu;
    uint hi = (q_u8(blk + 104u + b) >> (2u * k)) & 3u;
    int sc = int(lo | (hi << 4)) - 32;
    int low = int((q_u8(blk + 32u + (j >> 7) * 32u + l) >> (2u * s)) & 3u);
    int h = (q_u8(blk + l) & (1u << ((j >> 7) * 4u + s))) != 0u ? 0 : 4;
    precise float dl = q_f16(blk + 108u) * float(sc);
    precise float v = dl * float(low - h);
    return v;
}
#elif QTYPE == 12 || QTYPE == 13
// Q4_K { f16 d, dmin; u8 scales[12]; u8 qs[128]; } 144 bytes,
// Q5_K { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; } 176 bytes.
// Element o: c = o / 64, r = o % 64; 4-bit quant = low (r < 32) or high nibble of
// qs[32c + r % 32]; Q5_K adds 16 if bit (2c + r / 32) of qh[r % 32] is set. Sub-block
// t = o / 32 has a 6-bit scale and min (get_scale_min_k4): x = (d * sc) * q - (dmin * m).
#define QK 256
#if QTYPE == 12
#define QBYTES 144
#define QS_AT 16u
#else
#define QBYTES 176
#define QS_AT 48u
#endif
float dq(uint blk, uint j) {
    uint t = j >> 5, l = j & 31u;
    uint sc, m;
    if (t < 4u) {
        sc = q_u8(blk + 4u + t) & 63u;
        m = q_u8(blk + 8u + t) & 63u;
    } else {
        sc = (q_u8(blk + 8u + t) & 0xFu) | ((q_u8(blk + t) >> 6) << 4);
        m = (q_u8(blk + 8u + t) >> 4) | ((q_u8(blk + 4u + t) >> 6) << 4);
    }
    uint q = (q_u8(blk + QS_AT + (j >> 6) * 32u + l) >> ((t & 1u) * 4u)) & 0xFu;
#if QTYPE == 13
    q += (q_u8(blk + 16u + l) & (1u << t)) != 0u ? 16u : 0u;
#endif
    precise float d1 = q_f16(blk) * float(sc);
    precise float m1 = q_f16(blk + 2u) * float(m);
    precise float v = d1 * float(q) - m1;
    return v;
}
#elif QTYPE == 14
// Q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } 210 bytes. Element o: n = o / 128,
// r = o % 128, g = r / 32, l = r % 32: low 4 bits = nibble (g / 2) of ql[64n + l + 32 (g % 2)],
// high 2 bits = field g of qh[32n + l]; scale scales[8n + l / 16 + 2g]:
// x = (d * sc) * (q - 32).
#define QK 256
#define QBYTES 210
float dq(uint blk, uint j) {
    uint n = j >> 7, g = (j >> 5) & 3u, l = j & 31u;
    uint ql = (q_u8(blk + n * 64u + l + 32u * (g & 1u)) >> (4u * (g >> 1))) & 0xFu;
    uint qh = (q_u8(blk + 128u + n * 32u + l) >> (2u * g)) & 3u;
    int q = int(ql | (qh << 4)) - 32;
    int sc = int(q_u8(blk + 192u + n * 8u + (l >> 4) + 2u * g) << 24) >> 24;
    precise float v = q_f16(blk + 208u) * float(sc) * float(q);
    return v;
}
#elif QTYPE == 15
// Q8_K { f32 d; i8 qs[256]; i16 bsums[16]; } 292 bytes (activation format): x = d * q.
#define QK 256
#define QBYTES 292
float dq(uint blk, uint j) {
    int q = int(q_u8(blk + 4u + j) << 24) >> 24;
    precise float v = uintBitsToFloat(q_u32(blk)) * float(q);
    return v;
}
#elif QTYPE == 9
// Q8_1 { f16 d, s; i8 qs[32]; } 36 bytes (activation format; s = d * sum(qs)): x = q * d.
#define QK 32
#define QBYTES 36
float dq(uint blk, uint j) {
    int q = int(q_u8(blk + 4u + j) << 24) >> 24;
    precise float v = float(q) * q_f16(blk);
    return v;
}

// ---- Code books, FP4 and ternary formats.
#elif QTYPE == 20
// IQ4_NL { f16 d; u8 qs[16]; } 18 bytes: x = d * kvalues_iq4nl[nibble]; low nibbles are
// j < 16, as Q4_0.
#define QK 32
#define QBYTES 18
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint q = (q_u8(blk + 2u + (j & 15u)) >> ((j >> 4) * 4u)) & 0xFu;
    precise float v = q_f16(blk) * float(KVALUES_IQ4NL[q]);
    return v;
}
#elif QTYPE == 23
// IQ4_XS { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; } 136 bytes. Sub-block
// t = o / 32: 6-bit scale = nibble (t % 2) of scales_l[t / 2] | field t of scales_h << 4;
// quants as IQ4_NL in qs[16t..16t+16]: x = (d * (ls - 32)) * kvalues_iq4nl[nibble].
#define QK 256
#define QBYTES 136
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint t = j >> 5, r = j & 31u;
    uint ls = ((q_u8(blk + 4u + (t >> 1)) >> (4u * (t & 1u))) & 0xFu) | (((q_u16(blk + 2u) >> (2u * t)) & 3u) << 4);
    uint q = (q_u8(blk + 8u + 16u * t + (r & 15u)) >> ((r >> 4) * 4u)) & 0xFu;
    precise float dl = q_f16(blk) * float(int(ls) - 32);
    precise float v = dl * float(KVALUES_IQ4NL[q]);
    return v;
}
#elif QTYPE == 39
// MXFP4 { u8 e; u8 qs[16]; } (17 bytes in GGUF) in vkml's device layout (ops/src/quant/
// mxfp4_layout.rs): the part's blocks in groups of 16, each group 272 bytes, the 16 E8M0
// scales first, then the 16 blocks' qs. Kernels address a block by its GGUF byte offset
// blk = 17 b (b the block's index in the part), as for every other type; mxfp4_e and
// mxfp4_qs find it. No code is negative zero (8) there.
// x = kvalues_fp4[nibble] * 2^(e - 128) (the table holds doubled E2M1 values;
// ggml_e8m0_to_fp32_half); low nibbles are j < 16.
#define QK 32
#define QBYTES 17
#include "iq_tables.glsl"
// The E8M0 scale byte of the block at GGUF byte blk.
uint mxfp4_e(uint blk) {
    uint b = blk / 17u;
    return q_u8(272u * (b >> 4) + (b & 15u));
}
// The byte (16-aligned) of the qs of the block at GGUF byte blk.
uint mxfp4_qs(uint blk) {
    uint b = blk / 17u;
    return 272u * (b >> 4) + 16u + 16u * (b & 15u);
}
// The 4 words of qs of the block at GGUF byte blk into q[0..3].
#define MXFP4_LOAD_QS(q, blk) { uint w_ = mxfp4_qs(blk) >> 2; \
    [[unroll]] for (uint i_ = 0; i_ < 4u; i_++) q[i_] = QW(w_ + i_); }
float dq(uint blk, uint j) {
    float d = e8m0_half(mxfp4_e(blk));
    uint q = (q_u8(mxfp4_qs(blk) + (j & 15u)) >> ((j >> 4) * 4u)) & 0xFu;
    precise float v = float(KVALUES_FP4[q]) * d;
    return v;
}
#elif QTYPE == 40
// NVFP4 { u8 d[4]; u8 qs[32]; } 36 bytes, 64 elements. Sub-block s = o / 16 has the UE4M3
// scale d[s] (ggml_ue4m3_to_fp32, times 0.5; 0 and 0x7F are 0); element o is nibble
// (o % 16 / 8) of qs[8s + o % 8]: x = kvalues_fp4[nibble] * scale.
#define QK 64
#define QBYTES 36
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint s = j >> 4, r = j & 15u;
    uint x = q_u8(blk + s);
    float d = 0.0;
    if (x != 0u && x != 0x7Fu) {
        uint e = (x >> 3) & 0xFu;
        float man = float(x & 7u);
        // Every step is exact (powers of two, at most 4 significant bits).
        precise float raw = e == 0u ? man * uintBitsToFloat(118u << 23)                        // 2^-9
                                    : (1.0 + man * 0.125) * uintBitsToFloat((e + 120u) << 23); // 2^(e-7)
        d = raw * 0.5;
    }
    uint q = (q_u8(blk + 4u + 8u * s + (r & 7u)) >> ((r >> 3) * 4u)) & 0xFu;
    precise float v = float(KVALUES_FP4[q]) * d;
    return v;
}
#elif QTYPE == 34
// TQ1_0 { u8 qs[48]; u8 qh[4]; f16 d; } 54 bytes: base-3 digits, 5 per byte of qs and 4 per
// byte of qh, digit n of byte q being ((q * 3^n mod 256) * 3) >> 8. Elements 0..160: digit
// o / 32 of qs[o % 32]; 160..240: digit (o - 160) / 16 of qs[32 + o % 16]; 240..256: digit
// (o - 240) / 4 of qh[o % 4]. x = (digit - 1) * d.
#define QK 256
#define QBYTES 54
float dq(uint blk, uint j) {
    uint byte, n;
    if (j < 160u) {
        byte = q_u8(blk + (j & 31u));
        n = j >> 5;
    } else if (j < 240u) {
        byte = q_u8(blk + 32u + (j & 15u));
        n = (j - 160u) >> 4;
    } else {
        byte = q_u8(blk + 48u + (j & 3u));
        n = (j - 240u) >> 2;
    }
    const uint pow3[5] = uint[](1u, 3u, 9u, 27u, 81u);
    uint q = (byte * pow3[n]) & 0xFFu;
    int t = int((q * 3u) >> 8);
    precise float v = float(t - 1) * q_f16(blk + 52u);
    return v;
}
#elif QTYPE == 35
// TQ2_0 { u8 qs[64]; f16 d; } 66 bytes: element o is 2-bit field (o % 128 / 32) of
// qs[32 (o / 128) + o % 32]; x = (q - 1) * d.
#define QK 256
#define QBYTES 66
float dq(uint blk, uint j) {
    uint q = (q_u8(blk + (j >> 7) * 32u + (j & 31u)) >> (((j >> 5) & 3u) * 2u)) & 3u;
    precise float v = float(int(q) - 1) * q_f16(blk + 64u);
    return v;
}
#elif QTYPE == 41
// Q1_0 { f16 d; u8 qs[16]; } 18 bytes, 128 elements: bit j % 8 of qs[j / 8]; x = bit ? d : -d.
#define QK 128
#define QBYTES 18
float dq(uint blk, uint j) {
    float d = q_f16(blk);
    return ((q_u8(blk + 2u + (j >> 3)) >> (j & 7u)) & 1u) != 0u ? d : -d;
}
#elif QTYPE == 42
// Q2_0 { f16 d; u8 qs[16]; } 18 bytes, 64 elements: 2-bit field j % 4 of qs[j / 4];
// x = (q - 1) * d.
#define QK 64
#define QBYTES 18
float dq(uint blk, uint j) {
    uint q = (q_u8(blk + 2u + (j >> 2)) >> ((j & 3u) * 2u)) & 3u;
    precise float v = float(int(q) - 1) * q_f16(blk);
    return v;
}

// ---- Grid i-quants (packed tables in iq_tables.glsl: NAME_byte(i, j) = byte j of entry i). Sub-block ib = o / 32, group l = o % 32 / 8
// of 8 elements, element e = o % 8. Grid entries are 8 (IQ2_*, IQ1_*) or 4 (IQ3_*) bytes.
#elif QTYPE == 16
// IQ2_XXS { f16 d; u16 qs[32]; } 66 bytes. Per sub-block 8 bytes at 2 + 8ib: bytes 0..4 are
// grid indices (one per group), bytes 4..8 a u32 `aux` = 4 x 7-bit sign indices | 4-bit
// scale << 28. x = ((d * (0.5 + scale)) * 0.25) * grid[e] * (sign bit e ? -1 : 1).
#define QK 256
#define QBYTES 66
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint ib = j >> 5, l = (j >> 3) & 3u, e = j & 7u;
    uint at = blk + 2u + 8u * ib;
    uint aux = q_u32(at + 4u);
    uint g = IQ2XXS_GRID_byte(q_u8(at + l), e);
    uint signs = KSIGNS_IQ2XS_at((aux >> (7u * l)) & 127u);
    precise float db = q_f16(blk) * (0.5 + float(aux >> 28)) * 0.25;
    precise float v = db * float(g) * ((signs & (1u << e)) != 0u ? -1.0 : 1.0);
    return v;
}
#elif QTYPE == 17
// IQ2_XS { f16 d; u16 qs[32]; u8 scales[8]; } 74 bytes. qs[4ib + l] = 9-bit grid index |
// 7-bit sign index << 9; scales[ib] has the 4-bit scale of groups 0-1 (low) and 2-3 (high).
// x = ((d * (0.5 + scale)) * 0.25) * grid[e] * sign.
#define QK 256
#define QBYTES 74
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint ib = j >> 5, l = (j >> 3) & 3u, e = j & 7u;
    uint q = q_u16(blk + 2u + 2u * (4u * ib + l));
    uint sc = (q_u8(blk + 66u + ib) >> (4u * (l >> 1))) & 0xFu;
    uint g = IQ2XS_GRID_byte(q & 511u, e);
    uint signs = KSIGNS_IQ2XS_at(q >> 9);
    precise float db = q_f16(blk) * (0.5 + float(sc)) * 0.25;
    precise float v = db * float(g) * ((signs & (1u << e)) != 0u ? -1.0 : 1.0);
    return v;
}
#elif QTYPE == 22
// IQ2_S { f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]; } 82 bytes. Grid index = qs[4ib + l] |
// field l of qh[ib] << 8 (10 bits); sign bits = qs[32 + 4ib + l]; scales as IQ2_XS.
#define QK 256
#define QBYTES 82
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint ib = j >> 5, l = (j >> 3) & 3u, e = j & 7u;
    uint idx = q_u8(blk + 2u + 4u * ib + l) | ((q_u8(blk + 66u + ib) << (8u - 2u * l)) & 0x300u);
    uint signs = q_u8(blk + 34u + 4u * ib + l);
    uint sc = (q_u8(blk + 74u + ib) >> (4u * (l >> 1))) & 0xFu;
    uint g = IQ2S_GRID_byte(idx, e);
    precise float db = q_f16(blk) * (0.5 + float(sc)) * 0.25;
    precise float v = db * float(g) * ((signs & (1u << e)) != 0u ? -1.0 : 1.0);
    return v;
}
#elif QTYPE == 18
// IQ3_XXS { f16 d; u8 qs[96]; } 98 bytes. qs[0..64]: two 4-byte grid indices per group
// (qs[8ib + 2l] for e < 4, qs[8ib + 2l + 1] for e >= 4); qs[64 + 4ib ..] a u32 `aux` as
// IQ2_XXS. x = ((d * (0.5 + scale)) * 0.5) * grid[e % 4] * sign.
#define QK 256
#define QBYTES 98
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint ib = j >> 5, l = (j >> 3) & 3u, e = j & 7u;
    uint aux = q_u32(blk + 66u + 4u * ib);
    uint idx = q_u8(blk + 2u + 8u * ib + 2u * l + (e >> 2));
    uint g = IQ3XXS_GRID_byte(idx, e & 3u);
    uint signs = KSIGNS_IQ2XS_at((aux >> (7u * l)) & 127u);
    precise float db = q_f16(blk) * (0.5 + float(aux >> 28)) * 0.5;
    precise float v = db * float(g) * ((signs & (1u << e)) != 0u ? -1.0 : 1.0);
    return v;
}
#elif QTYPE == 21
// IQ3_S { f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]; } 110 bytes. Grid index
// (9 bits) = qs[8ib + 2l + e / 4] | bit (2l + e / 4) of qh[ib] << 8; sign bits signs[4ib + l];
// 4-bit scale = nibble (ib % 2) of scales[ib / 2]: x = (d * (1 + 2 scale)) * grid[e % 4] * sign.
#define QK 256
#define QBYTES 110
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint ib = j >> 5, l = (j >> 3) & 3u, e = j & 7u;
    uint h = 2u * l + (e >> 2);
    uint idx = q_u8(blk + 2u + 8u * ib + h) | ((q_u8(blk + 66u + ib) << (8u - h)) & 256u);
    uint signs = q_u8(blk + 74u + 4u * ib + l);
    uint sc = (q_u8(blk + 106u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xFu;
    uint g = IQ3S_GRID_byte(idx, e & 3u);
    precise float db = q_f16(blk) * float(int(1u + 2u * sc));
    precise float v = db * float(g) * ((signs & (1u << e)) != 0u ? -1.0 : 1.0);
    return v;
}
#elif QTYPE == 19
// IQ1_S { f16 d; u8 qs[32]; u16 qh[8]; } 50 bytes. Grid index (11 bits) = qs[4ib + l] |
// field l (3 bits) of qh[ib] << 8; qh[ib] bits 12..15 = 3-bit scale, delta sign. Grid
// bytes are signed (-1, 0, 1): x = (d * (2 scale + 1)) * (grid[e] + (sign ? -1/8 : 1/8)).
#define QK 256
#define QBYTES 50
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint ib = j >> 5, l = (j >> 3) & 3u, e = j & 7u;
    uint qh = q_u16(blk + 34u + 2u * ib);
    uint idx = q_u8(blk + 2u + 4u * ib + l) | (((qh >> (3u * l)) & 7u) << 8);
    int g = int(IQ1S_GRID_byte(idx, e) << 24) >> 24;
    float delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;
    precise float dl = q_f16(blk) * float(2u * ((qh >> 12) & 7u) + 1u);
    precise float v = dl * (float(g) + delta);
    return v;
}
#elif QTYPE == 29
// IQ1_M { u8 qs[32]; u8 qh[16]; u8 scales[8]; } 56 bytes. The f16 super-block scale is the
// top nibbles of the 4 u16 in scales (iq1m_scale). Group l: grid index = qs[4ib + l] |
// (qh[2ib + l / 2] >> 4 (l % 2)) & 7 << 8, delta sign = bit 3 of that nibble; 3-bit scale =
// field (2 (ib % 2) + l / 2) of u16 scales[ib / 2]:
// x = (d * (2 scale + 1)) * (grid[e] + (sign ? -1/8 : 1/8)).
#define QK 256
#define QBYTES 56
#include "iq_tables.glsl"
float dq(uint blk, uint j) {
    uint ib = j >> 5, l = (j >> 3) & 3u, e = j & 7u;
    uint u = (q_u16(blk + 48u) >> 12) | ((q_u16(blk + 50u) >> 8) & 0x00F0u) | ((q_u16(blk + 52u) >> 4) & 0x0F00u) |
             (q_u16(blk + 54u) & 0xF000u);
    float d = unpackHalf2x16(u).x;
    uint s = q_u16(blk + 48u + 2u * (ib >> 1));
    uint sc = (s >> (6u * (ib & 1u) + 3u * (l >> 1))) & 7u;
    uint qh = q_u8(blk + 32u + 2u * ib + (l >> 1)) >> (4u * (l & 1u));
    uint idx = q_u8(blk + 4u * ib + l) | ((qh & 7u) << 8);
    int g = int(IQ1S_GRID_byte(idx, e) << 24) >> 24;
    float delta = (qh & 8u) != 0u ? -0.125 : 0.125;
    precise float dl = d * float(2u * sc + 1u);
    precise float v = dl * (float(g) + delta);
    return v;
}
#else
#error "quant.glsl: unsupported QTYPE"
#endif

#endif
