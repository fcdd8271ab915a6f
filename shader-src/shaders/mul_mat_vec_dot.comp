//! variant q4_0 QTYPE=2
//! variant q8_0 QTYPE=8
// Integer-dot mat-vec: y[b, r] = sum over blocks of d_w * d_x * sumi, where sumi is the
// exact integer dot of the weight quants with x quantized to Q8_1 (quantize_q8_1.comp),
// computed with packed 4x8-bit dot products (GL_EXT_integer_dot_product; hardware-
// accelerated where Capabilities says so). Q4_0: sumi = sum(nibble * q) - 8 * sum(q), as
// ggml's vec_dot_q4_0 with (nibble - 8). One subgroup per NR rows, whole blocks per
// invocation, subgroup add.
// Bindings: 0 = W (raw blocks), 1 = xq (Q8_1 words, 9 per block, [NB, k/32]), 2 = y f32 [NB, rows]
// (epilogue per include/mat_vec_out.glsl: with the gated products each subgroup also
// computes the NR up rows, at r + rows, beside its gate rows; x is loaded once for both).
// Push: w_offset, row_bytes, k, rows (output rows), batch, y_stride (include/mat_vec_out.glsl),
// eps (unused: the push block the mat-vec kernels share).
// Specialization: 0 = workgroup, 1 = NB, 2 = NR, 10 = epilogue.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_integer_dot_product : require
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint NB = 1;
layout(constant_id = 2) const uint NR = 1;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer XQ { uint xq[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint batch; uint y_stride; float eps; } p;
#include "mat_vec_out.glsl"

// The exact integer dot of one weight block (at byte blk) with the Q8_1 quants xv; for
// Q4_0, xsum is the sum of those quants (the -8 offset of the nibbles).
int block_dot(uint blk, uint xv[8], int xsum) {
    int sumi = 0;
#if QTYPE == 2
    uint q[4];
    LOAD_WORDS(q, 4u, blk + 2u);
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        sumi += dotPacked4x8EXT(int(xv[i]), q[i] & 0x0F0F0F0Fu);
        sumi += dotPacked4x8EXT(int(xv[4u + i]), (q[i] >> 4) & 0x0F0F0F0Fu);
    }
    sumi -= 8 * xsum;
#else
    uint q[8];
    LOAD_WORDS(q, 8u, blk + 2u);
    [[unroll]] for (uint i = 0; i < 8u; i++) sumi += dotPacked4x8EXT(int(q[i]), int(xv[i]));
#endif
    return sumi;
}


void main() {
    uint r0 = ((gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * gl_NumSubgroups + gl_SubgroupID) * NR;
    if (r0 >= p.rows) return;
    uint lane = gl_SubgroupInvocationID;
    uint nblocks = p.k / 32u;
    float acc[NR * NB], acc2[NR * NB]; // acc2: the up rows of the gated products
    [[unroll]] for (uint i = 0; i < NR * NB; i++) { acc[i] = 0.0; acc2[i] = 0.0; }
    for (uint ib = lane; ib < nblocks; ib += gl_SubgroupSize) {
        [[unroll]] for (uint b = 0; b < NB; b++) {
            uint xb = (b * nblocks + ib) * 9u;
            float dx = unpackHalf2x16(xq[xb]).x;
            uint xv[8];
            [[unroll]] for (uint i = 0; i < 8u; i++) xv[i] = xq[xb + 1u + i];
            int xsum = 0;
#if QTYPE == 2
            [[unroll]] for (uint i = 0; i < 8u; i++) xsum += dotPacked4x8EXT(int(xv[i]), 0x01010101u);
#endif
            [[unroll]] for (uint rr = 0; rr < NR; rr++) {
                uint r = min(r0 + rr, p.rows - 1u); // rows past the end recompute the last row, unstored
                uint blk = p.w_offset + r * p.row_bytes + ib * QBYTES;
                acc[rr * NB + b] += float(block_dot(blk, xv, xsum)) * q_f16(blk) * dx;
                if (MV_GLU) {
                    uint ublk = blk + p.rows * p.row_bytes;
                    acc2[rr * NB + b] += float(block_dot(ublk, xv, xsum)) * q_f16(ublk) * dx;
                }
            }
        }
    }
    [[unroll]] for (uint rr = 0; rr < NR; rr++) {
        [[unroll]] for (uint b = 0; b < NB; b++) {
            float t = subgroupAdd(acc[rr * NB + b]);
            float u = MV_GLU ? subgroupAdd(acc2[rr * NB + b]) : 0.0;
            if (lane == 0 && r0 + rr < p.rows) {
                if (MV_GLU) {
                    mv_store_glu(b, r0 + rr, t, u);
                } else {
                    mv_store(b, r0 + rr, t);
                }
            }
        }
    }
}
