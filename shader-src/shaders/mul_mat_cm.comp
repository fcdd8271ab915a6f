//! variants-of dequant.comp
//! target vulkan1.3
// Quantized mat-mat for prompts on tensor cores (VK_KHR_cooperative_matrix, f16 x f16 with
// f32 accumulation, 16x16x16 subgroup matrices):
//   C[n, r] (+)= sum_c X[n, c] * W[r, c]   for n < n_tok, r < rows.
// X f16 [n_tok, k] row-major (the op converts f32 activations first); W raw GGUF blocks
// (row r at w_offset + r * row_bytes); C f32 [n_tok, rows]. k must be a multiple of 32
// (and of the block size).
//
// One workgroup of 128 invocations = 4 subgroups of 32 computes a BM x BN = 128 rows x 128
// tokens tile; each subgroup multiplies a 64 x 64 part with 4 x 4 accumulators. Per BK = 32
// step, invocation t decodes weight row t of the tile into shared memory as f16 and copies
// a quarter of four X rows beside it (16-byte stores; shared memory is uvec4 throughout).
// On the H100 the L1 / shared-memory pipe, not the tensor cores, bounds this kernel, so
// the design counts its wavefronts (one per cache line an instruction touches):
//   - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, Q2_K, Q4_K, Q5_K and Q6_K weights are read
//     coalesced: a subgroup reads its 32 rows' step bytes (RW words per row) with consecutive
//     invocations on consecutive words (an instruction touches ~32 / RW rows instead of
//     32), passes them through a per-subgroup scratch in shared memory (odd row stride
//     RWP: no bank conflicts; Q5_K and Q6_K, 20 words per row, stage in place in their own
//     rows of the A buffer being filled, as a separate scratch would pass 48 KiB), and
//     each invocation reads its own row's words back; F16 weights are read as words, 16
//     invocations per row, and X as 16-byte vectors, 4 invocations per row;
//   - 64 x 64 per subgroup needs 8 fragment loads per 16 multiplies (32 x 64 needed 6 per 8).
// Against the 8-subgroup kernel this replaced (each invocation loading its own 16
// weights: 16 rows per instruction) that took Q4_0 from 100 to 141-161 TFLOP/s and Q8_0
// from 77-88 to 134-149 on the H100 (benches/RESULTS.md).
// Shared memory is double-buffered (one barrier per step). The loop body is one basic
// block: the loads of step s + 2 are clamped to the last step (a repeated load is
// harmless), rows and tokens past the matrix are clamped to the last one (their products
// land in outputs that are never stored), and Q4_K's scale selection is branch-free, so
// the compiler can interleave the decode and stores of step s + 1 with the multiplies of
// step s. Every other type (Q3_K, the IQ types) decodes element by element through
// dq() (on the H100 about ten times slower: benches/RESULTS.md).
// Each weight is f16(dq()): Q4_1, Q5_1, Q2_K, Q4_K, Q5_K and Q6_K repeat dq()'s f32 arithmetic
// before one rounding, MXFP4's f32 product (decode_row) equals dq()'s, and the packed f16
// products of Q4_0, Q5_0 and Q8_0 ((q - 8) * d, (q - 16) * d, q * d) are exact before their
// one rounding; results equal sum(f16(w) * x) accumulated in f32.
//
// Split-K: workgroup z sums k in [z * k_chunk, min(k, (z + 1) * k_chunk)) and writes its
// partial product to C + z * n_tok * ldc (k_chunk a multiple of 256); the op adds the
// partials afterwards (`reduce_partials.comp`). Without a split (one z), C is the output.
// Bindings: 0 = W, 1 = X (uvec4: 8 halves), 2 = C. Push constants: w_offset, row_bytes, k,
// rows, n_tok, accumulate (1: add to C, folding a residual add into the product), k_chunk,
// ldc (C's row stride: rows, or the whole matrix's where the op runs one part of a matrix
// split over several bindings), pos0 (below), x_slots (below).
// Specialization constant 13, bindings 7 and 8, push constant x_slots
// (include/mul_mat_ids.glsl): grouped by expert, workgroup z an expert's tokens.
// w_offset must be a multiple of 4 and row_bytes even (every block size here is), but for
// MXFP4, whose blocks are found from their GGUF byte offsets (quant.glsl's mxfp4_qs).
// Grid: x = ceil(rows / 128), y = ceil(n_tok / 128), z = ceil(k / k_chunk).
// Specialization constants 4, 5 and 17, binding 12 (include/mul_mat_glu.glsl): the
// gated-product epilogue over a stacked [gate; up] weight, each tile's rows 0-63 gate and
// 64-127 up (GLU_STORE of include/mul_mat_cm.glsl); then accumulate and ldc are unused and
// there is no split-K. Specialization constants 6-11, bindings 3-6 and push constant pos0
// (include/mul_mat_rope.glsl): the rotary embedding and KV-cache append of a Q|K|V
// product in the store (ROPE_STORE of include/mul_mat_cm.glsl; head dim a divisor of 128),
// the same conditions; spec constants 14-16 and bindings 9-11 its bias and head norms.
// Requires subgroup size 32. Specialization constant 0, ROW_RASTER: when true, workgroup
// (x, y) takes the tile of linear index x + y * gx in row-tile-major order (the token tiles
// of one row tile are consecutive), so those workgroups run together and read that weight
// tile from memory once, the others from L2.
// Specialization constants 1 and 2, the workgroup size and WARP_SPECIALIZED: 128 and false
// as described above, or 256 and true: subgroups 4-7 then do the loads, decode and shared
// stores of step s + 1 (as subgroups 0-3 would) while subgroups 0-3 only multiply step s,
// so a subgroup's decode no longer waits behind its multiplies; specialization constant 3,
// X_BY_MULTIPLIERS, then moves the x copy to the multiplying subgroups, leaving the others
// only the weights. Each role is one branch of one if / else (two independent ifs were
// 15 % slower on the H100). Figures: `tuning::mat_mat_warp_specialized` and
// benches/RESULTS.md.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 1, local_size_x = 128) in;
layout(constant_id = 0) const bool ROW_RASTER = false;
layout(constant_id = 2) const bool WARP_SPECIALIZED = false;
layout(constant_id = 3) const bool X_BY_MULTIPLIERS = false;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { uvec4 x8[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 2) buffer C16 { uint c16[]; }; // MM_GLU_F16's view of C
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; uint pos0; uint x_slots; } p;

