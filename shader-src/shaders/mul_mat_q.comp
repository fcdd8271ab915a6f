//! variants-of dequant.comp
// Quantized mat-mat for prompts: C[n, r] = sum_c X[n, c] * W[r, c] for n < n_tok, r < rows.
// X f32 [n_tok, k] row-major; W raw blocks (row r at w_offset + r * row_bytes); C f32 [n_tok, rows].
// Tiles of BM = 64 weight rows x BN = 64 tokens x BK = 32; the weight tile is dequantized
// into shared memory once per step (dq() of quant.glsl, any supported type) and reused
// by all 64 tokens; 256 invocations each accumulate 4 x 4 outputs in f32.
// Bindings: 0 = W, 1 = X, 2 = C. Push constants: w_offset, row_bytes, k, rows, n_tok,
// accumulate (1: add to C, folding a residual add into the product), k_chunk (unused: the
// cooperative-matrix kernels' split-K; one push-constant layout for every mat-mat), ldc
// (C's row stride: rows, or the whole matrix's where the op runs one part of a split
// matrix).
// Grid: x = ceil(rows / 64), y = ceil(n_tok / 64).
// Specialization constants 4, 5 and 17, binding 12 (include/mul_mat_glu.glsl): the
// gated-product epilogue, y = act(gate) * up over a stacked [gate; up] weight (each tile's
// first 32 rows gate, its last 32 the matching up rows), f32 [n_tok, rows / 2] (stride
// rows / 2), or packed f16 staged through shared memory; accumulate and ldc unused.
// Specialization constants 6-11, bindings 3-6 and push constant pos0
// (include/mul_mat_rope.glsl): the rotary embedding and KV-cache append of a Q|K|V product
// in the store (head dim a divisor of 64), with spec constants 14-16 and bindings 9-11 its
// bias and head norms.
// Specialization constant 13, bindings 7 and 8 and push constant x_slots
// (include/mul_mat_ids.glsl): grouped by expert, workgroup z an expert's tokens.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 2) buffer C16 { uint c16[]; }; // MM_GLU_F16's view of C
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; uint pos0; uint x_slots; } p;

#define BM 64u
#define BN 64u
#define BK 32u
#include "mul_mat_ids.glsl"
#include "mul_mat_glu.glsl"
#include "mul_mat_rope.glsl"
shared float ws[BK][BM + 1];
shared float xs[BK][BN + 1];

// The rotary-embedding epilogue's staging: 32 tokens of the tile's 64 rows in ws; its
// head-norm scales in xs (free after the main loop).
float mm_staged(uint lr, uint tl) { return ws[lr >> 1][(lr & 1u) * 32u + tl]; }
void mm_norm_put(uint u, float v) { xs[u >> 6][u & 63u] = v; }
float mm_norm_get(uint u) { return xs[u >> 6][u & 63u]; }

void main() {
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    if (!mm_ids_begin(n0)) return;
    uint tid = gl_LocalInvocationID.x;
    uint tr = tid % 16u, tn = tid / 16u;
    float acc[4][4];
    for (uint i = 0; i < 4u; i++) for (uint j = 0; j < 4u; j++) acc[i][j] = 0.0;
    for (uint k0 = 0; k0 < p.k; k0 += BK) {
        for (uint i = tid; i < BM * BK; i += 256u) {
            uint rr = i / BK, kk = i % BK, r = mm_tile_row(r0, rr), col = k0 + kk;
            float v = 0.0;
            if (col < p.k) v = dq(mm_w_offset + r * p.row_bytes + (col / QK) * QBYTES, col % QK);
            ws[kk][rr] = v;
        }
        for (uint i = tid; i < BN * BK; i += 256u) {
            uint nn = i / BK, kk = i % BK, n = n0 + nn, col = k0 + kk;
            xs[kk][nn] = (n < mm_n_tok && col < p.k) ? x[mm_x_row(n) * p.k + col] : 0.0;
        }
        barrier();
        for (uint kk = 0; kk < BK; kk++) {
            float a[4], b[4];
            for (uint i = 0; i < 4u; i++) a[i] = ws[kk][tr + 16u * i];
            for (uint j = 0; j < 4u; j++) b[j] = xs[kk][tn + 16u * j];
            for (uint i = 0; i < 4u; i++) for (uint j = 0; j < 4u; j++) acc[i][j] += a[i] * b[j];
        }
        barrier();
    }
    if (MM_GLU != 0u) {
        // Rows tr + 16 i of the tile are gate rows for i < 2, their up rows at i + 2.
        uint h = p.rows >> 1, h0 = r0 >> 1;
        if (MM_GLU_F16) {
            // Staged in ws (its [32][65] floats: 32 outputs x 64 tokens), then written
            // two rows to a word.
            for (uint i = 0; i < 2u; i++) for (uint j = 0; j < 4u; j++) ws[tr + 16u * i][tn + 16u * j] = mm_glu(acc[i][j], acc[i + 2u][j], h0 + tr + 16u * i);
            barrier();
            for (uint e = tid; e < 32u * BN / 2u; e += 256u) {
                uint rp = e % 16u, tok = e / 16u;
                uint row = h0 + 2u * rp, n = n0 + tok;
                if (row < h && n < mm_n_tok) c16[(mm_out_row(n) * h + row) >> 1] = packHalf2x16(vec2(ws[2u * rp][tok], ws[2u * rp + 1u][tok]));
            }
            return;
        }
        for (uint i = 0; i < 2u; i++) {
            uint row = h0 + tr + 16u * i;
            if (row >= h) continue;
            for (uint j = 0; j < 4u; j++) {
                uint n = n0 + tn + 16u * j;
                if (n < mm_n_tok) c[mm_out_row(n) * h + row] = mm_glu(acc[i][j], acc[i + 2u][j], row);
            }
        }
        return;
    }
    if (MM_ROPE != 0u) {
        // Two passes of 32 tokens staged in ws, then each output pair of them.
        for (uint jp = 0; jp < 2u; jp++) {
            barrier();
            for (uint i = 0; i < 4u; i++) for (uint j = 2u * jp; j < 2u * jp + 2u; j++) {
                uint lr = tr + 16u * i, tl = tn + 16u * (j - 2u * jp);
                ws[lr >> 1][(lr & 1u) * 32u + tl] = acc[i][j];
            }
            barrier();
            if (ROPE_NORMS) {
                mm_rope_head_norms(r0, 32u);
                barrier();
            }
            for (uint e = tid; e < 32u * 32u; e += 256u) {
                uint lr = 2u * (e % 32u), tl = e / 32u;
                uint n = n0 + 32u * jp + tl;
                if (r0 + lr < p.rows && n < p.n_tok) mm_rope_store(r0, lr, tl, n);
            }
        }
        return;
    }
    for (uint i = 0; i < 4u; i++) {
        uint r = r0 + tr + 16u * i;
        if (r >= p.rows) continue;
        for (uint j = 0; j < 4u; j++) {
            uint n = n0 + tn + 16u * j;
            if (n < mm_n_tok) {
                uint at = mm_out_row(n) * p.ldc + r;
                c[at] = p.accumulate != 0u ? c[at] + acc[i][j] : acc[i][j];
            }
        }
    }
}
