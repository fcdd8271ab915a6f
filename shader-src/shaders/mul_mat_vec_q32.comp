//! variant q4_0 QTYPE=2
//! variant q4_1 QTYPE=3
//! variant q5_0 QTYPE=6
//! variant q5_1 QTYPE=7
//! variant q8_0 QTYPE=8
// Block-wise fused mat-vec for the 32-element GGML block types: one subgroup per row,
// each invocation decodes whole blocks (aligned 32-bit loads joined by funnel shifts,
// the scale factored out of the block's dot product), subgroup add at the end.
// y[b, r] = sum_c W[r, c] * x[b, c], b < NB.
// Bindings: 0 = W (raw blocks, row r at w_offset + r * row_bytes), 1 = x (vec4[NB * k / 4]),
//           2 = y (f32[NB * rows]; epilogue per include/mat_vec_out.glsl: with the gated
//           products each subgroup also computes the NR up rows beside its gate rows).
// Push constants: w_offset, row_bytes, k, rows (output rows), batch (unused: NB).
// Specialization: 0 = workgroup size (a multiple of the subgroup size; subgroups must be
// full), 1 = NB, the batch count (1..8; a constant so accumulators stay in registers),
// 2 = NR, rows per subgroup: each x vec4 loaded once serves NR rows.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint NB = 1;
layout(constant_id = 2) const uint NR = 1;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { vec4 x4[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint batch; } p;
#include "mat_vec_out.glsl"

vec4 nib_lo(uint u) { uint v = u & 0x0F0F0F0Fu; return vec4(v & 0xFFu, (v >> 8) & 0xFFu, (v >> 16) & 0xFFu, v >> 24); }
vec4 nib_hi(uint u) { return nib_lo(u >> 4); }
// Bits i..i+3 of h as the 0/16 fifth bit of four elements.
vec4 bit5(uint h, uint i) { return vec4((h >> i) & 1u, (h >> (i + 1u)) & 1u, (h >> (i + 2u)) & 1u, (h >> (i + 3u)) & 1u) * 16.0; }
vec4 s8(uint u) { int v = int(u); return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8)); }

// The block at byte blk dotted with its 32 x values.
float block_dot(uint blk, vec4 xv[8]) {
#if QTYPE == 8
    uint q[8];
    LOAD_WORDS(q, 8u, blk + 2u);
    float s = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; i++) s += dot(s8(q[i]), xv[i]);
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

void main() {
    uint r0 = ((gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * gl_NumSubgroups + gl_SubgroupID) * NR;
    if (r0 >= p.rows) return; // uniform across the subgroup
    uint lane = gl_SubgroupInvocationID;
    uint nblocks = p.k / 32u;
    uint k4 = p.k / 4u;
    float acc[NR * NB], acc2[NR * NB]; // acc2: the up rows of the gated products
    [[unroll]] for (uint i = 0; i < NR * NB; i++) { acc[i] = 0.0; acc2[i] = 0.0; }
    for (uint ib = lane; ib < nblocks; ib += gl_SubgroupSize) {
        uint x0 = ib * 8u; // first vec4 of the block in a batch row
        [[unroll]] for (uint b = 0; b < NB; b++) {
            vec4 xv[8];
            [[unroll]] for (uint i = 0; i < 8u; i++) xv[i] = x4[b * k4 + x0 + i];
            [[unroll]] for (uint rr = 0; rr < NR; rr++) {
                uint r = min(r0 + rr, p.rows - 1u); // rows past the end recompute the last row, unstored
                uint blk = p.w_offset + r * p.row_bytes + ib * QBYTES;
                acc[rr * NB + b] += block_dot(blk, xv);
                if (MV_GLU) acc2[rr * NB + b] += block_dot(blk + p.rows * p.row_bytes, xv);
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