#define BM 128u
#define BN 128u
#define BK 32u
#define LDSV 5u // uvec4 per shared row: 4 of data (32 halves) + 1 of padding
#define SA 0u
#define SB (2u * BM * LDSV)
#define SCR (SB + 2u * BN * LDSV)
#if QTYPE == 2
#define RWN 5
#define RWP 5u
#elif QTYPE == 8
#define RWN 9
#define RWP 9u
#elif QTYPE == 12
#define RWN 12
#define RWP 13u
#elif QTYPE == 3 || QTYPE == 39
#define RWN 5
#define RWP 5u
#elif QTYPE == 6 || QTYPE == 7
#define RWN 6
#define RWP 7u
#elif QTYPE == 10
#define RWN 10
#define RWP 11u
#elif QTYPE == 13 || QTYPE == 14
// Q5_K / Q6_K: 20 words per row and step, staged in place (IN_PLACE): in the subgroup's
// own 32 rows of the A buffer being filled (32 x 20 words, its rows' exact size), each
// invocation reading its row back before overwriting it with the decoded weights.
#define RWN 20
#define RWP 20u
#define IN_PLACE 1
#else
#define RWN 0
#define RWP 0u
#endif
#define RW uint(RWN)
#ifdef IN_PLACE
shared uvec4 sm[SCR]; // 40 KiB: no scratch beside the tiles (with it, 50 KiB: past the 48 KiB limit)
#else
shared uvec4 sm[SCR + 32u * RWP];
#endif

vec4 nib_lo(uint u) { uint v = u & 0x0F0F0F0Fu; return vec4(v & 0xFFu, (v >> 8) & 0xFFu, (v >> 16) & 0xFFu, v >> 24); }

#define MM_WRN 2u // row groups of subgroups (mm_staged)
#include "mul_mat_ids.glsl"
#include "mul_mat_cm.glsl"
#include "mul_mat_glu.glsl"
#include "mul_mat_rope.glsl"

uint nwords;

