// Four consecutive elements of a GGML block per call, from one or two 32-bit loads:
//   vec4 dq4(uint blk, uint j)   elements j..j+3 of the block at byte `blk` (j % 4 == 0).
// Include after quant.glsl. Types without a specialised decoder fall back to four dq().
// Used by the vectorised mat-vec; values equal dq()'s (same per-element arithmetic).
#ifndef VKML_QUANT_VEC4_GLSL
#define VKML_QUANT_VEC4_GLSL

// The four bytes of `u` as unsigned values.
uvec4 q_bytes(uint u) { return uvec4(u & 0xFFu, (u >> 8) & 0xFFu, (u >> 16) & 0xFFu, u >> 24); }

#if QTYPE == 0
vec4 dq4(uint blk, uint j) {
    uint w = blk >> 2;
    return vec4(uintBitsToFloat(qw[w]), uintBitsToFloat(qw[w + 1u]), uintBitsToFloat(qw[w + 2u]), uintBitsToFloat(qw[w + 3u]));
}
#elif QTYPE == 1
vec4 dq4(uint blk, uint j) {
    uint w = blk >> 2; // 8-byte aligned: rows are k * 2 bytes with k % 4 == 0
    return vec4(unpackHalf2x16(qw[w]), unpackHalf2x16(qw[w + 1u]));
}
#elif QTYPE == 30
vec4 dq4(uint blk, uint j) {
    uint w = blk >> 2;
    uint a = qw[w], b = qw[w + 1u];
    return vec4(uintBitsToFloat(a << 16), uintBitsToFloat(a & 0xFFFF0000u), uintBitsToFloat(b << 16), uintBitsToFloat(b & 0xFFFF0000u));
}
#elif QTYPE == 2 || QTYPE == 3
vec4 dq4(uint blk, uint j) {
#if QTYPE == 2
    const uint qs = 2u;
#else
    const uint qs = 4u;
#endif
    uint u = (q_u32(blk + qs + (j & 15u)) >> ((j >> 4) * 4u)) & 0x0F0F0F0Fu;
    vec4 q = vec4(q_bytes(u));
#if QTYPE == 2
    precise vec4 v = (q - 8.0) * q_f16(blk);
#else
    precise vec4 v = q * q_f16(blk) + q_f16(blk + 2u);
#endif
    return v;
}
#elif QTYPE == 6 || QTYPE == 7
vec4 dq4(uint blk, uint j) {
#if QTYPE == 6
    const uint qh_at = 2u, qs = 6u;
#else
    const uint qh_at = 4u, qs = 8u;
#endif
    uint lo = (q_u32(blk + qs + (j & 15u)) >> ((j >> 4) * 4u)) & 0x0F0F0F0Fu;
    uint h = q_u32(blk + qh_at) >> j;
    uint hi = ((h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21)) << 4;
    vec4 q = vec4(q_bytes(lo | hi));
#if QTYPE == 6
    precise vec4 v = (q - 16.0) * q_f16(blk);
#else
    precise vec4 v = q * q_f16(blk) + q_f16(blk + 2u);
#endif
    return v;
}
#elif QTYPE == 8
vec4 dq4(uint blk, uint j) {
    int u = int(q_u32(blk + 2u + j));
    vec4 q = vec4(bitfieldExtract(u, 0, 8), bitfieldExtract(u, 8, 8), bitfieldExtract(u, 16, 8), bitfieldExtract(u, 24, 8));
    precise vec4 v = q * q_f16(blk);
    return v;
}
#else
vec4 dq4(uint blk, uint j) { return vec4(dq(blk, j), dq(blk, j + 1u), dq(blk, j + 2u), dq(blk, j + 3u)); }
#endif

#endif
