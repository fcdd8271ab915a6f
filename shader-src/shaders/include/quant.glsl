// GGML block decoding for vkml kernels.
//
// The weight buffer is bound as `uint qw[]` (raw GGUF block bytes, little-endian) and
// read through byte/16-bit loaders, so no 8/16-bit storage feature is needed. Every
// GGML block size in bytes is even, so 16-bit fields are 2-byte aligned and never
// straddle a 32-bit word.
//
// Select the format with QTYPE = its GGUF id (ggml.h `enum ggml_type`):
//   0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 30 BF16.
// Each defines QK (elements per block), QBYTES (bytes per block) and
//   float dq(uint blk, uint j)   element j of the block that starts at byte blk,
// with the arithmetic of ggml-quants.c `dequantize_row_*` (products rounded once, no
// fused multiply-add: `precise`), so results equal vkml-quant's CPU dequantization.
//
// Layouts (ggml-common.h):
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
layout(std430, set = 0, binding = QW_BINDING) readonly buffer QW { uint qw[]; };

uint q_u8(uint b) { return (qw[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu; }
uint q_u16(uint b) { return (qw[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu; }
// 32 bits from a 2-byte-aligned offset.
uint q_u32(uint b) { return q_u16(b) | (q_u16(b + 2u) << 16); }
float q_f16(uint b) { return unpackHalf2x16(q_u16(b)).x; }
float q_bf16(uint b) { return uintBitsToFloat(q_u16(b) << 16); }

#if QTYPE == 0
#define QK 1
#define QBYTES 4
float dq(uint blk, uint j) { return uintBitsToFloat(qw[blk >> 2]); }
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
#else
#error "quant.glsl: unsupported QTYPE"
#endif

#endif