// Word w of row r's bytes for the step at column k0.
uint raw_word(uint r, uint w, uint k0) {
    uint row = mm_w_offset + r * p.row_bytes;
#if QTYPE == 2 || QTYPE == 8 || QTYPE == 3 || QTYPE == 6 || QTYPE == 7
    uint a = ((row + (k0 >> 5) * QBYTES) >> 2) + w;
#elif QTYPE == 39
    // MXFP4 in vkml's device layout (quant.glsl's mxfp4_e, mxfp4_qs): word 0 holds the
    // block's scale (byte b % 4 for block b), 1-4 are its codes.
    uint blk = row + (k0 >> 5) * QBYTES, b = blk / 17u;
    uint a = w == 0u ? 68u * (b >> 4) + ((b & 15u) >> 2) : (mxfp4_qs(blk) >> 2) + (w - 1u);
#elif QTYPE == 12
    uint blk = row + (k0 >> 8) * QBYTES;
    uint a = w < 4u ? (blk >> 2) + w : ((blk + 16u + ((k0 >> 6) & 3u) * 32u) >> 2) + (w - 4u);
#elif QTYPE == 10
    // Q2_K, sub-block t = (k0 / 32) % 8 of half n = t / 4: words 0-7: the 32 qs bytes
    // (16 + 32 n, 2-bit field t % 4), 8: the word holding scales 8 n + 2 (t % 4) and + 1,
    // 9: d and dmin. The block is word-aligned (84 bytes).
    uint blk = row + (k0 >> 8) * QBYTES;
    uint t = (k0 >> 5) & 7u;
    uint a = (blk >> 2) + (w < 8u ? 4u + 8u * (t >> 2) + w : (w == 8u ? 2u * (t >> 2) + ((t & 3u) >> 1) : 20u));
#elif QTYPE == 13
    // Words 0-3: d, dmin and scales; 4-11: the 32 qs bytes of sub-block t (nibble t % 2);
    // 12-19: qh (bit t). The block is word-aligned (176 bytes).
    uint blk = row + (k0 >> 8) * QBYTES;
    uint a = (blk >> 2) + (w < 4u ? w : (w < 12u ? 8u + 8u * ((k0 >> 6) & 3u) + w : w - 8u));
#elif QTYPE == 14
    // Step g = (k0 / 32) % 4 of half n = (k0 / 128) % 2: words 0-8: the 32 ql bytes
    // (64 n + 32 (g % 2), nibble g / 2), 9-17: the 32 qh bytes (128 + 32 n, bits 2g, 2g + 1),
    // whichever half-word the block (210 bytes) starts at; 18: the word holding scales
    // 8 n + 2 g and + 1; 19: the word holding d.
    uint blk = row + (k0 >> 8) * QBYTES;
    uint n = (k0 >> 7) & 1u, g = (k0 >> 5) & 3u;
    uint a = w < 9u ? ((blk + 64u * n + 32u * (g & 1u)) >> 2) + w
        : w < 18u ? ((blk + 128u + 32u * n) >> 2) + (w - 9u)
        : w == 18u ? (blk + 192u + 8u * n + 2u * g) >> 2 : (blk + 208u) >> 2;
#else
    uint a = 0u;
#endif
    return qw[min(a, nwords)];
}

// Decodes this invocation's row (words q, block at byte blk) into shared row o.
// Bit i (i < 4) of h moved to bit 4 of byte i: Q5's fifth bits beside four nibbles.
uint spread4(uint h) { return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25); }
vec4 bytes_f32(uint b) { return vec4(b & 0xFFu, (b >> 8) & 0xFFu, (b >> 16) & 0xFFu, b >> 24); }

void decode_row(uint o, uint q[RW > 0u ? RW : 1u], uint blk, uint k0) {
#if QTYPE == 2
    bool odd = (blk & 2u) != 0u;
    float16_t d = float16_t(unpackHalf2x16(odd ? q[0] >> 16 : q[0]).x);
    uint qs[4];
    [[unroll]] for (uint j = 0; j < 4u; j++) qs[j] = odd ? q[j + 1u] : ((q[j] >> 16) | (q[j + 1u] << 16));
    precise f16vec4 l0 = bytes4(qs[0], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 l1 = bytes4(qs[1], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 l2 = bytes4(qs[2], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 l3 = bytes4(qs[3], 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h0 = bytes4(qs[0] >> 4, 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h1 = bytes4(qs[1] >> 4, 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h2 = bytes4(qs[2] >> 4, 0x000F000Fu, 1032.0hf) * d;
    precise f16vec4 h3 = bytes4(qs[3] >> 4, 0x000F000Fu, 1032.0hf) * d;
    sm[o] = pack8(l0, l1);
    sm[o + 1u] = pack8(l2, l3);
    sm[o + 2u] = pack8(h0, h1);
    sm[o + 3u] = pack8(h2, h3);
#elif QTYPE == 8
    bool odd = (blk & 2u) != 0u;
    float16_t d = float16_t(unpackHalf2x16(odd ? q[0] >> 16 : q[0]).x);
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        uint qa = odd ? q[2u * c2 + 1u] : ((q[2u * c2] >> 16) | (q[2u * c2 + 1u] << 16));
        uint qb = odd ? q[2u * c2 + 2u] : ((q[2u * c2 + 1u] >> 16) | (q[2u * c2 + 2u] << 16));
        precise f16vec4 va = bytes4(qa ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        precise f16vec4 vb = bytes4(qb ^ 0x80808080u, 0x00FF00FFu, 1152.0hf) * d;
        sm[o + c2] = pack8(va, vb);
    }
#elif QTYPE == 3
    // Q4_1 { f16 d, m; u8 qs[16] } (20 bytes, word-aligned): x = q * d + m in f32 as
    // dq() (no fused multiply-add), rounded once to f16.
    vec2 dm = unpackHalf2x16(q[0]);
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        uint sh = (c2 >> 1) * 4u;
        precise vec4 va = bytes_f32((q[1u + 2u * (c2 & 1u)] >> sh) & 0x0F0F0F0Fu) * dm.x + dm.y;
        precise vec4 vb = bytes_f32((q[2u + 2u * (c2 & 1u)] >> sh) & 0x0F0F0F0Fu) * dm.x + dm.y;
        sm[o + c2] = pack8(f16vec4(va), f16vec4(vb));
    }
#elif QTYPE == 6 || QTYPE == 7
    // Q5_0 { f16 d; u8 qh[4]; u8 qs[16] } (22 bytes: a block starts at either half of a
    // word) and Q5_1 { f16 d, m; u8 qh[4]; u8 qs[16] } (24 bytes): the 5-bit q of weight e
    // is nibble e % 16 (low for e < 16) of qs plus bit e of qh as bit 4. Q5_0: (q - 16) * d
    // in packed f16, exact before its one rounding; Q5_1: q * d + m in f32 as dq().
#if QTYPE == 6
    bool odd = (blk & 2u) != 0u;
    float16_t d = float16_t(unpackHalf2x16(odd ? q[0] >> 16 : q[0]).x);
    uint w[5]; // w[0] = qh, w[1..4] = qs, whichever half-word the block starts at
    [[unroll]] for (uint j = 0; j < 5u; j++) w[j] = odd ? q[j + 1u] : ((q[j] >> 16) | (q[j + 1u] << 16));
#else
    vec2 dm = unpackHalf2x16(q[0]);
    uint w[5];
    [[unroll]] for (uint j = 0; j < 5u; j++) w[j] = q[j + 1u];
#endif
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        uint sh = (c2 >> 1) * 4u;
        // Weights 8 c2 .. 8 c2 + 7: qs words 2 (c2 % 2) + 1 and + 2, bits 8 c2 .. of qh.
        uint ba = ((w[1u + 2u * (c2 & 1u)] >> sh) & 0x0F0F0F0Fu) | spread4((w[0] >> (8u * c2)) & 0xFu);
        uint bb = ((w[2u + 2u * (c2 & 1u)] >> sh) & 0x0F0F0F0Fu) | spread4((w[0] >> (8u * c2 + 4u)) & 0xFu);
#if QTYPE == 6
        precise f16vec4 va = bytes4(ba, 0x00FF00FFu, 1040.0hf) * d;
        precise f16vec4 vb = bytes4(bb, 0x00FF00FFu, 1040.0hf) * d;
        sm[o + c2] = pack8(va, vb);
#else
        precise vec4 va = bytes_f32(ba) * dm.x + dm.y;
        precise vec4 vb = bytes_f32(bb) * dm.x + dm.y;
        sm[o + c2] = pack8(f16vec4(va), f16vec4(vb));
#endif
    }
#elif QTYPE == 39
    // MXFP4 { u8 e; u8 qs[16] } (e byte (blk / 17) % 4 of q[0], qs in q[1..4]: raw_word):
    // weight j < 16 is the low nibble of qs[j], 16 + j the high one. Each E2M1 code becomes the f16 bits of its
    // value times 2^-14 by shifts (sign to bit 15, exponent and mantissa to bits 9-11:
    // exact, the zero exponent a subnormal), two codes per word; the f32 of that, times
    // 2^(e - 113), is dq()'s kvalues_fp4[code] * 2^(e - 128) exactly, rounded once to f16.
    // (e is clamped at 200: past it every non-zero weight is an f16 infinity either way,
    // and the zero codes stay zero instead of 0 * inf.)
    uint s = (blk / 17u) & 3u;
    float sc = ldexp(1.0, int(min((q[0] >> (8u * s)) & 0xFFu, 200u)) - 113);
    uint qs[4];
    [[unroll]] for (uint j = 0; j < 4u; j++) qs[j] = q[j + 1u];
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        // Weights 8 c2 .. 8 c2 + 7: nibble c2 / 2 of qs words 2 (c2 % 2) and + 1.
        vec4 v[2];
        [[unroll]] for (uint h = 0; h < 2u; h++) {
            uint w = qs[2u * (c2 & 1u) + h] >> (4u * (c2 >> 1));
            uint e02 = w & 0x000F000Fu, e13 = (w >> 8) & 0x000F000Fu;
            vec2 a = unpackHalf2x16(((e02 & 0x00070007u) << 9) | ((e02 & 0x00080008u) << 12));
            vec2 b = unpackHalf2x16(((e13 & 0x00070007u) << 9) | ((e13 & 0x00080008u) << 12));
            precise vec4 x = vec4(a.x, b.x, a.y, b.y) * sc;
            v[h] = x;
        }
        sm[o + c2] = pack8(f16vec4(v[0]), f16vec4(v[1]));
    }
#elif QTYPE == 10
    // Q2_K: x = (d * sc) * q - dmin * m in f32 as dq() (no fused multiply-add), rounded
    // once; weights 0-15 of the step take scale byte 8 n + 2 (t % 4), 16-31 the next.
    uint t = (k0 >> 5) & 7u; // uniform over the workgroup
    uint scw = q[8] >> (16u * (t & 1u));
    vec2 dm = unpackHalf2x16(q[9]);
    precise float dl0 = dm.x * float(scw & 0xFu);
    precise float ml0 = dm.y * float((scw >> 4) & 0xFu);
    precise float dl1 = dm.x * float((scw >> 8) & 0xFu);
    precise float ml1 = dm.y * float((scw >> 12) & 0xFu);
    uint sh = 2u * (t & 3u);
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        float dl = c2 < 2u ? dl0 : dl1, ml = c2 < 2u ? ml0 : ml1;
        precise vec4 va = dl * bytes_f32((q[2u * c2] >> sh) & 0x03030303u) - ml;
        precise vec4 vb = dl * bytes_f32((q[2u * c2 + 1u] >> sh) & 0x03030303u) - ml;
        sm[o + c2] = pack8(f16vec4(va), f16vec4(vb));
    }
#elif QTYPE == 12 || QTYPE == 13
    // Q4_K, and Q5_K with bit t of each qh byte as the quant's bit 4:
    // x = (d * sc) * q - dmin * m in f32 as dq() (no fused multiply-add), rounded once.
    uint t = (k0 >> 5) & 7u; // uniform over the workgroup
    uint tl = t & 3u;
    uint s_t = (q[1] >> (8u * tl)) & 0xFFu;
    uint s_t4 = (q[2] >> (8u * tl)) & 0xFFu;
    uint s_t8 = (q[3] >> (8u * tl)) & 0xFFu;
    uint sc = t < 4u ? (s_t & 63u) : ((s_t8 & 0xFu) | ((s_t >> 6) << 4));
    uint m = t < 4u ? (s_t4 & 63u) : ((s_t8 >> 4) | ((s_t4 >> 6) << 4));
    vec2 dm = unpackHalf2x16(q[0]);
    precise float d1 = dm.x * float(sc);
    precise float m1 = dm.y * float(m);
    uint sh = (t & 1u) * 4u;
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
#if QTYPE == 12
        precise vec4 va = d1 * nib_lo(q[4u + 2u * c2] >> sh) - m1;
        precise vec4 vb = d1 * nib_lo(q[5u + 2u * c2] >> sh) - m1;
#else
        uint ba = ((q[4u + 2u * c2] >> sh) & 0x0F0F0F0Fu) | (((q[12u + 2u * c2] >> t) & 0x01010101u) << 4);
        uint bb = ((q[5u + 2u * c2] >> sh) & 0x0F0F0F0Fu) | (((q[13u + 2u * c2] >> t) & 0x01010101u) << 4);
        precise vec4 va = d1 * bytes_f32(ba) - m1;
        precise vec4 vb = d1 * bytes_f32(bb) - m1;
#endif
        sm[o + c2] = pack8(f16vec4(va), f16vec4(vb));
    }
#elif QTYPE == 14
    // Q6_K: q = ql nibble | qh 2 bits << 4, x = (d * sc) * (q - 32) in f32 as dq(),
    // rounded once; weights 0-15 of the step take scale 8 n + 2 g, 16-31 the next.
    bool odd = (blk & 2u) != 0u;
    uint g = (k0 >> 5) & 3u;
    uint scw = q[18] >> (((blk + 2u * g) & 3u) * 8u);
    float d = unpackHalf2x16(odd ? q[19] >> 16 : q[19]).x;
    precise float ds0 = d * float(int(scw << 24) >> 24);
    precise float ds1 = d * float(int(scw << 16) >> 24);
    uint nsh = 4u * (g >> 1), hsh = 2u * g;
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        uint b[2];
        [[unroll]] for (uint h = 0; h < 2u; h++) {
            uint i = 2u * c2 + h;
            uint lw = odd ? ((q[i] >> 16) | (q[i + 1u] << 16)) : q[i];
            uint hw = odd ? ((q[9u + i] >> 16) | (q[10u + i] << 16)) : q[9u + i];
            b[h] = ((lw >> nsh) & 0x0F0F0F0Fu) | (((hw >> hsh) & 0x03030303u) << 4);
        }
        float ds = c2 < 2u ? ds0 : ds1;
        precise vec4 va = ds * (bytes_f32(b[0]) - 32.0);
        precise vec4 vb = ds * (bytes_f32(b[1]) - 32.0);
        sm[o + c2] = pack8(f16vec4(va), f16vec4(vb));
    }
#endif
}

#if RWN == 0 && QTYPE != 1
// Any other type: element by element through the shared decoder.
void decode_generic(uint o, uint r, uint k0) {
    uint row = mm_w_offset + r * p.row_bytes;
    [[unroll]] for (uint c2 = 0; c2 < 4u; c2++) {
        vec4 v[2];
        [[unroll]] for (uint e = 0; e < 8u; e++) {
            uint col = k0 + 8u * c2 + e;
            v[e >> 2][e & 3u] = dq(row + (col / QK) * QBYTES, col % QK);
        }
        sm[o + c2] = pack8(f16vec4(v[0]), f16vec4(v[1]));
    }
}
#endif

void main() {
    nwords = qw.length() - 1u;
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (ROW_RASTER) {
        uint lin = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
        r0 = (lin / gl_NumWorkGroups.y) * BM;
        n0 = (lin % gl_NumWorkGroups.y) * BN;
    }
    if (!mm_ids_begin(n0)) return;
    uint lane = gl_SubgroupInvocationID;
    // produce: load and decode steps into shared memory; multiply: the 64 x 64 products.
    bool produce = !WARP_SPECIALIZED || gl_SubgroupID >= 4u;
    bool multiply = !WARP_SPECIALIZED || gl_SubgroupID < 4u;
    uint sg = gl_SubgroupID & 3u; // the role's subgroup index
    uint t = 32u * sg + lane;
    uint wr = sg & 1u, wn = sg >> 1;
    uint r = mm_tile_row(r0, t); // this invocation's row (t = 32 sg + lane)
    uint rowb = mm_w_offset + r * p.row_bytes;
    // x: invocation t reads 16-byte chunk t % 4 of tokens t / 4 + 32 i.
    uint xc = t & 3u, xt = t >> 2;
    uint xrow[4];
    [[unroll]] for (uint i = 0; i < 4u; i++) xrow[i] = mm_x_row(min(n0 + xt + 32u * i, mm_n_tok - 1u)) * (p.k >> 3) + xc;
#if RWN > 0
    // Coalesced raw loads: slot s of lane L holds word (32 s + L) % RW of row
    // r0 + 32 sg + (32 s + L) / RW.
#ifdef IN_PLACE
    // (recomputed at each load: 20 slots would hold 40 registers)
#define SROW(s_) mm_tile_row(r0, 32u * sg + (32u * (s_) + lane) / RW)
#define SW(s_) ((32u * (s_) + lane) % RW)
    // The scratch of buffer b: this subgroup's 32 rows of A there, in words.
#define SCR_AT(b_) ((SA + (b_) * BM * LDSV + 32u * sg * LDSV) * 4u)
#else
    uint srow[RW], sw[RW];
    [[unroll]] for (uint s = 0; s < RW; s++) {
        uint f = 32u * s + lane;
        srow[s] = mm_tile_row(r0, 32u * sg + f / RW);
        sw[s] = f % RW;
    }
#define SROW(s_) srow[s_]
#define SW(s_) sw[s_]
    uint scr = SCR * 4u + sg * 32u * RWP; // this subgroup's scratch, in words
#define SCR_AT(b_) scr
#endif
#if QTYPE == 10 || QTYPE == 13 || QTYPE == 14
#define BLK_AT(k0_) (rowb + ((k0_) >> 8) * QBYTES)
#else
#define BLK_AT(k0_) (rowb + ((k0_) >> 5) * QBYTES)
#endif
#endif

    MAT_C acc[4][4];
    [[unroll]] for (uint i = 0; i < 4u; i++) [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = MAT_C(0.0);

    uint kb = mm_split_z * p.k_chunk, ke = min(p.k, kb + p.k_chunk);
    uint nsteps = (ke - kb) / BK;
    uint klast = ke - BK;

#if RWN > 0
    uint raw[RW];
#endif
    uvec4 xr[4];
    // LOAD_W(k0): the weight loads of step k0 into registers (raw or wf); STORE_W(b, k0):
    // those registers decoded into shared buffer b; LOAD_X / STORE_X: the same for x;
    // LOAD_STEP / STORE_STEP: both. In the loop, PRODUCE_STEP stores step s + 1 (held in
    // registers) into buffer nxt and issues the loads of step s + 2; PRODUCE_W and
    // PRODUCE_X do that for the weights or x alone (X_BY_MULTIPLIERS).
#define LOAD_X(k0_) [[unroll]] for (uint i = 0; i < 4u; i++) xr[i] = x8[xrow[i] + ((k0_) >> 3)];
#define STORE_X(b_, xv_) [[unroll]] for (uint i = 0; i < 4u; i++) sm[SB + (b_) * BN * LDSV + (xt + 32u * i) * LDSV + xc] = xv_[i];
#define PRODUCE_X { uvec4 xs[4] = xr; LOAD_X(k2) STORE_X(nxt, xs) }
#if RWN > 0
#define LOAD_W(k0_) [[unroll]] for (uint s_ = 0; s_ < RW; s_++) raw[s_] = raw_word(SROW(s_), SW(s_), (k0_));
    // raw into this subgroup's scratch for buffer b: slot s of lane L is word (32 s + L) % RW
    // of scratch row (32 s + L) / RW.
#define STAGE_RAW(b_) [[unroll]] for (uint s_ = 0; s_ < RW; s_++) { \
    uint f = SCR_AT(b_) + (32u * s_ + lane) / RW * RWP + (32u * s_ + lane) % RW; sm[f >> 2][f & 3u] = raw[s_]; }
    // Once the scratch holds step k0: this invocation's row from it, decoded into buffer b.
#define FINISH_W(b_, k0_) { subgroupMemoryBarrierShared(); subgroupBarrier(); \
    uint q_[RW]; \
    [[unroll]] for (uint w = 0; w < RW; w++) { uint f = SCR_AT(b_) + lane * RWP + w; q_[w] = sm[f >> 2][f & 3u]; } \
    decode_row(SA + (b_) * BM * LDSV + t * LDSV, q_, BLK_AT(k0_), (k0_)); }
#define STORE_W(b_, k0_) { STAGE_RAW(b_) FINISH_W(b_, k0_) }
#define LOAD_STEP(k0_) { LOAD_W(k0_) LOAD_X(k0_) }
#define STORE_STEP(b_, k0_) { STAGE_RAW(b_) FINISH_W(b_, k0_) STORE_X(b_, xr) }
    // The loads of step s + 2 issue between the scratch stores and the subgroup barrier.
#define PRODUCE_STEP { STAGE_RAW(nxt) uvec4 xs[4] = xr; LOAD_STEP(k2) FINISH_W(nxt, kn) STORE_X(nxt, xs) }
#define PRODUCE_W { STAGE_RAW(nxt) LOAD_W(k2) FINISH_W(nxt, kn) }
#elif QTYPE == 1
    // F16: a subgroup reads its 32 rows' 64-byte steps, 16 invocations per row, word
    // lane % 16 of rows 32 sg + lane / 16 + 2 i.
    uint wl = lane & 15u;
    uint wrow[16];
    [[unroll]] for (uint i = 0; i < 16u; i++) wrow[i] = ((mm_w_offset + mm_tile_row(r0, 32u * sg + (lane >> 4) + 2u * i) * p.row_bytes) >> 2) + wl;
    uint wf[16];
#define LOAD_W(k0_) [[unroll]] for (uint i = 0; i < 16u; i++) wf[i] = qw[wrow[i] + ((k0_) >> 1)];
#define STORE_W(b_, k0_) [[unroll]] for (uint i = 0; i < 16u; i++) \
    sm[SA + (b_) * BM * LDSV + (32u * sg + (lane >> 4) + 2u * i) * LDSV + (wl >> 2)][wl & 3u] = wf[i];
#define LOAD_STEP(k0_) { LOAD_W(k0_) LOAD_X(k0_) }
#define STORE_STEP(b_, k0_) { STORE_W(b_, k0_) STORE_X(b_, xr) }
#define PRODUCE_STEP { STORE_STEP(nxt, kn) LOAD_STEP(k2) }
#define PRODUCE_W { STORE_W(nxt, kn) LOAD_W(k2) }
#else
#define LOAD_W(k0_)
#define STORE_W(b_, k0_) decode_generic(SA + (b_) * BM * LDSV + t * LDSV, r, (k0_));
#define LOAD_STEP(k0_) { LOAD_X(k0_) }
#define STORE_STEP(b_, k0_) { STORE_W(b_, k0_) STORE_X(b_, xr) }
#define PRODUCE_STEP { STORE_STEP(nxt, kn) LOAD_STEP(k2) }
#define PRODUCE_W { STORE_W(nxt, kn) }
#endif

    // Who copies x: the producing subgroups, or (warp-specialized with X_BY_MULTIPLIERS)
    // the multiplying ones.
    bool x_by_mul = WARP_SPECIALIZED && X_BY_MULTIPLIERS;
    if (produce) {
        if (x_by_mul) {
            LOAD_W(kb)
            STORE_W(0u, kb)
            LOAD_W(min(kb + BK, klast))
        } else {
            LOAD_STEP(kb)
            STORE_STEP(0u, kb)
            LOAD_STEP(min(kb + BK, klast))
        }
    } else if (x_by_mul) {
        LOAD_X(kb)
        STORE_X(0u, xr)
        LOAD_X(min(kb + BK, klast))
    }
    barrier();

    for (uint s = 0; s < nsteps; s++) {
        uint cur = s & 1u, nxt = cur ^ 1u;
        uint kn = min(kb + (s + 1u) * BK, klast); // step s + 1, held in raw / wf / xr
        uint k2 = min(kb + (s + 2u) * BK, klast);
#define MULTIPLY_STEP { uint abase = SA + cur * BM * LDSV, bbase = SB + cur * BN * LDSV; \
    [[unroll]] for (uint kk = 0; kk < 2u; kk++) { \
        MAT_B b[4]; \
        [[unroll]] for (uint j = 0; j < 4u; j++) \
            coopMatLoad(b[j], sm, bbase + (wn * 64u + 16u * j) * LDSV + 2u * kk, LDSV, gl_CooperativeMatrixLayoutColumnMajor); \
        [[unroll]] for (uint i = 0; i < 4u; i++) { \
            MAT_A a; \
            coopMatLoad(a, sm, abase + (wr * 64u + 16u * i) * LDSV + 2u * kk, LDSV, gl_CooperativeMatrixLayoutRowMajor); \
            [[unroll]] for (uint j = 0; j < 4u; j++) acc[i][j] = coopMatMulAdd(a, b[j], acc[i][j]); \
        } } }
        // One if / else per role (two independent ifs measured 15 % slower on the H100).
        if (!WARP_SPECIALIZED) {
            PRODUCE_STEP
            MULTIPLY_STEP
        } else if (produce) {
            if (X_BY_MULTIPLIERS) PRODUCE_W else PRODUCE_STEP
        } else {
            if (X_BY_MULTIPLIERS) PRODUCE_X
            MULTIPLY_STEP
        }
        barrier();
    }

    if (MM_GLU != 0u) {
        GLU_STORE(4u, 2u, multiply, sg)
        return;
    }
    if (MM_ROPE != 0u) {
        ROPE_STORE(4u, multiply, sg)
        return;
    }
    // The A buffers become the staging area (64 uvec4 = 256 floats per subgroup).
    uint cbase = mm_split_z * p.n_tok * p.ldc;
    if (multiply) [[unroll]] for (uint i = 0; i < 4u; i++) {
        [[unroll]] for (uint j = 0; j < 4u; j++) {
            uint tr = r0 + wr * 64u + 16u * i, tn = n0 + wn * 64u + 16u * j;
            if (tr >= p.rows || tn >= mm_n_tok) continue;
            STORE_TILE(acc[i][j], tr, tn)
        }
    }
}
